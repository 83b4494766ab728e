#!/usr/bin/env python3
"""Ask the installed vLLM's own selection code which attention backend it picks for GLM-5.

Run with the venv's python (no model load, seconds):
    echo '{"capability": "12.0", "dtype": "float16"}' | python vllm_preflight.py
Args (on stdin): capability ("X.Y"; default: this host's GPU 0), dtype (float16|bfloat16),
head_size (576), use_mla (true), use_sparse (true), kv_cache_dtype ("auto"),
num_heads (heads per GPU, 8 = GLM-5 at TP8), expect (backend name: failed if another wins),
queries (a list of such arg dicts answered in one process: {"results": [...]}).
without_gpu (stub vLLM's compiled kernel modules so its selection code can answer on a host
without a usable GPU: automatic when a capability is given and CUDA is unavailable).
Prints one PreflightReply (below), the schema the controller reads too.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import re
import sys
import time
import types
from collections.abc import Sequence
from pathlib import Path

from _envelope import Reply, TypedDict, main


class Candidate(TypedDict):
    """One backend on vLLM's priority list for the asked capability."""

    backend: str  # AttentionBackendEnum name
    priority: int
    valid: bool
    reasons: list  # why vLLM rejected it (empty when valid)


class PreflightReply(Reply, total=False):
    """The reply of one preflight (`queries` answers with {"results": [PreflightReply, ...]})."""

    selected: str | None  # the enum name vLLM picks (its class path if no candidate matches)
    selected_path: str | None
    error: str | None  # vLLM's own "No valid attention backend found ..."
    vllm_version: str
    capability: str  # "X.Y"
    capability_source: str
    config: str
    candidates: list  # [Candidate], in priority order
    seconds: float
    compiled_modules_stubbed: list


def _capability(args: dict, cuda_cls):  # vLLM classes are imported lazily
    from vllm.platforms.interface import DeviceCapability

    if args.get("capability"):
        major, minor = (int(x) for x in str(args["capability"]).split("."))
        return DeviceCapability(major, minor), "given"
    cap = cuda_cls.get_device_capability()
    if cap is None:
        raise RuntimeError("no CUDA device visible; pass capability")
    return cap, "host GPU 0"


# vLLM's compiled extension modules (vllm._C, vllm._flashmla_C, vllm._C_stable_libtorch,
# vllm.vllm_flash_attn._vllm_fa2_C, ...): only kernels live there, which selection never runs.
_COMPILED = re.compile(r"^vllm(\.\w+)*\._\w*C(_\w+)?$")


class _CompiledStubs(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Without a GPU (or with another build, e.g. vLLM's CPU build) vLLM's compiled modules
    cannot load; selection only needs them importable. They become empty modules, so code that
    probes for an op still finds it missing, as on a build that lacks the arch."""

    def __init__(self, names: set[str]) -> None:
        self.names = names
        self.stubbed: list[str] = []

    def find_spec(self, name, path=None, target=None):  # noqa: ANN001
        if name not in self.names and not _COMPILED.match(name):
            return None
        return importlib.machinery.ModuleSpec(name, self)

    def create_module(self, spec):  # noqa: ANN001
        self.stubbed.append(spec.name)
        return types.ModuleType(spec.name)

    def exec_module(self, module) -> None:  # noqa: ANN001
        return None


def compiled_modules() -> set[str]:
    """Dotted names of the extension modules (*.so) in the installed vllm package."""
    spec = importlib.util.find_spec("vllm")
    names: set[str] = set()
    for root in (spec.submodule_search_locations or []) if spec else []:
        for path in Path(root).rglob("*.so"):
            parts = path.relative_to(root).with_suffix("").parts
            names.add(".".join(("vllm", *parts[:-1], parts[-1].split(".")[0])))
    return names


def without_gpu(extra: Sequence[str] = ()) -> list[str]:
    """Let vLLM's selection code import on a host with no usable CUDA device; returns the
    compiled modules that were stubbed (reported in the reply)."""
    import torch
    from torch.overrides import TorchFunctionMode

    stubs = _CompiledStubs(compiled_modules() | set(extra))
    sys.meta_path.insert(0, stubs)

    class CudaToMeta(TorchFunctionMode):  # import-time CUDA workspaces go to the meta device
        def __torch_function__(self, func, types_, args=(), kwargs=None):  # noqa: ANN001
            kwargs = dict(kwargs or {})
            if str(kwargs.get("device", "")).startswith("cuda"):
                kwargs["device"] = "meta"
            return func(*args, **kwargs)

    torch.cuda.get_device_properties = lambda *a, **k: types.SimpleNamespace(  # type: ignore[assignment]
        multi_processor_count=132, total_memory=80 << 30, name="no-gpu", major=0, minor=0
    )
    CudaToMeta().__enter__()
    return stubs.stubbed


def preflight(args: dict) -> PreflightReply:
    t0 = time.monotonic()
    import torch

    stubbed = None
    if args.get("without_gpu") or (args.get("capability") and not torch.cuda.is_available()):
        stubbed = without_gpu()
    import vllm.platforms as platforms
    from vllm.platforms.cuda import CudaPlatform
    from vllm.v1.attention.selector import AttentionSelectorConfig

    cap, cap_source = _capability(args, CudaPlatform)

    class _ProbePlatform(CudaPlatform):  # vLLM's CUDA platform, answering for `cap`
        @classmethod
        def get_device_capability(cls, device_id: int = 0):
            return cap

    # Backends consult current_platform (e.g. family checks); make it agree with `cap`.
    platforms._current_platform = _ProbePlatform()
    dtype = getattr(torch, args.get("dtype", "float16"))
    wanted = {
        "head_size": int(args.get("head_size", 576)),
        "dtype": dtype,
        "kv_cache_dtype": args.get("kv_cache_dtype", "auto"),
        "block_size": args.get("block_size"),
        "use_mla": bool(args.get("use_mla", True)),
        "use_sparse": bool(args.get("use_sparse", True)),
    }
    cfg = AttentionSelectorConfig(
        **{k: v for k, v in wanted.items() if k in AttentionSelectorConfig._fields}
    )
    extra = {}
    if "num_heads" in inspect.signature(CudaPlatform.get_valid_backends).parameters:
        extra["num_heads"] = int(args.get("num_heads", 8))
    # vLLM selects inside a config context (some supports_combination hooks read it). A
    # default VllmConfig has no model_config, so model-specific checks are skipped.
    from vllm.config import VllmConfig, set_current_vllm_config

    with set_current_vllm_config(VllmConfig()):
        result = _select(_ProbePlatform, cap, cfg, extra, args, cap_source, t0)
    if stubbed is not None:
        result["compiled_modules_stubbed"] = sorted(set(stubbed))
        result["msg"] += " (asked without a GPU: compiled kernel modules stubbed)"
    return result


def _select(probe, cap, cfg, extra: dict, args: dict, cap_source: str, t0: float) -> PreflightReply:
    import vllm

    valid, invalid = probe.get_valid_backends(cap, cfg, **extra)
    candidates: list = []
    for item in valid:  # 0.16: (enum, prio); 0.33: _BackendCandidate(cls, enum, prio)
        enum, prio = (item[0], item[1]) if len(item) == 2 else (item[1], item[2])
        candidates.append(Candidate(backend=enum.name, priority=prio, valid=True, reasons=[]))
    # 0.16 reports rejected backends without their priority; both dicts follow the priority
    # list's order, so the unused indices belong to the rejected ones in insertion order.
    taken = {c["priority"] for c in candidates}
    free = iter(i for i in range(len(valid) + len(invalid)) if i not in taken)
    for enum, reasons in invalid.items():
        prio, reasons = reasons if isinstance(reasons, tuple) else (next(free), reasons)
        candidates.append(
            Candidate(
                backend=enum.name, priority=prio, valid=False, reasons=[str(r) for r in reasons]
            )
        )
    candidates.sort(key=lambda c: c["priority"])
    selected, error = None, None
    try:
        path = probe.get_attn_backend_cls(None, cfg, **extra)
        selected = next(
            (c["backend"] for c in candidates if c["valid"] and _path_of(c["backend"]) == path),
            path,
        )
    except ValueError as exc:  # vLLM's own "No valid attention backend found ..."
        error = str(exc)
    expect = args.get("expect")
    failed = selected is None or (expect is not None and selected != expect)
    msg = (
        f"vLLM {vllm.__version__} picks {selected} for capability {cap.major}.{cap.minor} "
        f"{args.get('dtype', 'float16')}"
        if selected
        else f"no backend: {error}"
    )
    if expect is not None and selected != expect:
        msg += f" (expected {expect})"
    return PreflightReply(
        failed=failed,
        changed=False,
        msg=msg,
        selected=selected,
        selected_path=path if selected else None,
        error=error,
        vllm_version=vllm.__version__,
        capability=f"{cap.major}.{cap.minor}",
        capability_source=cap_source,
        config=repr(cfg),
        candidates=candidates,
        seconds=round(time.monotonic() - t0, 3),
    )


def _path_of(name: str) -> str:
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    return AttentionBackendEnum[name].get_path()


def answer(args: dict) -> Reply:
    """One preflight, or several for one import of vLLM (`queries`: CI, reports)."""
    if "queries" not in args:
        return preflight(args)
    results = [preflight({**args, **q}) for q in args["queries"]]
    return {  # type: ignore[typeddict-unknown-key]  # Reply plus the queries' results
        "failed": any(r["failed"] for r in results),
        "changed": False,
        "msg": "; ".join(r["msg"] for r in results),
        "results": results,
    }


if __name__ == "__main__":
    # vLLM logs to stdout: the envelope sends that to stderr; any import or selection failure
    # is reported as data.
    main(answer, expected=(Exception,))
