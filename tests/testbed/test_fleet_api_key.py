"""A fleet whose replicas require an API key (`vllm_api_key`), behind a real vllm-router.

One replica (tb245, vLLM's CPU build, tiny model) and the router (tb246), brought up with the
CLI. vllm-router 0.1.17 passes a client's `Authorization` header on to the replica unchanged
and has no client key of its own, so the replica decides: a completion through the router with
the key is served, without it or with another key refused. The key is written only to the
replica's 0600 environment file: no process's command line, unit file, `systemctl show` or
glmops run log on either host holds it. The router answers on its inventory address only,
through glmops' gate: its worker admin API needs the controller's admin key (kept like the API
key: only in the gate's 0600 environment file on the router host).
"""

from __future__ import annotations

import json
import secrets
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from glmops.fleet.router import RouterClient, RouterError
from glmops.fleet.router_key import read_key
from tests.support.fleet_bed import FleetBed
from tests.support.testbed import booted

pytestmark = pytest.mark.testbed

FIRST_INDEX = 245  # tb245 serves, tb246 runs the router
MODEL = "tiny-llama"
KEY = "fleet-key-" + secrets.token_hex(12)
ROUTER_PORT_HEX = f"{30000:04X}"
INTERNAL_PORT_HEX = f"{30001:04X}"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, cpu_wheelhouse: Path) -> Iterator[FleetBed]:
    # internet: the testbed's forwarding, so the router host reaches the replica
    with booted(tmp_path_factory.mktemp("key-testbed"), FIRST_INDEX, 2, internet=True) as bed:
        f = FleetBed(
            bed, tmp_path_factory.mktemp("key-fleet"), cpu_wheelhouse, 1, {"vllm_api_key": KEY}
        )
        f.up()
        yield f


def complete(router_url: str, key: str | None) -> tuple[int, dict]:
    body = json.dumps({"model": MODEL, "prompt": "Hi", "max_tokens": 2, "temperature": 0})
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    request = urllib.request.Request(
        f"{router_url}/v1/completions", data=body.encode(), headers=headers
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, {"error": error.read().decode("utf-8", "replace")[:300]}


def test_a_completion_through_the_router_needs_the_key(fleet: FleetBed) -> None:
    status, reply = complete(fleet.router_url, KEY)
    assert status == 200 and reply["choices"], reply
    assert complete(fleet.router_url, None)[0] == 401
    assert complete(fleet.router_url, "not-" + KEY)[0] == 401


def test_the_key_is_in_no_command_line_unit_or_log(fleet: FleetBed) -> None:
    replica, router = fleet.replicas[0], fleet.router_host
    looks = {
        replica: [
            ["ps", "-eo", "args"],
            ["systemctl", "cat", "vllm-glm5"],
            ["systemctl", "show", "vllm-glm5"],
        ],
        router: [
            ["ps", "-eo", "args"],
            ["systemctl", "cat", "vllm-router"],
            ["systemctl", "show", "vllm-router"],
            ["systemctl", "cat", "vllm-router-gate"],
            ["systemctl", "show", "vllm-router-gate"],
        ],
    }
    admin_key = read_key(fleet.router_url)
    assert admin_key, "the deploy made no admin key for the router"
    for host, commands in looks.items():
        for argv in commands:
            out = fleet.bed.exec(host, argv).stdout
            assert out.strip(), f"{host}: {argv} printed nothing"
            assert KEY not in out, f"{host}: the key is in `{' '.join(argv)}`"
            assert admin_key not in out, f"{host}: the admin key is in `{' '.join(argv)}`"
    gate_env = fleet.bed.exec(
        router, ["systemctl", "show", "vllm-router-gate", "-p", "EnvironmentFiles", "--value"]
    ).stdout.split()[0]
    assert fleet.bed.exec(router, ["stat", "-c", "%a %U", gate_env]).stdout.split() == [
        "600",
        "root",
    ]
    assert admin_key in fleet.bed.exec(router, ["cat", gate_env]).stdout
    show = ["systemctl", "show", "vllm-glm5", "--value", "-p"]
    exec_start = fleet.bed.exec(replica, [*show, "ExecStart"]).stdout
    pid = fleet.bed.exec(replica, [*show, "MainPID"]).stdout.strip()
    assert "--served-model-name" in exec_start, exec_start  # vLLM's command line
    cmdline = fleet.bed.exec(replica, ["cat", f"/proc/{pid}/cmdline"]).stdout
    assert cmdline and KEY not in cmdline
    env_file = fleet.bed.exec(
        replica, ["systemctl", "show", "vllm-glm5", "-p", "EnvironmentFiles", "--value"]
    ).stdout.split()[0]
    mode = fleet.bed.exec(replica, ["stat", "-c", "%a %U", env_file]).stdout.split()
    assert mode == ["600", "root"], (env_file, mode)
    assert KEY in fleet.bed.exec(replica, ["cat", env_file]).stdout, "the key's one home"
    logs = [p for p in (fleet.work / "runs").rglob("*") if p.is_file()]
    assert logs and not [p for p in logs if KEY in p.read_text(errors="replace")]
    assert not [p for p in logs if admin_key in p.read_text(errors="replace")]


def test_the_router_listens_on_its_inventory_address_only(fleet: FleetBed) -> None:
    """/proc/net/tcp: the listening socket on port 30000 is bound to the router host's
    address (the inventory's), not 0.0.0.0; the controller reaches it there."""
    tcp = fleet.bed.exec(fleet.router_host, ["cat", "/proc/net/tcp"]).stdout.splitlines()[1:]
    bound = [
        line.split()[1].split(":")[0]
        for line in tcp
        if line.split()[1].endswith(":" + ROUTER_PORT_HEX) and line.split()[3] == "0A"
    ]
    address = fleet.router_url.split("//")[1].rsplit(":", 1)[0]
    little_endian = "".join(f"{int(part):02X}" for part in reversed(address.split(".")))
    assert bound == [little_endian], (bound, address)
    internal = [
        line.split()[1].split(":")[0]
        for line in tcp
        if line.split()[1].endswith(":" + INTERNAL_PORT_HEX) and line.split()[3] == "0A"
    ]
    assert internal == ["0100007F"], "vllm-router itself listens on 127.0.0.1 only"
    assert fleet.router_workers() == [fleet.urls[fleet.replicas[0]]]


def test_the_routers_admin_api_needs_the_admin_key(fleet: FleetBed) -> None:
    """From the controller: /add_worker and /list_workers without the admin key are refused
    (the list unchanged), with it they work; a client reaches /v1/models without it."""
    replica = fleet.urls[fleet.replicas[0]]
    for path in ("/add_worker?url=http://203.0.113.7:8000", "/list_workers"):
        request = urllib.request.Request(fleet.router_url + path, method="POST")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=30)
        assert refused.value.code == 403, path
    with pytest.raises(RouterError, match="HTTP 403"):
        RouterClient(fleet.router_url, admin_key="not-the-key").workers()
    assert RouterClient(fleet.router_url).workers() == [replica]
    models = urllib.request.Request(
        fleet.router_url + "/v1/models", headers={"Authorization": f"Bearer {KEY}"}
    )
    with urllib.request.urlopen(models, timeout=60) as response:
        assert [m["id"] for m in json.load(response)["data"]] == [MODEL]
