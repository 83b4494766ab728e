"""A gang (one replica across hosts) lives and restarts as one: when is it whole, when not.

vLLM's multi-node runtime forms its process group once, at start-up: a member that restarts on
its own (systemd's Restart=, a crash) never rejoins the head's engine, and a dead member makes
the head fail its next request. So a gang is healthy only if every member runs the process that
the last gang restart started: each member keeps a record of that restart (its unit's
InvocationID, the digest of its unit, environment and inputs files, the restart's generation and
the gang's members) and the verdict compares every member's record with what runs now.

The deploy observes every member first (one play), publishes the observations in the run's
folder on the controller (`Board`), and each member then reads the same verdict: one restart
decision for the whole gang. `glmops status` reads the same verdict to say `degraded`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from glmops.engine.connection import quote

RECORD_SUFFIX = ".gang.json"


def record_path(state_dir: str, unit: str) -> str:
    """Where a member keeps the record of the gang restart that started its process."""
    return f"{state_dir}/{unit}{RECORD_SUFFIX}"


def composition(replica: Mapping[str, Any]) -> list[str]:
    """The gang's members as `rank:host@address`, in rank order (part of every record)."""
    return [f"{m['rank']}:{m['host']}@{m['address']}" for m in replica["members"]]


@dataclass(frozen=True)
class MemberState:
    """One member's unit as observed now, and the record its last gang restart left."""

    host: str
    rank: int
    active: str  # ActiveState/SubState
    invocation: str
    record: dict[str, Any] | None = None
    config: str | None = None  # digest of the unit, environment and inputs files (None: unread)

    @property
    def running(self) -> bool:
        return self.active.startswith("active/")


@dataclass(frozen=True)
class Verdict:
    """What keeps a gang from being whole (`degraded`), and what changed since it started."""

    degraded: tuple[str, ...] = ()
    stale: tuple[str, ...] = ()
    unobserved: tuple[str, ...] = field(default=())

    @property
    def needs_restart(self) -> bool:
        return bool(self.degraded or self.stale)

    @property
    def reasons(self) -> tuple[str, ...]:
        return self.degraded + self.stale


def verdict(replica: Mapping[str, Any], states: Mapping[str, MemberState]) -> Verdict:
    """The gang's verdict from its members' observed states (pure)."""
    members = composition(replica)
    unobserved = tuple(m["host"] for m in replica["members"] if m["host"] not in states)
    degraded: list[str] = []
    stale: list[str] = []
    generations = {s.record.get("generation") for s in states.values() if s.record and s.running}
    for member in replica["members"]:
        state = states.get(member["host"])
        if state is None:
            continue
        problem = _member_problem(state, members, len(generations) > 1)
        if problem:
            degraded.append(f"{state.host} (rank {state.rank}): {problem}")
        elif state.config is not None and (state.record or {}).get("config") != state.config:
            stale.append(
                f"{state.host}: unit, environment or inputs changed since the gang started"
            )
    return Verdict(tuple(degraded), tuple(stale), unobserved)


def _member_problem(state: MemberState, members: list[str], split: bool) -> str | None:
    """Why this member is not part of the running gang, or None."""
    if not state.running:
        return f"not running (unit {state.active})"
    record = state.record
    if not record:
        return "running, but not started by a gang restart (no record)"
    if record.get("invocation") != state.invocation:
        return "restarted on its own since the gang started: it is not in the head's engine"
    if record.get("members") != members:
        return "started for other gang members than the inventory's"
    if split:
        return f"started by another gang restart ({record.get('generation')}) than its peers"
    return None


class Board:
    """The run's observations of gang members, on the controller (the run's folder), so that
    every member's task reads the same verdict in the next play."""

    def __init__(self, run_dir: Path):
        self.root = run_dir / "gangs"

    def publish(self, replica: str, state: MemberState) -> None:
        folder = self.root / replica
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{state.host}.json.tmp"
        tmp.write_text(json.dumps(asdict(state), sort_keys=True))
        tmp.replace(folder / f"{state.host}.json")

    def read(self, replica: str) -> dict[str, MemberState]:
        folder = self.root / replica
        if not folder.is_dir():
            return {}
        states = (MemberState(**json.loads(p.read_text())) for p in folder.glob("*.json"))
        return {s.host: s for s in states}


SEPARATOR = "--- glmops gang ---"


def observe_command(unit: str, record: str, files: list[str]) -> str:
    """One round trip: the unit's state and invocation, the restart record, the files' digests."""
    digests = f"sha256sum {' '.join(quote(f) for f in files)} 2>&1" if files else "true"
    return (
        f"systemctl show {quote(unit)} -p ActiveState -p SubState -p InvocationID"
        f" -p NeedDaemonReload; echo {quote(SEPARATOR)}; cat {quote(record)} 2>/dev/null;"
        f" echo; echo {quote(SEPARATOR)}; {digests}"
    )


def parse_observation(host: str, rank: int, text: str, *, with_config: bool) -> MemberState:
    """`observe_command`'s output -> the member's state."""
    props_text, _, rest = text.partition(SEPARATOR)
    record_text, _, digests = rest.partition(SEPARATOR)
    props = dict(line.split("=", 1) for line in props_text.splitlines() if "=" in line)
    try:
        record = json.loads(record_text) if record_text.strip() else None
    except ValueError:
        record = None  # a damaged record counts as none: the gang is restarted
    return MemberState(
        host=host,
        rank=rank,
        active=f"{props.get('ActiveState', '?')}/{props.get('SubState', '?')}",
        invocation=props.get("InvocationID", ""),
        record=record if isinstance(record, dict) else None,
        config=config_digest(digests) if with_config else None,
    )


def config_digest(sha256sum_output: str) -> str:
    """One digest over the files' digests (a missing file changes it too)."""
    return hashlib.sha256(sha256sum_output.strip().encode()).hexdigest()
