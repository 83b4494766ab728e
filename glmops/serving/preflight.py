"""Reading the patch-set preflight's reply (hosthelpers/vllm_preflight.py).

That helper asks the host's vLLM which attention backend it would pick for GLM-5 on the host's
GPU. Its reply (`selected`, `candidates: [{backend, valid, reasons}]`, `error`) belongs to the
patch-set work and may still move, so other likely spellings are read too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass
class PreflightResult:
    backend: str | None
    rejected: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


def parse_preflight(reply: Mapping[str, Any]) -> PreflightResult:
    """The backend the preflight says vLLM would pick, or why none."""
    backend = None
    for key in ("selected", "backend", "selected_backend", "would_select"):
        value = reply.get(key)
        if isinstance(value, str) and value:
            backend = value.split(".")[-1].upper()
            break
        if isinstance(value, Mapping) and value.get("name"):
            backend = str(value["name"]).split(".")[-1].upper()
            break
    rejected: dict[str, Any] = {
        str(c.get("backend")): c.get("reasons")
        for c in reply.get("candidates") or []
        if isinstance(c, Mapping) and not c.get("valid")
    }
    for key in ("rejected", "invalid", "reasons", "invalid_reasons"):
        value = reply.get(key)
        if isinstance(value, Mapping):
            rejected = dict(value)
            break
    error = None
    if reply.get("failed") or backend is None:
        error = str(reply.get("error") or reply.get("msg") or "no backend selected")
    return PreflightResult(backend, rejected, error)
