"""Run plays on hosts: batch by batch (`serial`, glmops/batches.py), each task on every host of
the batch in parallel (bounded by --forks) before the next task starts, as Ansible's linear
strategy does; `run_once` and `any_errors_fatal` act at those task boundaries, and `delegate_to`
runs a task over another host's session (its connection and run lock).

A host that fails or cannot be reached stops only itself, unless the play says otherwise
(`max_fail_percentage`, `any_errors_fatal`). Handlers run once per host at the
end of a play, only when a change notified them; a notification is written to the host before
anything else happens, so a later failure cannot lose it: the next run replays it. A changing
run holds each host's run lock (runlock.py). SIGINT/SIGTERM stop the run: no new task starts,
running commands are ended with their process groups, and the recap says what was interrupted.
"""

from __future__ import annotations

import functools
import os
import re
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from glmops import batches, paths, runlock
from glmops.connection import (
    KILL_GRACE_SECONDS,
    Connection,
    ConnectionSettings,
    Release,
    open_connection,
)
from glmops.context import RemoteCommandError, RemoteInfo, TaskContext
from glmops.errors import (
    CommandInterrupted,
    CommandTimeout,
    ExitCode,
    HostUnreachable,
    InputError,
    ModuleError,
    TemplateError,
)
from glmops.inventory import ConnectionSpec, Host, Inventory, load_inventory
from glmops.modules import REGISTRY
from glmops.modules.base import check_types
from glmops.notifications import play_key, read_pending, write_pending
from glmops.output import Reporter
from glmops.playbook import Play, Task
from glmops.results import HostTally, PlayRecap, Status, TaskResult
from glmops.runlog import Masker, RunLog
from glmops.templating import evaluate_condition, render_value, resolve_variables

HEARTBEAT_SECONDS = 30
#: Result data of a task whose command was ended midway (timeout, interrupt): it may have
#: changed the host, so its notifications are kept.
ENDED_MIDWAY = "ended_midway"


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
    #: Take each host's run lock (runlock.py); check runs and read-only reports do not.
    lock: bool = True


@dataclass
class HostSession:
    """One host's state across a run: its connection, what we know of it, and its tally."""

    host: Host
    tally: HostTally = field(default_factory=HostTally)
    conn: Connection | None = None
    remote: RemoteInfo | None = None
    facts: dict[str, Any] | None = None
    registered: dict[str, Any] = field(default_factory=dict)
    dead: bool = False  # unreachable or failed: no further tasks this run
    interrupted: str | None = None  # the task the run was interrupted in, or before
    release_lock: Release | None = None
    lock_play: Play | None = None  # the play whose context took the lock (for its state dir)
    targeted: bool = False  # a play ran on it (not only tasks delegated to it)
    pending: set[str] = field(default_factory=set)  # the current play's notified handlers
    #: Held while connecting and locking: its own play and delegated tasks may race there.
    guard: threading.Lock = field(default_factory=threading.Lock, repr=False)


class Executor:
    def __init__(
        self,
        inventory: Inventory,
        options: RunOptions,
        reporter: Reporter,
        masker: Masker,
        runlog: RunLog,
    ):
        self.inventory = inventory
        self.options = options
        self.reporter = reporter
        self.masker = masker
        self.runlog = runlog
        self.sessions: dict[str, HostSession] = {}
        self._sessions_guard = threading.Lock()
        #: Each play's batches, and why it stopped early (for the recap).
        self.plays: list[PlayRecap] = []
        self._running: dict[str, tuple[str, float]] = {}  # host -> (task, started)
        self._done = threading.Event()
        #: The signal that interrupted the run (SIGINT, SIGTERM), or None.
        self.interrupted: int | None = None

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
                recap = self._run_play(play, playbook, hosts)
                self.plays.append(recap)
                if recap.stopped:
                    break  # as in Ansible, a play stopped by its failures ends the run
        finally:
            for session in self.sessions.values():
                if session.release_lock is not None:
                    session.release_lock()
                if session.conn is not None:
                    session.conn.close()
            self._done.set()
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        code = self.exit_code()
        targets = self._targets()
        self.reporter.recap(
            {n: s.tally for n, s in targets.items()},
            str(self.runlog.path),
            int(code),
            interrupted={n: s.interrupted for n, s in targets.items() if s.interrupted},
            plays=self.plays,
        )
        return code

    def _targets(self) -> dict[str, HostSession]:
        """The hosts the plays ran on (not those only delegated to)."""
        return {n: s for n, s in self.sessions.items() if s.targeted}

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
        if self.interrupted is None:
            self.interrupted = signum
            self.reporter.note(
                f"{name}: stopping; running commands are being ended, no new task starts"
                " (again to exit at once)"
            )
            threading.Thread(target=self._cancel_all, name="cancel", daemon=True).start()
            return
        self.reporter.note(f"{name} again: killing running commands and exiting now")
        self._cancel_all(grace=0)
        os._exit(128 + signum)

    def _cancel_all(self, grace: float = KILL_GRACE_SECONDS) -> None:
        """Cancel every host's connection at once (each may wait out the grace)."""
        cancels = [
            threading.Thread(target=session.conn.cancel, args=(grace,), daemon=True)
            for session in list(self.sessions.values())
            if session.conn is not None
        ]
        for thread in cancels:
            thread.start()
        for thread in cancels:
            thread.join(grace + 30)

    def _heartbeat(self) -> None:
        """Every HEARTBEAT_SECONDS of a task, say which hosts are still busy and with what, so
        a slow host is never a mystery (the first line comes HEARTBEAT_SECONDS after it
        started)."""
        told: dict[tuple[str, float], int] = {}  # (host, started) -> heartbeats given
        while not self._done.wait(min(1.0, HEARTBEAT_SECONDS / 4)):
            now = time.monotonic()
            busy = []
            for host, (task, started) in list(self._running.items()):
                due = int((now - started) // HEARTBEAT_SECONDS)
                if due > told.get((host, started), 0):
                    told[(host, started)] = due
                    busy.append(f"{host} '{task}' ({now - started:.0f} s)")
            if busy:
                self.reporter.note("still running: " + ", ".join(busy))

    def exit_code(self) -> int:
        if self.interrupted:
            return 128 + self.interrupted  # 130 for SIGINT, 143 for SIGTERM, as shells do
        tallies = [s.tally for s in self._targets().values()]
        if any(t.unreachable for t in tallies):
            return ExitCode.HOST_UNREACHABLE
        if any(t.failed for t in tallies):
            return ExitCode.HOST_FAILED
        if self.options.check and any(t.changed for t in tallies):
            return ExitCode.CHECK_FOUND_CHANGES
        return ExitCode.OK

    def check_targets(self, plays: list[Play]) -> None:
        """Every play's `hosts:` must match a host of the inventory (a typo is an error)."""
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
            for task in play.tasks + play.handlers:
                name = task.delegate_to
                if name and "{" not in name and self._delegate_host(name) is None:
                    raise InputError(
                        f"task '{task.name}': delegate_to '{name}' is no host of the inventory "
                        f"{self.inventory.path} (nor localhost)",
                        source=task.source,
                        line=task.line,
                    )

    def _delegate_host(self, name: str) -> Host | None:
        """An inventory host by name; `localhost`, when the inventory has none, is the
        controller (a local connection)."""
        if name in self.inventory.hosts:
            return self.inventory.hosts[name]
        if name == "localhost":
            local = ConnectionSpec(address="localhost", connection="local")
            return Host("localhost", [], {}, local)
        return None

    def _play_hosts(self, play: Play) -> list[Host]:
        return self.inventory.select(play.hosts)

    # -- one play: its batches, each run task by task on every host of the batch -------------
    def _run_play(self, play: Play, playbook: Path, hosts: list[Host]) -> PlayRecap:
        """Run the play batch by batch (`serial`); stop early when a batch's failures say so."""
        sessions = [self._session(h) for h in hosts]
        for session in sessions:
            session.targeted = True
        split = batches.split([s for s in sessions if not s.dead], play.serial)
        recap = PlayRecap(play.name, [[s.host.name for s in batch] for batch in split])
        forks = self.options.forks or min(len(sessions), 32)
        with ThreadPoolExecutor(max_workers=forks, thread_name_prefix="host") as pool:
            for index, batch in enumerate(split, 1):
                if self.interrupted:
                    break
                if len(split) > 1:
                    names = [s.host.name for s in batch]
                    self.reporter.batch(play.name, index, len(split), names)
                fatal = self._run_batch(play, playbook, batch, pool)
                failed = sum(1 for s in batch if s.dead)
                reason = fatal or (
                    batches.stop_reason(len(batch), failed, play.max_fail_percentage)
                    if play.stops_on_failure
                    else None
                )
                if reason and not self.interrupted:
                    recap.stopped, recap.stopped_by_batch = reason, index
                    recap.not_reached = [s.host.name for later in split[index:] for s in later]
                    never = ", ".join(recap.not_reached) or "none"
                    self.reporter.note(
                        f"play '{play.name}' stopped by batch {index}/{len(split)}: {reason}; "
                        f"hosts never reached: {never}"
                    )
                    break
        return recap

    def _run_batch(
        self, play: Play, playbook: Path, batch: list[HostSession], pool: ThreadPoolExecutor
    ) -> str | None:
        """The whole play on one batch, each task on every host of it before the next task
        starts (Ansible's linear strategy), then its handlers. Returns why any_errors_fatal
        stops the play, or None."""
        self._each(pool, batch, lambda s: self._start_play(play, playbook, s))
        if play.any_errors_fatal and (failed := [s.host.name for s in batch if s.dead]):
            return f"any_errors_fatal: the play's start failed on {', '.join(failed)}"
        for task in play.tasks:
            if not task.selected(self.options.tags, self.options.skip_tags):
                continue
            live = [s for s in batch if not s.dead]
            if not live:
                return None
            if self.interrupted:
                for session in live:
                    session.interrupted = session.interrupted or f"before '{task.name}'"
                return None
            if task.module == "meta":  # flush_handlers: run what is notified so far, now
                self._each(pool, live, lambda s: self._flush(play, playbook, s))
            elif task.run_once:
                self._run_once(play, playbook, task, live, pool)
            else:
                self._each(pool, live, functools.partial(self._step, play, playbook, task=task))
            failed = [s.host.name for s in live if s.dead]
            if failed and task.errors_fatal(play.any_errors_fatal):
                return f"any_errors_fatal: '{task.name}' failed on {', '.join(failed)}"
        live = [s for s in batch if not s.dead]
        if self.interrupted:
            for session in live:
                session.interrupted = session.interrupted or "before the handlers"
            return None
        self._each(pool, live, lambda s: self._run_handlers(play, playbook, s, s.pending))
        return None

    def _each(
        self,
        pool: ThreadPoolExecutor,
        sessions: list[HostSession],
        step: Callable[[HostSession], TaskResult | None],
    ) -> list[TaskResult | None]:
        """One step on each host at once; a host's trouble stops that host only."""
        return list(pool.map(lambda s: self._guard_host(s, step), sessions))

    def _guard_host(
        self, session: HostSession, step: Callable[[HostSession], TaskResult | None]
    ) -> TaskResult | None:
        """Run one step on a host, turning what stops the host into its state and tally."""
        name = session.host.name
        try:
            return step(session)
        except CommandInterrupted:
            session.interrupted = session.interrupted or "while connecting"
        except runlock.HostLocked as error:
            session.dead = True
            session.tally.failed += 1
            self.reporter.task(name, "run lock", TaskResult(Status.FAILED, str(error)))
            self.runlog.write(name, f"LOCKED: {error}")
        except HostUnreachable as error:
            self._unreachable(session, str(error))
        except Exception as error:  # never let one host's trouble stop the others
            self.runlog.write(name, traceback.format_exc())
            session.dead = True
            session.tally.failed += 1
            self.reporter.task(
                name, "glmops", TaskResult(Status.FAILED, f"internal error: {error!r}")
            )
        return None

    def _start_play(self, play: Play, playbook: Path, session: HostSession) -> None:
        """Connect (and lock), read the notifications an earlier run left, gather facts."""
        self._connect(play, session)
        key = play_key(playbook, play.name)
        session.pending = read_pending(self._context(play, session, None), key, play.handler_names)
        if session.pending:
            self.reporter.note(
                f"replaying notifications kept from an earlier run: "
                f"{', '.join(sorted(session.pending))}",
                session.host.name,
            )
        if play.gather_facts and session.facts is None:
            self._gather_task(play, session)

    def _step(self, play: Play, playbook: Path, session: HostSession, task: Task) -> TaskResult:
        result = self._run_task(play, playbook, session, task)
        self._after_task(play, playbook, session, task, result)
        return result

    def _after_task(
        self, play: Play, playbook: Path, session: HostSession, task: Task, result: TaskResult
    ) -> None:
        """Record the task's notifications on the host; a failure ends the host's play."""
        if self.interrupted and not session.interrupted:
            session.interrupted = f"in '{task.name}'"
        # A task ended mid-command may have changed the host: its notification is kept too
        # (a needless restart later beats a lost one).
        if (result.changed or result.data.get(ENDED_MIDWAY)) and task.notify:
            new = set(task.notify) - session.pending
            session.pending |= set(task.notify)
            if new and not self.options.check:
                write_pending(
                    self._context(play, session, None),
                    play_key(playbook, play.name),
                    session.pending,
                    play.handler_names,
                )
        if result.failed and not result.ignored:
            session.dead = True

    def _flush(self, play: Play, playbook: Path, session: HostSession) -> None:
        session.pending = self._run_handlers(play, playbook, session, session.pending)

    def _run_once(
        self,
        play: Play,
        playbook: Path,
        task: Task,
        live: list[HostSession],
        pool: ThreadPoolExecutor,
    ) -> None:
        """`run_once`: the task runs on the batch's first live host; its result (register,
        notifications, failure) counts for every host of the batch."""
        first, rest = live[0], live[1:]
        step = functools.partial(self._step, play, playbook, task=task)
        result = self._each(pool, [first], step)[0]
        name = first.host.name
        if result is None:
            shared = TaskResult(Status.FAILED, f"run once on {name}, which could not run it")
        else:
            status = Status.FAILED if result.failed else result.status
            msg = "(output hidden: no_log)" if task.no_log else result.msg
            shared = TaskResult(
                status, f"run once on {name}: {msg}", None, result.data, delegate=result.delegate
            )

        def share(session: HostSession) -> TaskResult:
            copy = TaskResult(shared.status, shared.msg, None, dict(shared.data))
            copy.delegate = shared.delegate
            self._record(session, task, copy, source=f"{task.source}:{task.line}")
            self._after_task(play, playbook, session, task, copy)
            return copy

        self._each(pool, rest, share)

    def _session(self, host: Host) -> HostSession:
        """The run's one session per host, shared by its plays and by tasks delegated to it."""
        with self._sessions_guard:
            return self.sessions.setdefault(host.name, HostSession(host))

    def _connect(self, play: Play, session: HostSession) -> None:
        """Connect to the host, and take its run lock when this run changes hosts; once per
        run, whether for its own tasks or for tasks delegated to it."""
        with session.guard:
            self._ensure_connected(session)
            if self.options.lock and not self.options.check and session.release_lock is None:
                self._lock(play, session)

    def _ensure_connected(self, session: HostSession) -> None:
        if session.conn is not None:
            return
        host = session.host
        session.conn = open_connection(host.name, host.connection, self.options.connection)
        probe = session.conn.run('id -u; printf "%s\\n" "$HOME"', timeout=30)
        lines = probe.stdout.splitlines()
        if probe.rc != 0 or len(lines) < 2:
            raise HostUnreachable(f"cannot run commands on {host.name}: {probe.stderr.strip()}")
        session.remote = RemoteInfo(uid=int(lines[0]), home=lines[1], python=None)
        self.runlog.write(host.name, f"connected as uid {lines[0]}")

    def _unreachable(self, session: HostSession, message: str) -> None:
        session.dead = True
        session.tally.unreachable += 1
        self.reporter.task(session.host.name, "connect", TaskResult(Status.UNREACHABLE, message))
        self.runlog.write(session.host.name, f"UNREACHABLE: {message}")

    def _context(self, play: Play, session: HostSession, task: Task | None) -> TaskContext:
        host = session.host
        become = next(
            v
            for v in (task and task.become, play.become, host.connection.become, False)
            if v is not None
        )
        assert session.conn is not None and session.remote is not None
        return TaskContext(
            host=host,
            conn=session.conn,
            remote=session.remote,
            log=self.runlog,
            masker=self.masker,
            check=self.options.check,
            diff=self.options.diff,
            become=bool(become),
            sudo_password=self.options.sudo_password,
            timeout=task.timeout if task else None,
            task_name=task.name if task else "",
            # glmops' own state (notifications, the lock) is always kept as root
            become_user=(task.become_user or play.become_user) if task else None,
            no_log=bool(task and task.no_log),
            reconnect=lambda: self._reconnect(session),
            notify_progress=lambda text: self.reporter.note(text, host.name),
        )

    def _lock(self, play: Play, session: HostSession) -> None:
        session.lock_play = play
        session.release_lock = runlock.acquire(
            self._context(play, session, None), runlock.holder_info(str(self.runlog.path))
        )

    def _reconnect(self, session: HostSession) -> Connection:
        """A fresh connection to the same host (after a reboot); the old one is closed first,
        and the run lock, which lived with it, is taken again."""
        if session.conn is not None:
            session.conn.close()
        session.conn = None
        session.release_lock = None
        self._ensure_connected(session)
        if session.lock_play is not None:
            self._lock(session.lock_play, session)
        assert session.conn is not None
        return session.conn

    def variables(
        self, play: Play, playbook: Path, session: HostSession, task: Task | None = None
    ) -> dict[str, Any]:
        host = session.host
        merged = {**play.defaults, **host.vars, **play.vars, **self.options.extra_vars}
        self.masker.add_secret_vars(merged)
        merged.update(
            inventory_hostname=host.name,
            group_names=host.groups,
            check_mode=self.options.check,
            playbook_dir=str(playbook.parent),
            facts=session.facts or {},
        )
        merged.update(session.registered)
        if task:
            merged.update(task.vars)
        where = f"{task.where} on host '{host.name}'" if task else f"play '{play.name}'"
        resolved = resolve_variables(merged, where=where)
        self.masker.add_secret_vars(resolved)
        return resolved

    # -- one task ----------------------------------------------------------------------------
    def _run_task(
        self, play: Play, playbook: Path, session: HostSession, task: Task, *, handler: bool = False
    ) -> TaskResult:
        started = time.monotonic()
        source = f"{task.source}:{task.line}"
        self.reporter.task_start(session.host.name, task.name, source, handler=handler)
        self._running[session.host.name] = (task.name, started)
        try:
            if task.loop is None:
                result = self._guarded(play, playbook, session, task, {})
            else:
                result = self._looped(play, playbook, session, task)
        finally:
            self._running.pop(session.host.name, None)
        self._record(
            session, task, result, handler=handler, source=source, took=time.monotonic() - started
        )
        return result

    def _record(
        self,
        session: HostSession,
        task: Task,
        result: TaskResult,
        *,
        handler: bool = False,
        source: str | None = None,
        took: float | None = None,
    ) -> None:
        """Count a task's result for a host, register it, and show it (censored by no_log)."""
        if result.failed and task.ignore_errors:
            result.ignored = True
        session.tally.count(result)
        if task.register:
            session.registered[task.register] = result.registered()
        if not result.failed:  # set_fact
            session.registered.update(result.data.get("set_vars") or {})
        shown = _censored(result) if task.no_log else result
        self.runlog.write(
            session.host.name,
            f"task {task.name!r}: {shown.status.value} "
            f"({took or 0:.2f}s) {shown.msg}" + (f" on {shown.delegate}" if shown.delegate else ""),
        )
        self.reporter.task(
            session.host.name,
            task.name,
            shown,
            handler=handler,
            source=source,
            duration=took,
        )

    def _guarded(
        self,
        play: Play,
        playbook: Path,
        session: HostSession,
        task: Task,
        item_vars: dict[str, Any],
    ) -> TaskResult:
        """One run of a task (or of one loop item), every failure turned into its result."""
        try:
            return self._attempts(play, playbook, session, task, item_vars)
        except HostUnreachable:
            raise
        except CommandTimeout as error:
            return TaskResult(Status.FAILED, f"timed out: {error}", data={ENDED_MIDWAY: True})
        except CommandInterrupted as error:
            return TaskResult(
                Status.FAILED,
                f"interrupted: {error}; its command was ended",
                data={ENDED_MIDWAY: True},
            )
        except (TemplateError, ModuleError, RemoteCommandError) as error:
            return TaskResult(Status.FAILED, str(error))
        except Exception as error:  # a bug in a module fails its task, never the whole run
            trace = traceback.format_exc()
            self.runlog.write(session.host.name, trace)
            return TaskResult(
                Status.FAILED,
                f"internal error in module '{task.module}': {error!r}"
                f" (traceback in {self.runlog.path}/{session.host.name}.log)",
                data={"traceback": trace},
            )

    def _looped(self, play: Play, playbook: Path, session: HostSession, task: Task) -> TaskResult:
        """`loop:` the task once per item (as `loop_var`); the result holds every item's."""
        where = f"{task.where} on host '{session.host.name}'"
        try:
            items = render_value(
                task.loop, self.variables(play, playbook, session, task), where=where
            )
        except TemplateError as error:
            return TaskResult(Status.FAILED, str(error))
        if not isinstance(items, list):
            return TaskResult(Status.FAILED, f"{where}: 'loop' rendered to {items!r}, not a list")
        results, delegates = [], set()
        for item in items:
            if self.interrupted:
                break
            one = self._guarded(play, playbook, session, task, {task.loop_var: item})
            results.append({**one.registered(), task.loop_var: item})
            delegates |= {one.delegate} if one.delegate else set()
        result = _loop_result(results, task.loop_var)
        result.delegate = ", ".join(sorted(delegates)) or None
        return result

    def _attempts(
        self,
        play: Play,
        playbook: Path,
        session: HostSession,
        task: Task,
        item_vars: dict[str, Any],
    ) -> TaskResult:
        where = f"{task.where} on host '{session.host.name}'"
        variables = {**self.variables(play, playbook, session, task), **item_vars}
        module_cls = REGISTRY[task.module]
        if task.when is not None and not evaluate_condition(task.when, variables, where=where):
            return TaskResult(
                Status.SKIPPED,
                f"condition false: {task.when}",
                data=dict(module_cls.result_defaults),
            )
        params = render_value(task.args, variables, where=where)
        problems = check_types(module_cls, params)
        if problems:
            raise ModuleError(f"{where}: {problems[0]}")
        delegate = self._delegate(play, task, variables, where) if task.delegate_to else None
        ctx = self._context(play, delegate or session, task)
        ctx.environment = _environment(
            render_value({**play.environment, **task.environment}, variables, where=where), where
        )
        if task.check_mode is False:
            ctx.check = False
        ctx.vars, ctx.search_paths = variables, _search_paths(playbook)
        attempts = task.retries + 1 if (task.retries or task.until) else 1
        for attempt in range(1, attempts + 1):
            result = self._once(module_cls(params), ctx)
            result.data = {**module_cls.result_defaults, **result.data}
            result = self._conditions(task, result, variables, where)
            if task.until is None and not result.failed:
                break
            if task.until is not None:
                scope = {
                    **variables,
                    "result": result.registered(),
                    **({task.register: result.registered()} if task.register else {}),
                }
                if evaluate_condition(task.until, scope, where=where):
                    break
            if attempt < attempts:
                self.runlog.write(session.host.name, f"retry {attempt}/{task.retries}: {task.name}")
                time.sleep(task.delay)
        else:
            if task.until is not None and not result.failed:
                result = TaskResult(
                    Status.FAILED,
                    f"'until' still false after {attempts} attempt(s): {result.msg}",
                    result.diff,
                    result.data,
                )
        if (
            result.changed
            and module_cls.changes_facts
            and session.facts is not None
            and not self.options.check
            and delegate is None
        ):
            self._gather_facts(play, session)
        if delegate is not None and delegate is not session:
            result.delegate = delegate.host.name
        return result

    def _delegate(
        self, play: Play, task: Task, variables: dict[str, Any], where: str
    ) -> HostSession:
        """The session a `delegate_to` task runs over: the delegate's connection, become and
        run lock (taken once, without waiting, by a changing run), shared with the delegate's
        own play when it is a host of this run too."""
        name = render_value(task.delegate_to, variables, where=where)
        host = self._delegate_host(str(name).strip()) if isinstance(name, str) else None
        if host is None:
            raise ModuleError(f"{where}: delegate_to {name!r} is no host of the inventory")
        target = self._session(host)
        try:
            self._connect(play, target)
        except runlock.HostLocked as error:
            raise ModuleError(f"delegate '{host.name}': {error}") from None
        except HostUnreachable as error:
            raise HostUnreachable(f"delegate '{host.name}': {error}") from None
        return target

    def _once(self, module, ctx: TaskContext) -> TaskResult:
        plan = module.plan(ctx)
        if plan.change is False:
            return TaskResult(Status.OK, plan.reason, data=plan.data_public())
        if ctx.check:
            if plan.change is None:
                return TaskResult(Status.SKIPPED, f"check mode: {plan.reason}")
            return TaskResult(Status.CHANGED, plan.reason, plan.diff, plan.data_public())
        return module.apply(ctx, plan)

    def _conditions(
        self, task: Task, result: TaskResult, variables: dict[str, Any], where: str
    ) -> TaskResult:
        if (
            task.changed_when is None
            and task.failed_when is None
            or result.status in (Status.SKIPPED, Status.UNREACHABLE)
        ):
            return result
        scope = {**variables, "result": result.registered()}
        if task.register:
            scope[task.register] = result.registered()
        if task.failed_when is not None and evaluate_condition(
            task.failed_when, scope, where=where
        ):
            return TaskResult(
                Status.FAILED, f"failed_when: {task.failed_when}", result.diff, result.data
            )
        if task.changed_when is not None and result.status is not Status.FAILED:
            changed = evaluate_condition(task.changed_when, scope, where=where)
            result.status = Status.CHANGED if changed else Status.OK
        elif task.failed_when is not None and result.status is Status.FAILED:
            result.status = Status.CHANGED if result.data.get("rc") is not None else Status.OK
        return result

    # -- handlers ----------------------------------------------------------------------------
    def _run_handlers(
        self, play: Play, playbook: Path, session: HostSession, pending: set[str]
    ) -> set[str]:
        """Run the notified handlers in the order they are defined; returns those still pending."""
        if not pending:
            return pending
        done: set[str] = set()
        for handler in play.handlers:
            names = {handler.name, *handler.listen}
            if not names & pending:
                continue
            if self.interrupted:  # what is still pending stays recorded on the host
                session.interrupted = session.interrupted or f"before handler '{handler.name}'"
                return pending - done
            result = self._run_task(play, playbook, session, handler, handler=True)
            if result.failed and not result.ignored:
                session.dead = True
                break
            done |= names
        if not self.options.check:
            write_pending(
                self._context(play, session, None),
                play_key(playbook, play.name),
                pending - done,
                play.handler_names,
            )
        return pending - done

    # -- facts -------------------------------------------------------------------------------
    def _gather_task(self, play: Play, session: HostSession) -> bool:
        """Gather facts as the play's first task; False (host failed) when the probe fails."""
        try:
            self._gather_facts(play, session)
            result = TaskResult(Status.OK, _facts_summary(session.facts or {}))
        except (RemoteCommandError, CommandTimeout) as error:
            result = TaskResult(Status.FAILED, f"cannot gather facts: {error}")
            session.dead = True
        session.tally.count(result)
        self.reporter.task(session.host.name, "gather facts", result)
        return not result.failed

    def _gather_facts(self, play: Play, session: HostSession) -> None:
        from glmops.facts_gather import gather

        ctx = self._context(play, session, None)
        session.facts = gather(
            ctx, {**play.defaults, **session.host.vars, **play.vars, **self.options.extra_vars}
        )


def _environment(values: Any, where: str) -> dict[str, str]:
    if not isinstance(values, dict):
        raise ModuleError(f"{where}: 'environment' must be a mapping")
    for name in values:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(name)):
            raise ModuleError(f"{where}: environment variable name {name!r} is not valid")
    return {str(k): "" if v is None else str(v) for k, v in values.items()}


def _loop_result(results: list[dict[str, Any]], loop_var: str) -> TaskResult:
    """One result for a looped task: failed if an item failed, changed if one changed."""
    counts: dict[str, int] = {}
    for one in results:
        counts[one["status"]] = counts.get(one["status"], 0) + 1
    if counts.get("failed"):
        status = Status.FAILED
    elif counts.get("changed"):
        status = Status.CHANGED
    elif results and counts.get("skipped") == len(results):
        status = Status.SKIPPED
    else:
        status = Status.OK
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    failed = [f"{loop_var}={one[loop_var]!r}: {one['msg']}" for one in results if one["failed"]]
    msg = f"{len(results)} item(s): {summary or 'none'}" + (
        f"; {'; '.join(failed)}" if failed else ""
    )
    return TaskResult(status, msg, data={"results": results})


def _censored(result: TaskResult) -> TaskResult:
    """What a `no_log` task shows: its status, never its output, message or diff."""
    return TaskResult(
        result.status,
        "(output hidden: no_log)",
        None,
        {},
        ignored=result.ignored,
        delegate=result.delegate,
    )


def _facts_summary(facts: dict[str, Any]) -> str:
    gpus = facts.get("gpus") or []
    names = sorted({f"{g.get('name')} ({g.get('compute_cap')})" for g in gpus})
    os_info = facts.get("os") or {}
    system = f"{os_info.get('id', '?')} {os_info.get('version_id', '')}".strip()
    return f"{system}, {len(gpus)} GPU(s)" + (f": {', '.join(names)}" if names else "")


def _search_paths(playbook: Path) -> list[Path]:
    """Where `src:` of copy/template is looked up: beside the playbook, then the project's."""
    return [playbook.parent, playbook.parent.parent, paths.root()]


def observe(
    inventory_path: Path, plays: list[Play], *, check: bool = False
) -> tuple[ExitCode, Executor]:
    """Run read-only plays for a report (`glmops facts`, `glmops status`): task lines go to
    stderr, so stdout stays free for the report; returns the executor to read sessions from."""
    masker = Masker()
    options = RunOptions(check=check, lock=False)
    reporter = Reporter(masker, stdout=sys.stderr)
    executor = Executor(
        load_inventory(inventory_path), options, reporter, masker, RunLog(options.run_root, masker)
    )
    return executor.run(plays, inventory_path), executor
