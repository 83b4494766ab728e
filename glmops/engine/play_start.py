"""A play's start on a host in one round trip after connecting: the run lock (when this run
takes it now), the notifications an earlier run of the play left (notifications.py), and
either the host's facts when the play gathers them (hosthelpers/facts_probe.py) or, when it
does not, its tasks' checks run ahead (prefetch.py), all answered by one command. It prints
the pending file in base64 on its first line, then the facts probe's output and its exit
status, or the checks' probe's output."""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from glmops.engine.connection import CommandResult, quote
from glmops.engine.context import (
    RemoteCommandError,
    TaskContext,
    helper_command,
    helper_reply,
    helper_stdin,
)
from glmops.engine.facts_gather import probe_args
from glmops.engine.notifications import parse_pending, pending_of, pending_path, play_key
from glmops.engine.prefetch import CHECK_TIMEOUT_S, probe_command, take_answers, unique
from glmops.engine.runlock import HOLD_START_SECONDS, FollowUp
from glmops.engine.unsafe import mark_unsafe
from glmops.errors import CommandTimeout

if TYPE_CHECKING:
    from glmops.engine.nodes import Play
    from glmops.engine.run_state import RunState
    from glmops.engine.sessions import HostSession, SessionPool

FACTS_TIMEOUT_S = 120
_STATUS = re.compile(r"\nglmops-rc=(\d+)\n?$")


@dataclass
class Started:
    """What the play's start learned: its pending notifications; why facts failed, if so;
    whether the tasks' checks ran ahead with it."""

    pending: set[str]
    facts_error: str | None = None
    checked: bool = False


def start(
    state: RunState,
    pool: SessionPool,
    play: Play,
    playbook: Path,
    session: HostSession,
    *,
    gather: bool,
    checks: Callable[[], list[str]] | None = None,
) -> Started:
    """Connect and lock (once per run), read the pending notifications, gather facts (when
    `gather`) or else run the checks `checks` names ahead: the lock's round trip carries the
    rest, or one command does without it."""
    facts_input = ""
    if gather:
        variables = {**play.defaults, **session.host.vars, **play.vars}
        args = {**probe_args({**variables, **state.options.extra_vars}), "check": True}
        facts_input = helper_stdin("facts_probe", args)

    wanted: list[str] = []

    def reads(ctx: TaskContext) -> FollowUp:
        # Usually there is no such file: the test, a shell builtin, then starts no process.
        pending = quote(pending_path(ctx))
        command = f"[ -r {pending} ] && base64 -w0 {pending} 2>/dev/null; echo"
        if gather:
            length = len(facts_input.encode())
            command += (
                f'; head -c {length} | {helper_command("facts_probe")} 2>&1; echo "glmops-rc=$?"'
            )
            return FollowUp(command, facts_input, FACTS_TIMEOUT_S)
        # The checks run as the connection's user, each with its own sudo: only where this
        # command is not run through sudo itself.
        if checks is not None and ctx.elevated(":") == (":", None):
            wanted[:] = checks()
        if wanted:
            return FollowUp(f"{command}; {probe_command(unique(wanted))}", "", CHECK_TIMEOUT_S)
        return FollowUp(command, "", HOLD_START_SECONDS)

    output = pool.connect(play, session, reads)
    ctx = pool.context(play, session, None)
    if output is None:
        follow = reads(ctx)
        output = ctx.run(
            follow.command,
            stdin=follow.stdin or None,
            timeout=follow.wait,
            essential=True,
            log_output=not wanted,  # a check may read a file's content: each task logs its own
        ).stdout
    encoded, _, probed = output.partition("\n")
    try:
        text: str | None = base64.b64decode(encoded.strip(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        text = None
    key = play_key(playbook, play.name)
    started = Started(pending_of(parse_pending(text), key, play.handler_names))
    if gather:
        try:
            session.facts = mark_unsafe(_facts(probed))  # what the host said: data
        except (RemoteCommandError, CommandTimeout) as error:
            started.facts_error = str(error)
    elif wanted:
        take_answers(state, session, wanted, probed)
        started.checked = True
    return started


def _facts(probed: str) -> dict[str, Any]:
    """The facts probe's reply from its output (stdout and stderr) and exit status."""
    status = _STATUS.search(probed)
    rc = int(status.group(1)) if status else 1
    out = probed[: status.start()] if status else probed
    reply = helper_reply("facts_probe", CommandResult("facts_probe", rc, out, "", 0.0))
    reply.pop("changed", None)
    return reply
