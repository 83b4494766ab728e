"""Compile backend/indexer_logits.py's kernels as the indexer fallback launches them, for SM120
and SM90, with whatever Triton this process imports (test_indexer_topk_compile.py runs it under
each supported vLLM's): ``python3 -m tests.unit.indexer_compile``. Prints a JSON object: the
Triton and, for each kernel and arch, its registers and stack bytes."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
ROW = dict(LOGITS="fp32", CTX="i32", WORK="i32")
OUTPUTS = dict(ROW, OUT="i32", CAND="i32")
LOGITS = dict(Q="u8", KV="u8", KV_F32="fp32", W="fp32", CTX="i32", TABLE="i32", OUT="fp32")
ARCHS = (120, 90)


def jobs(mod: ModuleType) -> list[tuple[str, dict, dict, dict]]:
    """(kernel, pointer types, constexprs, options) as the fallback launches them for GLM-5's
    indexer and k=2048."""
    logits = dict(BLOCK=64, D=128, BLOCK_H=32, BLOCKS_PER_PROGRAM=16, FP8_DOT=True)
    bounds = dict(K=2048, SAMPLE=mod._TOPK_SAMPLE, MARGIN=mod._TOPK_MARGIN)
    collect = dict(K=2048, CHUNK=mod._TOPK_CHUNK, SUBS=1, CAP=mod._TOPK_CAP)
    finish = dict(K=2048, CAP=mod._TOPK_CAP, SLICE=mod._TOPK_SLICE)
    finish_options = {"num_warps": mod._TOPK_FINISH_WARPS, "maxnreg": mod._TOPK_FINISH_REGS}
    return [
        ("_paged_logits_kernel", LOGITS, logits, {"num_warps": 4}),
        ("_topk_bounds_kernel", ROW, bounds, {"num_warps": 8}),
        ("_topk_collect_kernel", OUTPUTS, collect, {"num_warps": mod._TOPK_COLLECT_WARPS}),
        ("_topk_finish_kernel", OUTPUTS, finish, finish_options),
    ]


def _arg_type(arg: str, pointers: dict, constexprs: dict) -> str:
    if arg in constexprs:
        return "constexpr"
    return "*" + pointers[arg] if arg in pointers else "i32"


def main() -> None:
    os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="triton-cache-"))
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from tests.support.module_file import load_module_file
    from tests.unit.sparse_mla_compile import _resources

    mod = load_module_file(ROOT / "backend" / "indexer_logits.py", "indexer_logits_under_compile")
    report = []
    for arch in ARCHS:
        for name, pointers, constexprs, options in jobs(mod):
            fn = getattr(mod, name)
            signature = {arg: _arg_type(arg, pointers, constexprs) for arg in fn.arg_names}
            source = ASTSource(fn, signature, constexprs)
            compiled = triton.compile(source, target=GPUTarget("cuda", arch, 32), options=options)
            regs, stack = _resources(compiled.asm["cubin"])
            report.append({"kernel": name, "arch": arch, "regs": regs, "stack": stack})
    json.dump({"triton": triton.__version__, "kernels": report}, sys.stdout)


if __name__ == "__main__":
    main()
