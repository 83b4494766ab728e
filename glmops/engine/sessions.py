"""Each host's state across a run (`HostSession`) and the pool that holds them
(`SessionPool`): one session per host, shared by the plays that target it and the tasks
delegated to it, connected and locked once. A play's hosts and a task's delegate get their
connection, run lock, task context and facts the same way, from the pool."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from glmops.engine import runlock
from glmops.engine.checkcache import CheckCache
from glmops.engine.connect import open_connection
from glmops.engine.connection import KILL_GRACE_SECONDS, Connection, Release
from glmops.engine.context import RemoteInfo, TaskContext
from glmops.engine.inventory import Host
from glmops.engine.nodes import Play, Task
from glmops.engine.results import HostTally
from glmops.engine.unsafe import mark_unsafe
from glmops.errors import HostUnreachable

if TYPE_CHECKING:
    from glmops.engine.run_state import RunState

#: Who we are on a host: the uid and the home folder, a line each.
WHO_AM_I = 'id -u; printf "%s\\n" "$HOME"'


@dataclass
class HostSession:
    """One host's state across a run: its connection, what we know of it, and its tally. The
    pool sets its connection, lock and facts; the task runner and the play loop the rest."""

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
    #: The task that last failed this host, and its result (a block's rescue reads it).
    failure: tuple[Task, Any] | None = None
    #: How the connection reaches the host (a play's `connection:` may ask for another).
    conn_kind: str | None = None
    #: Checks run ahead for the play's tasks, in one probe (glmops/engine/prefetch.py).
    prefetched: CheckCache = field(default_factory=CheckCache)
    #: Held while connecting and locking: its own play and delegated tasks may race there.
    guard: threading.Lock = field(default_factory=threading.Lock, repr=False)


class SessionPool:
    """The run's host sessions: each made once, on first use, then connected and locked once,
    whether for its own play or for a task delegated to it."""

    def __init__(self, state: RunState):
        self._state = state
        self._sessions: dict[str, HostSession] = {}
        self._guard = threading.Lock()  # the dict: plays' threads and delegated tasks add to it

    @property
    def sessions(self) -> Mapping[str, HostSession]:
        """Every host's session so far, by name (read-only: `session` adds them)."""
        return MappingProxyType(self._sessions)

    def session(self, host: Host) -> HostSession:
        """The run's one session per host, shared by its plays and by tasks delegated to it."""
        with self._guard:
            return self._sessions.setdefault(host.name, HostSession(host))

    def targets(self) -> dict[str, HostSession]:
        """The hosts the plays ran on (not those only delegated to)."""
        return {n: s for n, s in self._sessions.items() if s.targeted}

    def connect(
        self,
        play: Play,
        session: HostSession,
        then: Callable[[TaskContext], runlock.FollowUp] | None = None,
    ) -> str | None:
        """Connect to the host, and take its run lock when this run changes hosts; once per
        run, whether for its own tasks or for tasks delegated to it. When the lock is taken
        now, `then` (made for the host's context) runs in the same round trip and its output
        is returned; None means it did not run."""
        options = self._state.options
        with session.guard:
            wanted = _connection_kind(play, session.host)
            if session.conn is not None and session.conn_kind != wanted:
                # The play asks for another way to reach the host: the lock, held over the
                # old connection, is taken again over the new one.
                if session.release_lock is not None:
                    session.release_lock()
                    session.release_lock = None
                session.conn.close()
                session.conn = None
            session.conn_kind = wanted
            locking = options.lock and not options.check and session.release_lock is None
            # Logged in as root over SSH, who we are is known but for $HOME: the lock's round
            # trip carries the question, instead of a round trip of its own before it.
            learn = (
                locking
                and then is not None
                and session.conn is None
                and session.host.connection.user == "root"
                and wanted != "local"
            )
            self._ensure_connected(session, probe=not learn)
            if learn and then is not None:
                return self._lock_learning_remote(play, session, then)
            if locking:
                return self._lock(play, session, then)
        return None

    def open(self, host: Host, work: str) -> TaskContext:
        """The one door to a host for work outside a playbook (the model phase, the host
        checks): connected, and locked when the run changes hosts, as a play would be; the
        context is named after `work`."""
        play = Play(name=work, hosts=host.name, source=work, line=0)
        session = self.session(host)
        self.connect(play, session)
        return replace(self.context(play, session, None), task_name=work)

    def context(self, play: Play, session: HostSession, task: Task | None) -> TaskContext:
        """What a task (or the engine's own step, when `task` is None) acts on the host with."""
        host, state = session.host, self._state
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
            log=state.runlog,
            masker=state.masker,
            check=state.options.check,
            diff=state.options.diff,
            become=bool(become),
            sudo_password=state.options.sudo_password,
            timeout=task.timeout if task else None,
            task_name=task.name if task else "",
            # glmops' own state (notifications, the lock) is always kept as root
            become_user=(task.become_user or play.become_user) if task else None,
            no_log=bool(task and task.no_log),
            reconnect=lambda: self._reconnect(session),
            prefetched=session.prefetched,
            notify_progress=lambda text: state.reporter.note(text, host.name),
        )

    def gather_facts(self, play: Play, session: HostSession) -> None:
        from glmops.engine.facts_gather import gather

        ctx = self.context(play, session, None)
        variables = {**play.defaults, **session.host.vars, **play.vars}
        facts = gather(ctx, {**variables, **self._state.options.extra_vars})
        session.facts = mark_unsafe(facts)  # what the host said: data, never a template

    def cancel_all(self, grace: float = KILL_GRACE_SECONDS) -> None:
        """Cancel every host's connection at once (each may wait out the grace). No lock:
        a signal handler calls this, maybe while its own thread holds the pool's."""
        cancels = [
            threading.Thread(target=session.conn.cancel, args=(grace,), daemon=True)
            for session in list(self._sessions.values())
            if session.conn is not None
        ]
        for thread in cancels:
            thread.start()
        for thread in cancels:
            thread.join(grace + 30)

    def close(self) -> None:
        """Release every run lock taken and close every connection (the run is over)."""
        for session in self._sessions.values():
            if session.release_lock is not None:
                session.release_lock()
                session.release_lock = None
            if session.conn is not None:
                session.conn.close()

    def _ensure_connected(self, session: HostSession, *, probe: bool = True) -> None:
        """Connect, and learn who we are on the host (uid, home) in a round trip of its own;
        without `probe`, the caller learns it in its first command (`_learned`) and until
        then the session says uid 0 (root's) with no home."""
        if session.conn is not None:
            return
        host = session.host
        spec = host.connection
        if session.conn_kind and session.conn_kind != spec.connection:
            spec = replace(spec, connection=session.conn_kind)
        session.conn = open_connection(host.name, spec, self._state.options.connection)
        if not probe:
            session.remote = RemoteInfo(uid=0, home="", python=None)
            return
        self._ask_who(session)

    def _ask_who(self, session: HostSession) -> None:
        assert session.conn is not None
        answer = session.conn.run(WHO_AM_I, timeout=30)
        if answer.rc != 0:
            name = session.host.name
            raise HostUnreachable(f"cannot run commands on {name}: {answer.stderr.strip()}")
        session.remote = None  # a new connection (after a reboot, too): nothing staged yet
        self._learned(session, answer.stdout)

    def _learned(self, session: HostSession, answer: str) -> str:
        """Set the session's uid and home from `WHO_AM_I`'s answer; returns what followed it."""
        uid, home, rest = (answer.split("\n", 2) + ["", ""])[:3]
        if not uid.strip().isdigit() or not home:
            raise HostUnreachable(f"cannot run commands on {session.host.name}: {answer!r}")
        session.remote = session.remote or RemoteInfo(uid=int(uid), home=home, python=None)
        session.remote.uid, session.remote.home = int(uid), home
        self._state.runlog.write(session.host.name, f"connected as uid {uid.strip()}")
        return rest

    def _lock_learning_remote(
        self, play: Play, session: HostSession, then: Callable[[TaskContext], runlock.FollowUp]
    ) -> str | None:
        """`_lock` whose follow-up first says who we are, for a session connected without
        asking: logged in as root, so the lock's command is root's whatever the answer."""

        def who_then(ctx: TaskContext) -> runlock.FollowUp:
            follow = then(ctx)
            return replace(follow, command=f"{WHO_AM_I}; {follow.command}")

        output = self._lock(play, session, who_then)
        if output is None:  # the lock was this very run's (another name of the host): no answer
            self._ask_who(session)
            return None
        rest = self._learned(session, output)
        assert session.remote is not None
        if session.remote.uid != 0:
            raise HostUnreachable(
                f"{session.host.name}: logged in as root, but the uid there is {session.remote.uid}"
            )
        return rest

    def _lock(
        self,
        play: Play,
        session: HostSession,
        then: Callable[[TaskContext], runlock.FollowUp] | None = None,
    ) -> str | None:
        session.lock_play = play
        holder = runlock.holder_info(str(self._state.runlog.path))
        ctx = self.context(play, session, None)
        session.release_lock, output = runlock.acquire_then(ctx, holder, then and then(ctx))
        return output

    def _reconnect(self, session: HostSession) -> Connection:
        """A fresh connection to the same host (after a reboot); the old one is closed first,
        and the run lock, which lived with it, is taken again. Under the session's guard, as
        `connect`: a task delegated to this host meanwhile waits for the one new connection."""
        with session.guard:
            if session.conn is not None:
                session.conn.close()
            session.conn = None
            session.release_lock = None
            self._ensure_connected(session)
            if session.lock_play is not None:
                self._lock(session.lock_play, session)
            assert session.conn is not None
            return session.conn


def _connection_kind(play: Play, host: Host) -> str:
    """How to reach the host in this play, by Ansible's precedence: the inventory's
    `connection` for the host, then the play's `connection:`, then ssh."""
    return host.vars.get("connection") or play.connection or host.connection.connection
