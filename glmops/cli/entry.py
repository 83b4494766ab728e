"""The console script's entry: `glmops --version` is answered before the command line library
and the verbs load (a user feels start-up on every call); everything else goes to `main`."""

from __future__ import annotations

import sys


def main() -> None:
    """Run the command line as `glmops`."""
    if sys.argv[1:] == ["--version"]:
        from glmops import __version__

        print(f"glmops, version {__version__}")  # the same line as click's version option
        return
    from glmops.cli.main import main as command_line

    command_line(prog_name="glmops")
