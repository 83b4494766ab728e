"""The indexer top-k's Triton kernels (backend/indexer_logits.py) compiled for the GPUs the
fallback serves, SM120 and SM90 (the GPU suite's stand-in), by Triton's own compiler without a
GPU: the interpreter tests (tests/patchset/test_indexer.py) check what they compute, not that
they compile. Each must compile without spilling, and the row-wide passes must keep two 8-warp
programs an SM (at most 128 registers a thread), which their latency hiding relies on."""

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


@pytest.fixture(scope="module")
def kernels() -> ModuleType:
    return load_module_file(KERNELS, "indexer_logits_under_compile")


def _jobs(mod: ModuleType) -> list[tuple[str, dict, dict, int]]:
    """(kernel, pointer types, constexprs, warps) as topk_per_row launches them for k=2048."""
    shape = dict(K=2048, WS=mod._TOPK_WS)
    chunk = mod._TOPK_CHUNK
    return [
        *[
            ("_topk_hist_kernel", ROW, dict(shape, PASS=p, CHUNK=chunk, SUBS=4), 8)
            for p in range(2)
        ],
        ("_topk_split_kernel", OUTPUTS, dict(shape, CHUNK=chunk // 2, SUBS=8, CAP=4096), 8),
        ("_topk_finish_kernel", OUTPUTS, dict(shape, CAP=4096, SLICE=mod._TOPK_SLICE), 4),
    ]


def _arg_type(arg: str, pointers: dict, constexprs: dict) -> str:
    if arg in constexprs:
        return "constexpr"
    return "*" + pointers[arg] if arg in pointers else "i32"


@pytest.mark.parametrize("arch", [120, 90])
def test_topk_kernels_compile_without_spills(kernels: ModuleType, arch: int) -> None:
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    for name, pointers, constexprs, warps in _jobs(kernels):
        fn = getattr(kernels, name)
        signature = {arg: _arg_type(arg, pointers, constexprs) for arg in fn.arg_names}
        compiled = triton.compile(
            ASTSource(fn, signature, constexprs),
            target=GPUTarget("cuda", arch, 32),
            options={"num_warps": warps},
        )
        regs, stack = _resources(compiled.asm["cubin"])
        assert stack == 0, f"{name} spills on sm_{arch}: {stack} B of stack"
        if warps == 8:
            assert regs <= 128, f"{name} on sm_{arch}: {regs} registers, one program an SM"
