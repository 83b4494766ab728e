"""A rolling deploy of a mixed fleet behind a real vllm-router, with vLLM's CPU build and the
tiny model: a gang (one replica, data parallel 2 over tb250, the head, and tb251, the worker)
and a plain replica on tb252; tb253 runs the router.

`glmops deploy --rolling` with a changed unit environment: the gang's head leaves the router
and drains before any member stops, the gang restarts as one (worker, then head), and the head
goes back into the router once past its gate, then soaks; the plain replica rolls in its own
batch, so the router always has a worker. A second rolling deploy changes nothing and never
takes a replica out.
"""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.fleet_bed import FLEET_VARS, FleetBed, changed, failures
from tests.support.testbed import booted

pytestmark = pytest.mark.testbed

FIRST_INDEX = 250  # tb250..tb253: this file's own hosts
HEAD, WORKER, PLAIN = (f"tb{FIRST_INDEX + i}" for i in range(3))


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, cpu_wheelhouse: Path) -> Iterator[FleetBed]:
    # internet: the testbed's forwarding, so the members and the router reach each other
    with booted(tmp_path_factory.mktemp("gang-roll"), FIRST_INDEX, 4, internet=True) as bed:
        gang = {"replica": "g", "replica_mode": "data_parallel"}  # ranks in inventory order
        members = {HEAD: gang, WORKER: gang}
        work = tmp_path_factory.mktemp("gang-fleet")
        f = FleetBed(bed, work, cpu_wheelhouse, 3, host_vars=members)
        f.up()
        yield f


def rolling(fleet: FleetBed, tag: str) -> tuple[int, list[dict[str, Any]], list[list[str]]]:
    """`glmops deploy --rolling` with GLMOPS_ROLL=tag in the unit environment, and the
    router's worker lists seen every 0.5 s while it ran."""
    env = {**FLEET_VARS["vllm_env"], "GLMOPS_ROLL": tag}
    proc = fleet.popen("deploy", "--rolling", "-e", json.dumps({"vllm_env": env}))
    seen: list[list[str]] = []
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.5):
            seen.append(fleet.router_workers())

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    assert proc.stdout is not None
    events = [json.loads(line) for line in proc.stdout if line.startswith("{")]
    rc = proc.wait(timeout=60)
    done.set()
    watcher.join()
    return rc, events, seen


def steps(events: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """(host, task, status) of every task and handler that did not skip, in run order."""
    return [
        (e["host"], e["task"], e["status"])
        for e in events
        if e.get("event") in ("task", "handler") and e["status"] != "skipped"
    ]


def at(order: list[tuple[str, str, str]], host: str, prefix: str, status: str) -> int:
    found = [i for i, s in enumerate(order) if s[0] == host and s[1].startswith(prefix)]
    assert found, f"no {prefix!r} on {host}"
    assert order[found[-1]][2] == status, order[found[-1]]
    return found[-1]


def complete(fleet: FleetBed) -> dict[str, Any]:
    body = {"model": "tiny-llama", "prompt": "Hello", "max_tokens": 4, "temperature": 0}
    request = urllib.request.Request(
        f"{fleet.router_url}/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=120) as reply:
        return json.loads(reply.read())


def test_a_gang_rolls_out_of_the_router_drained_restarted_and_back(fleet: FleetBed) -> None:
    head_url, plain_url = fleet.urls[HEAD], fleet.urls[PLAIN]
    both = sorted([head_url, plain_url])
    assert fleet.router_workers() == both, "the gang is one worker (its head), beside the plain"
    pids = {h: fleet.unit(h)["MainPID"] for h in (HEAD, WORKER, PLAIN)}
    rc, events, seen = rolling(fleet, "1")
    assert rc == 0, failures(events)
    order = steps(events)
    out = at(order, HEAD, "rolling: gang head out of the router", "changed")
    drained = at(order, HEAD, "rolling: gang head drained", "ok")
    stops = [at(order, h, "gang member stopped", "changed") for h in (HEAD, WORKER)]
    worker = at(order, WORKER, "gang worker started", "changed")
    head = at(order, HEAD, "gang head started", "changed")
    ready = at(order, HEAD, "gang head ready", "ok")
    back = at(order, HEAD, "rolling: gang head back into the router", "changed")
    soak = at(order, HEAD, "rolling: gang head soak", "ok")
    assert out < drained < min(stops) and max(stops) < worker < head < ready < back < soak, order
    gang_steps = [s for s in order if s[0] in (HEAD, WORKER)]
    assert not [s for s in gang_steps if s[1].startswith("rolling: out of the router")], order
    plain_out = at(order, PLAIN, "rolling: out of the router", "changed")
    plain_back = at(order, PLAIN, "rolling: back into the router", "changed")
    assert soak < plain_out < plain_back or plain_back < out, "one replica's batch at a time"
    assert [plain_url] in seen, f"the head never left the router: {seen}"
    assert [head_url] in seen, f"the plain replica never left the router: {seen}"
    assert [] not in seen, f"the router was left without a worker: {seen}"
    assert fleet.router_workers() == both
    assert all(fleet.unit(h)["MainPID"] != pids[h] for h in pids), "every replica restarted"
    assert complete(fleet)["usage"]["completion_tokens"] == 4
    recap = next(e for e in events if e.get("event") == "fleet")
    assert recap["stopped"] is None and recap["out_of_router"] == {}, recap


def test_a_converged_fleet_stays_in_the_router(fleet: FleetBed) -> None:
    pids = {h: fleet.unit(h)["MainPID"] for h in (HEAD, WORKER, PLAIN)}
    rc, events, seen = rolling(fleet, "1")
    assert rc == 0, failures(events)
    assert changed(events) == 0, [s for s in steps(events) if s[2] == "changed"]
    both = sorted([fleet.urls[HEAD], fleet.urls[PLAIN]])
    assert all(workers == both for workers in seen), seen
    assert {h: fleet.unit(h)["MainPID"] for h in pids} == pids
    pending = {
        e["host"]: e
        for e in events
        if e.get("event") == "task" and e["task"] == "rolling: will the gang restart"
    }
    assert pending[PLAIN]["status"] == "skipped", pending  # not a gang member
    gang = [pending[h] for h in (HEAD, WORKER)]
    assert all("no restart" in e["msg"] for e in gang), gang
