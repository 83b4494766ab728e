#!/usr/bin/env python3
"""Ask the installed vLLM's own selector which attention backend it uses for a served model.

For hosts where vLLM logs no selection line: its CPU platform (vllm/platforms/cpu.py,
get_attn_backend_cls) returns CPU_ATTN for standard attention without logging anything, so the
journal check has nothing to read there. Run with the venv's python (seconds, no model load):
    echo '{"config": "/srv/models/tiny/hf", "dtype": "float32"}' | python vllm_backend_probe.py
Args: config (folder with config.json: head size, MLA or not), dtype, kv_cache_dtype ("auto").
Prints one JSON object, a BackendReply.
"""

from __future__ import annotations

import inspect
import json
import os
import time

from _envelope import Reply, TypedDict, main


class AttentionShape(TypedDict):
    head_size: int
    num_heads: int
    use_mla: bool
    use_sparse: bool  # the model has an indexer (DeepSeek sparse attention)


class AttentionQuery(AttentionShape):
    """What the selector was asked: the model's attention shape and the dtypes."""

    dtype: str  # the torch dtype, e.g. "torch.bfloat16"
    kv_cache_dtype: str


class BackendReply(Reply, total=False):
    """All keys on success; a failed reply (any exception) carries only the envelope's."""

    backend: str  # the selected backend's name, upper case (e.g. "FLASH_ATTN", "CPU_ATTN")
    backend_cls: str  # module.qualname of the backend class
    platform: str  # vLLM's current platform class (e.g. "CudaPlatform")
    query: AttentionQuery
    elapsed_s: float


def attention_shape(config: dict) -> AttentionShape:
    """Head size, head count and MLA/sparse flags from an HF config.json, as vLLM derives them."""
    text = config.get("text_config") or config
    heads = int(text.get("num_attention_heads") or 1)
    mla = text.get("kv_lora_rank") is not None
    if mla:
        head_size = int(text["kv_lora_rank"]) + int(text.get("qk_rope_head_dim") or 0)
    else:
        head_size = int(text.get("head_dim") or int(text["hidden_size"]) // heads)
    return {
        "head_size": head_size,
        "num_heads": heads,
        "use_mla": mla,
        "use_sparse": text.get("index_topk") is not None,
    }


def probe(args: dict) -> BackendReply:
    started = time.monotonic()
    import torch
    from vllm.platforms import current_platform
    from vllm.v1.attention import selector

    with open(os.path.join(args["config"], "config.json")) as f:
        shape = attention_shape(json.load(f))
    dtype = getattr(torch, str(args.get("dtype") or "bfloat16"))
    kv = args.get("kv_cache_dtype") or "auto"
    query: AttentionQuery = {**shape, "dtype": str(dtype), "kv_cache_dtype": kv}
    wanted = {
        "head_size": shape["head_size"],
        "dtype": dtype,
        "kv_cache_dtype": kv,
        "use_mla": shape["use_mla"],
        "use_sparse": shape["use_sparse"],
        "num_heads": shape["num_heads"],
    }
    accepted = inspect.signature(selector.get_attn_backend).parameters
    call = {k: v for k, v in wanted.items() if k in accepted}
    try:  # the selector reads the current engine config (block size, parallelism): a default one
        from vllm.config import VllmConfig, set_current_vllm_config

        with set_current_vllm_config(VllmConfig()):
            backend_cls = selector.get_attn_backend(**call)
    except ImportError:  # older vLLM: no config context needed
        backend_cls = selector.get_attn_backend(**call)
    name = backend_cls.get_name() if hasattr(backend_cls, "get_name") else backend_cls.__name__
    platform = type(current_platform).__name__
    return {
        "failed": False,
        "changed": False,
        "backend": str(name).split(".")[-1].upper(),
        "backend_cls": f"{backend_cls.__module__}.{backend_cls.__qualname__}",
        "platform": platform,
        "query": query,
        "elapsed_s": round(time.monotonic() - started, 2),
        "msg": f"{platform} selects {name} for {query}",
    }


if __name__ == "__main__":
    main(probe, expected=(Exception,))  # the reply says what failed, never a traceback
