"""The rolling deploy's schedule and stop rule, and the drain helper (tested end to end with
real vLLM replicas and vllm-router in tests/testbed/test_fleet_roll.py)."""

from __future__ import annotations

import http.server
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from glmops.context import run_helper_here
from glmops.errors import ExitCode, InputError
from glmops.fleet.roll import Batch, FleetDeploy, batches, parse_serial, too_many_failed
from glmops.inventory import load_inventory

FLEET = """
all:
  vars: {router_host: rt, router_wheelhouse: /nowhere}
  children:
    serving:
      hosts:
        r1: {address: 10.0.0.1}
        r2: {address: 10.0.0.2}
        r3: {address: 10.0.0.3}
        r4: {address: 10.0.0.4}
    routers:
      hosts:
        rt: {address: 10.0.0.9}
"""


def names(groups: list[tuple[Any, ...]]) -> list[list[str]]:
    return [[r.name for r in group] for group in groups]


@pytest.fixture
def deploy(tmp_path: Path) -> Iterator[tuple[FleetDeploy, list[tuple[str, str, dict]], dict]]:
    (tmp_path / "hosts.yml").write_text(textwrap.dedent(FLEET))
    inventory = load_inventory(tmp_path / "hosts.yml")
    calls: list[tuple[str, str, dict]] = []
    fail: dict[str, str] = {}  # host -> why, for the runs of deploy.yml

    def run(playbook: Path, limit: str, extra: dict, on_failure: Any) -> ExitCode:
        calls.append((playbook.name, limit, extra))
        hit = [h for h in limit.split(",") if h in fail and playbook.name in fail[h]]
        for host in hit:
            on_failure(host, fail[host])
        return ExitCode.HOST_FAILED if hit else ExitCode.OK

    yield FleetDeploy(inventory, "all", run, json_events=True), calls, fail


def test_serial_sizes_numbers_percentages_and_ramps(deploy: Any) -> None:
    replicas = deploy[0].fleet.replicas
    assert names(batches(replicas, ["1"])) == [["r1"], ["r2"], ["r3"], ["r4"]]
    assert names(batches(replicas, ["50%"])) == [["r1", "r2"], ["r3", "r4"]]
    assert names(batches(replicas, parse_serial("1, 100%"))) == [["r1"], ["r2", "r3", "r4"]]
    assert names(batches(replicas, ["10%"])) == [["r1"], ["r2"], ["r3"], ["r4"]]
    with pytest.raises(InputError, match="neither a number nor a percentage"):
        batches(replicas, ["two"])


def test_max_fail_percentage_is_exceeded_not_reached(deploy: Any) -> None:
    batch = Batch(tuple(deploy[0].fleet.replicas[:2]), failed={"r1": "x"})
    assert not too_many_failed(batch, 50) and too_many_failed(batch, 49)


def test_the_router_host_serves_nothing_and_a_failed_preflight_touches_nothing(
    deploy: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet, calls, fail = deploy
    assert [r.name for r in fleet.fleet.replicas] == ["r1", "r2", "r3", "r4"]
    fail["r3"] = "fleet-preflight.yml: free disk: only 0 GiB"
    assert fleet.rolling(["1"], 0) == ExitCode.HOST_FAILED
    assert [c[0] for c in calls] == ["fleet-preflight.yml"]
    assert "preflight failed; no replica was touched: r3: " in capsys.readouterr().out


def test_a_failed_batch_stops_the_roll_and_stays_out_of_the_router(deploy: Any) -> None:
    fleet, calls, fail = deploy
    fail["r2"] = "deploy.yml: ready: not ready"
    assert fleet.rolling(["1"], 0) == ExitCode.HOST_FAILED
    assert [(c[0], c[1]) for c in calls] == [
        ("fleet-preflight.yml", "r1,r2,r3,r4"),
        ("deploy.yml", "r1"),
        ("deploy.yml", "r2"),
        ("router.yml", "rt"),
    ]
    assert calls[1][2]["fleet_rolling"] is True
    assert calls[1][2]["fleet_replica_urls"]["r1"] == "http://10.0.0.1:8000"
    router = calls[-1][2]
    assert router["fleet_workers"] == ["http://10.0.0.1:8000", "http://10.0.0.3:8000",
                                       "http://10.0.0.4:8000"]  # fmt: skip
    assert router["fleet_router_argv"][-3:] == router["fleet_workers"]
    assert "more than max_fail_percentage=0" in (fleet.stopped or "")


def test_a_failure_within_max_fail_percentage_lets_the_roll_go_on(deploy: Any) -> None:
    fleet, calls, fail = deploy
    fail["r1"] = "deploy.yml: ready: not ready"
    assert fleet.rolling(["50%"], 50) == ExitCode.HOST_FAILED
    assert [c[1] for c in calls if c[0] == "deploy.yml"] == ["r1,r2", "r3,r4"]
    assert fleet.stopped is None


class Metrics(http.server.BaseHTTPRequestHandler):
    """/metrics in vLLM's text format: 2 requests running for the first looks, then none."""

    looks = 0

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        Metrics.looks += 1
        running = 2.0 if Metrics.looks <= 3 else 0.0
        body = (
            "# TYPE vllm:num_requests_running gauge\n"
            f'vllm:num_requests_running{{engine="0",model_name="m"}} {running}\n'
            'vllm:num_requests_waiting{engine="0",model_name="m"} 5.0\n'
        ).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_drain_waits_for_running_requests_then_bounds_the_wait() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        reply = run_helper_here("vllm_drain", {"port": port, "interval": 0.1, "timeout": 10})
        assert reply["running"] == 0 and reply["msg"].startswith("drained"), reply
        Metrics.looks = -1000
        reply = run_helper_here("vllm_drain", {"port": port, "interval": 0.1, "timeout": 0.5})
        assert reply["timed_out"] and "still running after" in reply["msg"], reply
    finally:
        server.shutdown()
    gone = run_helper_here("vllm_drain", {"port": port, "timeout": 1})
    assert gone["running"] is None and "nothing runs there" in gone["msg"]
