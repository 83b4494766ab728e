"""Fixtures for the host checks: the inventory's variables, facts and helpers, per host.

Run by `glmops verify` (hosts `glmops://NAME`, over glmops' connections) or directly:
`pytest tests/host --hosts=glmops://gpu1` (inventory from $GLMOPS_INVENTORY) or
`pytest tests/host --hosts=ssh://root@gpu1` (no inventory: glmops' defaults apply).
Not collected by the default `pytest` run (pyproject testpaths): they need real hosts.
"""

from __future__ import annotations

import shlex
from typing import Any

import pytest

from glmops.cli.verify import HostVars, inventory_host, register_backend, run_helper
from glmops.fleet.topology import Member, Replica, replica_from_data
from glmops.gpu.facts import HostFacts, parse_facts
from glmops.gpu.serving.flags import setting

register_backend()


@pytest.fixture(scope="module")
def hostvars(host: Any) -> HostVars:
    """The inventory's variables for this host ({} without an inventory entry); its repr, in a
    failed check's traceback, hides secret values."""
    entry = inventory_host(host.backend.get_hostname())
    return HostVars(entry.vars if entry else {})


@pytest.fixture(scope="module")
def facts(host: Any, hostvars: dict[str, Any]) -> HostFacts:
    raw = run_helper(
        host,
        "facts_probe",
        {"venv": hostvars.get("vllm_venv"), "model_dir": hostvars.get("model_dir"), "check": True},
    )
    return parse_facts(raw)


@pytest.fixture(scope="module")
def unit(hostvars: dict[str, Any]) -> str:
    return str(setting(hostvars, "vllm_unit"))


@pytest.fixture(scope="module")
def exec_start(host: Any, unit: str) -> list[str]:
    """The words of the installed unit's ExecStart (empty when the unit is missing)."""
    text = host.file(f"/etc/systemd/system/{unit}.service")
    if not text.exists:
        return []
    line = next((x for x in text.content_string.splitlines() if x.startswith("ExecStart=")), "")
    return shlex.split(line.removeprefix("ExecStart="))


@pytest.fixture(scope="module")
def gang(host: Any, hostvars: dict[str, Any]) -> tuple[Replica, Member] | None:
    """This host's replica and its place in it, when the replica spans hosts (a gang)."""
    data = hostvars.get("fleet_replica") or {}
    if len(data.get("members") or ()) < 2:
        return None
    replica = replica_from_data(data)
    return replica, replica.member(host.backend.get_hostname())
