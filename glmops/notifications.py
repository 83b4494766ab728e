"""Durable handler notifications: kept on the host, so a failure cannot lose a restart.

A change that notifies a handler is written to `<state dir>/pending-handlers.json` on the host
before the play goes on; the handler clears it when it has run. A run that failed in between
leaves it there, and the next run replays it (the fix for Ansible's lost-notification class).
"""

from __future__ import annotations

import json

from glmops.connection import quote
from glmops.context import TaskContext

PENDING_FILE = "pending-handlers.json"


def read_pending(ctx: TaskContext, known: set[str]) -> set[str]:
    """Notifications an earlier run left on the host, for handlers this play has."""
    result = ctx.run(f"cat {quote(_path(ctx))} 2>/dev/null")
    try:
        names = set(json.loads(result.stdout)) if result.ok and result.stdout.strip() else set()
    except (json.JSONDecodeError, TypeError):
        names = set()
    return names & known


def write_pending(ctx: TaskContext, pending: set[str]) -> None:
    """Record the notifications still to run (atomically), or remove the file when none."""
    path = _path(ctx)
    if not pending:
        ctx.run(f"rm -f {quote(path)}")
        return
    folder = path.rsplit("/", 1)[0]
    ctx.run(
        f"mkdir -p {quote(folder)} && printf '%s' {quote(json.dumps(sorted(pending)))} "
        f"> {quote(path + '.tmp')} && mv -f {quote(path + '.tmp')} {quote(path)}",
        check=True,
        what="record pending handlers",
    )


def _path(ctx: TaskContext) -> str:
    return f"{ctx.state_dir}/{PENDING_FILE}"
