"""Safer serving defaults: vLLM binds the host's fleet address (never every interface unless
the inventory says so), a server others reach without an API key is a warning in deploy and
status, and a router others reach goes behind the admin-key gate (or, with the gate off, is said
at each deploy)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from glmops.cli.status import status_row
from glmops.engine.inventory import load_inventory
from glmops.engine.playbook import load_playbook
from glmops.fleet.roll import router_vars
from glmops.fleet.topology import fleet_from_inventory
from glmops.gpu.serving import serve_flags
from glmops.gpu.serving.flags import default_bind_address
from tests.support.engine import Runner
from tests.support.serving_inputs import BASE, facts

PLAY = """
- hosts: all
  gather_facts: false
  tasks:
    - name: flags
      vllm_serve_config:
        model: /m/model
        require_files: false
        vllm_venv: /opt/v
        glm5_hf_config_dir: /m/hf
        vllm_device: cpu
        {extra}
      register: serve
    - name: keep
      copy:
        dest: "{{ root }}/serve.json"
        content: "{{ {'argv': serve.argv, 'warning': serve.exposure_warning} | to_json }}"
        backup: false
"""


def host_flag(argv: list[str]) -> str:
    return argv[argv.index("--host") + 1]


def test_vllm_binds_loopback_on_the_controller_and_no_warning(
    run_playbook: Runner, local_inventory: Path, hostile
) -> None:
    outcome = run_playbook(PLAY.replace("{extra}", ""), local_inventory)
    assert outcome.exit_code == 0, outcome.stderr
    kept = json.loads((local_inventory.parent / "root" / "serve.json").read_text())
    hostile.check(
        "vLLM default bind on a local host",
        host_flag(kept["argv"]) == "127.0.0.1" and kept["warning"] is None,
        f"--host {host_flag(kept['argv'])}, warning {kept['warning']!r}",
    )


def test_an_exposed_server_without_a_key_is_warned_at_deploy(
    run_playbook: Runner, local_inventory: Path, hostile
) -> None:
    extra = "vllm_host: 0.0.0.0"
    outcome = run_playbook(PLAY.replace("{extra}", extra), local_inventory)
    kept = json.loads((local_inventory.parent / "root" / "serve.json").read_text())
    keyed = run_playbook(
        PLAY.replace("{extra}", f"{extra}\n        vllm_api_key: k-1"), local_inventory
    )
    with_key = json.loads((local_inventory.parent / "root" / "serve.json").read_text())
    deploy = load_playbook(Path(__file__).parents[2] / "playbooks" / "deploy.yml")
    says = [
        t
        for t in deploy[0].tasks
        if t.module == "debug" and t.args.get("msg") == "{{ serve.exposure_warning }}"
    ]
    hostile.check(
        "vLLM on 0.0.0.0 without an API key",
        outcome.exit_code == keyed.exit_code == 0
        and "without an API key" in (kept["warning"] or "")
        and with_key["warning"] is None
        and len(says) == 1
        and says[0].when,
        f"warning {kept['warning']!r}; with a key {with_key['warning']!r}; deploy shows it: {says}",
    )


FLEET = """
all:
  children:
    serving:
      hosts:
        g1: {address: 10.0.0.1}
        g2: {address: gpu-2.internal}
"""


def test_vllm_defaults_to_the_address_the_fleet_reaches_it_at(tmp_path: Path, hostile) -> None:
    path = tmp_path / "hosts.yml"
    path.write_text(textwrap.dedent(FLEET))
    inventory = load_inventory(path)
    for name, address in (("g1", "10.0.0.1"), ("g2", "gpu-2.internal")):
        host = inventory.host(name)
        assert host is not None
        bind = default_bind_address(host.vars.get("fleet_replica"), name, host.connection.address)
        argv = serve_flags(facts(8, "12.0"), {**BASE, "vllm_host": bind}).argv
        hostile.check(
            f"vLLM default bind on fleet host {name}",
            host_flag(argv) == address,
            f"--host {host_flag(argv)}, the fleet reaches it at {address}",
        )
    argv = serve_flags(facts(8, "12.0"), BASE).argv
    hostile.check("vLLM bind with nothing said", host_flag(argv) == "127.0.0.1", str(argv))


def test_status_warns_about_a_server_others_reach_without_a_key(hostile) -> None:
    variables = {**BASE, "gguf_shards": "/m", "vllm_profile": "v0_16", "vllm_host": "10.0.0.1"}
    raw = {"gpus": [{"index": 0, "compute_cap": "12.0"}], "venv": {"vllm_version": "0.16.0"}}
    bare = status_row("g1", raw, {}, variables)
    keyed = status_row("g1", raw, {}, {**variables, "vllm_api_key": "k-1"})
    loop = status_row("g1", raw, {}, {**variables, "vllm_host": "127.0.0.1"})
    hostile.check(
        "status of vLLM on 10.0.0.1 without an API key",
        any("without an API key" in w for w in bare["warnings"])
        and keyed["warnings"] == loop["warnings"] == [],
        f"{bare['warnings']} / {keyed['warnings']} / {loop['warnings']}",
    )


ROUTED = """
all:
  vars: {router_host: rt, router_wheelhouse: /nowhere}
  children:
    serving:
      hosts:
        r1: {address: 10.0.0.1}
    routers:
      hosts:
        rt: {address: 10.0.0.9}
"""


def test_a_router_others_reach_is_gated_or_said_at_each_deploy(tmp_path: Path, hostile) -> None:
    path = tmp_path / "hosts.yml"
    said, gated = {}, {}
    for name, text in (
        ("remote", ROUTED),
        ("ungated", ROUTED.replace("router_wheelhouse: /nowhere", "router_gate: false")),
        ("local", ROUTED.replace("router_host: rt", "router_host: localhost")),
    ):
        path.write_text(textwrap.dedent(text))
        inventory = load_inventory(path)
        variables = router_vars(inventory, fleet_from_inventory(inventory, []), [])
        said[name] = variables["fleet_router_warning"]
        gated[name] = bool(variables["fleet_router_gate_argv"])
    router = load_playbook(Path(__file__).parents[2] / "playbooks" / "router.yml")
    says = [t for t in router[0].tasks if t.args.get("msg") == "{{ fleet_router_warning }}"]
    hostile.check(
        "router admin API on 10.0.0.9",
        gated == {"remote": True, "ungated": False, "local": False}
        and said["remote"] == said["local"] == ""
        and "10.0.0.9" in said["ungated"]
        and len(says) == 1,
        f"gated {gated}; said {said}; router.yml shows it: {bool(says)}",
    )
