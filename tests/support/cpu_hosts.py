"""Testbed hosts that serve vLLM's CPU build with glmops' tiny model: the CLI environment the
testbed tests drive `glmops` with (an inventory of the booted hosts plus inventory/cpu's
variables, the tiny model, a run directory of their own)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from glmops.testbed import Testbed

ROOT = Path(__file__).resolve().parents[2]
CPU_VARS = yaml.safe_load((ROOT / "inventory" / "cpu" / "group_vars.yml").read_text())


def cpu_env(
    bed: Testbed,
    wheelhouse: Path,
    work: Path,
    *,
    group_vars: Mapping[str, Any] | None = None,
    host_vars: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, str]:
    """The CLI's environment: `work/hosts.yml` ($GLMOPS_INVENTORY), the bed's hosts with
    inventory/cpu's variables, the wheelhouse, `group_vars` over them and `host_vars[host]` on
    each named host; the tiny model built in `work/tiny` ($TINY); runs in `work/runs`."""
    from glmops.testbed import tinymodel

    doc = yaml.safe_load(bed.inventory_path.read_text())
    doc["all"].setdefault("vars", {}).update(
        CPU_VARS, vllm_wheelhouse=str(wheelhouse), **(group_vars or {})
    )
    hosts = doc["all"]["children"]["testbed"]["hosts"]
    for name, values in (host_vars or {}).items():
        hosts[name].update(values)
    inventory = work / "hosts.yml"
    inventory.write_text(yaml.safe_dump(doc))
    tinymodel.build(work / "tiny")
    return {
        **os.environ,
        "GLMOPS_INVENTORY": str(inventory),
        "GLMOPS_RUN_DIR": str(work / "runs"),
        "TINY": str(work / "tiny"),
    }
