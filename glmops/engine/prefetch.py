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
    """One shell command that runs each check as the connection would (in /bin/sh, no stdin)
    and prints every exit status, then the size of every stdout and stderr, then all of them
    in one base64 line: a shell and coreutils, so a converged host starts no interpreter.

    A converged host's round trip is mostly process starts: each check is `eval`ed in a
    subshell (its text stays one quoted word, so it cannot change the probe around it, and
    a syntax error in it is its own exit status 2) instead of a `/bin/sh` of its own, and
    the outputs are encoded once, not once each."""
    files = " ".join(f"{index}{stream}" for index in range(len(commands)) for stream in "oe")
    steps = "".join(
        f"(unset glmops_probe; eval {quote(command)}) "
        f'>"$glmops_probe/{index}o" 2>"$glmops_probe/{index}e" </dev/null; echo "rc=$?"; '
        for index, command in enumerate(commands)
    )
    # A subshell of its own: its `exit`, `cd` and cleanup end with it, also inside a longer
    # command; every check starts in the directory the probe started in.
    return (
        "(glmops_probe=$(mktemp -d) || exit 1; trap 'rm -rf \"$glmops_probe\"' EXIT; "
        f'{steps}cd "$glmops_probe" && stat -c %s {files} && cat {files} | base64 -w0; '
        f"echo; echo {PROBE_END})"
    )


def parse_probe(stdout: str, count: int) -> list[tuple[int, str, str]]:
    """Each check's (exit status, stdout, stderr) from `probe_command`'s output; ValueError
    when it is not whole (the probe stopped early)."""
    lines = stdout.split("\n")
    if len(lines) < 3 * count + 2 or lines[3 * count + 1] != PROBE_END:
        raise ValueError(f"the probe's answer is not whole ({len(lines)} lines)")
    statuses, sizes = lines[:count], lines[count : 3 * count]
    if not all(status.startswith("rc=") for status in statuses):
        raise ValueError("the probe's answer has no exit status for every check")
    if not all(size.isascii() and size.isdigit() for size in sizes):
        raise ValueError("the probe's output sizes are not all byte counts")
    blob = base64.b64decode(lines[3 * count], validate=True)
    offsets = [0]
    for size in sizes:
        offsets.append(offsets[-1] + int(size))
    if offsets[-1] != len(blob):
        raise ValueError(f"the probe's outputs are {len(blob)} bytes, not {offsets[-1]}")
    texts = [blob[offsets[i] : offsets[i + 1]].decode(errors="replace") for i in range(2 * count)]
    return [(int(statuses[i][3:]), texts[2 * i], texts[2 * i + 1]) for i in range(count)]


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
