"""Gather a host's facts in one round trip with the host-side probe (glmops/hosthelpers)."""

from __future__ import annotations

from typing import Any

from glmops.engine.context import TaskContext
from glmops.pins import DEFAULT_MODEL_DIR


def probe_args(variables: dict[str, Any]) -> dict[str, Any]:
    """The probe's arguments from inventory variables: the venv and model folder to look at."""
    return {
        "venv": variables.get("vllm_venv"),
        "model_dir": variables.get("model_dir", DEFAULT_MODEL_DIR),
    }


def gather(ctx: TaskContext, variables: dict[str, Any]) -> dict[str, Any]:
    """The facts probe's reply (its FactsReply) less `changed`: the host's `facts` variable,
    which glmops.gpu.facts.parse_facts reads through that schema."""
    reply = ctx.run_helper("facts_probe", {**probe_args(variables), "check": True}, timeout=120)
    reply.pop("changed", None)
    return reply
