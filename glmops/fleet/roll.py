"""`glmops deploy` for a fleet: the replicas' deploy, rolling or at once, then the router.

At once (default): deploy.yml on every replica, then router.yml on the router host, which lists
every replica that did not fail. Rolling (`--rolling`): fleet-preflight.yml on every replica
first (nothing changes anywhere if one fails), then deploy.yml with the play's `serial` and
`max_fail_percentage` set (the engine runs it batch by batch, Ansible's way) and
`fleet_rolling` over the replicas of one host, so that a replica with a pending restart leaves
the router, drains, restarts, passes the gate, goes back in and soaks (those tasks are in
deploy.yml). Then each gang (one replica over several hosts) in a run of its own, one gang at a
time: its head leaves the router and drains, the gang restarts as one, and the head is gated,
put back and soaked. A batch (or gang) whose failures pass `max_fail_percentage` stops the
roll; failed replicas stay out of the router, and the fleet recap says why.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from glmops import paths
from glmops.engine import batches
from glmops.engine.batches import SerialEntry
from glmops.engine.inventory import Inventory
from glmops.errors import ExitCode, InputError
from glmops.fleet.router import (
    GATE_ENV,
    GATE_SCRIPT,
    GATE_SOURCE,
    admin_exposure_warning,
    gate_argv,
    listen_address,
    needs_gate,
    router_argv,
)
from glmops.fleet.router_key import ensure_key
from glmops.fleet.topology import Fleet, Replica, fleet_from_inventory, serving_hosts


@dataclass
class RunOutcome:
    """One playbook run as the fleet sees it."""

    code: int  # an ExitCode, or 128 + the signal that interrupted the run
    failed: dict[str, str] = field(default_factory=dict)  # host -> the failed task and why
    batches: list[list[str]] = field(default_factory=list)
    stopped: str | None = None  # why the engine stopped the play early


#: run(playbook, limit, extra vars, play settings such as serial) -> outcome (the CLI's runner)
Runner = Callable[[Path, str, dict[str, Any], dict[str, Any]], RunOutcome]


def parse_serial(text: str) -> list[SerialEntry]:
    """`--serial 1`, `--serial 25%` or a ramp `--serial 1,25%,100%`, checked as `serial:` is."""
    parts = [part.strip() for part in text.split(",") if part.strip()]
    entries: list[SerialEntry] = [int(p) if p.isdigit() else p for p in parts]
    try:
        return batches.serial_entries(entries)
    except ValueError as error:
        raise InputError(f"--serial: {error}") from None


def fleet_vars(fleet: Fleet) -> dict[str, Any]:
    """What deploy.yml's rolling tasks read: the router, and each host's replica URL."""
    return {
        "fleet_router_url": fleet.router.url if fleet.router else "",
        "fleet_replica_urls": {m.host: r.url for r in fleet.replicas for m in r.members},
    }


def router_vars(inventory: Inventory, fleet: Fleet, workers: Sequence[str]) -> dict[str, Any]:
    """What router.yml reads: the unit's argv, the URL, the worker list, the wheelhouse; for
    a router others reach, the gate's argv and the admin key (the router then listens on
    127.0.0.1, `router_internal_port`, default the router port + 1)."""
    router = inventory.host(fleet.router.host) if fleet.router else None
    assert fleet.router is not None and router is not None  # the topology checked both
    host = router.vars
    venv = str(host.get("router_venv", "/opt/vllm-router"))
    listen = listen_address(
        fleet.router.address,
        host.get("router_listen"),
        host=fleet.router.host,
        source=str(inventory.path),
    )
    gated = needs_gate(listen, host.get("router_gate", True))
    internal = host.get("router_internal_port", fleet.router.port + 1)
    if isinstance(internal, bool) or not isinstance(internal, int):
        raise InputError(
            f"router_internal_port must be an integer, got {internal!r}", source=str(inventory.path)
        )
    bind_host, bind_port = ("127.0.0.1", internal) if gated else (listen, fleet.router.port)
    argv = router_argv(
        f"{venv}/bin/vllm-router",
        host=bind_host,
        port=bind_port,
        workers=list(workers),
        policy=str(host.get("router_policy", "round_robin")),
    )
    out: dict[str, Any] = {
        "fleet_router_argv": argv,
        "fleet_router_url": fleet.router.url,
        "fleet_router_bind": f"{bind_host}:{bind_port}",
        "fleet_workers": list(workers),
        "router_port": fleet.router.port,
        "fleet_router_warning": admin_exposure_warning(listen, gated=gated) or "",
        "fleet_router_gate_argv": [],
    }
    if gated:
        script = f"{venv}/{GATE_SCRIPT}"
        out["fleet_router_gate_argv"] = gate_argv(
            f"{venv}/bin/python",
            script,
            listen=listen,
            port=fleet.router.port,
            upstream_port=internal,
        )
        out["fleet_router_gate_script"] = script
        out["fleet_router_gate_source"] = str(GATE_SOURCE)
        out["fleet_router_gate_env"] = GATE_ENV
        out["fleet_router_admin_secret"] = ensure_key(fleet.router.url)
    if "router_wheelhouse" not in host:
        from glmops.gpu import wheelcache

        out["router_wheelhouse"] = str(wheelcache.router_wheelhouse())
    return out


class FleetDeploy:
    """One `glmops deploy` over the fleet the inventory describes."""

    def __init__(self, inventory: Inventory, pattern: str, run: Runner, *, json_events: bool):
        self.inventory = inventory
        serving = serving_hosts(inventory, pattern)
        if not serving:
            raise InputError(f"'{pattern}' names no serving host", source=str(inventory.path))
        self.fleet = fleet_from_inventory(inventory, serving)
        # The router lists every replica of the inventory, also those this run leaves alone.
        self.routed = fleet_from_inventory(inventory, serving_hosts(inventory))
        self.hosts = ",".join(m.host for r in self.fleet.replicas for m in r.members)
        self.run = run
        self.json_events = json_events
        self.outcome = RunOutcome(ExitCode.OK)

    def at_once(self) -> int:
        self.outcome = self.run(paths.playbooks() / "deploy.yml", self.hosts, {}, {})
        return self._router_and_recap()

    def rolling(self, serial: list[SerialEntry], max_fail_percentage: float) -> int:
        preflight = self.run(paths.playbooks() / "fleet-preflight.yml", self.hosts, {}, {})
        if preflight.code != ExitCode.OK:
            why = "; ".join(f"{h}: {w}" for h, w in preflight.failed.items())
            self.outcome = RunOutcome(
                preflight.code, stopped=f"preflight failed, nothing done: {why}"
            )
            self._recap({})
            return preflight.code
        extra = {"fleet_rolling": True, **fleet_vars(self.fleet)}
        singles = [r.head.host for r in self.fleet.replicas if not r.is_gang]
        if singles:
            # The engine batches hosts: right for replicas of one host each.
            settings = {"serial": serial, "max_fail_percentage": max_fail_percentage}
            self._roll(",".join(singles), extra, settings)
        for gang in (r for r in self.fleet.replicas if r.is_gang):
            # A gang is one batch of its own (a batch of hosts could split it): every member
            # in one run, whose gang plays take the head out, drain, restart and gate it.
            if self.outcome.stopped or self.outcome.code >= 128:
                break
            self._roll(",".join(m.host for m in gang.members), extra, {})
            self._stop_if_too_many_failed(gang, max_fail_percentage)
        return self._router_and_recap()

    def _roll(self, hosts: str, extra: dict[str, Any], settings: dict[str, Any]) -> None:
        """One run of deploy.yml over `hosts`, added to the roll's outcome."""
        run = self.run(paths.playbooks() / "deploy.yml", hosts, extra, settings)
        done = self.outcome
        self.outcome = RunOutcome(
            max(done.code, run.code),
            {**done.failed, **run.failed},
            done.batches + (run.batches or [hosts.split(",")]),
            done.stopped or run.stopped,
        )

    def _stop_if_too_many_failed(self, gang: Replica, max_fail_percentage: float) -> None:
        failed = [m.host for m in gang.members if m.host in self.outcome.failed]
        if failed and 100 * len(failed) / len(gang.members) > max_fail_percentage:
            self.outcome.stopped = (
                f"gang {gang.name}: {', '.join(failed)} failed, more than "
                f"max_fail_percentage {max_fail_percentage:g}% of its {len(gang.members)} hosts"
            )

    def route(self, failed: dict[str, str]) -> int:
        """The router play alone, after the replicas were deployed some other way (`glmops
        up`'s phases): `failed` (host -> why) stays out of rotation."""
        code = ExitCode.HOST_FAILED if failed else ExitCode.OK
        self.outcome = RunOutcome(code, dict(failed))
        return self._router_and_recap()

    def _router_and_recap(self) -> int:
        """The router play, then the fleet recap. An interrupted run (SIGINT, SIGTERM) stops
        here: the router is left as the roll left it (a replica taken out stays out, safe),
        and the next deploy puts it right."""
        out = {
            self.routed.replica_of(host).name: f"{host}: {why}"
            for host, why in self.outcome.failed.items()
        }
        code = self.outcome.code
        if code >= 128:
            self.outcome.stopped = self.outcome.stopped or "interrupted: the router left as it was"
            self._recap(out)
            return code
        if self.fleet.router is not None:
            # A replica this run failed stays out of rotation; the rest (rolled, not in this
            # run, or unchanged) serve.
            workers = [r.url for r in self.routed.replicas if r.name not in out]
            extra = router_vars(self.inventory, self.routed, workers)
            routed = self.run(paths.playbooks() / "router.yml", self.fleet.router.host, extra, {})
            code = max(code, routed.code)
        self._recap(out)
        return code

    def _recap(self, out_of_router: dict[str, str]) -> None:
        data = {
            "batches": self.outcome.batches,
            "stopped": self.outcome.stopped,
            "out_of_router": out_of_router,
        }
        if self.json_events:
            from glmops.engine.output import event_line

            print(event_line("fleet", **data), flush=True)
            return
        lines = ["FLEET RECAP"]
        if self.outcome.stopped:
            lines.append(f"  roll stopped: {self.outcome.stopped}")
        for name, why in out_of_router.items():
            lines.append(f"  left out of the router: {name} ({why})")
        if len(lines) == 1:
            lines.append("  every replica in the router")
        print("\n".join(lines), file=sys.stdout, flush=True)
