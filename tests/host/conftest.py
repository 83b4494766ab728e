"""Fixtures for the host checks: the inventory's variables, facts and helpers, per host.

Run by `glmops verify` (hosts `glmops://NAME`, over glmops' connections) or directly:
`pytest tests/host --hosts=glmops://gpu1` (inventory from $GLMOPS_INVENTORY) or
`pytest tests/host --hosts=ssh://root@gpu1` (no inventory: glmops' defaults apply).
Not collected by the default `pytest` run (pyproject testpaths): they need real hosts.
"""

from __future__ import annotations

import base64
import json
import shlex
from typing import Any

import pytest

from glmops.context import helper_command, helper_stdin
from glmops.facts import HostFacts, parse_facts
from glmops.serving.flags import setting
from glmops.verify import GlmopsBackend, inventory_host, register_backend

register_backend()


def run_helper(host: Any, name: str, args: dict[str, Any], python: str = "python3") -> dict:
    """A glmops host helper's reply, through the engine's own launcher (nothing left on the host).

    On `glmops://` hosts the arguments travel on stdin, as in a deploy. testinfra's own backends
    cannot feed stdin, so there the same input rides in the command line (base64), where other
    users on the host could read it: use `glmops verify` for hosts whose helpers get secrets.
    """
    if isinstance(host.backend, GlmopsBackend):
        return host.backend.run_helper(name, args, python)
    data = base64.b64encode(helper_stdin(name, args).encode()).decode()
    result = host.run(f"echo {data} | base64 -d | {helper_command(name, python)}")
    assert result.rc == 0, f"helper {name}: {result.stderr[-800:]}"
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def hostvars(host: Any) -> dict[str, Any]:
    """The inventory's variables for this host ({} without an inventory entry)."""
    entry = inventory_host(host.backend.get_hostname())
    return dict(entry.vars) if entry else {}


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
