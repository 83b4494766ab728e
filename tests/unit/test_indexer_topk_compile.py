"""The indexer top-k's Triton kernels (backend/indexer_logits.py), and the logits kernel
building the top-k's first histogram, compiled for the GPUs the fallback serves, SM120 and SM90
(the GPU suite's stand-in), by Triton's own compiler without a GPU: the interpreter tests
(tests/patchset/test_indexer.py) check what they compute, not that they compile. Each must
compile without spilling, under both digit plans, and the row-wide passes must keep two 8-warp
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
LOGITS = dict(Q="u8", KV="u8", KV_F32="fp32", W="fp32", CTX="i32", TABLE="i32", OUT="fp32")
LOGITS["HIST"] = "i32"


@pytest.fixture(scope="module")
def kernels() -> ModuleType:
    return load_module_file(KERNELS, "indexer_logits_under_compile")


def _jobs(mod: ModuleType, digits: tuple[int, ...]) -> list[tuple[str, dict, dict, int]]:
    """(kernel, pointer types, constexprs, warps) as topk_per_row launches them for k=2048."""
    plan = dict(K=2048, WS=mod._TOPK_WS, D0=digits[0], D1=digits[1], D2=(digits + (0,))[2])
    chunk, passes = mod._TOPK_CHUNK, len(digits)
    hist = [
        dict(plan, PASS=p, SHIFT=32 - sum(digits[: p + 1]), BITS=bits, CHUNK=chunk, SUBS=4)
        for p, bits in enumerate(digits)
    ]
    logits = dict(
        BLOCK=64, D=128, BLOCK_H=32, BLOCKS_PER_PROGRAM=16, FP8_DOT=True,
        HIST_BITS=digits[0], HIST_STRIDE=mod._TOPK_WS,
    )  # fmt: skip
    return [
        ("_paged_logits_kernel", LOGITS, logits, 4),  # GLM-5's indexer, the first histogram
        *[("_topk_hist_kernel", ROW, constexprs, 8) for constexprs in hist],
        (
            "_topk_split_kernel",
            OUTPUTS,
            dict(plan, CHUNK=chunk // 2, SUBS=8, CAP=mod._TOPK_CAP, PASSES=passes),
            8,
        ),
        (
            "_topk_finish_kernel",
            OUTPUTS,
            dict(plan, CAP=mod._TOPK_CAP, SLICE=mod._TOPK_SLICE, PASSES=passes),
            4,
        ),
    ]


def _arg_type(arg: str, pointers: dict, constexprs: dict) -> str:
    if arg in constexprs:
        return "constexpr"
    return "*" + pointers[arg] if arg in pointers else "i32"


@pytest.mark.parametrize(
    "arch,digits", [(120, (8, 8)), (120, (6, 6, 4)), (90, (6, 6, 4))]
)  # SM90's registers track SM120's: one plan there keeps CI short
def test_topk_kernels_compile_without_spills(
    kernels: ModuleType, arch: int, digits: tuple[int, ...]
) -> None:
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    for name, pointers, constexprs, warps in _jobs(kernels, digits):
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


def test_topk_refuses_digit_plans_that_miss_16_bits(kernels: ModuleType) -> None:
    """Checked before any launch (the split and finishing passes assume a 16-bit prefix)."""
    import torch

    logits, lens = torch.zeros(2, 64), torch.full((2,), 64, dtype=torch.int32)
    for digits in ((8, 7), (8, 4, 4, 0), (16,), (4, 4, 4, 4), (9, 7)):
        with pytest.raises(ValueError, match="digits must be"):
            kernels.topk_per_row(logits, lens, 1, 8, digits=digits)
