"""Runs cases of backend/sparse_mla/'s tl.dot kernels under Triton's interpreter on the CPU
(tests/unit/test_sparse_mla_interpreted.py starts it): a process of its own, because Triton
decides whether its own library functions (``tl.zeros`` and the like) are interpreted when it
is first imported, so ``TRITON_INTERPRET=1`` must be set before that.

    TRITON_INTERPRET=1 python3 -m tests.support.sparse_mla_interpreted < cases.json

reads a JSON list of cases and prints one JSON object: the Triton that ran them and each case's
id with its failure (None if it passed). Another Triton than the installed one runs it when put
first on PYTHONPATH. The device is simulated: ``NUM_SMS`` SMs, an SM89's 99 KB of shared memory
per block, no Gluon kernels, no PDL.
"""

from __future__ import annotations

import json
import os
import sys
import zlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
import torch
import triton
import triton.language as tl
from triton.runtime import interpreter

from benchmarks.sparse_mla.overrides import tile_of
from tests.support.module_file import load_sparse_mla
from tests.support.sparse_mla_cases import check_call, make_inputs

NUM_SMS = 32  # few enough that 3 tokens split
TOPK = 200  # a multiple of no tile's rows: every split ends in a ragged tile
NUM_ROWS = 1024  # the cache's rows
E4M3_SCALE = 0.25  # the e4m3 rows' one scale


def _create_dot_bf16_widened(
    self: interpreter.InterpreterBuilder,
    a: interpreter.TensorHandle,
    b: interpreter.TensorHandle,
    d: interpreter.TensorHandle,
    input_precision: object,
    max_num_imprecise_acc: object,
) -> interpreter.TensorHandle:
    """Triton's interpreter (3.5.1 to 3.8.0) keeps bf16 values as their raw 16 bits and
    multiplies those in its dot; this widens bf16 operands to float32 first, as its casts do."""

    def widened(x: interpreter.TensorHandle) -> interpreter.TensorHandle:
        if x.dtype.scalar != tl.bfloat16:
            return x
        data = interpreter._convert_float(x.data, tl.bfloat16, tl.float32, None)
        return interpreter.TensorHandle(data.view(np.float32), tl.float32)

    return _interpreted_dot(self, widened(a), widened(b), d, input_precision, max_num_imprecise_acc)


_interpreted_dot = interpreter.InterpreterBuilder.create_dot


def _convert_float_keeping_e4m3_nan(
    data: np.ndarray, input_dtype: tl.dtype, output_dtype: tl.dtype, rounding_mode: object
) -> np.ndarray:
    """Triton's interpreter converts e4m3's NaN (0x7F, 0xFF) to +-480 in every cast and dot;
    the GPU's conversions give NaN, which is how a NaN row the kernel should not have used shows
    up. This keeps it NaN (the bits of a quiet NaN of the output type)."""
    out = _interpreted_convert_float(data, input_dtype, output_dtype, rounding_mode)
    if input_dtype != tl.float8e4nv:
        return out
    mantissa = output_dtype.fp_mantissa_width
    exponent = output_dtype.primitive_bitwidth - mantissa - 1
    quiet_nan = ((1 << exponent) - 1) << mantissa | 1 << (mantissa - 1)
    nan = (np.frombuffer(data.tobytes(), dtype=np.uint8) & 0x7F).reshape(data.shape) == 0x7F
    return np.where(nan, out.dtype.type(quiet_nan), out)


_interpreted_convert_float = interpreter._convert_float


def e4m3_to_f16(data: np.ndarray) -> np.ndarray:
    """What ``_e4m3_to_f16``'s PTX (``cvt.rn.f16x2.e4m3x2``) computes for each e4m3 byte: its
    value in fp16, exactly (every e4m3 value is an fp16 value), NaN for NaN."""
    return _convert_float_keeping_e4m3_nan(data, tl.float8e4nv, tl.float16, None).view(np.float16)


def e4m3_bits_to_f16(data: np.ndarray) -> np.ndarray:
    """What ``_e4m3_bits_to_f16``'s PTX computes for each e4m3 byte: its sign to the top of a
    16-bit lane, its seven magnitude bits one place below (fp16 bits of the value times 2^-8)."""
    bits = data.view(np.uint8).astype(np.uint16)
    return (((bits & 0x80) << 8) | ((bits & 0x7F) << 7)).view(np.float16)


class _AsmResult:
    """What the interpreter's ``create_inline_asm`` returns: one result."""

    def __init__(self, handle: interpreter.TensorHandle) -> None:
        self.handle = handle

    def get_result(self, index: int) -> interpreter.TensorHandle:
        assert index == 0, "the kernel's fp8 widening PTX has one result"
        return self.handle


def _create_inline_asm_e4m3(
    self: interpreter.InterpreterBuilder,
    asm: str,
    constraints: str,
    values: list[interpreter.TensorHandle],
    types: list[object],
    is_pure: bool,
    pack: int,
) -> _AsmResult:
    """The interpreter runs no PTX: this stands in for the kernel's two snippets that widen
    e4m3 to fp16 (``cvt.rn.f16x2.e4m3x2``: the exact value; the ``prmt`` bit moves: the value
    times 2^-8), element by element, as the GPU computes them; any other PTX is refused."""
    (x,) = values
    if "cvt.rn.f16x2.e4m3x2" in asm:
        return _AsmResult(interpreter.TensorHandle(e4m3_to_f16(x.data), tl.float16))
    if "prmt.b32" in asm and "0x3F803F80" in asm:
        return _AsmResult(interpreter.TensorHandle(e4m3_bits_to_f16(x.data), tl.float16))
    raise NotImplementedError(f"no stand-in for this PTX: {asm}")


_interpreted_patch_lang = interpreter._patch_lang
_launch_grid = interpreter.GridExecutor.__call__
# The language modules (by id) patched by the launch in progress; None outside a launch.
_patched_in_launch: set[int] | None = None


def _patch_lang_once_per_launch(fn: Callable[..., object]) -> object:
    """Triton's interpreter (3.5.1 to 3.8.0) patches ``triton.language`` for the interpreter at
    each launch and again at every call of a jit helper within it, with the same builder: the
    repeats change nothing and were a quarter of the interpreter's time (one ``inspect`` scan of
    each language module per call). This patches once per launch and for every language module
    a helper sees that the launch has not patched yet."""
    langs = {id(value) for value in fn.__globals__.values() if value is tl or value is tl.core}
    if _patched_in_launch and langs <= _patched_in_launch:
        scope = getattr(interpreter, "_LangPatchScope", None)  # 3.6 on: the caller drops it
        return scope() if scope is not None else None
    patched = _interpreted_patch_lang(fn)
    if _patched_in_launch is not None:
        _patched_in_launch.update(langs)
    return patched


def _launch_patching_once(self: interpreter.GridExecutor, *args: Any, **kwargs: Any) -> object:
    """A launch whose jit helpers find ``triton.language`` patched already by the launch."""
    global _patched_in_launch
    outer, _patched_in_launch = _patched_in_launch, set()
    try:
        return _launch_grid(self, *args, **kwargs)
    finally:
        _patched_in_launch = outer


def simulated_kernel() -> ModuleType:
    """The kernel module, its kernels interpreted, on the simulated device."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        raise SystemExit("start with TRITON_INTERPRET=1 (before triton is imported)")
    interpreter.InterpreterBuilder.create_dot = _create_dot_bf16_widened
    interpreter.InterpreterBuilder.create_inline_asm = _create_inline_asm_e4m3
    interpreter._convert_float = _convert_float_keeping_e4m3_nan
    interpreter._patch_lang = _patch_lang_once_per_launch
    interpreter.GridExecutor.__call__ = _launch_patching_once
    torch.cuda.current_device = lambda: 0  # CPU tensors have no device index
    module = load_sparse_mla("sparse_mla_interpreted")
    module._num_sms = lambda device: NUM_SMS
    module._has_wgmma = module._has_gluon_mma = module._has_pdl = lambda device: False
    module._device_limits = lambda device: module.DeviceLimits((8, 9), 101376)
    return module


def _inputs(
    kmod: ModuleType, seed: str, num_heads: int, dtype: torch.dtype, kv_format: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, float]:
    """The GPU suite's mixed inputs for 3 tokens (the first with no valid index, the second
    with holes), the second also naming rows N and N + 1, which lie past the cache but inside
    its buffer, as NaN rows: q, the rows in ``kv_format`` (NaN rows stay NaN), indices, the
    rows' scale."""
    gen = torch.Generator().manual_seed(zlib.crc32(seed.encode()))
    q, kv, idx = make_inputs(gen, 3, num_heads, TOPK, dtype, "mixed", num_rows=NUM_ROWS)
    idx[1, 1::4] = NUM_ROWS + idx[1, 1::4] % 2
    buffer = torch.cat([kv, torch.full((2, kv.shape[1]), float("nan"), dtype=kv.dtype)])
    kv_scale = E4M3_SCALE if kv_format == "fp8" else 1.0
    if kv_format == "fp8":
        buffer = (buffer.float() / kv_scale).to(torch.float8_e4m3fn)
    elif kv_format == "fp8_ds_mla":
        buffer = kmod.quantize_fp8_ds_mla(buffer)
    return q, buffer[:NUM_ROWS], idx, kv_scale


def run_tile_case(kmod: ModuleType, case: dict[str, Any]) -> None:
    """One tile over one split and over three (uneven: the last is shorter), each against
    the reference."""
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[case["q_dtype"]]
    q, rows, idx, kv_scale = _inputs(kmod, case["id"], case["num_heads"], dtype, case["kv_format"])
    for splits in (1, 3):
        tile = tile_of(kmod, case["cfg"], case["kv_format"])
        check_call(kmod, q, rows, idx, num_splits=splits, tile=tile, kv_scale=kv_scale)


def run_plan_case(kmod: ModuleType) -> None:
    """The plan's own tile and split count: 16-bit rows with 64 heads take the 32-head tl.dot
    tile on a 99 KB GPU, and 3 tokens split to fill the SMs (4 ways on 32), so the merge runs,
    its partials written to the caller's workspace."""
    q, kv, idx, _ = _inputs(kmod, "plan", 64, torch.bfloat16, "16bit")
    tile, splits = kmod._plan(3, 64, TOPK, q.device)
    assert type(tile) is kmod.TlDotTile and tile.block_h == 32, tile
    assert splits == 4, splits
    workspace = torch.full((kmod.sparse_mla_workspace_numel(3, 64, splits),), float("nan"))
    check_call(kmod, q, kv, idx, workspace=workspace)
    assert not workspace.isnan().all(), "nothing was written to the caller's workspace"


def main() -> None:
    kmod = simulated_kernel()
    failures: dict[str, str | None] = {}
    for case in json.load(sys.stdin):
        try:
            if case["id"] == "plan":
                run_plan_case(kmod)
            else:
                run_tile_case(kmod, case)
            failures[case["id"]] = None
        except Exception as exc:  # noqa: BLE001 - each case's failure is reported, not raised
            failures[case["id"]] = f"{type(exc).__name__}: {exc}"[:2000]
    print(json.dumps({"triton": triton.__version__, "failures": failures}))


if __name__ == "__main__":
    main()
