"""`python3 -m glmops.cli`: the same command line as `glmops`."""

from glmops.cli.entry import main

main()
