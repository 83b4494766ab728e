"""vllm-router on the controller itself: `router_host: localhost`, no inventory entry for it.

The router host needs systemd, and this machine has none as PID 1, so the controller runs inside
tb247, a testbed host: this checkout and a venv of glmops' dependencies (from the controller's
wheelhouse, `python -m glmops.gpu.wheelcache glmops`; the hosts have no internet) go there, and
glmops runs playbooks/router.yml on `localhost` over a local connection, with the variables
`glmops deploy` gives it (glmops.fleet.roll.router_vars). The replica, tb248, serves the TEST
STAND-IN for vLLM (tests/support/vllm_standin.py, NOT vLLM: /health, /v1/models, a one-token
completion), which is all vllm-router asks of a worker.
"""

from __future__ import annotations

import io
import json
import shlex
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from glmops.fleet.roll import router_vars
from glmops.fleet.topology import fleet_from_inventory
from glmops.gpu import wheelcache
from glmops.run import load_inventory
from glmops.testbed import Testbed
from glmops.testbed.inventory import host_address
from tests.support.testbed import booted, host_read

pytestmark = pytest.mark.testbed

FIRST_INDEX = 247  # tb247 (the controller and router host), tb248 (a replica)
CTL, REPLICA = f"tb{FIRST_INDEX}", f"tb{FIRST_INDEX + 1}"
ROOT = Path(__file__).resolve().parents[2]
SRC, VENV, WHEELS, WORK = "/opt/glmops", "/opt/glmops-venv", "/opt/wheels", "/opt/fleet"
REPLICA_URL = f"http://{host_address(FIRST_INDEX + 1)}:8000"
MODEL = "tiny"
UNIT = "/etc/systemd/system/vllm-router.service"


def push(bed: Testbed, host: str, folder: Path, names: list[str], dest: str) -> None:
    """Copy files of `folder` to `dest` on the host (a tar through nsenter: no SSH, no glmops)."""
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        for name in names:
            tar.add(folder / name, name, filter=lambda t: None if "__pycache__" in t.name else t)
    script = f"mkdir -p {dest} && tar -x -C {dest}"
    done = bed.exec(host, ["sh", "-c", script], input=data.getvalue())
    assert done.returncode == 0, done.stderr


def sh(bed: Testbed, host: str, script: str, timeout: float = 120) -> str:
    done = bed.exec(host, ["sh", "-c", script], timeout=timeout)
    assert done.returncode == 0, f"{host}: {script}: {done.stdout}{done.stderr}"
    return done.stdout.strip()


def install_glmops(bed: Testbed) -> None:
    """The checkout and a venv of glmops' dependencies on the controller host, offline."""
    deps = wheelcache.glmops_wheelhouse()
    push(bed, CTL, ROOT, ["glmops", "playbooks", "templates", "pyproject.toml"], SRC)
    push(bed, CTL, deps.parent, [deps.name], WHEELS)
    router = wheelcache.router_wheelhouse()
    push(bed, CTL, router.parent, [router.name], WHEELS)
    sh(
        bed,
        CTL,
        f"mv {WHEELS}/{router.name} {WHEELS}/router && mv {WHEELS}/{deps.name} {WHEELS}/glmops",
    )
    requirements = " ".join(shlex.quote(r) for r in wheelcache.glmops_requirements())
    uv = "/opt/uv/uv-*.data/scripts/uv"
    sh(
        bed,
        CTL,
        f"python3 -m zipfile -e {WHEELS}/glmops/uv-*.whl /opt/uv && chmod +x {uv} && "
        f"UV_PYTHON_DOWNLOADS=never {uv} venv -q --python /usr/bin/python3 {VENV} && "
        f"{uv} pip install -q --offline --no-index --find-links {WHEELS}/glmops "
        f"--python {VENV}/bin/python {requirements}",
    )


def serve_stand_in(bed: Testbed) -> None:
    """The stand-in vLLM on the replica, as a transient systemd unit."""
    push(bed, REPLICA, ROOT / "tests" / "support", ["vllm_standin.py"], "/opt/standin")
    sh(
        bed,
        REPLICA,
        "printf 'GGUF' > /opt/standin/model.gguf && systemd-run --unit vllm-standin "
        "python3 /opt/standin/vllm_standin.py serve /opt/standin/model.gguf "
        f"--host 0.0.0.0 --port 8000 --served-model-name {MODEL}",
    )


#: The two ways to name the controller as the router host: Ansible's implicit localhost (no
#: inventory entry), and an inventory host with a local connection.
ROUTER_HOSTS = {
    "implicit": ("localhost", {}),
    "explicit": ("ctl", {"ctl": {"connection": "local"}}),
}


def write_fleet(bed: Testbed, local: Path, name: str) -> None:
    """On the controller host: `name`.yml, the inventory (one replica, the router on the
    controller), and `name`.json, the router play's variables as `glmops deploy` computes them."""
    router_host, routers = ROUTER_HOSTS[name]
    replicas = {REPLICA: {"address": host_address(FIRST_INDEX + 1)}}
    doc = {
        "all": {
            "vars": {
                "router_host": router_host,
                "router_wheelhouse": f"{WHEELS}/router",
                "python_version": "3.11",
                "uv_version": wheelcache.UV,
            },
            "children": {"replicas": {"hosts": replicas}, "routers": {"hosts": routers}},
        }
    }
    (local / f"{name}.yml").write_text(yaml.safe_dump(doc))
    inventory = load_inventory(local / f"{name}.yml")
    fleet = fleet_from_inventory(inventory, inventory.select("replicas"))
    variables = router_vars(inventory, fleet, fleet.worker_urls)
    (local / f"{name}.json").write_text(json.dumps(variables))
    push(bed, CTL, local, [f"{name}.yml", f"{name}.json"], WORK)


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    # internet: the testbed's forwarding, so the router on tb247 reaches the replica on tb248
    # (everything the hosts install comes from the controller's wheelhouses)
    with booted(tmp_path_factory.mktemp("router-local-bed"), FIRST_INDEX, 2, internet=True) as b:
        install_glmops(b)
        serve_stand_in(b)
        local = tmp_path_factory.mktemp("router-local")
        for name in ROUTER_HOSTS:
            write_fleet(b, local, name)
        yield b


def glmops_router(
    bed: Testbed, name: str = "implicit", *args: str, variables: str | None = None
) -> tuple[int, list[dict[str, Any]], str]:
    """`glmops run playbooks/router.yml` on the controller host, limited to the router host."""
    command = (
        f"cd {SRC} && PYTHONPATH={SRC} GLMOPS_RUN_DIR={WORK}/runs {VENV}/bin/python -m glmops.cli "
        f"run playbooks/router.yml -i {WORK}/{name}.yml -l {ROUTER_HOSTS[name][0]} "
        f"-e @{WORK}/{variables or name + '.json'} --json {' '.join(args)}"
    )
    done = bed.exec(CTL, ["sh", "-c", command], timeout=600)
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return done.returncode, events, done.stderr[-4000:]


def recap(events: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    return next(e for e in events if e["event"] == "recap")["hosts"]


def completion_through_router(bed: Testbed) -> dict[str, Any]:
    """A completion sent to the router on the controller host, from there."""
    body = json.dumps({"model": MODEL, "prompt": "hi", "max_tokens": 1})
    script = (
        "import sys, urllib.request as u; r = u.Request('http://127.0.0.1:30000/v1/completions', "
        f"data={body!r}.encode(), headers={{'Content-Type': 'application/json'}}); "
        "sys.stdout.write(u.urlopen(r, timeout=30).read().decode())"
    )
    return json.loads(sh(bed, CTL, f"python3 -c {shlex.quote(script)}"))


def router_workers(bed: Testbed) -> list[str]:
    script = (
        "import urllib.request as u; "
        "print(u.urlopen('http://127.0.0.1:30000/list_workers').read().decode())"
    )
    return json.loads(sh(bed, CTL, f"python3 -c {shlex.quote(script)}"))["urls"]


def router_unit(bed: Testbed) -> dict[str, str]:
    out = sh(bed, CTL, "systemctl show vllm-router -p ActiveState,MainPID,NRestarts,ControlGroup")
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def test_the_router_runs_on_the_controller_under_systemd_and_reaches_the_replica(
    bed: Testbed,
) -> None:
    rc, events, stderr = glmops_router(bed)
    assert rc == 0, [e for e in events if e.get("status") == "failed"] or stderr
    assert set(recap(events)) == {"localhost"}, "the play ran on the controller only"
    unit = router_unit(bed)
    assert unit["ActiveState"] == "active" and unit["MainPID"] not in ("", "0"), unit
    assert unit["ControlGroup"].endswith("/vllm-router.service")
    exec_start = sh(bed, CTL, f"grep ^ExecStart= {UNIT}")
    assert exec_start.startswith("ExecStart=/opt/vllm-router/bin/vllm-router ")
    assert exec_start.endswith(f"--worker-urls {REPLICA_URL}"), exec_start
    assert router_workers(bed) == [REPLICA_URL]
    assert completion_through_router(bed)["choices"][0]["text"] == " Hello"
    deadline = time.monotonic() + 10
    journal = ""
    while "POST /v1/completions" not in journal and time.monotonic() < deadline:
        journal = sh(bed, REPLICA, "journalctl -u vllm-standin --no-pager -o cat")
        time.sleep(0.5)
    served = [line for line in journal.splitlines() if "POST /v1/completions" in line]
    assert served and host_address(FIRST_INDEX) in served[-1], "the replica did not serve it"


def test_a_second_run_changes_nothing(bed: Testbed) -> None:
    before = router_unit(bed)
    rc, events, stderr = glmops_router(bed)
    assert rc == 0, stderr
    assert recap(events)["localhost"]["changed"] == 0, [
        e for e in events if e.get("status") == "changed"
    ]
    assert router_unit(bed)["MainPID"] == before["MainPID"]


def test_check_mode_changes_nothing(bed: Testbed) -> None:
    """A second replica in check mode: the unit and the router's list would change; neither does."""
    before = (router_unit(bed), host_read(bed, CTL, UNIT))
    more = json.loads(sh(bed, CTL, f"cat {WORK}/implicit.json"))
    extra = "http://" + host_address(FIRST_INDEX + 1) + ":8001"
    more["fleet_workers"].append(extra)
    more["fleet_router_argv"].append(extra)
    sh(bed, CTL, f"echo {shlex.quote(json.dumps(more))} > {WORK}/more.json")
    rc, events, stderr = glmops_router(bed, "implicit", "--check", variables="more.json")
    assert rc == 3, stderr
    changed = {e["task"] for e in events if e.get("status") == "changed"}
    assert changed == {"vllm-router unit", "router workers as the inventory says"}, changed
    assert (router_unit(bed), host_read(bed, CTL, UNIT)) == before
    assert router_workers(bed) == [REPLICA_URL]


def test_an_inventory_host_with_a_local_connection_is_the_same_controller(bed: Testbed) -> None:
    before = router_unit(bed)
    rc, events, stderr = glmops_router(bed, "explicit")
    assert rc == 0, stderr
    hosts = recap(events)
    assert set(hosts) == {"ctl"} and hosts["ctl"]["changed"] == 0, hosts
    assert router_unit(bed)["MainPID"] == before["MainPID"]
    assert router_workers(bed) == [REPLICA_URL]
