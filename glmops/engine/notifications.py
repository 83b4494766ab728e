"""Durable handler notifications: kept on the host, so a failure cannot lose a restart.

A change that notifies a handler is written to `<state dir>/pending-handlers.json` on the host
before the play goes on; the handler clears it when it has run. A run that failed in between
leaves it there, and the next run of that play replays it (the fix for Ansible's
lost-notification class). The file keeps each play's notifications apart (keyed by playbook file
name and play name), so a run of another playbook never drops them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from glmops.engine.connection import quote
from glmops.engine.context import TaskContext

PENDING_FILE = "pending-handlers.json"
FORMAT_VERSION = 2


def play_key(playbook: Path, play_name: str) -> str:
    """Which play a notification belongs to: stable across checkouts and working folders."""
    return f"{playbook.name}:{play_name}"


def read_pending(ctx: TaskContext, key: str, known: set[str]) -> set[str]:
    """Notifications an earlier run of this play left on the host, for handlers it has.

    A file from before notifications were kept per play (a plain list) counts for every play
    that has a handler of that name.
    """
    return pending_of(_read(ctx), key, known)


def pending_of(plays: dict[str, list[str]], key: str, known: set[str]) -> set[str]:
    """The play's notifications in the file's (`parse_pending`), for handlers it has."""
    return (set(plays.get(key, ())) | set(plays.get("", ()))) & known


def write_pending(ctx: TaskContext, key: str, pending: set[str], known: set[str]) -> None:
    """Record this play's notifications still to run (atomically); other plays' stay."""
    plays = _read(ctx)
    plays[key] = sorted(pending)
    if "" in plays:  # the old shared list: this play has now taken what was its own
        plays[""] = sorted(set(plays[""]) - known)
    plays = {name: names for name, names in plays.items() if names}
    path = _path(ctx)
    if not plays:
        ctx.run(f"rm -f {quote(path)}", check=True, what="clear pending handlers", essential=True)
        return
    text = format_pending(plays)
    folder = path.rsplit("/", 1)[0]
    ctx.run(
        f"mkdir -p {quote(folder)} && printf '%s' {quote(text)} "
        f"> {quote(path + '.tmp')} && mv -f {quote(path + '.tmp')} {quote(path)}",
        check=True,
        what="record pending handlers",
        essential=True,  # a notification must be kept even when the run is being interrupted
    )


def format_pending(plays: dict[str, list[str]]) -> str:
    """The file's text: each play's pending notifications, by play key."""
    return json.dumps({"version": FORMAT_VERSION, "plays": plays}, sort_keys=True)


def parse_pending(text: str | bytes | None) -> dict[str, list[str]]:
    """The file's notifications by play key ("" for a file from before plays were kept apart);
    empty for a missing or unreadable file."""
    try:
        data: Any = json.loads(text) if text and text.strip() else {}
    except (json.JSONDecodeError, UnicodeDecodeError):
        data = {}
    if isinstance(data, list):
        return {"": [str(name) for name in data]}
    plays = data.get("plays") if isinstance(data, dict) else None
    if not isinstance(plays, dict):
        return {}
    return {str(k): [str(n) for n in v] for k, v in plays.items() if isinstance(v, list)}


def pending_names(text: str | bytes | None) -> list[str]:
    """Every handler still to run, whichever play notified it (for `glmops status`)."""
    return sorted({name for names in parse_pending(text).values() for name in names})


def _read(ctx: TaskContext) -> dict[str, list[str]]:
    result = ctx.run(f"cat {quote(_path(ctx))} 2>/dev/null", essential=True)
    return parse_pending(result.stdout if result.ok else None)


def pending_path(ctx: TaskContext) -> str:
    """The file on the host (under the state dir)."""
    return _path(ctx)


def _path(ctx: TaskContext) -> str:
    return f"{ctx.state_dir}/{PENDING_FILE}"
