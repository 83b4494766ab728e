"""What one run is asked to do (`RunOptions`) and what its parts share while it runs
(`RunState`): the session pool, the task runner and the play loop each receive the one state
object, so the interrupt the executor's signal handler sets is the one every loop checks."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from glmops.engine.connection import ConnectionSettings

if TYPE_CHECKING:
    from glmops.engine.output import Reporter
    from glmops.engine.runlog import Masker, RunLog


def default_run_root() -> Path:
    """Where run directories go: $GLMOPS_RUN_DIR, else .glmops/runs."""
    return Path(os.environ.get("GLMOPS_RUN_DIR", ".glmops/runs"))


@dataclass
class RunOptions:
    check: bool = False
    diff: bool = False
    forks: int | None = None
    limit: str | None = None
    tags: set[str] = field(default_factory=set)
    skip_tags: set[str] = field(default_factory=set)
    extra_vars: dict[str, Any] = field(default_factory=dict)
    sudo_password: str | None = None
    run_root: Path = field(default_factory=default_run_root)
    connection: ConnectionSettings = field(default_factory=ConnectionSettings)
    #: --start-at-task: skip the play's tasks before the first one of this name.
    start_at_task: str | None = None
    #: --force-handlers: notified handlers run even on hosts that failed.
    force_handlers: bool = False
    #: Take each host's run lock (runlock.py); check runs and read-only reports do not.
    lock: bool = True


@dataclass
class RunState:
    """One run's options and outputs, and the two things its threads signal each other."""

    options: RunOptions
    reporter: Reporter
    masker: Masker
    runlog: RunLog
    #: The signal that interrupted the run (SIGINT, SIGTERM), or None; set by the executor,
    #: read at every task (and loop item) boundary: once set, no new task starts.
    interrupted: int | None = None
    #: host -> (task, started): what each host runs now, set by the task runner and read by
    #: the executor's heartbeat.
    running: dict[str, tuple[str, float]] = field(default_factory=dict)
