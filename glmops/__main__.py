"""`python3 -m glmops`: the same command line as `glmops`."""

from glmops.cli.main import main

main(prog_name="glmops")
