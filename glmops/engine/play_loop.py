"""The play loop: a play's hosts split into `serial` batches (glmops/engine/batches.py), each batch
run task by task on every host of it at once (up to --forks) before the next task starts, as
Ansible's linear strategy does, then its handlers. `run_once`, `meta: flush_handlers` and
`any_errors_fatal` act at those task boundaries; after a batch, `max_fail_percentage` decides
whether the play goes on. A host's trouble stops that host only. Notifications are written to
the host as they happen and read back at the play's start, so none is lost between runs."""

from __future__ import annotations

import functools
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from glmops.engine import batches, play_start, prefetch, runlock
from glmops.engine.block_run import BlockRunner
from glmops.engine.inventory import Host
from glmops.engine.nodes import Block, Include, Node, Play, Task
from glmops.engine.notifications import play_key, write_pending
from glmops.engine.results import PlayRecap, Status, TaskResult
from glmops.engine.run_state import RunState
from glmops.engine.sessions import HostSession, SessionPool
from glmops.engine.task_run import ENDED_MIDWAY, TaskRunner
from glmops.errors import CommandInterrupted, HostUnreachable


class PlayLoop:
    """Runs a play over its hosts: their sessions from the pool, each task by the runner."""

    def __init__(self, state: RunState, pool: SessionPool, runner: TaskRunner):
        self._state = state
        self._pool = pool
        self._runner = runner
        self._blocks = BlockRunner(state, runner, self._run_nodes)

    def run_play(self, play: Play, playbook: Path, hosts: list[Host]) -> PlayRecap:
        """Run the play batch by batch (`serial`); stop early when a batch's failures say so."""
        sessions = [self._pool.session(h) for h in hosts]
        for session in sessions:
            session.targeted = True
        split = batches.split([s for s in sessions if not s.dead], play.serial)
        recap = PlayRecap(play.name, [[s.host.name for s in batch] for batch in split])
        forks = self._state.options.forks or min(len(sessions), 32)
        with ThreadPoolExecutor(max_workers=forks, thread_name_prefix="host") as pool:
            for index, batch in enumerate(split, 1):
                if self._state.interrupted:
                    break
                if len(split) > 1:
                    names = [s.host.name for s in batch]
                    self._state.reporter.batch(play.name, index, len(split), names)
                fatal = self._run_batch(play, playbook, batch, pool)
                failed = sum(1 for s in batch if s.dead)
                reason = fatal or (
                    batches.stop_reason(len(batch), failed, play.max_fail_percentage)
                    if play.stops_on_failure
                    else None
                )
                if reason and not self._state.interrupted:
                    recap.stopped, recap.stopped_by_batch = reason, index
                    recap.not_reached = [s.host.name for later in split[index:] for s in later]
                    never = ", ".join(recap.not_reached) or "none"
                    self._state.reporter.note(
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
        try:
            return self._run_body(play, playbook, batch, pool)
        finally:
            for session in batch:  # answers run ahead for this play stand no longer
                session.prefetched.forget()

    def _run_body(
        self, play: Play, playbook: Path, batch: list[HostSession], pool: ThreadPoolExecutor
    ) -> str | None:
        if play.any_errors_fatal and (failed := [s.host.name for s in batch if s.dead]):
            return f"any_errors_fatal: the play's start failed on {', '.join(failed)}"
        reason = self._run_nodes(play, playbook, play.tasks, batch, pool)
        if reason:
            return reason
        if self._state.interrupted:
            for session in batch:
                if not session.dead:
                    session.interrupted = session.interrupted or "before the handlers"
            return None
        handled = self._handler_hosts(play, batch)
        self._each(pool, handled, lambda s: self._flush(play, playbook, s))
        return None

    def _run_nodes(
        self,
        play: Play,
        playbook: Path,
        nodes: list[Node],
        sessions: list[HostSession],
        pool: ThreadPoolExecutor,
    ) -> str | None:
        """Tasks, blocks and includes in order on the hosts still up; returns why
        any_errors_fatal stops the play, or None."""
        for node in nodes:
            live = [s for s in sessions if not s.dead]
            if not live:
                return None
            if self._state.interrupted:
                for session in live:
                    session.interrupted = session.interrupted or f"before '{node.name}'"
                return None
            if isinstance(node, Block):
                reason = self._blocks.run_block(play, playbook, node, live, pool)
            elif isinstance(node, Include):
                reason = self._blocks.run_include(play, playbook, node, live, pool)
            else:
                reason = self._run_task(play, playbook, node, live, pool)
            if reason:
                return reason
        return None

    def _run_task(
        self,
        play: Play,
        playbook: Path,
        task: Task,
        live: list[HostSession],
        pool: ThreadPoolExecutor,
    ) -> str | None:
        """One task on every live host at once (run_once: the first); --start-at-task skips
        the tasks before the one it names."""
        if self._blocks.seeking(task):
            return None
        options = self._state.options
        if not task.implicit and not task.selected(options.tags, options.skip_tags):
            return None
        if task.module == "meta":  # flush_handlers: run what is notified so far, now
            handled = self._handler_hosts(play, live)
            self._each(pool, handled, lambda s: self._flush(play, playbook, s))
        elif task.run_once:
            self._run_once(play, playbook, task, live, pool)
        else:
            self._each(pool, live, functools.partial(self._step, play, playbook, task=task))
        failed = [s.host.name for s in live if s.dead]
        if failed and task.errors_fatal(play.any_errors_fatal) and not self._blocks.rescuable:
            return f"any_errors_fatal: '{task.name}' failed on {', '.join(failed)}"
        return None

    def _handler_hosts(self, play: Play, sessions: list[HostSession]) -> list[HostSession]:
        """The hosts whose notified handlers run now: those up, and with --force-handlers (or
        the play's force_handlers) those a failed task stopped too."""
        force = play.force_handlers or self._state.options.force_handlers
        return [s for s in sessions if not s.dead or (force and s.failure is not None)]

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
            self._state.reporter.task(name, "run lock", TaskResult(Status.FAILED, str(error)))
            self._state.runlog.write(name, f"LOCKED: {error}")
        except HostUnreachable as error:
            session.dead = True
            session.tally.unreachable += 1
            self._state.reporter.task(name, "connect", TaskResult(Status.UNREACHABLE, str(error)))
            self._state.runlog.write(name, f"UNREACHABLE: {error}")
        except Exception as error:  # never let one host's trouble stop the others
            self._state.runlog.write(name, traceback.format_exc())
            session.dead = True
            session.tally.failed += 1
            self._state.reporter.task(
                name, "glmops", TaskResult(Status.FAILED, f"internal error: {error!r}")
            )
        return None

    def _start_play(self, play: Play, playbook: Path, session: HostSession) -> None:
        """Connect (and lock), read the notifications an earlier run left, gather facts (one
        round trip after connecting), then run the tasks' checks ahead (one more; in the same
        one when the play gathers no facts)."""
        gather = play.gather_facts and session.facts is None
        args = (self._state, self._runner, self._pool, play, playbook, session, play.tasks)
        started = play_start.start(
            self._state,
            self._pool,
            play,
            playbook,
            session,
            gather=gather,
            checks=lambda: prefetch.wanted_checks(*args),
        )
        session.pending = started.pending
        if session.pending:
            self._state.reporter.note(
                f"replaying notifications kept from an earlier run: "
                f"{', '.join(sorted(session.pending))}",
                session.host.name,
            )
        if gather and not self._facts_task(session, started.facts_error):
            return
        if not started.checked:
            prefetch.run_ahead(*args)

    def _step(self, play: Play, playbook: Path, session: HostSession, task: Task) -> TaskResult:
        result = self._runner.run(play, playbook, session, task)
        self._after_task(play, playbook, session, task, result)
        return result

    def _after_task(
        self, play: Play, playbook: Path, session: HostSession, task: Task, result: TaskResult
    ) -> None:
        """Record the task's notifications on the host; a failure ends the host's play."""
        if self._state.interrupted and not session.interrupted:
            session.interrupted = f"in '{task.name}'"
        # A task ended mid-command may have changed the host: its notification is kept too
        # (a needless restart later beats a lost one).
        if (result.changed or result.data.get(ENDED_MIDWAY)) and task.notify:
            new = set(task.notify) - session.pending
            session.pending |= set(task.notify)
            if new and not self._state.options.check:
                write_pending(
                    self._pool.context(play, session, None),
                    play_key(playbook, play.name),
                    session.pending,
                    play.handler_names,
                )
        if result.failed and not result.ignored:
            session.dead = True
            session.failure = (task, result)

    def _flush(self, play: Play, playbook: Path, session: HostSession) -> None:
        failed, session.dead = session.dead, False  # a forced flush on a failed host
        session.pending = self._run_handlers(play, playbook, session, session.pending)
        session.dead = session.dead or failed

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
            self._runner.record(session, task, copy, source=f"{task.source}:{task.line}")
            self._after_task(play, playbook, session, task, copy)
            return copy

        self._each(pool, rest, share)

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
            if self._state.interrupted:  # what is still pending stays recorded on the host
                session.interrupted = session.interrupted or f"before handler '{handler.name}'"
                return pending - done
            result = self._runner.run(play, playbook, session, handler, handler=True)
            if result.failed and not result.ignored:
                session.dead = True
                break
            done |= names
        if not self._state.options.check:
            write_pending(
                self._pool.context(play, session, None),
                play_key(playbook, play.name),
                pending - done,
                play.handler_names,
            )
        return pending - done

    def _facts_task(self, session: HostSession, error: str | None) -> bool:
        """Facts gathered (or not) shown as the play's first task; False when the host failed."""
        if error is None:
            result = TaskResult(Status.OK, _facts_summary(session.facts or {}))
        else:
            result = TaskResult(Status.FAILED, f"cannot gather facts: {error}")
            session.dead = True
        session.tally.count(result)
        self._state.reporter.task(session.host.name, "gather facts", result)
        return not result.failed


def _facts_summary(facts: dict[str, Any]) -> str:
    gpus = facts.get("gpus") or []
    names = sorted({f"{g.get('name')} ({g.get('compute_cap')})" for g in gpus})
    os_info = facts.get("os") or {}
    system = f"{os_info.get('id', '?')} {os_info.get('version_id', '')}".strip()
    return f"{system}, {len(gpus)} GPU(s)" + (f": {', '.join(names)}" if names else "")
