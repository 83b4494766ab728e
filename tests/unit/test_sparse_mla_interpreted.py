"""The portable tl.dot kernels of backend/sparse_mla/, run by Triton's interpreter on the CPU
against the float32 reference: what CI checks of the kernel's numerics without a GPU.

The interpreter executes each program's Triton operations in NumPy. So this checks what the
kernels compute (gathers by index, masks, the online softmax, fp8 widening and scales, split
partials, the merge) and the host code that plans and launches them (tile, split count,
workspace, out and lse): every tile of the plan's table and the tuning options an override can
reach, on the GPU suite's inputs (NaN in every row that no index selects or that lies past the
cache, poisoned outputs, an empty token, ragged splits), under the Triton of every supported
vLLM release (tests/support/tritons.py; under vLLM 0.16's and 0.27 onwards' the tl.dot kernels
are all the module runs: its Gluon kernels need Triton 3.6). It does not check the compiled
GPU code: tests/gpu/test_sparse_mla.py runs that on a GPU. The interpreter runs no Gluon (those
kernels are not run here) and no PTX: the two inline-PTX snippets that widen e4m3 to fp16 run as
stand-ins that compute what the PTX does (tests/support/sparse_mla_interpreted.py, where the
cases run, in a process of their own, on a simulated device).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from benchmarks.sparse_mla.overrides import config_of
from tests.support.interpreted import run_interpreted
from tests.support.module_file import load_sparse_mla

torch = pytest.importorskip("torch", reason="torch is not installed")
pytest.importorskip("triton", reason="triton is not installed")

from tests.support.sparse_mla_interpreted import (  # noqa: E402 (needs torch and triton)
    e4m3_bits_to_f16,
    e4m3_to_f16,
)
from tests.support.tritons import TRITONS, triton_env, under_each_triton  # noqa: E402

# Triton version -> each case id's failure (None if it passed), or why that Triton's run failed.
Failures = dict[str, dict[str, str | None] | str]
Q_DTYPES = {"16bit": ("fp16", "bf16"), "fp8": ("bf16", "fp16"), "fp8_ds_mla": ("bf16",)}
HEADS = {16: (8, 16), 32: (24,), 64: (48, 128)}  # fill the block, pad it, take two
# Keys of a table tile that shape it or its split count rather than switch a kernel option.
SHAPE_KEYS = {"BLOCK_H", "BLOCK_N", "num_warps", "num_stages", "WAVES", "ROUNDS"}
_KMOD = load_sparse_mla("sparse_mla_tiles")
# The plan's table of tl.dot tiles, each as the benchmark's config (a case crosses a process).
TABLE = {key: [config_of(_KMOD, tile) for tile in tiles] for key, tiles in _KMOD._TILES.items()}
# Every option some table tile sets: each case names them all, 0 where its tile has none.
OPTIONS = sorted({key for tiles in TABLE.values() for cfg in tiles for key in cfg} - SHAPE_KEYS)


def _case(
    kv_format: str,
    block_h: int,
    n: int,
    q_dtype: str,
    num_heads: int,
    extra: dict[str, int] | None = None,
) -> dict[str, Any]:
    """Table tile ``n`` of (``kv_format``, ``block_h``), with ``extra`` options, as a case."""
    named = "".join(f"+{key}{value}" for key, value in (extra or {}).items())
    return {
        "id": f"{kv_format}-{block_h}-tile{n}{named}-{q_dtype}-H{num_heads}",
        "kv_format": kv_format,
        "cfg": {**dict.fromkeys(OPTIONS, 0), **TABLE[kv_format, block_h][n], **(extra or {})},
        "q_dtype": q_dtype,
        "num_heads": num_heads,
    }


# Options a tile can take that no table tile does (tuning): the GPU suite runs the
# fp8_ds_mla ones; DV_SPLIT runs nowhere else.
OPTION_CASES = [
    _case("16bit", 64, 0, "bf16", 64, {"DV_SPLIT": 2}),
    _case("16bit", 16, 0, "fp16", 16, {"DV_SPLIT": 2}),
    _case("16bit", 64, 0, "bf16", 48, {"PREFETCH_IDX": 1, "num_stages": 3}),
    _case("fp8_ds_mla", 16, 0, "bf16", 16, {"FP16_DOTS": 0, "FP8_TWICE": 1}),  # bf16, again
    _case("fp8_ds_mla", 16, 0, "bf16", 16, {"E4M3_BITS": 1}),  # fp16 by moving bits
    _case("fp8_ds_mla", 16, 0, "bf16", 8, {"E4M3_BITS": 1, "FP8_TWICE": 1}),
    _case("fp8_ds_mla", 64, 1, "bf16", 64, {"PREFETCH_IDX": 1, "num_stages": 3}),
]
# One case per tile of the table, q dtype and head count, then the options.
TILE_CASES = [
    _case(kv_format, block_h, n, q_dtype, num_heads)
    for (kv_format, block_h), tiles in TABLE.items()
    for n in range(len(tiles))
    for q_dtype in Q_DTYPES[kv_format]
    for num_heads in HEADS[block_h]
] + OPTION_CASES


@pytest.fixture(scope="module")
def failures() -> Failures:
    """Every case, run once under each supported vLLM's Triton (each an interpreter process,
    two at a time): Triton version -> each id's failure or None, or why that run failed."""
    cases = [*TILE_CASES, {"id": "plan"}]

    def run(version: str) -> dict[str, str | None] | str:
        try:
            env = triton_env(version)
            report = run_interpreted("tests.support.sparse_mla_interpreted", cases, env=env)
        except Exception as exc:  # noqa: BLE001 - one Triton's failure fails its cases only
            return f"Triton {version}: {type(exc).__name__}: {exc}"[:4000]
        if report["triton"] != version:
            return f"asked for Triton {version}, ran under {report['triton']}"
        return report["failures"]

    return under_each_triton(run)


def _failure(failures: Failures, version: str, id_: str) -> str | None:
    """The case's failure under ``version`` (its run's, if the run itself failed)."""
    run = failures[version]
    if isinstance(run, str):
        return run
    assert id_ in run, "the case did not run"
    return run[id_]


@pytest.mark.parametrize("version", TRITONS)
@pytest.mark.parametrize("case", TILE_CASES, ids=[case["id"] for case in TILE_CASES])
def test_tile_against_the_reference(failures: Failures, case: dict[str, Any], version: str) -> None:
    """Three tokens (the first with no valid index, the second with holes and rows past the
    cache) on the tile, over one split and over three (uneven: the last is shorter), against
    the float32 reference."""
    failure = _failure(failures, version, case["id"])
    assert failure is None, failure


@pytest.mark.parametrize("version", TRITONS)
def test_the_plan_and_its_merge(failures: Failures, version: str) -> None:
    """No override: on the simulated 99 KB GPU, 64 heads over 16-bit rows take the 32-head
    tl.dot tile, 3 tokens split to fill its SMs, and the merge's partials go to the caller's
    workspace."""
    failure = _failure(failures, version, "plan")
    assert failure is None, failure


def test_the_ptx_stand_ins_widen_as_the_ptx_does() -> None:
    """The stand-ins for the kernel's two e4m3 widenings, against torch's e4m3 values for all
    256 codes: ``cvt.rn.f16x2.e4m3x2``'s gives each value exactly and NaN for NaN (so a NaN row
    read by mistake shows); the bit moves' each value times 2^-8, exactly, and NaN as +-480
    times 2^-8, as the PTX does (its callers never meet NaN: vLLM's cache writers saturate)."""
    codes = torch.arange(256, dtype=torch.uint8)
    values = codes.view(torch.float8_e4m3fn).float()
    nan = values.isnan()
    assert nan.sum() == 2  # 0x7F and 0xFF

    def widened(stand_in: Callable[[np.ndarray], np.ndarray]) -> torch.Tensor:
        return torch.from_numpy(stand_in(codes.numpy()).astype(np.float32))

    exact, bits = widened(e4m3_to_f16), widened(e4m3_bits_to_f16)
    assert torch.equal(exact[~nan], values[~nan]) and exact[nan].isnan().all()
    assert torch.equal(bits[~nan] * 256, values[~nan])
    assert torch.equal(bits[nan] * 256, torch.tensor([480.0, -480.0]))
