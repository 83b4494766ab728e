"""Serving inputs shared by the serving and status tests: facts of N GPUs and the variables."""

from __future__ import annotations

from typing import Any

from glmops.gpu.facts import HostFacts, parse_facts

BASE = {
    "vllm_venv": "/opt/venv",
    "vllm_model": "/models/GLM-5-UD-Q4_K_XL.gguf",
    "glm5_hf_config_dir": "/models/glm-5-hf",
}


def facts(count: int, cc: str, vllm: str | None = "0.16.0", manifest: Any = None) -> HostFacts:
    gpus = [{"index": i, "name": "GPU", "compute_cap": cc} for i in range(count)]
    venv = {"path": "/opt/venv", "vllm_version": vllm} if vllm else None
    return parse_facts({"gpus": gpus, "venv": venv, "patch_manifest": manifest})
