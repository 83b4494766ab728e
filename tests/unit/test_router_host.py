"""Where the router runs: an inventory host, or `localhost`, the controller without an inventory
entry (Ansible's implicit localhost); a router_host that is neither is refused with its file and
line. End to end, on a controller with systemd: tests/testbed/test_router_on_controller.py."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from glmops import paths
from glmops.cli.listing import list_hosts
from glmops.engine.playbook import load_playbook
from glmops.errors import ExitCode, InputError
from glmops.fleet.roll import FleetDeploy, RunOutcome, router_vars
from glmops.fleet.router_key import key_path
from glmops.fleet.topology import fleet_from_inventory
from glmops.run import load_inventory
from tests.support.engine import Runner

FLEET = """
all:
  vars: {router_host: localhost, router_port: 30007, router_wheelhouse: /nowhere}
  children:
    serving:
      hosts:
        r1: {address: 10.0.0.1}
        r2: {address: 10.0.0.2}
"""


def inventory_of(tmp_path: Path, text: str, extra: dict | None = None):
    path = tmp_path / "hosts.yml"
    path.write_text(textwrap.dedent(text))
    return load_inventory(path, extra)


def test_localhost_is_the_controller_without_an_inventory_entry(tmp_path: Path) -> None:
    inventory = inventory_of(tmp_path, FLEET, {"router_policy": "cache_aware"})
    fleet = fleet_from_inventory(inventory, inventory.select("serving"))
    assert fleet.router is not None
    assert (fleet.router.host, fleet.router.url) == ("localhost", "http://127.0.0.1:30007")
    local = inventory.host("localhost")
    assert local is not None and local.connection.connection == "local"
    assert local.vars["router_policy"] == "cache_aware", "extra vars reach it too"
    assert local.groups == [], "in no group"
    assert [h.name for h in inventory.select("all")] == ["r1", "r2"]
    assert [h.name for h in inventory.select("*")] == ["r1", "r2"], "globs skip it"
    assert [h.name for h in inventory.select("localhost")] == ["localhost"]
    assert inventory.select("localhost")[0] is local, "one object, however it is found"
    assert "localhost" not in inventory.hosts, "walking the inventory's hosts never meets it"


def test_an_inventory_localhost_is_used_as_written(tmp_path: Path) -> None:
    text = FLEET + "    routers:\n      hosts:\n        localhost: {address: 10.0.0.9}\n"
    inventory = inventory_of(tmp_path, text)
    router = fleet_from_inventory(inventory, []).router
    assert router is not None and router.url == "http://10.0.0.9:30007"
    assert inventory.hosts["localhost"].connection.connection == "ssh"


def test_an_inventory_host_with_a_local_connection_is_the_controller(tmp_path: Path) -> None:
    text = FLEET.replace("router_host: localhost", "router_host: ctl")
    text += "    routers:\n      hosts:\n        ctl: {connection: local}\n"
    router = fleet_from_inventory(inventory_of(tmp_path, text), []).router
    assert router is not None and (router.host, router.url) == ("ctl", "http://127.0.0.1:30007")


def test_an_unknown_router_host_names_the_file_and_line(tmp_path: Path) -> None:
    text = FLEET.replace("router_host: localhost", "router_host: rt9")
    with pytest.raises(InputError, match="router_host 'rt9' is not a host") as raised:
        fleet_from_inventory(inventory_of(tmp_path, text), [])
    assert str(raised.value).startswith(f"{tmp_path / 'hosts.yml'}:3: ")


def test_an_unknown_router_host_in_group_vars_names_that_file(tmp_path: Path) -> None:
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "all.yml").write_text("---\nvllm_port: 8000\nrouter_host: rt9\n")
    inventory = inventory_of(tmp_path, FLEET.replace("router_host: localhost, ", ""))
    with pytest.raises(InputError) as raised:
        fleet_from_inventory(inventory, [])
    assert str(raised.value).startswith(f"{tmp_path / 'group_vars' / 'all.yml'}:3: ")


def test_the_fleet_deploy_runs_the_router_play_on_the_controller(tmp_path: Path) -> None:
    inventory = inventory_of(tmp_path, FLEET)
    calls: list[tuple[str, str, dict]] = []

    def run(playbook: Path, limit: str, extra: dict, settings: dict) -> RunOutcome:
        calls.append((playbook.name, limit, extra))
        return RunOutcome(ExitCode.OK)

    assert FleetDeploy(inventory, "all", run, json_events=True).at_once() == ExitCode.OK
    assert [c[:2] for c in calls] == [("deploy.yml", "r1,r2"), ("router.yml", "localhost")]
    extra = calls[-1][2]
    assert extra["fleet_router_url"] == "http://127.0.0.1:30007"
    assert extra["fleet_workers"] == ["http://10.0.0.1:8000", "http://10.0.0.2:8000"]
    assert extra["fleet_router_argv"][:5] == [
        "/opt/vllm-router/bin/vllm-router",
        "--host",
        "127.0.0.1",
        "--port",
        "30007",
    ]


REMOTE = (
    FLEET.replace("router_host: localhost", "router_host: rt")
    + """\
    routers:
      hosts:
        rt: {address: 10.0.0.9}
"""
)


@pytest.fixture(autouse=True)
def glmops_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """router_vars makes the admin key of a gated router: in a home of the test's own."""
    monkeypatch.setenv("GLMOPS_HOME", str(tmp_path / "home"))


def router_bind(inventory) -> str:
    """Where clients reach the router: the gate's address when it has one, else its own."""
    variables = router_vars(inventory, fleet_from_inventory(inventory, []), [])
    argv = variables["fleet_router_gate_argv"] or variables["fleet_router_argv"]
    return argv[argv.index("--listen" if variables["fleet_router_gate_argv"] else "--host") + 1]


def test_the_router_listens_where_the_controller_reaches_it_not_on_every_interface(
    tmp_path: Path,
) -> None:
    assert router_bind(inventory_of(tmp_path, FLEET)) == "127.0.0.1"
    assert router_bind(inventory_of(tmp_path, REMOTE)) == "10.0.0.9"
    wide = inventory_of(tmp_path, REMOTE, {"router_listen": "0.0.0.0"})
    assert router_bind(wide) == "0.0.0.0", "every interface only when asked"


def test_a_router_others_reach_listens_on_loopback_behind_the_gate(tmp_path: Path) -> None:
    inventory = inventory_of(tmp_path, REMOTE, {"router_internal_port": 31000})
    variables = router_vars(inventory, fleet_from_inventory(inventory, []), [])
    argv = variables["fleet_router_argv"]
    assert argv[argv.index("--host") + 1 :][:3] == ["127.0.0.1", "--port", "31000"]
    assert variables["fleet_router_bind"] == "127.0.0.1:31000"
    assert variables["fleet_router_gate_argv"][2:] == [
        "--listen",
        "10.0.0.9",
        "--port",
        "30007",
        "--upstream-port",
        "31000",
    ]
    key = variables["fleet_router_admin_secret"]
    assert key and key not in " ".join(variables["fleet_router_gate_argv"])
    again = router_vars(inventory, fleet_from_inventory(inventory, []), [])
    assert again["fleet_router_admin_secret"] == key, "one key per router, kept"
    key_file = key_path("http://10.0.0.9:30007")
    assert key_file.read_text().strip() == key and key_file.stat().st_mode & 0o777 == 0o600
    assert key_file.parent.stat().st_mode & 0o777 == 0o700
    controller = inventory_of(tmp_path, FLEET)
    local = router_vars(controller, fleet_from_inventory(controller, []), [])
    assert local["fleet_router_gate_argv"] == [] and "fleet_router_admin_secret" not in local


def test_a_loopback_router_listen_on_a_remote_router_host_is_refused(tmp_path: Path) -> None:
    inventory = inventory_of(tmp_path, REMOTE, {"router_listen": "127.0.0.1"})
    with pytest.raises(InputError, match="router_listen 127.0.0.1 on rt: .* 10.0.0.9") as raised:
        router_bind(inventory)
    assert str(tmp_path / "hosts.yml") in str(raised.value)


def test_the_router_play_reaches_the_controller_only_when_limited_to_it(tmp_path: Path) -> None:
    inventory = inventory_of(tmp_path, FLEET)
    plays = load_playbook(paths.playbooks() / "router.yml")
    assert list_hosts(inventory, plays, "localhost").splitlines()[1:] == ["  localhost"]
    rt = inventory_of(tmp_path, FLEET.replace("router_host: localhost", "router_host: r2"))
    assert list_hosts(rt, plays, "r2").splitlines()[1:] == ["  r2"]


def test_the_router_play_refuses_a_host_that_is_not_the_router_host(
    run_playbook: Runner, tmp_path: Path
) -> None:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        textwrap.dedent(FLEET.replace("{address: 10.0.0.1}", "{connection: local}"))
    )
    playbook = (paths.playbooks() / "router.yml").read_text()
    outcome = run_playbook(playbook, inventory, limit="r1")
    assert outcome.exit_code == ExitCode.HOST_FAILED
    [result] = outcome.results("r1")
    assert (result["task"], result["status"]) == ("the router host only", "failed")
    assert "on router_host (localhost) only" in result["msg"]


def test_a_router_internal_port_that_is_not_a_number_is_refused(tmp_path: Path) -> None:
    inventory = inventory_of(tmp_path, REMOTE, {"router_internal_port": "30001x"})
    with pytest.raises(InputError, match="router_internal_port must be an integer"):
        router_vars(inventory, fleet_from_inventory(inventory, []), [])
