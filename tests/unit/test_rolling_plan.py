"""The fleet deploy's runs (preflight, the deploy with `serial`, the router) and the drain
helper; end to end with real vLLM replicas and vllm-router in tests/testbed/test_fleet_roll.py."""

from __future__ import annotations

import http.server
import json
import socket
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from glmops.engine.context import run_helper_here
from glmops.errors import ExitCode, InputError
from glmops.fleet.roll import FleetDeploy, RunOutcome, parse_serial
from glmops.run import load_inventory

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


@pytest.fixture
def deploy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[FleetDeploy, list[tuple[str, str, dict, dict]], dict]]:
    monkeypatch.setenv("GLMOPS_HOME", str(tmp_path / "home"))  # the router's admin key
    (tmp_path / "hosts.yml").write_text(textwrap.dedent(FLEET))
    inventory = load_inventory(tmp_path / "hosts.yml")
    calls: list[tuple[str, str, dict, dict]] = []
    fail: dict[str, str] = {}  # host -> "playbook: why", the failures the runs report

    def run(playbook: Path, limit: str, extra: dict, settings: dict) -> RunOutcome:
        calls.append((playbook.name, limit, extra, settings))
        hit = {h: fail[h] for h in limit.split(",") if h in fail and playbook.name in fail[h]}
        code = ExitCode.HOST_FAILED if hit else ExitCode.OK
        return RunOutcome(code, hit, stopped="by batch 2" if hit else None)

    yield FleetDeploy(inventory, "all", run, json_events=True), calls, fail


def test_serial_from_the_command_line() -> None:
    assert parse_serial("1") == [1]
    assert parse_serial("1, 25%,100%") == [1, "25%", "100%"]
    with pytest.raises(InputError, match="--serial: 'serial' entry 'two'"):
        parse_serial("two")


def test_the_router_host_serves_nothing_and_a_failed_preflight_touches_nothing(
    deploy: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet, calls, fail = deploy
    assert [r.name for r in fleet.fleet.replicas] == ["r1", "r2", "r3", "r4"]
    fail["r3"] = "fleet-preflight.yml: free disk: only 0 GiB"
    assert fleet.rolling([1], 0) == ExitCode.HOST_FAILED
    assert [c[0] for c in calls] == ["fleet-preflight.yml"]
    assert "preflight failed, nothing done: r3: " in capsys.readouterr().out


GANGS = FLEET.replace("r1: {address: 10.0.0.1}", "r1: {address: 10.0.0.1, replica: g}")
GANGS = GANGS.replace("r2: {address: 10.0.0.2}", "r2: {address: 10.0.0.2, replica: g}")
GANGS = GANGS.replace("r4: {address: 10.0.0.4}", "r4: {address: 10.0.0.4, replica: h}")
GANGS += "        r5: {address: 10.0.0.5, replica: h}\n        r6: {address: 10.0.0.6}\n"


def gang_fleet(tmp_path: Path, fail: dict[str, str]) -> tuple[FleetDeploy, list[tuple]]:
    """Gangs g (r1, r2) and h (r4, r5), replicas of one host r3 and r6."""
    (tmp_path / "hosts.yml").write_text(textwrap.dedent(GANGS))
    calls: list[tuple] = []

    def run(playbook: Path, limit: str, extra: dict, settings: dict) -> RunOutcome:
        calls.append((playbook.name, limit, extra, settings))
        hit = {h: fail[h] for h in limit.split(",") if h in fail and playbook.name in fail[h]}
        return RunOutcome(ExitCode.HOST_FAILED if hit else ExitCode.OK, hit)

    inventory = load_inventory(tmp_path / "hosts.yml")
    return FleetDeploy(inventory, "all", run, json_events=True), calls


def test_rolling_runs_each_gang_as_a_batch_of_its_own(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The replicas of one host in the engine's batches (`serial`), then one run per gang
    over all its members (never split), then the router."""
    fleet, calls = gang_fleet(tmp_path, {})
    assert fleet.rolling([1], 0) == ExitCode.OK
    assert [(c[0], c[1], c[3]) for c in calls] == [
        ("fleet-preflight.yml", "r1,r2,r3,r4,r5,r6", {}),
        ("deploy.yml", "r3,r6", {"serial": [1], "max_fail_percentage": 0}),
        ("deploy.yml", "r1,r2", {}),
        ("deploy.yml", "r4,r5", {}),
        ("router.yml", "rt", {}),
    ]
    for _, _, extra, _ in calls[1:4]:
        assert extra["fleet_rolling"] is True
        assert extra["fleet_replica_urls"]["r2"] == "http://10.0.0.1:8000", "the head's URL"
    assert calls[-1][2]["fleet_workers"] == [
        "http://10.0.0.1:8000", "http://10.0.0.3:8000", "http://10.0.0.4:8000",
        "http://10.0.0.6:8000"]  # fmt: skip
    recap = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert recap["stopped"] is None and recap["out_of_router"] == {}


def test_a_failed_gang_stops_the_roll_and_stays_out_of_the_router(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet, calls = gang_fleet(tmp_path, {"r2": "deploy.yml: gang worker started: failed"})
    assert fleet.rolling([1], 0) == ExitCode.HOST_FAILED
    assert [c[1] for c in calls] == ["r1,r2,r3,r4,r5,r6", "r3,r6", "r1,r2", "rt"], "h not rolled"
    assert calls[-1][2]["fleet_workers"] == [
        "http://10.0.0.3:8000", "http://10.0.0.4:8000", "http://10.0.0.6:8000"]  # fmt: skip
    recap = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert recap["stopped"] == "gang g: r2 failed, more than max_fail_percentage 0% of its 2 hosts"
    assert recap["out_of_router"] == {"g": "r2: deploy.yml: gang worker started: failed"}
    assert recap["batches"] == [["r3", "r6"], ["r1", "r2"]]


def test_rolling_sets_serial_and_leaves_failed_replicas_out_of_the_router(
    deploy: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet, calls, fail = deploy
    fail["r2"] = "deploy.yml: ready: not ready"
    assert fleet.rolling([1, "50%"], 25) == ExitCode.HOST_FAILED
    assert [(c[0], c[1]) for c in calls] == [
        ("fleet-preflight.yml", "r1,r2,r3,r4"),
        ("deploy.yml", "r1,r2,r3,r4"),
        ("router.yml", "rt"),
    ]
    assert calls[1][3] == {"serial": [1, "50%"], "max_fail_percentage": 25}
    assert calls[1][2]["fleet_rolling"] is True
    assert calls[1][2]["fleet_replica_urls"]["r1"] == "http://10.0.0.1:8000"
    router = calls[-1][2]
    assert router["fleet_workers"] == ["http://10.0.0.1:8000", "http://10.0.0.3:8000",
                                       "http://10.0.0.4:8000"]  # fmt: skip
    assert router["fleet_router_argv"][-3:] == router["fleet_workers"]
    assert router["fleet_router_url"] == "http://10.0.0.9:30000"
    recap = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert recap["event"] == "fleet" and recap["stopped"] == "by batch 2"
    assert recap["out_of_router"] == {"r2": "r2: deploy.yml: ready: not ready"}


def test_an_interrupted_roll_leaves_the_router_alone_and_exits_as_the_signal_says(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "hosts.yml").write_text(textwrap.dedent(FLEET))
    calls: list[str] = []

    def run(playbook: Path, limit: str, extra: dict, settings: dict) -> RunOutcome:
        calls.append(playbook.name)
        return RunOutcome(143 if playbook.name == "deploy.yml" else ExitCode.OK)  # SIGTERM

    fleet = FleetDeploy(load_inventory(tmp_path / "hosts.yml"), "all", run, json_events=True)
    assert fleet.rolling([1], 0) == 143
    assert calls == ["fleet-preflight.yml", "deploy.yml"], "the router play ran after SIGTERM"
    recap = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert recap["stopped"].startswith("interrupted")


def test_at_once_runs_every_replica_in_one_batch(deploy: Any) -> None:
    fleet, calls, _ = deploy
    assert fleet.at_once() == ExitCode.OK
    assert [(c[0], c[1], c[3]) for c in calls] == [
        ("deploy.yml", "r1,r2,r3,r4", {}),
        ("router.yml", "rt", {}),
    ]
    assert len(calls[-1][2]["fleet_workers"]) == 4


class Metrics(http.server.BaseHTTPRequestHandler):
    """/metrics in vLLM's text format, one (running, waiting) pair per look from `script`
    (the last one repeats); `delay_s` before each answer."""

    script: list[tuple[float, float]] = [(0.0, 0.0)]
    looks = 0
    delay_s = 0.0

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        running, waiting = Metrics.script[min(Metrics.looks, len(Metrics.script) - 1)]
        Metrics.looks += 1
        time.sleep(Metrics.delay_s)
        body = (
            "# TYPE vllm:num_requests_running gauge\n"
            f'vllm:num_requests_running{{engine="0",model_name="m"}} {running}\n'
            f'vllm:num_requests_waiting{{engine="0",model_name="m"}} {waiting}\n'
        ).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


class QuietServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # the helper hung up on a slow answer, as the test wants


@pytest.fixture
def metrics() -> Iterator[int]:
    Metrics.script, Metrics.looks, Metrics.delay_s = [(0.0, 0.0)], 0, 0.0
    server = QuietServer(("127.0.0.1", 0), Metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_drain_waits_for_queued_requests_and_for_the_count_to_settle(metrics: int) -> None:
    """A request the router sent just before the replica left it shows up after a first look
    of 0, and then waits in the queue before it runs: both would be cut by the restart."""
    Metrics.script = [(0, 0), (0, 1), (0, 1), (1, 0), (0, 0)]
    args = {"port": metrics, "interval": 0.1, "settle": 0.3, "timeout": 10}
    reply = run_helper_here("vllm_drain", args)
    assert Metrics.looks >= 7, f"stopped after {Metrics.looks} looks: {reply}"
    assert reply["held"] == 0 and reply["msg"].startswith("drained"), reply


def test_drain_bounds_the_wait_and_never_takes_silence_for_drained(metrics: int) -> None:
    Metrics.script = [(2, 5)]
    reply = run_helper_here("vllm_drain", {"port": metrics, "interval": 0.1, "timeout": 0.5})
    assert reply["timed_out"] and "7 request(s) still held after" in reply["msg"], reply
    Metrics.script, Metrics.delay_s = [(0, 0)], 1.0
    args = {"port": metrics, "interval": 0.1, "timeout": 0.5, "http_timeout": 0.2}
    slow = run_helper_here("vllm_drain", args)
    assert slow.get("timed_out") and "did not answer" in slow["msg"], slow


class QuietServer6(QuietServer):
    address_family = socket.AF_INET6


def test_drain_reaches_a_replica_at_an_ipv6_address() -> None:
    """The address goes into the URL in brackets, or the port would read as part of it."""
    Metrics.script, Metrics.looks, Metrics.delay_s = [(0.0, 0.0)], 0, 0.0
    server = QuietServer6(("::1", 0), Metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        args = {"address": "::1", "port": server.server_address[1], "settle": 0, "timeout": 5}
        reply = run_helper_here("vllm_drain", args)
    finally:
        server.shutdown()
        server.server_close()
    assert reply["held"] == 0 and Metrics.looks >= 1, reply


def test_drain_of_a_server_that_is_gone() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, not listening: connections are refused
        gone = run_helper_here("vllm_drain", {"port": port, "timeout": 1})
    assert gone["held"] is None and "nothing runs there" in gone["msg"], gone


def test_the_engine_runs_the_deploy_in_batches_and_stops_past_max_fail(tmp_path: Path) -> None:
    """The fleet's runner sets `serial` on a real play and reads the engine's batches, its stop
    reason and each host's failed task (three local hosts; the second one fails)."""
    from glmops.run import RunRequest, fleet_runner

    hosts = "".join(
        f"    {h}: {{connection: local, state_dir: '{tmp_path}/state-{h}'}}\n" for h in "abc"
    )
    (tmp_path / "hosts.yml").write_text(f"all:\n  hosts:\n{hosts}")
    (tmp_path / "play.yml").write_text(
        "- name: roll\n  hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - name: step\n      fail: {msg: broken}\n      when: inventory_hostname == 'b'\n"
    )
    settings = {"serial": [1], "max_fail_percentage": 0.0}
    base = RunRequest(tmp_path / "play.yml", tmp_path / "hosts.yml", json_events=True)
    outcome = fleet_runner(base)(tmp_path / "play.yml", "all", {"x": 1}, settings)
    assert outcome.code == ExitCode.HOST_FAILED
    assert outcome.failed == {"b": "step: broken"}
    assert outcome.batches == [["a"], ["b"], ["c"]]
    assert "more than max_fail_percentage 0" in (outcome.stopped or "")


def test_a_deploy_of_some_replicas_keeps_the_others_in_the_router(tmp_path: Path) -> None:
    (tmp_path / "hosts.yml").write_text(textwrap.dedent(FLEET))
    calls: list[tuple[str, str, dict]] = []

    def run(playbook: Path, limit: str, extra: dict, settings: dict) -> RunOutcome:
        calls.append((playbook.name, limit, extra))
        return RunOutcome(ExitCode.OK)

    fleet = FleetDeploy(load_inventory(tmp_path / "hosts.yml"), "r2", run, json_events=True)
    assert fleet.at_once() == ExitCode.OK
    assert [(c[0], c[1]) for c in calls] == [("deploy.yml", "r2"), ("router.yml", "rt")]
    assert len(calls[-1][2]["fleet_workers"]) == 4, "replicas outside --limit stay routed"
    calls.clear()
    assert fleet.route({"r4": "deploy: ready: not ready"}) == ExitCode.HOST_FAILED
    assert [c[0] for c in calls] == ["router.yml"], "route() runs the router play alone"
    assert "http://10.0.0.4:8000" not in calls[-1][2]["fleet_workers"]
    assert len(calls[-1][2]["fleet_workers"]) == 3
