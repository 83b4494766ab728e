"""A play's checks run ahead: before a host's tasks run, the read-only commands their plans
will start with (`Module.checks`) go to the host in one probe (hosthelpers/run_checks.py), and
each plan then gets its answer from here instead of asking the host again.

Why it stays correct: an answer is the host's state when the probe ran, and it stands only
while nothing has changed the host since. Every task that applies a change (a handler too)
drops all answers left (`CheckCache.forget`), so the tasks after it check again, in order, as
they always did; each answer is used once, so a retried check asks the host. A task whose
arguments or `when` need an earlier task's result renders differently here or not at all: its
answer is never asked for, or never made, and it checks as before.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from glmops.engine.connection import CommandResult, without_group_lines
from glmops.engine.context import (
    RemoteCommandError,
    helper_command,
    helper_reply,
    helper_stdin,
)
from glmops.errors import CommandTimeout, GlmopsError

if TYPE_CHECKING:
    from glmops.engine.playbook import Play
    from glmops.engine.run_state import RunState
    from glmops.engine.sessions import HostSession, SessionPool
    from glmops.engine.task_run import TaskRunner

CHECK_TIMEOUT_S = 60


class CheckCache:
    """One host's answers to checks run ahead, by the command as the connection runs it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._answers: dict[str, list[CommandResult]] = {}

    def fill(self, answers: dict[str, list[CommandResult]]) -> None:
        with self._lock:
            self._answers = answers

    def take(self, command: str) -> CommandResult | None:
        """The answer to `command` run ahead, once; None when there is none (left)."""
        with self._lock:
            found = self._answers.get(command)
            return found.pop() if found else None

    def forget(self) -> None:
        """The host may have changed: no answer from before stands."""
        with self._lock:
            self._answers = {}

    def __len__(self) -> int:
        with self._lock:
            return sum(len(found) for found in self._answers.values())


def run_ahead(
    state: RunState,
    runner: TaskRunner,
    pool: SessionPool,
    play: Play,
    playbook: Path,
    session: HostSession,
    tasks: Iterable[Any],
) -> int:
    """Run the checks of `tasks` on the host in one round trip; returns how many ran."""
    session.prefetched.forget()
    wanted: list[str] = []
    for task in tasks:
        wanted += _task_checks(state, runner, pool, play, playbook, session, task)
    if not wanted:
        return 0
    unique = list(dict.fromkeys(wanted))
    ctx = pool.context(play, session, None)
    ctx.become, ctx.environment = False, {}  # each check carries its own sudo and exports
    try:
        # Not logged here (a check may read a file's content); each task logs its own answer.
        probe = ctx.run(
            helper_command("run_checks"),
            stdin=helper_stdin("run_checks", {"commands": unique, "timeout": CHECK_TIMEOUT_S}),
            timeout=CHECK_TIMEOUT_S * 2,
            log_output=False,
        )
        results = helper_reply("run_checks", probe)["results"]
        if not isinstance(results, list) or len(results) != len(unique):
            raise TypeError(f"{len(unique)} checks sent, answers: {results!r:.200}")
    except (RemoteCommandError, CommandTimeout, KeyError, TypeError) as error:
        state.runlog.write(session.host.name, f"checks not run ahead: {error}")
        return 0
    answers: dict[str, list[CommandResult]] = {}
    for command, got in zip(unique, results, strict=True):
        answer = CommandResult(
            command,
            int(got["rc"]),
            str(got["stdout"]),
            without_group_lines(str(got["stderr"])),
            float(got["duration"]),
        )
        answers[command] = [answer] * wanted.count(command)
    session.prefetched.fill(answers)
    return len(unique)


def _task_checks(
    state: RunState,
    runner: TaskRunner,
    pool: SessionPool,
    play: Play,
    playbook: Path,
    session: HostSession,
    task: Any,
) -> list[str]:
    """The task's checks as its context would run them; none for a task whose checks cannot
    be known from here (a loop, a delegate, a password to send, an input not yet rendered)."""
    from glmops.engine.templating import evaluate_condition, render_value
    from glmops.modules import REGISTRY
    from glmops.modules.base import Module, check_types

    module_cls = REGISTRY.get(getattr(task, "module", ""))
    if (
        module_cls is None
        or module_cls.checks is Module.checks
        or task.loop is not None
        or task.delegate_to
        or task.run_once
        or task.environment
        or play.environment
        or not task.selected(state.options.tags, state.options.skip_tags)
    ):
        return []
    where = f"{task.where} on host '{session.host.name}'"
    try:
        variables = runner.variables(play, playbook, session, task)
        if task.when is not None and not evaluate_condition(task.when, variables, where=where):
            return []
        params = render_value(task.args, variables, where=where)
        if check_types(module_cls, params):
            return []
        commands = module_cls(params).checks()
        ctx = pool.context(play, session, task)
    except (GlmopsError, ValueError, TypeError, KeyError):
        return []  # the task itself says what is wrong when it runs
    elevated = [ctx.elevated(command) for command in commands]
    return [command for command, password in elevated if password is None]
