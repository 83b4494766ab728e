"""A fleet of 3 real vLLM replicas (CPU build, tiny model) behind a real vllm-router.

One fleet is booted for the file (tb211..tb213 serve, tb214 runs the router) and brought up with
the CLI. Then, in order: a second deploy of the converged fleet restarts nothing and takes no
replica out of rotation; a rolling redeploy that restarts every replica loses no request of a
paced load through the router; and a replica SIGKILLed as it soaks fails its batch, which stops
the roll (max_fail_percentage 0) with the replica left out of the router and the reason in the
fleet recap, while a second replica killed in rotation is covered by the router's retries.

Three replicas, as in production, fit the default run on 2 cores because the load is paced
(`PACE`): the replicas serve it with CPU to spare, so a restart under load takes about as long
as an idle one. Any failed request is printed beside the roll's tasks of that moment.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from glmops.fleet.loadgen import Load
from tests.support.fleet_bed import FLEET_VARS, FleetBed, changed, explain, failures, fleet_recap
from tests.support.testbed import booted

pytestmark = pytest.mark.testbed

FIRST_INDEX = 211  # tb211..tb214: this file's own hosts
MODEL = "tiny-llama"
#: A paced load: one client, 2 s between its requests. vLLM's CPU worker spins for 1 s after
#: each request it serves, so a closed loop (or any pace that reaches a replica more than once
#: a second) keeps every serving replica on a CPU of the 2 all hosts share, and a restart under
#: load took several times an idle one. This pace still sends requests all through the roll.
PACE = {"threads": 1, "pause_s": 2.0}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, cpu_wheelhouse: Path) -> Iterator[FleetBed]:
    # internet: the testbed's forwarding, so the router host reaches the replicas (the hosts
    # still get everything they install from the controller's wheelhouses)
    with booted(tmp_path_factory.mktemp("fleet-testbed"), FIRST_INDEX, 4, internet=True) as bed:
        f = FleetBed(bed, tmp_path_factory.mktemp("fleet"), cpu_wheelhouse)
        f.up()
        yield f


def tasks(events: list[dict[str, Any]], prefix: str, status: str | None = None) -> list[dict]:
    return [
        e
        for e in events
        if e.get("event") in ("task", "handler")
        and e["task"].startswith(prefix)
        and (status is None or e["status"] == status)
    ]


def watch_router(fleet: FleetBed, stop: threading.Event, seen: list[list[str]]) -> None:
    while not stop.wait(0.5):
        seen.append(fleet.router_workers())


def test_the_router_serves_every_replica(fleet: FleetBed) -> None:
    assert fleet.router_workers() == sorted(fleet.urls.values())
    unit = fleet.bed.exec(fleet.router_host, ["systemctl", "cat", "vllm-router"]).stdout
    exec_start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    assert all(url in exec_start for url in fleet.urls.values()), exec_start
    with Load(fleet.router_url, MODEL, threads=1) as load:
        time.sleep(3)
    summary = load.summary()
    assert summary["served"] >= 1 and summary["failed"] == 0, summary


def test_a_second_deploy_of_the_converged_fleet_restarts_nothing(fleet: FleetBed) -> None:
    before = {h: fleet.unit(h) for h in fleet.replicas}
    stop, seen = threading.Event(), []
    watcher = threading.Thread(target=watch_router, args=(fleet, stop, seen))
    watcher.start()
    try:
        rc, events = fleet.cli("deploy", "--rolling")
    finally:
        stop.set()
        watcher.join()
    assert rc == 0, failures(events)
    assert changed(events) == 0, [e for e in events if e.get("status") == "changed"]
    assert {h: fleet.unit(h) for h in fleet.replicas} == before
    assert not tasks(events, "rolling: out of the router", "changed")
    assert seen and all(workers == sorted(fleet.urls.values()) for workers in seen), seen
    assert fleet_recap(events)["out_of_router"] == {}


def test_rolling_redeploy_under_load_loses_no_request(fleet: FleetBed) -> None:
    before = {h: fleet.unit(h)["MainPID"] for h in fleet.replicas}
    stop, seen = threading.Event(), []
    watcher = threading.Thread(target=watch_router, args=(fleet, stop, seen))
    watcher.start()
    try:
        with Load(fleet.router_url, MODEL, **PACE) as load:
            rc, events = fleet.cli("deploy", "--rolling", "-e", json.dumps(roll_env("a")))
    finally:
        stop.set()
        watcher.join()
    summary = load.summary()
    print(f"\nrolling redeploy of {len(fleet.replicas)} replicas under load: {summary}")
    print("\n".join(explain(load.failed(), events)))
    assert rc == 0, failures(events)
    recap = fleet_recap(events)
    assert recap["batches"] == [[h] for h in fleet.replicas] and recap["stopped"] is None
    for host in fleet.replicas:
        assert fleet.unit(host)["MainPID"] != before[host], f"{host} was not restarted"
        for step in ("rolling: out of the router", "restart vllm", "rolling: back into"):
            assert [e["host"] for e in tasks(events, step, "changed")].count(host) == 1, step
        # the router's own list, looked at every 0.5 s: the replica was out for a while
        assert any(fleet.urls[host] not in workers for workers in seen), f"{host} never left"
    assert len(tasks(events, "rolling: drain", "ok")) == len(fleet.replicas)
    assert fleet.router_workers() == sorted(fleet.urls.values())
    assert summary["failed"] == 0, summary["errors"]
    assert summary["served"] >= 20, summary
    assert 0 < summary["p50_s"] <= summary["p99_s"] < 30, summary


def test_a_replica_killed_mid_roll_stops_the_roll_and_stays_out(fleet: FleetBed) -> None:
    """tb211, just restarted and back in the router, is SIGKILLed as its soak starts: its batch
    fails and, with max_fail_percentage 0, the roll stops there. tb212 (serving, not yet
    rolled) is SIGKILLed at the same moment: the requests it held are retried by the router on
    the other replicas; systemd restarts it."""
    first, second, third = fleet.replicas
    with Load(fleet.router_url, MODEL, **PACE) as load:
        proc = fleet.popen("deploy", "--rolling", "-e", json.dumps(roll_env("b")))
        assert proc.stdout is not None
        events: list[dict[str, Any]] = []
        killed = False
        for line in proc.stdout:
            if not line.startswith("{"):
                continue
            event = json.loads(line)
            events.append(event)
            starts = event.get("event") == "task_start" and event.get("host") == first
            if starts and event.get("task", "").startswith("rolling: soak") and not killed:
                fleet.kill(first)
                fleet.kill(second)
                killed = True
        rc = proc.wait(timeout=60)
    summary = load.summary()
    print(f"\nSIGKILL mid-roll, load through the router: {summary}")
    print("\n".join(explain(load.failed(), events)))
    assert killed, [e.get("task") for e in events if e.get("event") == "task_start"][-10:]
    assert rc == 2, fleet.stderr_log.read_text()[-3000:]
    recap = fleet_recap(events)
    assert "1 of 1 host(s) failed (100%), more than max_fail_percentage 0" in recap["stopped"]
    recaps = [e for e in events if e.get("event") == "recap"]
    engine = next(p for e in recaps for p in e.get("plays", []) if p["name"] == "deploy GLM-5")
    assert engine["stopped_by_batch"] == 1 and engine["not_reached"] == [second, third], engine
    why = recap["out_of_router"][first]
    assert why.startswith(f"{first}: rolling: soak") and "unhealthy" in why, why
    assert fleet.router_workers() == sorted([fleet.urls[second], fleet.urls[third]])
    restarted = {e["host"] for e in tasks(events, "restart vllm")}
    assert restarted == {first}, f"the roll restarted {restarted} past the failed batch"
    # Killing a serving replica cuts the requests it was running; the router retries them on
    # another replica, so clients see at most a few failures.
    assert summary["failed"] <= 2, summary["errors"]
    assert summary["served"] >= 10, summary


def roll_env(tag: str) -> dict[str, Any]:
    """A changed unit environment (the fleet's own plus a new variable): every replica's
    restart is pending."""
    return {"vllm_env": {**FLEET_VARS["vllm_env"], "GLMOPS_FLEET_ROLL": tag}}
