"""The indexer top-k's Triton kernels (backend/indexer_logits.py) and the logits kernel,
compiled for the GPUs the fallback serves, SM120 and SM90 (the GPU suite's stand-in), by
Triton's own compiler without a GPU: the interpreter tests (tests/patchset/test_indexer.py)
check what they compute, not that they compile. Each must compile without spilling (the
finish needs its register cap for that on sm_120), and the collecting pass must stay within 128
registers a thread: it is latency-bound per program, so it relies on many programs an SM."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

pytest.importorskip("torch", reason="the kernel module needs torch")
triton = pytest.importorskip("triton", reason="the kernel module imports triton")

from tests.support.module_file import load_module_file  # noqa: E402
from tests.unit.sparse_mla_compile import _resources  # noqa: E402

KERNELS = Path(__file__).resolve().parents[2] / "backend" / "indexer_logits.py"
ROW = dict(LOGITS="fp32", CTX="i32", WORK="i32")
OUTPUTS = dict(ROW, OUT="i32", CAND="i32")
LOGITS = dict(Q="u8", KV="u8", KV_F32="fp32", W="fp32", CTX="i32", TABLE="i32", OUT="fp32")


@pytest.fixture(scope="module")
def kernels() -> ModuleType:
    return load_module_file(KERNELS, "indexer_logits_under_compile")


def _jobs(mod: ModuleType) -> list[tuple[str, dict, dict, dict]]:
    """(kernel, pointer types, constexprs, options) as topk_per_row launches them for k=2048."""
    logits = dict(BLOCK=64, D=128, BLOCK_H=32, BLOCKS_PER_PROGRAM=16, FP8_DOT=True)
    bounds = dict(K=2048, SAMPLE=mod._TOPK_SAMPLE, MARGIN=mod._TOPK_MARGIN)
    collect = dict(K=2048, CHUNK=mod._TOPK_CHUNK, SUBS=1, CAP=mod._TOPK_CAP)
    finish = dict(K=2048, CAP=mod._TOPK_CAP, SLICE=mod._TOPK_SLICE)
    return [
        ("_paged_logits_kernel", LOGITS, logits, {"num_warps": 4}),  # GLM-5's indexer
        ("_topk_bounds_kernel", ROW, bounds, {"num_warps": 8}),
        ("_topk_collect_kernel", OUTPUTS, collect, {"num_warps": mod._TOPK_COLLECT_WARPS}),
        (
            "_topk_finish_kernel",
            OUTPUTS,
            finish,
            {"num_warps": mod._TOPK_FINISH_WARPS, "maxnreg": mod._TOPK_FINISH_REGS},
        ),
    ]


def _arg_type(arg: str, pointers: dict, constexprs: dict) -> str:
    if arg in constexprs:
        return "constexpr"
    return "*" + pointers[arg] if arg in pointers else "i32"


@pytest.mark.parametrize("arch", [120, 90])
def test_topk_kernels_compile_without_spills(kernels: ModuleType, arch: int) -> None:
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    for name, pointers, constexprs, options in _jobs(kernels):
        fn = getattr(kernels, name)
        signature = {arg: _arg_type(arg, pointers, constexprs) for arg in fn.arg_names}
        compiled = triton.compile(
            ASTSource(fn, signature, constexprs),
            target=GPUTarget("cuda", arch, 32),
            options=options,
        )
        regs, stack = _resources(compiled.asm["cubin"])
        assert stack == 0, f"{name} spills on sm_{arch}: {stack} B of stack"
        if name == "_topk_collect_kernel":
            assert regs <= 128, f"{name} on sm_{arch}: {regs} registers, few programs an SM"
