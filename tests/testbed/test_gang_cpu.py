"""One vLLM replica across two testbed hosts (a gang): tensor parallel 2 over vLLM's own
multi-node runtime (MP backend, no Ray), with vLLM's CPU build and glmops' tiny model.

The hosts share `replica: tiny`; `glmops deploy` gives the worker (rank 1) `--headless`, both
members `--nnodes 2` and the network environment from the route to the peer, starts the worker
before the head and gates on the head. `glmops verify` checks the worker as a worker (its gang
flags, the gang restart's process, a connection to its head; no HTTP) and the head fully.
Then the worker is killed (SIGKILL): `glmops verify` fails on it, `glmops status` says the
gang is degraded and names the worker; `glmops deploy` restarts the gang and it answers again;
a further deploy changes nothing.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from glmops.testbed import Testbed
from glmops.testbed.inventory import host_address
from tests.support.cpu_hosts import cpu_env
from tests.support.glmops_cli import run_cli, tasks_named
from tests.support.testbed import booted, host_read

pytestmark = pytest.mark.testbed

FIRST_INDEX = 221  # tb221 (head) and tb222 (worker): this file's own hosts
HEAD, WORKER = f"tb{FIRST_INDEX}", f"tb{FIRST_INDEX + 1}"
ROOT = Path(__file__).resolve().parents[2]
UNIT = "/etc/systemd/system/vllm-glm5.service"


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    # internet: the machine forwards between the hosts' networks, so the members reach each
    # other (as hosts of one segment would); the test's traffic only goes to the test hosts.
    with booted(tmp_path_factory.mktemp("gang-testbed"), FIRST_INDEX, 2, internet=True) as b:
        yield b


@pytest.fixture(scope="module")
def env(
    bed: Testbed, cpu_wheelhouse: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, str]:
    """An inventory of the two hosts as one replica (gang), with inventory/cpu's variables."""
    return cpu_env(
        bed,
        cpu_wheelhouse,
        tmp_path_factory.mktemp("gang"),
        group_vars={
            "vllm_tensor_parallel_size": 2,
            # Tensor parallel makes vLLM compile its vocab-parallel embedding mask with torch
            # inductor, which needs a C++ compiler; the test hosts have none: run it eagerly.
            "vllm_env": {"TORCHDYNAMO_DISABLE": "1"},
            # A gang member stops by SIGKILL, but a test host's systemd cannot kill a whole
            # control group: the head's engine processes outlived it until TimeoutStopSec
            # (30 s by default) on every heal. No test here times a stop.
            "vllm_stop_timeout_s": 5,
        },
        host_vars={
            HEAD: {"replica": "tiny", "node_rank": 0},
            WORKER: {"replica": "tiny", "node_rank": 1},
        },
    )


def glmops(env: dict[str, str], *args: str) -> tuple[int, list[dict]]:
    rc, events, _ = run_cli(*args, env=env, cwd=ROOT, timeout=1200, ok=(0, 2, 3))
    return rc, events


def failed(events: list[dict]) -> list[str]:
    return [f"{e.get('host')}: {e.get('msg')}" for e in events if e.get("status") == "failed"]


def changed(events: list[dict]) -> int:
    recap = next(e for e in events if e.get("event") == "recap")["hosts"]
    return sum(h["changed"] for h in recap.values())


def status_of(events: list[dict], task_name: str, host: str) -> str:
    found = [e for e in tasks_named(events, task_name) if e.get("host") == host]
    assert found, f"no task {task_name!r} on {host}"
    return found[-1]["status"]


def verify(env: dict[str, str]) -> tuple[int, dict[str, dict[str, str]]]:
    """`glmops verify`'s host checks: exit code, and each check's outcome by `check[host]`."""
    rc, events = glmops(env, "verify")
    return rc, {e["check"]: e for e in events if "check" in e}


def outcome(checks: dict[str, dict[str, str]], check: str, host: str) -> str:
    return checks[f"{check}[glmops://{host}]"]["outcome"]


def invocations(bed: Testbed) -> dict[str, str]:
    show = ["systemctl", "show", "-P", "InvocationID", "vllm-glm5"]
    return {h: bed.exec(h, show).stdout.strip() for h in (HEAD, WORKER)}


def complete(prompt: str) -> dict[str, Any]:
    """One completion through the head's API server (a testbed address only)."""
    body = {"model": "tiny-llama", "prompt": prompt, "max_tokens": 4, "temperature": 0}
    request = urllib.request.Request(
        f"http://{host_address(FIRST_INDEX)}:8000/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=120) as reply:
        return json.loads(reply.read())


def test_gang_serves_tensor_parallel_2_across_two_hosts(env: dict[str, str], bed: Testbed) -> None:
    rc, events = glmops(env, "provision", "all")
    assert rc == 0, failed(events)
    tiny = f"tiny_model_src={env['TINY']}"
    rc, events = glmops(env, "run", "playbooks/tiny-model.yml", "-e", tiny)
    assert rc == 0, failed(events)
    rc, events = glmops(env, "deploy")
    assert rc == 0, failed(events)
    assert status_of(events, "gang worker started", WORKER) == "changed"
    assert status_of(events, "gang head started", HEAD) == "changed"
    assert status_of(events, "gang head ready", HEAD) == "ok"
    assert status_of(events, "gang member stopped", WORKER) == "changed"
    order = [
        e["host"]
        for e in events
        if e.get("event") == "task"
        and e.get("task", "").startswith(("gang worker started", "gang head started"))
        and e["status"] == "changed"
    ]
    assert order == [WORKER, HEAD], "the worker starts before the head"
    head_unit, worker_unit = host_read(bed, HEAD, UNIT) or "", host_read(bed, WORKER, UNIT) or ""
    head_ip = host_address(FIRST_INDEX)
    assert "--tensor-parallel-size 2 " in head_unit and "--tensor-parallel-size 2 " in worker_unit
    assert f"--nnodes 2 --node-rank 0 --master-addr {head_ip} --master-port 29501" in head_unit
    assert "--node-rank 1" in worker_unit and "--headless" in worker_unit
    assert "--headless" not in head_unit
    worker_env = host_read(bed, WORKER, "/etc/glmops/vllm-glm5.env") or ""
    assert f'VLLM_HOST_IP="{host_address(FIRST_INDEX + 1)}"' in worker_env
    assert f'GLOO_SOCKET_IFNAME="vg{FIRST_INDEX + 1}"' in worker_env
    journal = bed.exec(HEAD, ["journalctl", "-u", "vllm-glm5", "-o", "cat", "--no-pager"]).stdout
    assert "world_size=2, local_world_size=1" in journal, "one rank per host, two hosts"
    reply = complete("Hello, world")
    assert reply["usage"]["completion_tokens"] == 4, reply


def test_verify_checks_a_worker_as_a_worker_and_the_head_fully(env: dict[str, str]) -> None:
    rc, checks = verify(env)
    assert rc == 0, {k: v for k, v in checks.items() if v["outcome"] != "passed"}
    for http in ("test_port_listening", "test_health_200"):
        assert outcome(checks, http, HEAD) == "passed"
        skipped = checks[f"{http}[glmops://{WORKER}]"]
        assert skipped["outcome"] == "skipped", skipped
        assert f"--headless) serves no HTTP; its head {HEAD} serves the API" in skipped["why"]
    for host in (HEAD, WORKER):
        for check in ("test_gang_flags", "test_gang_member_joined", "test_unit_enabled_and_active"):
            assert outcome(checks, check, host) == "passed", (check, host)
        assert outcome(checks, "test_selected_backend_as_expected", host) == "passed", host


def test_dead_worker_degrades_the_gang_and_deploy_heals_it(
    env: dict[str, str], bed: Testbed
) -> None:
    # Every vLLM process of the worker (the unit's main process and its engine's workers),
    # as when its host dies: a container's systemd cannot kill a whole control group.
    assert bed.exec(WORKER, ["pkill", "-KILL", "-u", "vllm"]).returncode == 0
    rc, checks = verify(env)
    assert rc == 2, checks
    dead = checks[f"test_gang_member_joined[glmops://{WORKER}]"]
    assert dead["outcome"] == "failed" and f"{WORKER} (rank 1): " in dead["why"], dead
    rc, events = glmops(env, "status")
    rows = {e["host"]: e for e in events if e.get("event") == "status"}
    for host in (HEAD, WORKER):
        assert rows[host]["gang"]["state"] == "degraded", rows[host]
    why = " ".join(rows[HEAD]["gang"]["why"])
    assert f"{WORKER} (rank 1)" in why and HEAD not in why.split(":")[0], why
    rc, events = glmops(env, "deploy")
    assert rc == 0, failed(events)
    assert status_of(events, "gang worker started", WORKER) == "changed"
    assert status_of(events, "gang head started", HEAD) == "changed"
    assert complete("Hello again")["usage"]["completion_tokens"] == 4
    rc, events = glmops(env, "status")
    rows = {e["host"]: e for e in events if e.get("event") == "status"}
    assert rows[WORKER]["gang"]["state"] == "whole", rows[WORKER]
    before = invocations(bed)
    rc, events = glmops(env, "deploy")
    assert rc == 0 and changed(events) == 0, [e for e in events if e.get("status") == "changed"]
    assert invocations(bed) == before, "a converged gang is not restarted"


def test_data_parallel_2_across_the_two_hosts(env: dict[str, str], bed: Testbed) -> None:
    """The same two hosts as one data parallel replica (`replica_mode: data_parallel`): a whole
    copy of the model on each, the worker a headless engine from global rank 1, one API server
    on the head, which answers."""
    doc = yaml.safe_load(Path(env["GLMOPS_INVENTORY"]).read_text())
    doc["all"]["vars"].pop("vllm_tensor_parallel_size")
    for host in (HEAD, WORKER):
        doc["all"]["children"]["testbed"]["hosts"][host]["replica_mode"] = "data_parallel"
    inventory = Path(env["GLMOPS_INVENTORY"]).with_name("data-parallel.yml")
    inventory.write_text(yaml.safe_dump(doc))
    dp_env = {**env, "GLMOPS_INVENTORY": str(inventory)}
    rc, events = glmops(dp_env, "deploy")
    assert rc == 0, failed(events)
    assert status_of(events, "gang worker started", WORKER) == "changed"
    assert status_of(events, "gang head started", HEAD) == "changed"
    head_unit, worker_unit = host_read(bed, HEAD, UNIT) or "", host_read(bed, WORKER, UNIT) or ""
    dp = (
        "--data-parallel-size 2 --data-parallel-size-local 1 --data-parallel-address "
        f"{host_address(FIRST_INDEX)} --data-parallel-rpc-port 29550"
    )
    assert dp in head_unit and "--headless" not in head_unit
    assert f"{dp} --headless --data-parallel-start-rank 1" in worker_unit
    assert "--nnodes" not in head_unit + worker_unit
    assert complete("Hello, data parallel")["usage"]["completion_tokens"] == 4
    journal = ["journalctl", "-u", "vllm-glm5", "-o", "cat", "--no-pager"]
    worker_log = bed.exec(WORKER, journal).stdout
    launched = "Launching 1 data parallel engine(s) in headless mode, with head node address"
    assert f"{launched} tcp://{host_address(FIRST_INDEX)}:29550" in worker_log, worker_log[-3000:]
    rc, checks = verify(dp_env)
    assert rc == 0, {k: v for k, v in checks.items() if v["outcome"] != "passed"}
    for host in (HEAD, WORKER):
        assert outcome(checks, "test_gang_flags", host) == "passed", host
        assert outcome(checks, "test_gang_member_joined", host) == "passed", host
