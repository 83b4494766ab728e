"""One vLLM replica across two testbed hosts (a gang): tensor parallel 2 over vLLM's own
multi-node runtime (MP backend, no Ray), with vLLM's CPU build and glmops' tiny model.

The hosts share `replica: tiny`; `glmops deploy` gives the worker (rank 1) `--headless`, both
members `--nnodes 2` and the network environment from the route to the peer, starts the worker
before the head and gates on the head. Then the worker is killed (SIGKILL): `glmops status`
says the gang is degraded and names the worker; `glmops deploy` restarts the gang and it
answers again; a further deploy changes nothing.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

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


def test_dead_worker_degrades_the_gang_and_deploy_heals_it(
    env: dict[str, str], bed: Testbed
) -> None:
    # Every vLLM process of the worker (the unit's main process and its engine's workers),
    # as when its host dies: a container's systemd cannot kill a whole control group.
    assert bed.exec(WORKER, ["pkill", "-KILL", "-u", "vllm"]).returncode == 0
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
