"""`glmops deploy` for a fleet: the replicas' deploy, rolling or at once, then the router.

At once (default): deploy.yml on every replica, then router.yml on the router host, which lists
every replica that did not fail. Rolling (`--rolling`): fleet-preflight.yml on every replica
first (nothing changes anywhere if one fails), then deploy.yml one batch of replicas at a time
with `fleet_rolling` set, so that a replica with a pending restart leaves the router, drains,
restarts, passes the gate, goes back in and soaks (the tasks are in deploy.yml). A batch whose
failed share passes `max_fail_percentage` stops the roll; failed replicas stay out of the
router, and the fleet recap says why.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from glmops import paths
from glmops.errors import ExitCode, InputError
from glmops.fleet.router import router_argv
from glmops.fleet.topology import Fleet, Replica, fleet_from_inventory
from glmops.inventory import Inventory

#: run(playbook, limit, extra vars, on_failure(host, why)) -> exit code (the CLI's runner)
Runner = Callable[[Path, str, dict[str, Any], Callable[[str, str], None]], ExitCode]


@dataclass
class Batch:
    replicas: tuple[Replica, ...]
    failed: dict[str, str] = field(default_factory=dict)  # replica name -> why
    code: ExitCode = ExitCode.OK

    @property
    def hosts(self) -> list[str]:
        return [m.host for r in self.replicas for m in r.members]

    def as_data(self) -> dict[str, Any]:
        return {
            "replicas": [r.name for r in self.replicas],
            "failed": self.failed,
            "exit_code": int(self.code),
        }


def batches(replicas: Sequence[Replica], serial: Sequence[str | int]) -> list[tuple[Replica, ...]]:
    """Ansible's `serial`: sizes as numbers or percentages of the fleet; a list ramps up and
    its last size repeats."""
    sizes = [_size(step, len(replicas)) for step in serial] or [len(replicas)]
    out, start, i = [], 0, 0
    while start < len(replicas):
        size = sizes[min(i, len(sizes) - 1)]
        out.append(tuple(replicas[start : start + size]))
        start, i = start + size, i + 1
    return out


def _size(step: str | int, total: int) -> int:
    text = str(step).strip()
    try:
        value = math.floor(total * float(text[:-1]) / 100) if text.endswith("%") else int(text)
    except ValueError:
        raise InputError(f"--serial: {step!r} is neither a number nor a percentage") from None
    return max(1, value)


def too_many_failed(batch: Batch, max_fail_percentage: float) -> bool:
    """Ansible's rule: the roll stops when a batch's failed share exceeds the percentage."""
    return 100.0 * len(batch.failed) / len(batch.replicas) > max_fail_percentage


def fleet_vars(fleet: Fleet) -> dict[str, Any]:
    """What deploy.yml's rolling tasks read: the router, and each host's replica URL."""
    return {
        "fleet_router_url": fleet.router.url if fleet.router else "",
        "fleet_replica_urls": {m.host: r.url for r in fleet.replicas for m in r.members},
    }


def router_vars(inventory: Inventory, fleet: Fleet, workers: Sequence[str]) -> dict[str, Any]:
    """What router.yml reads: the unit's argv, the URL, the worker list, the wheelhouse."""
    assert fleet.router is not None
    host = inventory.hosts[fleet.router.host].vars
    venv = str(host.get("router_venv", "/opt/vllm-router"))
    argv = router_argv(
        f"{venv}/bin/vllm-router",
        host=str(host.get("router_listen", "0.0.0.0")),
        port=fleet.router.port,
        workers=list(workers),
        policy=str(host.get("router_policy", "round_robin")),
    )
    out: dict[str, Any] = {
        "fleet_router_argv": argv,
        "fleet_router_url": fleet.router.url,
        "fleet_workers": list(workers),
        "router_port": fleet.router.port,
    }
    if "router_wheelhouse" not in host:
        from glmops import wheelcache

        out["router_wheelhouse"] = str(wheelcache.router_wheelhouse())
    return out


class FleetDeploy:
    """One `glmops deploy` over the fleet the inventory describes."""

    def __init__(self, inventory: Inventory, pattern: str, run: Runner, *, json_events: bool):
        self.inventory = inventory
        router_host = fleet_from_inventory(inventory, []).router
        serving = [
            h
            for h in inventory.select(pattern)
            if router_host is None or h.name != router_host.host
        ]
        if not serving:
            raise InputError(f"'{pattern}' names no serving host", source=str(inventory.path))
        self.fleet = fleet_from_inventory(inventory, serving)
        self.run = run
        self.json_events = json_events
        self.batches: list[Batch] = []
        self.stopped: str | None = None

    def at_once(self) -> ExitCode:
        batch = self._deploy(tuple(self.fleet.replicas), {})
        self.batches.append(batch)
        return self._router_and_recap(batch.code)

    def rolling(self, serial: Sequence[str | int], max_fail_percentage: float) -> ExitCode:
        failed: dict[str, str] = {}
        hosts = ",".join(m.host for r in self.fleet.replicas for m in r.members)
        preflight = paths.playbooks() / "fleet-preflight.yml"
        code = self.run(preflight, hosts, {}, lambda h, w: failed.setdefault(h, w))
        if code != ExitCode.OK:
            self.stopped = "preflight failed; no replica was touched: " + "; ".join(
                f"{h}: {w}" for h, w in failed.items()
            )
            self._recap()
            return code
        extra = {"fleet_rolling": True, **fleet_vars(self.fleet)}
        worst = ExitCode.OK
        for replicas in batches(self.fleet.replicas, serial):
            batch = self._deploy(replicas, extra)
            self.batches.append(batch)
            worst = max(worst, batch.code)
            if batch.failed and too_many_failed(batch, max_fail_percentage):
                self.stopped = (
                    f"batch {len(self.batches)}: {len(batch.failed)} of {len(replicas)} "
                    f"replica(s) failed, more than max_fail_percentage={max_fail_percentage:g}"
                )
                break
        return self._router_and_recap(worst)

    def _deploy(self, replicas: tuple[Replica, ...], extra: dict[str, Any]) -> Batch:
        batch = Batch(replicas)

        def failed(host: str, why: str) -> None:
            batch.failed.setdefault(self.fleet.replica_of(host).name, f"{host}: {why}")

        playbook = paths.playbooks() / "deploy.yml"
        batch.code = self.run(playbook, ",".join(batch.hosts), extra, failed)
        return batch

    def _router_and_recap(self, code: ExitCode) -> ExitCode:
        if self.fleet.router is not None:
            failed = {name for b in self.batches for name in b.failed}
            # A replica this run failed stays out of rotation; the rest (rolled or not) serve.
            workers = [r.url for r in self.fleet.replicas if r.name not in failed]
            extra = router_vars(self.inventory, self.fleet, workers)
            router_code = self.run(
                paths.playbooks() / "router.yml", self.fleet.router.host, extra, lambda h, w: None
            )
            code = max(code, router_code)
        self._recap()
        return ExitCode(code)

    def _recap(self) -> None:
        data = {
            "batches": [b.as_data() for b in self.batches],
            "stopped": self.stopped,
            "out_of_router": {n: w for b in self.batches for n, w in b.failed.items()},
        }
        if self.json_events:
            from glmops.output import event_line

            print(event_line("fleet", **data), flush=True)
            return
        lines = ["FLEET RECAP"]
        for i, b in enumerate(self.batches, 1):
            state = "failed: " + "; ".join(b.failed.values()) if b.failed else "ok"
            lines.append(f"  batch {i}: {', '.join(data['batches'][i - 1]['replicas'])} — {state}")
        if self.stopped:
            lines.append(f"  roll stopped: {self.stopped}")
        for name, why in data["out_of_router"].items():
            lines.append(f"  left out of the router: {name} ({why})")
        print("\n".join(lines), file=sys.stdout, flush=True)


def parse_serial(text: str) -> list[str]:
    """`--serial 1`, `--serial 25%` or a ramp `--serial 1,25%,100%`."""
    return [part.strip() for part in text.split(",") if part.strip()]
