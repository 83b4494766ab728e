"""A fleet on testbed hosts: 3 replicas of vLLM's CPU build with the tiny model, and a router.

Shared by tests/testbed/test_fleet_roll.py and benchmarks/fleet_rolling: boots the hosts, writes
the inventory (replicas, router_host), and brings the fleet up with the CLI exactly as a user
would (`glmops provision`, the tiny-model playbook, `glmops deploy`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from glmops.fleet.loadgen import Sample
from glmops.fleet.router import RouterClient
from glmops.testbed import Testbed
from glmops.testbed.inventory import host_address

ROOT = Path(__file__).resolve().parents[2]
CPU_VARS = yaml.safe_load((ROOT / "inventory" / "cpu" / "group_vars.yml").read_text())
#: Short waits for a tiny model: drain and soak in seconds, not minutes. The unit environment:
#: vLLM's CPU build binds ("auto") each worker's threads to the CPUs of its NUMA node less one
#: it reserves (its ompmultiprocessing.py), so on a 2-CPU machine every replica's worker is
#: pinned to CPU 0, beside the others' workers, which spin (sched_yield) for 1 s after each
#: request; a replica restarting under load took about 6 min, against under 1 min idle.
#: Unbound, with one thread each, the kernel spreads the replicas over both CPUs.
FLEET_VARS: dict[str, Any] = {
    "fleet_drain_timeout_s": 30,
    "fleet_soak_s": 4,
    "vllm_restart_sec": 2,
    "vllm_env": {"VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1"},
}
UNIT = "vllm-glm5"


class FleetBed:
    """Replicas tb<first>..tb<first+n-1> and the router on the next host; `extra`: further
    variables of the replicas, `host_vars`: of single hosts (e.g. the members of a gang)."""

    def __init__(
        self,
        bed: Testbed,
        work: Path,
        wheelhouse: Path,
        replicas: int = 3,
        extra: dict[str, Any] | None = None,
        host_vars: dict[str, dict[str, Any]] | None = None,
    ):
        self.bed = bed
        self.work = work
        first = bed.first_index
        self.replicas = [f"tb{first + i}" for i in range(replicas)]
        self.router_host = f"tb{first + replicas}"
        self.router_url = f"http://{host_address(first + replicas)}:30000"
        self.urls = {
            h: f"http://{host_address(first + i)}:8000" for i, h in enumerate(self.replicas)
        }
        self.inventory = work / "hosts.yml"
        doc = self._inventory(wheelhouse, extra or {}, host_vars or {})
        self.inventory.write_text(yaml.safe_dump(doc))
        self.env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "GLMOPS_INVENTORY": str(self.inventory),
            "GLMOPS_RUN_DIR": str(work / "runs"),
        }

    def _inventory(
        self, wheelhouse: Path, extra: dict[str, Any], host_vars: dict[str, dict[str, Any]]
    ) -> dict[str, Any]:
        doc = yaml.safe_load(self.bed.inventory_path.read_text())
        hosts = doc["all"]["children"]["testbed"]["hosts"]
        for name, variables in host_vars.items():
            hosts[name] = {**hosts[name], **variables}
        serving = {**CPU_VARS, **FLEET_VARS, "vllm_wheelhouse": str(wheelhouse), **extra}
        doc["all"]["vars"].update(
            router_host=self.router_host,
            python_version=CPU_VARS["python_version"],
            uv_version=CPU_VARS["uv_version"],
        )
        doc["all"]["children"] = {
            "replicas": {"vars": serving, "hosts": {h: hosts[h] for h in self.replicas}},
            "routers": {"hosts": {self.router_host: hosts[self.router_host]}},
        }
        return doc

    def up(self) -> None:
        """Provision the replicas, put the tiny model on them, deploy the fleet."""
        from glmops.testbed import tinymodel

        tiny = self.work / "tiny"
        if not tiny.exists():
            tinymodel.build(tiny)
        for args in (
            ("provision", "replicas"),
            ("run", "playbooks/tiny-model.yml", "-l", "replicas", "-e", f"tiny_model_src={tiny}"),
            ("deploy",),
        ):
            rc, events = self.cli(*args)
            assert rc == 0, failures(events)

    def cli(self, *args: str, timeout: float = 1500) -> tuple[int, list[dict[str, Any]]]:
        proc = subprocess.run(
            [sys.executable, "-m", "glmops.cli", *args, "--json"],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
        if proc.returncode != 0:
            print(proc.stderr[-6000:])
        return proc.returncode, events

    def popen(self, *args: str) -> subprocess.Popen:
        """The CLI with --json, its events readable line by line as they come; its stderr
        goes to `self.stderr_log` (a pipe nobody reads would stall it)."""
        with self.stderr_log.open("w") as stderr:
            return subprocess.Popen(
                [sys.executable, "-m", "glmops.cli", *args, "--json"],
                cwd=ROOT,
                env=self.env,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
            )

    @property
    def stderr_log(self) -> Path:
        return self.work / "cli-stderr.log"

    def unit(self, host: str) -> dict[str, str]:
        """MainPID and NRestarts of a replica's vLLM unit, read on the host (nsenter, no SSH)."""
        out = self.bed.exec(
            host, ["systemctl", "show", UNIT, "-p", "MainPID,NRestarts,ActiveState"]
        ).stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def kill(self, host: str) -> str:
        pid = self.unit(host)["MainPID"]
        assert pid not in ("", "0"), f"{host}: vLLM not running"
        self.bed.exec(host, ["kill", "-9", pid])
        return pid

    def stops_timed_out(self, host: str) -> int:
        """How often systemd had to SIGKILL the replica's vLLM because it did not stop within
        TimeoutStopSec: vLLM holds an unanswered request on stop until it is killed."""
        journal = ["journalctl", "-u", f"{UNIT}.service", "--no-pager", "-o", "cat"]
        lines = self.bed.exec(host, journal).stdout.splitlines()
        return sum("State 'stop-sigterm' timed out" in line for line in lines)

    def router_workers(self) -> list[str]:
        return sorted(RouterClient(self.router_url).workers())


def failures(events: list[dict[str, Any]]) -> list[str]:
    return [
        f"{e.get('host')}: {e.get('task')}: {e.get('msg')}"
        for e in events
        if e.get("status") in ("failed", "unreachable")
    ]


def fleet_recap(events: list[dict[str, Any]]) -> dict[str, Any]:
    found = [e for e in events if e.get("event") == "fleet"]
    assert found, "no fleet recap in the events"
    return found[-1]


def explain(failed: list[Sample], events: list[dict[str, Any]]) -> list[str]:
    """Each failed request beside what the deploy did while it was out: the tasks and
    handlers that started or ended on any host from 5 s before it was sent until it ended."""
    steps = [e for e in events if e.get("event") in ("task_start", "task", "handler")]
    origin = min((e["time"] for e in steps), default=0.0)
    lines = []
    for sample in failed:
        lines.append(
            f"request sent at +{sample.at - origin:.1f} s, ended after {sample.latency_s:.1f} s:"
            f" {sample.status}: {(sample.error or '')[:160]}"
        )
        lines += [
            f"  +{e['time'] - origin:.1f} s {e.get('host')}: {e['task']} ({e.get('status', '')})"
            for e in steps
            if sample.at - 5 <= e["time"] <= sample.at + sample.latency_s
        ]
    return lines


def changed(events: list[dict[str, Any]]) -> int:
    recaps = [e["hosts"] for e in events if e.get("event") == "recap"]
    return sum(h["changed"] for recap in recaps for h in recap.values())


def main() -> int:
    """`python3 -m tests.support.fleet_bed DIR`: the fleet on the CLI's testbed (tb1..tb4),
    left running; prints the inventory to use with the CLI."""
    from glmops.gpu import wheelcache

    work = Path(sys.argv[1] if len(sys.argv) > 1 else "~/.cache/glmops/fleet-demo").expanduser()
    work.mkdir(parents=True, exist_ok=True)
    bed = Testbed()
    bed.up(4, internet=True)  # forwarding: the router host reaches the replicas
    fleet = FleetBed(bed, work, wheelcache.cpu_wheelhouse())
    fleet.up()
    print(fleet.inventory)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
