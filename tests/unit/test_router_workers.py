"""router_workers against a real vllm-router (PyPI wheel, cached outside the repo).

The workers here are stand-ins: plain HTTP servers whose `/health` answers 200, which is all the
router asks of a worker before it lists it. Serving real vLLM replicas behind the router is the
fleet's testbed test.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from glmops.fleet.router import RouterClient
from tests.support.engine import Runner
from tests.support.router_gate import free_port, vllm_router, wait_http


@pytest.fixture
def stand_in_workers(tmp_path: Path) -> Iterator[list[str]]:
    (tmp_path / "www").mkdir()
    (tmp_path / "www" / "health").write_text("ok\n")
    procs, urls = [], []
    for _ in range(2):
        port = free_port()
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
                cwd=tmp_path / "www",
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        urls.append(f"http://127.0.0.1:{port}")
    try:
        for url in urls:
            wait_http(url + "/health")
        yield urls
    finally:
        for proc in procs:
            proc.kill()


@pytest.fixture
def router(stand_in_workers: list[str], tmp_path: Path) -> Iterator[str]:
    with vllm_router(stand_in_workers[:1], tmp_path / "router.log") as url:
        yield url


def sync(router: str, workers: list[str], state: str = "exact") -> str:
    return f"""
- hosts: all
  gather_facts: false
  tasks:
    - name: router workers
      router_workers: {{router: "{router}", workers: {workers!r}, state: {state}, timeout: 30}}
"""


def test_router_worker_list_follows_the_inventory(
    run_playbook: Runner, local_inventory: Path, router: str, stand_in_workers: list[str]
) -> None:
    a, b = stand_in_workers
    client = RouterClient(router)
    assert client.workers() == [a]

    check = run_playbook(sync(router, [b]), local_inventory, check=True)
    assert check.exit_code == 3 and check.status("router workers") == "changed"
    assert client.workers() == [a], "check mode changed the router"

    first = run_playbook(sync(router, [a, b]), local_inventory)
    assert first.exit_code == 0 and first.status("router workers") == "changed", first.stderr
    assert sorted(client.workers()) == sorted([a, b])

    again = run_playbook(sync(router, [a, b]), local_inventory)
    assert again.exit_code == 0 and again.changed() == 0, again.results()

    out = run_playbook(sync(router, [a], state="absent"), local_inventory)
    assert out.exit_code == 0 and out.status("router workers") == "changed"
    assert client.workers() == [b]

    present = run_playbook(sync(router, [a], state="present"), local_inventory)
    assert present.exit_code == 0 and sorted(client.workers()) == sorted([a, b])


def test_router_down_fails_naming_the_router(run_playbook: Runner, local_inventory: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    outcome = run_playbook(sync(dead, ["http://127.0.0.1:9"]), local_inventory)
    assert outcome.exit_code == 2 and outcome.status("router workers") == "failed"
    assert dead in outcome.stderr
