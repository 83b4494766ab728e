"""Reading the patch-set preflight's reply (hosthelpers/vllm_preflight.py).

That helper asks the host's vLLM which attention backend it would pick for GLM-5 on the host's
GPU. Its reply is one schema, `PreflightReply` in the helper, which both sides read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from glmops.hosthelpers.vllm_preflight import PreflightReply


@dataclass
class PreflightResult:
    backend: str | None
    rejected: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


def parse_preflight(reply: PreflightReply | Mapping[str, Any]) -> PreflightResult:
    """The backend the preflight says vLLM would pick, or why none."""
    selected = reply.get("selected")
    backend = str(selected).split(".")[-1].upper() if selected else None
    rejected: dict[str, Any] = {
        c["backend"]: c["reasons"] for c in reply.get("candidates") or [] if not c["valid"]
    }
    error = None
    if reply.get("failed") or backend is None:
        error = str(reply.get("error") or reply.get("msg") or "no backend selected")
    return PreflightResult(backend, rejected, error)
