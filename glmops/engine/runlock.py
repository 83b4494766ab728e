"""One changing run at a time per host: a lock on the host, held for the run's connection.

The lock is an flock(1) on `<state dir>/run-<host>.lock`, held by a command that lives as long
as the run's connection (it waits on its stdin): a run that ends, or dies (`kill -9`, a lost
controller), closes the connection and the lock goes with it, so no stale lock can block the
next run. Beside it, `run-<host>.lock.info` names the holder (pid, controller, user, start
time) for the message a second run gets. `--check` runs change nothing and take no lock.

The info file is also a guard: a run flocks it before trying the lock and lets it go only once
it has either written its own info (having taken the lock) or read the holder's (having not).
So a run never reads the info in the moment between another run taking the lock and naming
itself (it would see the previous holder's name, or nothing, and a second connection of the
same run would be refused as a stranger).

A run also takes the lock of each host it delegates a task to (`delegate_to`), once, and holds
it to its end. Locks are only ever tried, never waited for, so two runs that each hold a host
the other delegates to fail fast instead of waiting on each other.
"""

from __future__ import annotations

import getpass
import json
import os
import socket
import time
from dataclasses import dataclass

from glmops.engine.connection import HOLD_START_SECONDS, Release, quote
from glmops.engine.context import TaskContext
from glmops.errors import GlmopsError

LOCKED = "glmops-locked"
ANSWERED = "glmops-answered"  # ends what a follow-up printed
BUSY = "glmops-busy"
GUARD_WAIT_S = 20  # the guard is held for a write or a read of a few bytes


class HostLocked(GlmopsError):
    """Another glmops run is changing this host."""


def holder_info(run_dir: str) -> dict[str, object]:
    """Who this run is, as a second run will be told."""
    return {
        "pid": os.getpid(),
        "controller": socket.gethostname(),
        "user": getpass.getuser(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "run": run_dir,
    }


@dataclass(frozen=True)
class FollowUp:
    """A command run right after the lock is taken, in the same round trip (what the play
    reads at its start), with the stdin it reads after the lock's own."""

    command: str
    stdin: str = ""
    wait: float = HOLD_START_SECONDS


def acquire(ctx: TaskContext, info: dict[str, object]) -> Release:
    """Take the host's run lock, or raise HostLocked naming the run that holds it.

    The lock is per inventory host name, so several names for one machine (`connection:
    local` hosts) do not exclude each other within one run.
    """
    return acquire_then(ctx, info, None)[0]


def acquire_then(
    ctx: TaskContext, info: dict[str, object], then: FollowUp | None
) -> tuple[Release, str | None]:
    """`acquire`, and once the lock is taken `then` on the host in the same round trip: its
    output is returned (None when the lock was this run's already and `then` did not run)."""
    folder = ctx.state_dir
    lock = f"{folder}/run-{ctx.host.name}.lock"
    about = f"{lock}.info"
    after = f"{{ {then.command}; }}; echo; echo {ANSWERED}; " if then else ""
    script = (
        f"{{ [ -d {quote(folder)} ] || mkdir -p {quote(folder)}; }} && "  # no process if there
        f"exec 9>>{quote(lock)} 8>>{quote(about)} || exit 1; "
        f"flock -w {GUARD_WAIT_S} 8 || exit 1; "
        f"if flock -n 9; then printf '%s\\n' {quote(json.dumps(info))} > {quote(about)}; "
        f"exec 8>&-; echo {LOCKED}; {after}exec cat >/dev/null; "
        f'else echo "{BUSY} $(cat {quote(about)} 2>/dev/null)"; fi'
    )
    command, password = ctx.elevated(script)
    stdin = (password or "") + (then.stdin if then else "")
    answer, release = ctx.conn.hold(
        command,
        stdin=stdin or None,
        until=ANSWERED if then else None,
        wait=then.wait if then else HOLD_START_SECONDS,
    )
    first, _, rest = answer.partition("\n")
    if first == LOCKED and release is not None:
        return release, (rest[:-1] if rest.endswith("\n") else rest) if then else None
    if release is not None:
        release()
    if first.startswith(BUSY):
        holder = first[len(BUSY) :].strip()
        if _same_run(holder, info):
            return (lambda: None), None  # two inventory hosts on one machine, in this very run
        raise HostLocked(_busy_message(holder, lock))
    raise HostLocked(f"cannot take the run lock {lock}: {first.strip() or 'no answer'}")


def _same_run(text: str, info: dict[str, object]) -> bool:
    try:
        other = json.loads(text)
    except json.JSONDecodeError:
        return False
    keys = ("pid", "controller", "run")
    return isinstance(other, dict) and all(other.get(k) == info.get(k) for k in keys)


def _busy_message(text: str, lock: str) -> str:
    try:
        other = json.loads(text)
    except json.JSONDecodeError:
        other = {}
    who = (
        f"pid {other.get('pid')} on controller {other.get('controller')} "
        f"(user {other.get('user')}), started {other.get('started')}"
        if isinstance(other, dict) and other
        else "a run that did not say who it is"
    )
    return (
        f"another glmops run is changing this host: {who}; it holds {lock}. "
        "Wait for it to finish (the lock goes when its connection closes), or stop it; "
        "--check runs are not blocked"
    )
