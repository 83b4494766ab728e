"""Run plays on hosts: `Executor.run` takes a loaded playbook and an inventory and returns the
exit code (read-only reports go through glmops/engine/reports.py).
This file holds the run as a whole:
which plays run on which hosts, SIGINT/SIGTERM, the heartbeat, the recap and the exit code.

The Executor composes the run's parts, each in its own module and each given, when it is made,
only the parts it uses:

- `RunState` (glmops/engine/run_state.py): the options, reporter, masker and run log, the
  signal that interrupted the run and what each host is running now; every part below receives it;
- `SessionPool(state)` (glmops/engine/sessions.py): one `HostSession` per host, connected and locked
  once (its run lock, runlock.py), its task contexts, facts, reconnects; closed at the end;
- `Delegates(inventory, pool)` (glmops/engine/delegation.py): the session a `delegate_to` task runs
  over;
- `TaskRunner(state, pool, delegates, inventory)` (glmops/engine/task_run.py): one task on one host
  (variables, `hostvars` and `groups` included; when, loop, retries, plan/apply), its result
  recorded;
- `PlayLoop(state, pool, runner)` (glmops/engine/play_loop.py): a play's batches, run task by task
  on every host (linear strategy), `run_once`, `any_errors_fatal`, `max_fail_percentage`,
  handlers and notifications.

A run: the plays' hosts and literal delegates are checked first (a typo touches no host); the
signal handlers and the heartbeat start; each play runs through the play loop, which makes the
hosts' sessions as it reaches them; at the end every run lock is released and connection
closed, and the recap printed. A host that fails or cannot be reached stops only itself, unless
the play says otherwise (`max_fail_percentage`, `any_errors_fatal`). SIGINT/SIGTERM stop the
run: no new task starts, running commands are ended with their process groups, and the recap
says what was interrupted.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from glmops.engine import templating
from glmops.engine.delegation import Delegates, check_delegates
from glmops.engine.inventory import Host, Inventory
from glmops.engine.nodes import Play, Task
from glmops.engine.output import Reporter
from glmops.engine.play_loop import PlayLoop
from glmops.engine.results import PlayRecap, exit_code
from glmops.engine.run_state import RunOptions, RunState, default_run_root
from glmops.engine.runlog import Masker, RunLog
from glmops.engine.sessions import HostSession, SessionPool
from glmops.engine.task_run import TaskRunner
from glmops.errors import InputError

#: A run is started from here: the options and their run directory come with the executor.
__all__ = ["Executor", "RunOptions", "default_run_root"]

HEARTBEAT_SECONDS = 30


class Executor:
    """One run of plays over an inventory: its options, output, run log and host sessions."""

    def __init__(
        self,
        inventory: Inventory,
        options: RunOptions,
        reporter: Reporter,
        masker: Masker,
        runlog: RunLog,
    ):
        self.inventory = inventory
        self._state = RunState(options, reporter, masker, runlog)
        self._pool = SessionPool(self._state)
        self._runner = TaskRunner(
            self._state, self._pool, Delegates(inventory, self._pool), inventory
        )
        self._play_loop = PlayLoop(self._state, self._pool, self._runner)
        #: Each play's batches, and why it stopped early (for the recap).
        self.plays: list[PlayRecap] = []
        self._done = threading.Event()

    @property
    def options(self) -> RunOptions:
        return self._state.options

    @property
    def reporter(self) -> Reporter:
        return self._state.reporter

    @property
    def runlog(self) -> RunLog:
        return self._state.runlog

    @property
    def sessions(self) -> Mapping[str, HostSession]:
        """Every host's session, by name: the plays' hosts and the delegates."""
        return self._pool.sessions

    @property
    def interrupted(self) -> int | None:
        """The signal that interrupted the run (SIGINT, SIGTERM), or None."""
        return self._state.interrupted

    def variables(
        self, play: Play, playbook: Path, session: HostSession, task: Task | None = None
    ) -> dict[str, Any]:
        """What a task of `play` on this host sees (for reports that render a play's vars)."""
        return self._runner.variables(play, playbook, session, task)

    # -- the run -----------------------------------------------------------------------------
    def run(self, plays: list[Play], playbook: Path) -> int:
        self.check_targets(plays)
        limited = (
            set(h.name for h in self.inventory.select(self.options.limit))
            if self.options.limit
            else None
        )
        heartbeat = threading.Thread(target=self._heartbeat, daemon=True, name="heartbeat")
        heartbeat.start()
        templating.STOP.clear()
        previous = self._catch_signals()
        try:
            for play in plays:
                if self.interrupted:
                    break
                hosts = [h for h in self._play_hosts(play) if limited is None or h.name in limited]
                if not hosts:
                    self.reporter.note(
                        f"play '{play.name}': no host matches '{play.hosts}'"
                        + (f" within --limit {self.options.limit}" if limited else "")
                    )
                    continue
                self.reporter.play(play.name, [h.name for h in hosts])
                recap = self._play_loop.run_play(play, playbook, hosts)
                self.plays.append(recap)
                if recap.stopped:
                    break  # as in Ansible, a play stopped by its failures ends the run
        finally:
            templating.STOP.clear()  # renderings after this run (another run's) go on
            self._pool.close()
            self._done.set()
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        code = self.exit_code()
        targets = self._pool.targets()
        self.reporter.recap(
            {n: s.tally for n, s in targets.items()},
            str(self.runlog.path),
            int(code),
            interrupted={n: s.interrupted for n, s in targets.items() if s.interrupted},
            plays=self.plays,
        )
        return code

    # -- interrupts --------------------------------------------------------------------------
    def _catch_signals(self) -> dict[int, Any]:
        """SIGINT and SIGTERM stop the run cleanly (see `_on_signal`); the old handlers are
        returned for restoring. Only the main thread can set handlers."""
        if threading.current_thread() is not threading.main_thread():
            return {}
        return {
            signum: signal.signal(signum, self._on_signal)
            for signum in (signal.SIGINT, signal.SIGTERM)
        }

    def _on_signal(self, signum: int, frame: Any) -> None:
        """First signal: no new task starts anywhere, running commands are ended (their process
        groups), pending notifications stay on the hosts, and the recap is printed. A second
        signal ends the running commands and exits at once."""
        name = signal.Signals(signum).name
        if self._state.interrupted is None:
            self._state.interrupted = signum
            templating.STOP.set()  # a long rendering stops too, not only commands
            self.reporter.note(
                f"{name}: stopping; running commands are being ended, no new task starts"
                " (again to exit at once)"
            )
            threading.Thread(target=self._pool.cancel_all, name="cancel", daemon=True).start()
            return
        self.reporter.note(f"{name} again: killing running commands and exiting now")
        self._pool.cancel_all(grace=0)
        os._exit(128 + signum)

    def _heartbeat(self) -> None:
        """Every HEARTBEAT_SECONDS of a task, say which hosts are still busy and with what, so
        a slow host is never a mystery (the first line comes HEARTBEAT_SECONDS after it
        started)."""
        told: dict[tuple[str, float], int] = {}  # (host, started) -> heartbeats given
        while not self._done.wait(min(1.0, HEARTBEAT_SECONDS / 4)):
            now = time.monotonic()
            busy = []
            for host, (task, started) in list(self._state.running.items()):
                due = int((now - started) // HEARTBEAT_SECONDS)
                if due > told.get((host, started), 0):
                    told[(host, started)] = due
                    busy.append(f"{host} '{task}' ({now - started:.0f} s)")
            if busy:
                self.reporter.note("still running: " + ", ".join(busy))

    def exit_code(self) -> int:
        tallies = [s.tally for s in self._pool.targets().values()]
        return exit_code(tallies, check=self.options.check, interrupted=self.interrupted)

    def check_targets(self, plays: list[Play]) -> None:
        """Every play's `hosts:` must match a host of the inventory (a typo is an error), and
        every literal `delegate_to` a host too."""
        for play in plays:
            try:
                self.inventory.select(play.hosts)
            except InputError:
                raise InputError(
                    f"play '{play.name}': hosts '{play.hosts}' matches no host in the inventory "
                    f"{self.inventory.path}",
                    source=play.source,
                    line=play.line,
                ) from None
            check_delegates(play, self.inventory)

    def _play_hosts(self, play: Play) -> list[Host]:
        return self.inventory.select(play.hosts)
