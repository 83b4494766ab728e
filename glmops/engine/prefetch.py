"""A play's checks run ahead: before a host's tasks run, the read-only commands their plans
will start with (`Module.checks`) go to the host in one probe (`probe_command`), and
each plan then gets its answer from here instead of asking the host again.

Why it stays correct: an answer is the host's state when the probe ran, and it stands only
while nothing has changed the host since. Every task that applies a change (a handler too)
drops all answers left (`CheckCache.forget`, glmops/engine/checkcache.py), so the tasks after
it check again, in order, as they always did; each answer is used once, so a retried check
asks the host. A task whose arguments or `when` need an earlier task's result renders
differently here or not at all: its answer is never asked for, or never made, and it checks
as before.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from glmops.engine.connection import CommandResult, quote, without_group_lines
from glmops.errors import CommandTimeout, GlmopsError

if TYPE_CHECKING:
    from glmops.engine.nodes import Play
    from glmops.engine.run_state import RunState
    from glmops.engine.sessions import HostSession, SessionPool
    from glmops.engine.task_run import TaskRunner

CHECK_TIMEOUT_S = 120
PROBE_END = "glmops-checks-done"


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
    wanted = wanted_checks(state, runner, pool, play, playbook, session, tasks)
    if not wanted:
        return 0
    ctx = pool.context(play, session, None)
    ctx.become, ctx.environment = False, {}  # each check carries its own sudo and exports
    try:
        # Not logged here (a check may read a file's content); each task logs its own answer.
        probe = ctx.run(probe_command(unique(wanted)), timeout=CHECK_TIMEOUT_S, log_output=False)
    except CommandTimeout as error:
        state.runlog.write(session.host.name, f"checks not run ahead: {error}")
        return 0
    return take_answers(state, session, wanted, probe.stdout)


def wanted_checks(
    state: RunState,
    runner: TaskRunner,
    pool: SessionPool,
    play: Play,
    playbook: Path,
    session: HostSession,
    tasks: Iterable[Any],
) -> list[str]:
    """The checks the plans of `tasks` will start with, in order, a repeat once per task that
    asks (each answer is used once); the host's answers from before are dropped."""
    session.prefetched.forget()
    wanted: list[str] = []
    for task in tasks:
        wanted += _task_checks(state, runner, pool, play, playbook, session, task)
    return wanted


def unique(wanted: list[str]) -> list[str]:
    """Each check once, in first-asked order: what the probe runs."""
    return list(dict.fromkeys(wanted))


def take_answers(state: RunState, session: HostSession, wanted: list[str], stdout: str) -> int:
    """Keep the probe's answers (`probe_command(unique(wanted))`'s output) for the tasks;
    returns how many checks ran (0, logged, when the answer is not whole)."""
    checks = unique(wanted)
    try:
        results = parse_probe(stdout, len(checks))
    except ValueError as error:
        state.runlog.write(session.host.name, f"checks not run ahead: {error}")
        return 0
    answers: dict[str, list[CommandResult]] = {}
    for command, (rc, out, err) in zip(checks, results, strict=True):
        answer = CommandResult(command, rc, out, without_group_lines(err), 0.0)
        answers[command] = [answer] * wanted.count(command)
    session.prefetched.fill(answers)
    return len(checks)


def probe_command(commands: list[str]) -> str:
    """One shell command that runs each check as the connection would (`/bin/sh -c`, no
    stdin) and prints, per check, its exit status and its stdout and stderr in base64: a
    shell and coreutils, so a converged host starts no interpreter."""
    steps = "".join(
        f'/bin/sh -c {quote(command)} >"$d/o" 2>"$d/e" </dev/null; echo "rc=$?"; '
        'base64 -w0 "$d/o"; echo; base64 -w0 "$d/e"; echo; '
        for command in commands
    )
    # A subshell of its own: its `exit` and its cleanup end with it, also inside a longer command
    return f"(d=$(mktemp -d) || exit 1; trap 'rm -rf \"$d\"' EXIT; {steps}echo {PROBE_END})"


def parse_probe(stdout: str, count: int) -> list[tuple[int, str, str]]:
    """Each check's (exit status, stdout, stderr) from `probe_command`'s output; ValueError
    when it is not whole (the probe stopped early)."""
    lines = stdout.split("\n")
    if len(lines) < 3 * count + 1 or lines[3 * count] != PROBE_END:
        raise ValueError(f"the probe's answer is not whole ({len(lines)} lines)")
    results = []
    for index in range(count):
        status, out, err = lines[3 * index : 3 * index + 3]
        if not status.startswith("rc="):
            raise ValueError(f"the probe's answer {index} has no exit status")
        decoded = [base64.b64decode(text).decode(errors="replace") for text in (out, err)]
        results.append((int(status[3:]), decoded[0], decoded[1]))
    return results


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
