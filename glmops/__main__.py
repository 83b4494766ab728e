"""`python3 -m glmops`: the same command line as `glmops`."""

from glmops.cli.entry import main

main()
