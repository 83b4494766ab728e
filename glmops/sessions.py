"""Each host's state across a run (`HostSession`) and how the engine reaches it: one session
per host, shared by the plays that target it and the tasks delegated to it, connected and
locked once. Kept apart from the play loop so that both a play's hosts and a task's delegate
get their connection, run lock and task context the same way."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from glmops import runlock
from glmops.connection import Connection, Release, open_connection
from glmops.context import RemoteInfo, TaskContext
from glmops.errors import HostUnreachable
from glmops.inventory import Host
from glmops.playbook import Play, Task
from glmops.results import HostTally, Status, TaskResult

if TYPE_CHECKING:
    from glmops.executor import RunOptions
    from glmops.output import Reporter
    from glmops.runlog import Masker, RunLog


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


class Sessions:
    """The engine's part that opens, locks and describes host sessions (mixed into Executor)."""

    options: RunOptions
    reporter: Reporter
    masker: Masker
    runlog: RunLog
    sessions: dict[str, HostSession]
    _sessions_guard: threading.Lock

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

    def _gather_facts(self, play: Play, session: HostSession) -> None:
        from glmops.facts_gather import gather

        ctx = self._context(play, session, None)
        session.facts = gather(
            ctx, {**play.defaults, **session.host.vars, **play.vars, **self.options.extra_vars}
        )
