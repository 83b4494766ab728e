"""Read-only runs behind the report commands (`glmops facts`, `glmops status`), with the
command line's connection options: extra variables, the sudo password, forks, host keys."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from glmops.engine.executor import Executor, RunOptions
from glmops.engine.inventory import load_inventory
from glmops.engine.output import Reporter
from glmops.engine.playbook import Play
from glmops.engine.runlog import Masker, RunLog
from glmops.errors import ExitCode


def run_read_only(
    inventory_path: Path,
    plays: list[Play],
    options: RunOptions | None = None,
    *,
    check: bool = False,
    verbosity: int = 0,
) -> tuple[ExitCode, Executor]:
    """Run plays that change nothing, for a report: task lines go to stderr, so stdout stays
    free for the report; no run lock is taken. Returns the executor to read sessions from."""
    options = replace(options or RunOptions(), check=check, lock=False)
    masker = Masker({options.sudo_password} if options.sudo_password else set())
    reporter = Reporter(masker, verbosity=verbosity, stdout=sys.stderr)
    inventory = load_inventory(inventory_path, options.extra_vars)
    executor = Executor(inventory, options, reporter, masker, RunLog(options.run_root, masker))
    return executor.run(plays, inventory_path), executor
