"""The fleet's shape from an inventory, each gang member's flags, and the router's command line."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import textwrap
from pathlib import Path

import jinja2
import pytest

from glmops import paths
from glmops.engine.templating import make_environment
from glmops.errors import InputError
from glmops.fleet.multinode import (
    Route,
    data_parallel_args,
    gang_args,
    gang_env,
    member_plan,
    parse_route,
    ray_start_argv,
    ray_unit_vars,
    route_peer,
)
from glmops.fleet.router import router_argv, worker_changes
from glmops.fleet.topology import fleet_from_inventory, replica_data
from glmops.gpu.facts import parse_facts
from glmops.gpu.serving import ServeError, serve_flags
from glmops.run import load_inventory

FLEET = """
all:
  vars: {router_host: ctl, vllm_port: 8000}
  children:
    serving:
      hosts:
        r1: {address: 10.0.0.1}
        r2: {address: 10.0.0.2}
        g2: {address: 10.0.1.2, replica: big, node_rank: 1}
        g1: {address: 10.0.1.1, replica: big}
    local:
      hosts:
        ctl: {connection: local, router_port: 30001}
"""


def fleet_of(tmp_path: Path, text: str, group: str = "serving"):
    path = tmp_path / "hosts.yml"
    path.write_text(textwrap.dedent(text))
    inventory = load_inventory(path)
    return fleet_from_inventory(inventory, inventory.select(group))


def test_ipv6_addresses_are_bracketed_in_the_fleets_urls(tmp_path: Path) -> None:
    text = """
all:
  vars: {router_host: rt}
  children:
    serving:
      hosts:
        r1: {address: "fd00::11"}
    routers:
      hosts:
        rt: {address: "fd00::9", router_port: 30000}
"""
    fleet = fleet_of(tmp_path, text)
    assert fleet.worker_urls == ("http://[fd00::11]:8000",)
    assert fleet.router is not None and fleet.router.url == "http://[fd00::9]:30000"


def test_single_hosts_are_replicas_and_shared_names_are_gangs(tmp_path: Path) -> None:
    fleet = fleet_of(tmp_path, FLEET)
    assert [r.name for r in fleet.replicas] == ["r1", "r2", "big"]
    big = fleet.replicas[2]
    assert big.is_gang and big.head.host == "g1" and big.head.address == "10.0.1.1"
    assert [m.host for m in big.restart_order()] == ["g2", "g1"], "workers before the head"
    assert fleet.worker_urls == (
        "http://10.0.0.1:8000",
        "http://10.0.0.2:8000",
        "http://10.0.1.1:8000",
    )
    assert fleet.router is not None and fleet.router.url == "http://127.0.0.1:30001"
    assert fleet.replica_of("g2") is big


def test_gang_ranks_must_be_a_permutation(tmp_path: Path) -> None:
    bad = FLEET.replace("node_rank: 1", "node_rank: 2")
    with pytest.raises(InputError, match=r"replica 'big': node_rank must number its hosts 0\.\.1"):
        fleet_of(tmp_path, bad)


def test_gang_members_must_agree_on_the_port(tmp_path: Path) -> None:
    bad = FLEET.replace("replica: big, node_rank: 1", "replica: big, node_rank: 1, vllm_port: 9")
    with pytest.raises(InputError, match="same vllm_port") as raised:
        fleet_of(tmp_path, bad)
    assert str(tmp_path / "hosts.yml") in str(raised.value), "the error names the inventory"


def test_router_host_must_be_in_the_inventory(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="router_host 'nope' is not a host"):
        fleet_of(tmp_path, FLEET.replace("router_host: ctl", "router_host: nope"))


def test_no_router_host_means_no_router(tmp_path: Path) -> None:
    assert fleet_of(tmp_path, FLEET.replace("router_host: ctl, ", "")).router is None


def test_gang_members_get_vllm_multinode_flags(tmp_path: Path) -> None:
    big = fleet_of(tmp_path, FLEET).replicas[2]
    head, worker = big.members
    assert gang_args(big, head) == [
        "--nnodes", "2", "--node-rank", "0", "--master-addr", "10.0.1.1", "--master-port", "29501",
    ]  # fmt: skip
    assert gang_args(big, worker) == [
        "--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.1.1", "--master-port", "29501",
        "--headless",
    ]  # fmt: skip
    single = fleet_of(tmp_path, FLEET).replicas[0]
    assert gang_args(single, single.head) == [], "a one-host replica is plain vllm serve"
    assert route_peer(big, head) is worker and route_peer(big, worker) is head


DATA_PARALLEL = FLEET.replace(
    "g2: {address: 10.0.1.2, replica: big, node_rank: 1}",
    "g2: {address: 10.0.1.2, replica: big, node_rank: 1, replica_mode: data_parallel,"
    " vllm_data_parallel_size_local: 2}",
).replace(
    "g1: {address: 10.0.1.1, replica: big}",
    "g1: {address: 10.0.1.1, replica: big, replica_mode: data_parallel,"
    " vllm_data_parallel_size_local: 2}",
)


def test_data_parallel_replica_head_and_headless_followers(tmp_path: Path) -> None:
    big = fleet_of(tmp_path, DATA_PARALLEL).replicas[2]
    head, worker = big.members
    assert (big.mode, big.dp_local, big.dp_rpc_port) == ("data_parallel", 2, 29550)
    dp = [
        "--data-parallel-size", "4", "--data-parallel-size-local", "2",
        "--data-parallel-address", "10.0.1.1", "--data-parallel-rpc-port", "29550",
    ]  # fmt: skip
    assert data_parallel_args(big, head) == dp
    assert data_parallel_args(big, worker) == [*dp, "--headless", "--data-parallel-start-rank", "2"]
    assert member_plan(replica_data(big), "g2", 29501)["args"][-3:] == [
        "--headless", "--data-parallel-start-rank", "2",
    ]  # fmt: skip
    assert "--nnodes" not in member_plan(replica_data(big), "g1", 29501)["args"]


@pytest.mark.parametrize(
    ("edit", "refusal"),
    [
        (
            lambda t: t.replace("r1: {address: 10.0.0.1}", "r1: {address: 10.0.0.1, "
                                "replica_mode: data_parallel}"),
            "replica 'r1': replica_mode data_parallel needs a replica of two or more hosts",
        ),
        (
            lambda t: t.replace("vllm_port: 8000}", "vllm_port: 8000, multinode_backend: ray}"),
            "runs on vLLM's own multi-node runtime (multinode_backend: mp), not Ray",
        ),
        (
            lambda t: t.replace("size_local: 2", "size_local: 0"),
            "needs vllm_data_parallel_size_local of at least 1",
        ),
        (
            lambda t: t.replace("node_rank: 1, replica_mode: data_parallel,", "node_rank: 1,"),
            "the hosts of one gang need the same replica_mode",
        ),
        (
            lambda t: t.replace("data_parallel", "expert_parallel"),
            "replica_mode must be one of tensor_parallel, data_parallel, got 'expert_parallel'",
        ),
    ],
)  # fmt: skip
def test_data_parallel_combinations_glmops_refuses(tmp_path: Path, edit, refusal: str) -> None:
    with pytest.raises(InputError, match="hosts.yml") as refused:
        fleet_of(tmp_path, edit(DATA_PARALLEL))
    assert refusal in str(refused.value)


def test_route_picks_interface_and_source_address() -> None:
    text = '[{"dst":"10.0.1.2","dev":"eth1","prefsrc":"10.0.1.1","flags":[],"uid":0,"cache":[]}]'
    route = parse_route(text, "10.0.1.2")
    assert route == Route("eth1", "10.0.1.1")
    assert gang_env(route) == {
        "VLLM_HOST_IP": "10.0.1.1",
        "GLOO_SOCKET_IFNAME": "eth1",
        "NCCL_SOCKET_IFNAME": "eth1",
    }
    with pytest.raises(ValueError, match="no usable route to 10.9.9.9"):
        parse_route("RTNETLINK answers: Network is unreachable", "10.9.9.9")


def test_ray_units_start_head_then_join_it(tmp_path: Path) -> None:
    big = fleet_of(tmp_path, FLEET).replicas[2]
    head, worker = big.members
    assert ray_start_argv(big, head, Route("eth1", "10.0.1.1"), "/opt/vllm/bin/ray") == [
        "/opt/vllm/bin/ray", "start", "--head", "--port", "6379",
        "--node-ip-address", "10.0.1.1", "--block",
    ]  # fmt: skip
    assert ray_start_argv(big, worker, Route("eth1", "10.0.1.2")) == [
        "ray", "start", "--address", "10.0.1.1:6379", "--node-ip-address", "10.0.1.2", "--block",
    ]  # fmt: skip


def test_router_argv_and_worker_list_changes() -> None:
    argv = router_argv(
        "/opt/r/bin/vllm-router", host="0.0.0.0", port=30000, workers=["http://a:8000"]
    )
    assert argv[argv.index("--worker-urls") + 1 :] == ["http://a:8000"]
    assert argv[argv.index("--health-check-interval-secs") + 1] == "5"
    assert "--worker-urls" not in router_argv("r", host="h", port=1, workers=[])
    changes = worker_changes(
        ["http://a:8000/", "http://b:8000"], ["http://a:8000", "http://c:8000"]
    )
    assert changes.add == ("http://c:8000",) and changes.remove == ("http://b:8000",)
    assert worker_changes(["http://a:8000"], ["http://a:8000/"]).empty


def test_ray_units_render_and_verify(tmp_path: Path) -> None:
    """The Ray head and worker units, rendered by the template engine deploys use, carry the
    `ray start --block` lines and the gang's network environment; systemd-analyze accepts them."""
    big = fleet_of(tmp_path, FLEET).replicas[2]
    head, worker = big.members
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "ray").write_text("#!/bin/sh\n")  # systemd-analyze checks the path exists
    (venv / "bin" / "ray").chmod(0o755)
    env = make_environment(jinja2.FileSystemLoader(str(paths.templates())))
    units = {}
    for member, route in ((head, Route("eth1", "10.0.1.1")), (worker, Route("eth1", "10.0.1.2"))):
        ray = ray_unit_vars(big, member, route, venv=str(venv), user="root")
        units[member.host] = env.get_template("systemd/ray.service.j2").render(ray=ray)
    exec_lines = {h: _line(text, "ExecStart=") for h, text in units.items()}
    assert exec_lines["g1"] == (
        f"ExecStart={venv}/bin/ray start --head --port 6379 --node-ip-address 10.0.1.1 --block"
    )
    assert exec_lines["g2"] == (
        f"ExecStart={venv}/bin/ray start --address 10.0.1.1:6379 --node-ip-address 10.0.1.2 --block"
    )
    for host, ip in (("g1", "10.0.1.1"), ("g2", "10.0.1.2")):
        assert f'Environment="VLLM_HOST_IP={ip}"' in units[host]
        assert 'Environment="GLOO_SOCKET_IFNAME=eth1"' in units[host]
        assert 'Environment="NCCL_SOCKET_IFNAME=eth1"' in units[host]
    systemd_verifies(tmp_path, "ray", units)


def systemd_verifies(folder: Path, prefix: str, units: dict[str, str]) -> None:
    """systemd-analyze accepts each rendered unit (as `<prefix>-<host>.service`)."""
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze not installed: rendered text checked only")
    for host, text in units.items():
        unit = folder / f"{prefix}-{host}.service"
        unit.write_text(text)
        checked = subprocess.run(
            ["systemd-analyze", "verify", str(unit)], capture_output=True, text=True
        )
        problems = [  # other units' noise is not ours
            line for line in checked.stderr.splitlines() if f"{prefix}-" in line
        ]
        assert checked.returncode == 0 and not problems, checked.stderr


def _line(text: str, prefix: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(prefix))


def test_data_parallel_units_render_and_verify(tmp_path: Path) -> None:
    """Each member's vllm serve unit for a data parallel gang of two 8-GPU hosts (2 ranks of
    TP 4 on each), rendered as the deploy renders it; systemd-analyze accepts both."""
    big = fleet_of(tmp_path, DATA_PARALLEL).replicas[2]
    facts = parse_facts(
        {"gpus": [{"name": "H200", "compute_cap": "9.0"} for _ in range(8)], "driver": {}}
    )
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "vllm").write_text("#!/bin/sh\n")  # systemd-analyze checks the path exists
    (venv / "bin" / "vllm").chmod(0o755)
    env = make_environment(jinja2.FileSystemLoader(str(paths.templates())))
    units, configs = {}, {}
    for member in big.members:
        gang = member_plan(replica_data(big), member.host, 29501)
        gang["env"] = gang_env(Route("eth1", member.address))
        variables = {
            "vllm_venv": str(venv),
            "glm5_hf_config_dir": str(tmp_path),
            "vllm_model": str(tmp_path / "model.gguf"),
            "vllm_dtype": "bfloat16",
            "vllm_home": str(tmp_path),
            "vllm_env_dir": str(tmp_path),
            "vllm_gang": gang,
        }
        configs[member.host] = serve_flags(facts, variables)
        text = env.get_template("systemd/vllm-glm5.service.j2").render(
            serve=configs[member.host].as_data()
        )
        units[member.host] = text
    assert configs["g1"].tensor_parallel == 4, "8 GPUs per host hold 2 data parallel ranks"
    head, worker = (_line(units[h], "ExecStart=") for h in ("g1", "g2"))
    dp = (
        "--tensor-parallel-size 4 --dtype bfloat16 .* --data-parallel-size 4 "
        "--data-parallel-size-local 2 --data-parallel-address 10.0.1.1 "
        "--data-parallel-rpc-port 29550"
    )
    assert re.search(dp + "$", head) and "--headless" not in head, head
    assert re.search(dp + " --headless --data-parallel-start-rank 2$", worker), worker
    assert "--nnodes" not in head + worker, "data parallel ranks are whole copies per host"
    assert "#   --data-parallel-size: gang big (data_parallel): rank 1 of 2 hosts" in units["g2"]
    with pytest.raises(ServeError, match="is 16 ranks per host > 8 GPUs"):
        serve_flags(facts, {**variables, "vllm_tensor_parallel_size": 8, "vllm_gang": {
            **gang, "dp_local": 2, "span": 1}})  # fmt: skip
    systemd_verifies(tmp_path, "vllm", units)


def test_the_router_host_serves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The router host is no replica: deploy, up, model, verify and status leave it out
    (status and the model phase here for real, on this machine)."""
    from glmops.cli.status import collect
    from glmops.fleet.topology import serving_hosts
    from glmops.model.phase import ModelOptions
    from glmops.run import ModelRequest, run_model

    path = tmp_path / "hosts.yml"
    path.write_text(
        f"all:\n  vars: {{router_host: rt, state_dir: '{tmp_path}/state'}}\n  hosts:\n"
        "    here: {connection: local}\n    rt: {connection: local}\n"
    )
    inventory = load_inventory(path)
    assert [h.name for h in serving_hosts(inventory)] == ["here"]
    assert serving_hosts(inventory, "rt") == []
    monkeypatch.setenv("GLMOPS_RUN_DIR", str(tmp_path / "runs"))
    _, rows = collect(path, "all")
    assert [row["host"] for row in rows] == ["here"]
    with pytest.raises(InputError, match="'rt' selects no serving host"):
        collect(path, "rt")
    capsys.readouterr()
    run_model(ModelRequest(path, "all", ModelOptions(check=True), json_events=True))
    recap = [json.loads(line) for line in capsys.readouterr().out.splitlines()][-1]
    assert list(recap["hosts"]) == ["here"], "the model phase leaves the router host out"


def test_the_gpu_count_host_check_reads_a_members_share() -> None:
    """tests/host's GPU count on an 8-GPU member: TP 16 over 2 hosts, or 2 data parallel
    ranks of TP 4 on this host, both use 8 GPUs here."""
    from tests.host import test_host as checks

    facts = parse_facts(
        {"gpus": [{"name": "H200", "compute_cap": "9.0"} for _ in range(8)], "driver": {}}
    )
    gpu = {"vllm_device": "cuda"}
    spans = ["vllm", "serve", "m", "--tensor-parallel-size", "16", "--nnodes", "2"]
    checks.test_gpu_count(facts, gpu, spans)
    copies = ["vllm", "serve", "--tensor-parallel-size", "4", "--data-parallel-size-local", "2"]
    checks.test_gpu_count(facts, gpu, copies)
    with pytest.raises(AssertionError, match="8 GPUs, expected 4"):
        checks.test_gpu_count(facts, gpu, copies[:4])
