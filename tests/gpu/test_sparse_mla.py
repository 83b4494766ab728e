"""GPU correctness suite for backend/sparse_mla/ against its float32 reference.

Every case draws fresh random inputs, fills every KV row that no index selects with NaN (a read
of a wrong row shows up as NaN) and poisons the outputs before the call (an unwritten element
shows up as NaN). Skipped where torch, triton or a CUDA device is missing (CI has none).
"""

from __future__ import annotations

import itertools
import math
import zlib
from collections.abc import Callable
from types import ModuleType

import pytest

from benchmarks.sparse_mla import overrides
from tests.support.module_file import load_sparse_mla

torch = pytest.importorskip("torch", reason="torch is not installed (GPU tests need it)")
pytest.importorskip("triton", reason="triton is not installed (GPU tests need it)")

from tests.support.sparse_mla_cases import SM_SCALE as _SM_SCALE  # noqa: E402 (needs torch)
from tests.support.sparse_mla_cases import check_call, make_inputs  # noqa: E402


def default_config(kmod: ModuleType, *args: object, **kwargs: object) -> dict[str, int]:
    """The plan's default tile as the benchmark's config: a tuning config updates it."""
    return overrides.config_of(kmod, kmod._default_tile(*args, **kwargs))


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
]

_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


@pytest.fixture(scope="module")
def kmod() -> ModuleType:
    """Load the kernel by file path: backend/ need not be a package, nor glmops importable."""
    return load_sparse_mla("glmops_backend_sparse_mla")


def _smem_per_block(kmod: ModuleType) -> int:
    """This GPU's opt-in shared memory per block, as the plan reads it."""
    return kmod._device_limits(torch.cuda.current_device()).smem_per_block


def _e4m3_rows_640_apart(kv: torch.Tensor, kv_scale: float) -> torch.Tensor:
    """The cache rows as fp8 e4m3 values scaled by 1 / ``kv_scale``, in a view whose rows are
    640 bytes apart with NaN between them, so that a read past a row's 576 bytes shows."""
    wide = torch.full((kv.shape[0], 640), float("nan"), device=kv.device).to(torch.float8_e4m3fn)
    wide[:, :576] = (kv.float() / kv_scale).to(torch.float8_e4m3fn)
    return wide[:, :576]


def _stages_built(
    kmod: ModuleType, stages: tuple[int, ...], launch: Callable[[int], object], refused: str
) -> tuple[int, ...]:
    """The stage counts of a sweep that this Triton builds for the mma.sync and e4m3 Gluon
    tiles: from 3.7 on only powers of two (Triton aborts the process on 3, backend/DESIGN.md
    "Which Triton runs which kernels"). Each count left out must be refused: ``launch(stages)``
    raises a ValueError matching ``refused`` before Triton sees the tile."""
    built = tuple(n for n in stages if kmod._TRITON < (3, 7) or n & (n - 1) == 0)
    for left_out in sorted(set(stages) - set(built)):
        with pytest.raises(ValueError, match=refused):
            launch(left_out)
    return built


# The grid: H x T x topk, both dtypes alternating, a pattern mix in every case.
_GRID = [
    pytest.param(h, t, k, dt, id=f"H{h}-T{t}-k{k}-{dt}")
    for i, (h, t, k) in enumerate(
        itertools.product((8, 16, 32, 64, 128), (1, 3, 64, 257), (64, 2000, 2048))
    )
    for dt in (("bf16", "fp16") if t <= 64 or i % 2 == 0 else ("bf16" if i % 4 else "fp16",))
]


@pytest.mark.gpu
@pytest.mark.parametrize(("num_heads", "num_tokens", "topk", "dtype"), _GRID)
def test_grid_mixed_patterns(
    kmod: ModuleType, num_heads: int, num_tokens: int, topk: int, dtype: str
) -> None:
    seed = zlib.crc32(f"{num_heads}-{num_tokens}-{topk}-{dtype}".encode())
    gen = torch.Generator(device="cuda").manual_seed(seed)
    pattern = "mixed" if num_tokens > 1 else ("tail", "scattered", "plain")[topk % 3]
    q, kv, idx = make_inputs(gen, num_tokens, num_heads, topk, _DTYPES[dtype], pattern)
    check_call(kmod, q, kv, idx)


@pytest.mark.gpu
@pytest.mark.parametrize("prefetch", [0, 1])
@pytest.mark.parametrize("num_heads", [8, 64])
def test_both_index_schedules(kmod: ModuleType, num_heads: int, prefetch: int) -> None:
    """The index load inside the loop and the one prefetched a tile ahead (each tile's default
    uses one of them) agree with the reference on both tiles, over 3 splits (topk 2000: the
    last split's chunk ends in the middle of a tile) and with no split at all."""
    gen = torch.Generator(device="cuda").manual_seed(4321 + num_heads + prefetch)
    q, kv, idx = make_inputs(gen, 5, num_heads, 2000, torch.bfloat16, "mixed")
    cfg = {**default_config(kmod, num_heads), "PREFETCH_IDX": prefetch}
    for splits in (1, 3):
        check_call(kmod, q, kv, idx, num_splits=splits, config=cfg)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("pattern", ["plain", "tail", "scattered", "empty", "dups"])
@pytest.mark.parametrize("num_heads", [8, 64, 128])
def test_index_patterns(kmod: ModuleType, num_heads: int, pattern: str, dtype: str) -> None:
    gen = torch.Generator(device="cuda").manual_seed(1234 + num_heads)
    q, kv, idx = make_inputs(gen, 9, num_heads, 2048, _DTYPES[dtype], pattern)
    check_call(kmod, q, kv, idx)


@pytest.mark.gpu
@pytest.mark.parametrize("num_splits", [1, 2, 3, 7, 16, 64])
@pytest.mark.parametrize("num_heads", [16, 128])
def test_explicit_splits(kmod: ModuleType, num_heads: int, num_splits: int) -> None:
    """Every split count, including ones that leave splits empty, merges to the same result."""
    gen = torch.Generator(device="cuda").manual_seed(99 + num_splits)
    q, kv, idx = make_inputs(gen, 5, num_heads, 2000, torch.bfloat16, "mixed")
    check_call(kmod, q, kv, idx, num_splits=num_splits)


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("num_tokens", "num_heads", "tile", "rows", "expected"),
    [
        (22, 16, "own", "16bit", (6, 1)),
        (22, 64, "99 KB", "16bit", (6, 4)),
        (90, 64, "99 KB", "16bit", (4, 4)),
        (22, 16, "99 KB tl.dot", "16bit", (6, 1)),
        (90, 64, "99 KB tl.dot", "fp8_ds_mla", (4, 4)),
        (90, 32, "99 KB tl.dot", "fp8_ds_mla", (2, 4)),
        (6, 16, "H200 tl.dot", "16bit", (22, 1)),
    ],
)
def test_the_plan_fills_idle_sms(
    kmod: ModuleType,
    num_tokens: int,
    num_heads: int,
    tile: str,
    rows: str,
    expected: tuple[int, int],
) -> None:
    """Batch sizes that leave SMs idle at a power-of-two split count (on the H200's 132 SMs
    as 32 and 128 tokens do on SM120's 188): the split count and rounds the plan picks
    instead (``expected``) are what runs, and are right. Tiles: the H200's own (its Gluon
    tile; and its tl.dot tile, two per SM, at 6 tokens, where the partial cap's 16 splits
    leave SMs idle and 22 give each one), and a 99 KB GPU's with Triton 3.6 (mma.sync) and 3.5
    (tl.dot: one program per SM there, where the H200 holds two, so their counts fill the SMs
    too; fp8_ds_mla's grouped tiles queue rounds)."""
    if torch.cuda.get_device_properties(0).multi_processor_count != 132:
        pytest.skip("the expected split counts are for 132 SMs (H200)")
    if tile == "99 KB" and not kmod._gluon_mma_usable(
        torch.cuda.get_device_capability(), proxy=True
    ):
        pytest.skip("the mma.sync tiles need the Gluon kernels under this Triton and an SM80+ GPU")
    gen = torch.Generator(device="cuda").manual_seed(zlib.crc32(f"fill-{num_tokens}".encode()))
    q, kv, idx = make_inputs(gen, num_tokens, num_heads, 2048, torch.bfloat16, "mixed")
    if rows == "fp8_ds_mla":
        kv = kmod.quantize_fp8_ds_mla(kv)
    sm120 = kmod.DeviceLimits((12, 0), 101376)
    cfg = None
    if tile == "H200 tl.dot":
        cfg = default_config(kmod, num_heads, rows, limits=kmod.H200_LIMITS)
    elif tile != "own":
        cfg = default_config(kmod, num_heads, rows, limits=sm120, gluon_mma=tile == "99 KB")
    planned, splits = overrides.plan(kmod, num_tokens, num_heads, 2048, q.device, None, cfg, rows)
    assert (splits, planned.get("ROUNDS", 1)) == expected
    assert tile != "99 KB tl.dot" or (planned["WAVES"] == 1 and "MMA_V2" not in planned)
    check_call(kmod, q, kv, idx, config=cfg)


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("num_heads", "num_tokens", "kv_format", "tile", "late"),
    [(8, 3, "16bit", "H200", True), (64, 1, "16bit", "H200", True)]
    + [(16, 8, "16bit", "H200", True), (64, 8, "16bit", "H200", False)]
    + [(128, 8, "16bit", "H200", False), (16, 8, "fp8", "H200", True)]
    + [(64, 8, "fp8", "H200", False), (32, 8, "16bit", "H200", False)]
    + [(8, 8, "fp8", "SM120", True), (64, 8, "fp8", "SM120", False)]
    + [(16, 8, "16bit", "SM120", True), (64, 1, "16bit", "SM120", True)],
)
def test_dependent_launch_changes_nothing(
    kmod: ModuleType, num_heads: int, num_tokens: int, kv_format: str, tile: str, late: bool
) -> None:
    """The merge launched as a programmatic dependent (PDL) gives the same bits as a plain
    launch, with each Gluon split kernel's trigger after its main loop (``late``) and at its
    exit: the H200's tiles and SM120's (mma.sync; the 32-head one is the H200's for 17-32
    heads). Each run gets its own NaN-filled workspace, so a merge that read the partials
    before the split kernel wrote them would show NaN instead of a stale correct copy."""
    dev = torch.cuda.current_device()
    if not kmod._has_wgmma(dev) or kmod._num_sms(dev) != 132:
        pytest.skip("the cases are chosen for the H200's Gluon tiles and its 132 SMs")
    gen = torch.Generator(device="cuda").manual_seed(5 + num_heads + num_tokens)
    q, kv, idx = make_inputs(gen, num_tokens, num_heads, 2048, torch.bfloat16, "mixed")
    kv_scale = 0.03125 if kv_format == "fp8" else 1.0
    if kv_format == "fp8":
        kv = _e4m3_rows_640_apart(kv, kv_scale)
    sm120 = {"limits": kmod.DeviceLimits((12, 0), 101376), "wgmma": False, "gluon_mma": True}
    planned = {"H200": {}, "SM120": sm120}[tile]
    tile, splits = kmod._plan(num_tokens, num_heads, 2048, q.device, None, None, kv_format,
                              **planned)  # fmt: skip
    assert tile.gluon and splits > 1, f"a split Gluon tile, not {tile} x {splits}"
    programs = num_tokens * splits * -(-num_heads // tile.block_h)
    assert kmod._late_trigger(tile, programs, dev) == late
    cfg = overrides.config_of(kmod, tile)
    numel = kmod.sparse_mla_workspace_numel(num_tokens, num_heads, splits)
    results = []
    for pdl in (1, 0):
        workspace = torch.full((numel,), float("nan"), device="cuda")
        out = overrides.decode(
            kmod, q, kv, idx, _SM_SCALE, num_splits=splits, config={**cfg, "PDL": pdl},
            workspace=workspace, kv_scale=kv_scale,
        )  # fmt: skip
        results.append(out)
    (o1, l1), (o0, l0) = results
    assert not o1.isnan().any() and torch.equal(o0, o1) and torch.equal(l0, l1)
    check_call(kmod, q, kv, idx, num_splits=splits, config=cfg, kv_scale=kv_scale)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_duplicates_count_twice(kmod: ModuleType, dtype: str) -> None:
    """Listing the same set twice keeps the output and adds ln 2 to the LSE."""
    gen = torch.Generator(device="cuda").manual_seed(7)
    q, kv, idx = make_inputs(gen, 4, 16, 1024, _DTYPES[dtype], "tail")
    idx[0] = -1  # one empty token stays empty when doubled
    twice = torch.cat([idx, idx], dim=1)
    check_call(kmod, q, kv, twice)
    o1, l1 = overrides.decode(kmod, q, kv, idx, _SM_SCALE)
    o2, l2 = overrides.decode(kmod, q, kv, twice, _SM_SCALE)
    tol = 2e-3 if dtype == "fp16" else 1.5e-2
    torch.testing.assert_close(o2[1:].float(), o1[1:].float(), atol=tol, rtol=tol)
    torch.testing.assert_close(l2[1:], l1[1:] + math.log(2.0), atol=1e-3, rtol=0)
    assert torch.isneginf(l2[0]).all()


@pytest.mark.gpu
@pytest.mark.parametrize("num_heads", [8, 64])
def test_strided_views_and_peaked_softmax(kmod: ModuleType, num_heads: int) -> None:
    """q as a slice of a wider tensor, KV rows with a padded row stride, a large scale."""
    gen = torch.Generator(device="cuda").manual_seed(42)
    q, kv, idx = make_inputs(gen, 6, num_heads, 2048, torch.bfloat16, "mixed")
    wide_q = torch.empty(6, num_heads, 640, dtype=q.dtype, device="cuda")
    wide_q[..., :576] = q
    wide_kv = torch.full((kv.shape[0], 640), float("nan"), dtype=kv.dtype, device="cuda")
    wide_kv[:, :576] = kv
    check_call(kmod, wide_q[..., :576], wide_kv[:, :576], idx, sm_scale=0.12)


@pytest.mark.gpu
@pytest.mark.parametrize("num_splits", [1, 3])
@pytest.mark.parametrize("num_heads", [8, 64])
def test_strided_out_and_lse(kmod: ModuleType, num_heads: int, num_splits: int) -> None:
    """out as a slice of wider rows and lse as a transposed view are written through their
    strides (by the split kernel with one split, by the merge with three), nothing beside them,
    bit for bit what contiguous buffers get."""
    gen = torch.Generator(device="cuda").manual_seed(640 + num_heads + num_splits)
    q, kv, idx = make_inputs(gen, 5, num_heads, 2048, torch.bfloat16, "mixed")
    wide_out = torch.full((5, num_heads, 640), float("nan"), dtype=q.dtype, device="cuda")
    lse_by_head = torch.full((num_heads, 5), float("nan"), dtype=torch.float32, device="cuda")
    out, lse = wide_out[..., :512], lse_by_head.t()
    overrides.decode(kmod, q, kv, idx, _SM_SCALE, out=out, lse=lse, num_splits=num_splits)
    dense_out, dense_lse = overrides.decode(kmod, q, kv, idx, _SM_SCALE, num_splits=num_splits)
    torch.cuda.synchronize()
    assert wide_out[..., 512:].isnan().all(), "a store landed beside out's rows"
    assert torch.equal(out, dense_out) and torch.equal(lse, dense_lse)
    check_call(kmod, q, kv, idx, num_splits=num_splits)


def _64_head_tiles(kmod: ModuleType) -> list[dict[str, int]]:
    """The tl.dot 64-head tile (every GPU but Hopper) and, on Hopper with Triton 3.6, the Gluon
    tile at each shape it offers (64 rows x 2 stages is the default)."""
    tiles = [{**default_config(kmod, 64, wgmma=False), "WGMMA": 0}]
    if kmod._has_wgmma(torch.cuda.current_device()):
        wgmma = default_config(kmod, 64, wgmma=True)
        tiles += [wgmma] + [
            {**wgmma, "BLOCK_N": n, "num_stages": st} for n, st in ((32, 3), (16, 4))
        ]
    return tiles


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize(
    ("num_heads", "num_tokens", "topk"), [(64, 5, 2000), (128, 3, 2048), (40, 4, 64), (96, 2, 300)]
)
def test_64_head_tiles(
    kmod: ModuleType, num_heads: int, num_tokens: int, topk: int, dtype: str
) -> None:
    """Both 64-head tiles, over 1, 3 and 16 splits (topk 2000 and 300: the last chunk ends
    inside a tile; 40 and 96 heads: a padded head block)."""
    gen = torch.Generator(device="cuda").manual_seed(zlib.crc32(f"wg-{num_heads}-{dtype}".encode()))
    q, kv, idx = make_inputs(gen, num_tokens, num_heads, topk, _DTYPES[dtype], "mixed")
    for cfg in _64_head_tiles(kmod):
        for splits in (1, 3, 16):
            check_call(kmod, q, kv, idx, num_splits=splits, config=cfg)


def _small_head_tiles(kmod: ModuleType) -> list[dict[str, int]]:
    """The 16-head tl.dot tile and, on Hopper with Triton 3.6, the swapped Gluon tile at 16 and
    8 heads per block (2 stages; 3 fit at 8)."""
    tiles = [{**default_config(kmod, 16, wgmma=False), "WGMMA": 0}]
    if kmod._has_wgmma(torch.cuda.current_device()):
        swapped = {"BLOCK_N": 64, "num_warps": 4, "WGMMA": 1}
        tiles += [
            {**swapped, "BLOCK_H": bh, "num_stages": st} for bh, st in ((16, 2), (8, 2), (8, 3))
        ]
    return tiles


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize(
    ("num_heads", "num_tokens", "topk"), [(8, 5, 2000), (16, 3, 2048), (5, 4, 64), (12, 2, 300)]
)
def test_small_head_tiles(
    kmod: ModuleType, num_heads: int, num_tokens: int, topk: int, dtype: str
) -> None:
    """Every small-head tile over 1, 3 and 16 splits (topk 2000 and 300: the last chunk ends
    inside a tile; 5 and 12 heads: padded head blocks, two of them at 8 heads per block)."""
    gen = torch.Generator(device="cuda").manual_seed(zlib.crc32(f"sh-{num_heads}-{dtype}".encode()))
    q, kv, idx = make_inputs(gen, num_tokens, num_heads, topk, _DTYPES[dtype], "mixed")
    for cfg in _small_head_tiles(kmod):
        for splits in (1, 3, 16):
            check_call(kmod, q, kv, idx, num_splits=splits, config=cfg)


@pytest.mark.gpu
def test_inputs_the_gluon_kernel_cannot_copy_fall_back(kmod: ModuleType) -> None:
    """KV rows or q heads whose stride is not a multiple of 16 elements (577 and 584 bf16;
    584 is 16-byte aligned, yet Triton cannot prove it), and a q whose dtype differs from the
    cache's, cannot take the Gluon kernel's 16-byte copies: the default plan uses the tl.dot
    tile for them, and asking for the Gluon tile is refused. So is an fp32 ``out`` (the Gluon
    kernel stores 16-bit rows): it gets exactly the tl.dot tile's fp32 values."""
    gen = torch.Generator(device="cuda").manual_seed(577)
    q, kv, idx = make_inputs(gen, 3, 64, 2048, torch.bfloat16, "mixed")
    cases = [(q, kv.to(torch.float16))]
    for width in (577, 584):
        wide_kv = torch.full((kv.shape[0], width), float("nan"), dtype=kv.dtype, device="cuda")
        wide_kv[:, :576] = kv
        wide_q = torch.full((3, 64, width), float("nan"), dtype=q.dtype, device="cuda")
        wide_q[..., :576] = q
        cases += [(q, wide_kv[:, :576]), (wide_q[..., :576], kv)]
    for q_in, kv_in in cases:
        check_call(kmod, q_in, kv_in, idx)

    check_call(kmod, q, kv, idx, out_dtype=torch.float32)
    fp32_out = torch.empty(3, 64, 512, dtype=torch.float32, device="cuda")
    tl_dot_out = torch.empty_like(fp32_out)
    tl_dot = {**default_config(kmod, 64, wgmma=False), "WGMMA": 0}
    overrides.decode(kmod, q, kv, idx, _SM_SCALE, out=fp32_out)
    overrides.decode(kmod, q, kv, idx, _SM_SCALE, out=tl_dot_out, config=tl_dot)
    assert torch.equal(fp32_out, tl_dot_out), "an fp32 out must take the tl.dot tile"

    if kmod._has_wgmma(torch.cuda.current_device()):
        gluon = default_config(kmod, 64, wgmma=True)
        refused = [(q_in, kv_in, None, gluon) for q_in, kv_in in cases]
        refused += [(q, kv, fp32_out, gluon), (q, kv, None, {**gluon, "num_stages": 3})]
        swapped = default_config(kmod, 16, wgmma=True)  # 3 stages fit at 8 heads, not at 16
        refused += [(q, kv, None, {**swapped, "num_stages": 3})]
        for q_in, kv_in, out, cfg in refused:  # the last two overflow shared memory
            with pytest.raises(ValueError, match="WGMMA needs"):
                overrides.decode(kmod, q_in, kv_in, idx, _SM_SCALE, out=out, config=cfg)


_FP8_GRID = [
    pytest.param(h, t, k, id=f"H{h}-T{t}-k{k}")
    for h, t, k in itertools.product((8, 16, 32, 64, 128), (1, 3, 64, 257), (64, 2000, 2048))
    if t < 257 or k == 2048
]


@pytest.mark.gpu
@pytest.mark.parametrize(("num_heads", "num_tokens", "topk"), _FP8_GRID)
def test_fp8_ds_mla_rows(kmod: ModuleType, num_heads: int, num_tokens: int, topk: int) -> None:
    """fp8_ds_mla cache rows (uint8 [N, 656]) against the reference on their dequantized
    values. The rows no index selects come from NaN rows, so their fp8 bytes, scales and rope
    are NaN too: a wrong gather shows up as NaN."""
    seed = zlib.crc32(f"fp8-{num_heads}-{num_tokens}-{topk}".encode())
    gen = torch.Generator(device="cuda").manual_seed(seed)
    pattern = "mixed" if num_tokens > 1 else ("tail", "scattered", "plain")[topk % 3]
    q, kv, idx = make_inputs(gen, num_tokens, num_heads, topk, torch.bfloat16, pattern)
    rows = kmod.quantize_fp8_ds_mla(kv)
    unselected = kv[:, 0].isnan()
    assert kmod.dequantize_fp8_ds_mla(rows[unselected]).isnan().all()
    check_call(kmod, q, rows, idx)


@pytest.mark.gpu
@pytest.mark.parametrize("num_heads", [16, 128])
def test_fp8_ds_mla_strided_rows_and_splits(kmod: ModuleType, num_heads: int) -> None:
    """fp8_ds_mla rows inside a wider, NaN-padded buffer (row stride 672 bytes), over 1, 3 and
    16 splits, with the index prefetch on, every index listed twice; and on the kernel that
    keeps the latent in fp8 groups (a 99 KB GPU's plan for 9+ heads), groups gathered again for
    P.V and kept, widened to bf16 or fp16, with group scales from 1e-6 to 1e2 (P times a tiny
    scale must keep its precision: bf16's range, or fp16 after the tile's largest scale). The
    widening kernel is not held to those scales: it rounds each scaled latent to bf16, so its
    scores err in proportion to |k| (4% of the largest output at 1e2,
    benchmarks/results/kernel-log.md round 18)."""
    gen = torch.Generator(device="cuda").manual_seed(77 + num_heads)
    q, kv, idx = make_inputs(gen, 5, num_heads, 1000, torch.bfloat16, "mixed")
    rows = kmod.quantize_fp8_ds_mla(kv)
    wide = torch.full((rows.shape[0], 672), 0xFF, dtype=torch.uint8, device="cuda")
    wide[:, :656] = rows
    for splits in (1, 3, 16):
        check_call(kmod, q, wide[:, :656], idx, num_splits=splits)
    prefetch = {**default_config(kmod, num_heads, "fp8_ds_mla"), "PREFETCH_IDX": 1, "num_stages": 3}
    check_call(kmod, q, wide[:, :656], idx, num_splits=3, config=prefetch)
    check_call(kmod, q, wide[:, :656], torch.cat([idx, idx], dim=1))
    exponents = torch.randint(-6, 3, (kv.shape[0], 4), generator=gen, device="cuda")
    spread = torch.ones_like(kv)
    spread[:, :512] = (10.0**exponents).repeat_interleave(128, dim=1)
    spread_rows = kmod.quantize_fp8_ds_mla(kv * spread)
    sm120 = kmod.DeviceLimits((12, 0), 101376)
    grouped = default_config(kmod, num_heads, "fp8_ds_mla", limits=sm120)  # FP8_GROUPS
    bare = {k: v for k, v in grouped.items() if k not in ("FP8_TWICE", "FP16_DOTS", "E4M3_BITS")}
    # The groups gathered again or kept, widened to bf16 or to fp16 (by conversion or bits).
    widen = ({}, {"FP16_DOTS": 1}, {"FP16_DOTS": 1, "E4M3_BITS": 1})
    for cfg in ({**bare, **w, "FP8_TWICE": twice} for w in widen for twice in (0, 1)):
        check_call(kmod, q, wide[:, :656], idx, num_splits=3, config=cfg)
        check_call(kmod, q, spread_rows, idx, config=cfg)


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("num_heads", "num_tokens", "topk"),
    [(8, 5, 2000), (5, 3, 300), (16, 4, 2048), (12, 2, 64), (64, 3, 700), (1, 257, 2048)],
)
def test_fp8_ds_mla_mma_tile(kmod: ModuleType, num_heads: int, num_tokens: int, topk: int) -> None:
    """fp8_ds_mla rows on the e4m3 Gluon tile with mma.sync (``DS``: group scales on the
    scores and, over each group's largest in the tile, on V as it is widened; run here on
    Hopper, which has mma.sync too): 8-head blocks on 4 warps and 16-head blocks on 4 and 8,
    at 2 and 3 stages (3 refused from Triton 3.7), over 1, 3 and 16 splits, q's rope part in
    shared memory or in registers; rows inside a wider NaN-padded buffer, NaN in every row not
    selected, padded head blocks, several blocks (64 heads), group scales from 1e-6 to 1e2, a
    q 2^18 times larger; an 8-head block on 8 warps is refused."""
    if not kmod._gluon_mma_usable(torch.cuda.get_device_capability(), proxy=True):
        pytest.skip("the mma.sync tiles need the Gluon kernels under this Triton and an SM89+ GPU")
    gen = torch.Generator(device="cuda").manual_seed(zlib.crc32(f"ds-mma-{num_heads}".encode()))
    q, kv, idx = make_inputs(gen, num_tokens, num_heads, topk, torch.bfloat16, "mixed")
    rows = kmod.quantize_fp8_ds_mla(kv)
    wide = torch.full((rows.shape[0], 672), 0xFF, dtype=torch.uint8, device="cuda")
    wide[:, :656] = rows
    tile = {"BLOCK_N": 64, "num_stages": 2, "WAVES": 1, "MMA_V2": 1}
    blocks = [(8, 4), (16, 4), (16, 8)] if num_heads > 8 else [(8, 4)]
    # A 99 KB GPU holds 2 stages, and 16 heads only with q's rope part in registers.
    roomy = _smem_per_block(kmod) >= kmod._DS_TILE_16_HEADS_SMEM

    def launch(stages: int) -> object:
        cfg = {**tile, "BLOCK_H": 8, "num_warps": 4, "num_stages": stages}
        return overrides.decode(kmod, q, wide[:, :656], idx, _SM_SCALE, config=cfg)

    swept = _stages_built(kmod, (2, 3) if roomy else (2,), launch, "MMA_V2 needs")
    for (block_h, warps), stages in itertools.product(blocks, swept):
        cfg = {**tile, "BLOCK_H": block_h, "num_warps": warps, "num_stages": stages}
        if roomy or block_h == 8:
            for splits in (1, 3, 16):
                check_call(kmod, q, wide[:, :656], idx, num_splits=splits, config=cfg)
        # q's rope part in registers (what a 99 KB GPU runs with 16 heads).
        check_call(kmod, q, wide[:, :656], idx, num_splits=3, config={**cfg, "ROPE_REGS": 1})
    exponents = torch.randint(-6, 3, (kv.shape[0], 4), generator=gen, device="cuda")
    spread = torch.ones_like(kv)
    spread[:, :512] = (10.0**exponents).repeat_interleave(128, dim=1)
    spread_rows = kmod.quantize_fp8_ds_mla(kv * spread)
    cfg = {**tile, "BLOCK_H": 8, "num_warps": 4}
    check_call(kmod, q, spread_rows, idx, config=cfg)
    check_call(kmod, q * 2.0**18, rows, idx, _SM_SCALE * 2.0**-18, config=cfg)
    with pytest.raises(ValueError, match="MMA_V2 needs"):
        overrides.decode(kmod, q, rows, idx, _SM_SCALE, config={**cfg, "num_warps": 8})


@pytest.mark.gpu
@pytest.mark.parametrize("num_heads", [8, 16])
def test_fp8_ds_mla_mma_tile_keeps_a_small_group(kmod: ModuleType, num_heads: int) -> None:
    """Each latent group keeps its precision when its scales sit 10^5-10^7 below another
    group's in every row (so across whole tiles): V's factors are over each group's own
    largest scale, so none falls to fp16's subnormals. Checked per group of output columns,
    against that group's own magnitude (the whole output's error would hide it)."""
    if not kmod._gluon_mma_usable(torch.cuda.get_device_capability(), proxy=True):
        pytest.skip("the mma.sync tiles need the Gluon kernels under this Triton and an SM89+ GPU")
    gen = torch.Generator(device="cuda").manual_seed(zlib.crc32(f"ds-group-{num_heads}".encode()))
    q, kv, idx = make_inputs(gen, 4, num_heads, 1000, torch.bfloat16, "mixed")
    spread = torch.ones_like(kv)
    factors = torch.tensor([1e-5, 1e2, 1.0, 1e-3], device="cuda", dtype=kv.dtype)
    spread[:, :512] = factors.repeat_interleave(128)
    rows = kmod.quantize_fp8_ds_mla(kv * spread)
    ref, _ = kmod.reference_sparse_mla(q, rows, idx, _SM_SCALE)
    tile = overrides.config_of(kmod, kmod._e4m3_mma_tile(num_heads, 1, "fp8", kmod.H200_LIMITS))
    roomy = num_heads <= 8 or _smem_per_block(kmod) >= kmod._DS_TILE_16_HEADS_SMEM
    for cfg in ([tile] if roomy else []) + [{**tile, "ROPE_REGS": 1}]:
        out, _ = overrides.decode(kmod, q, rows, idx, _SM_SCALE, num_splits=3, config=cfg)
        for group in range(4):
            cols = slice(128 * group, 128 * group + 128)
            o, r = out[..., cols].float(), ref[..., cols]
            rel = ((o - r).norm() / r.norm()).item()
            assert rel < 1.2e-2, f"group {group} (x{factors[group].item():g}): {rel:.3e}"


def _fp16_q_in_bf16_bounds(
    kmod: ModuleType,
    q: torch.Tensor,
    rows: torch.Tensor,
    idx: torch.Tensor,
    cfg: dict[str, int],
    kv_scale: float,
    refused: str,
) -> None:
    """An e4m3 Gluon tile under an fp16 q (GGUF on SM120 serves float16), over 1 and 16
    splits, within bf16's bounds (q's two e4m3 parts hold it to about bf16's precision); an
    out of another dtype than q is refused with ``refused``."""
    for splits in (1, 16):
        check_call(
            kmod, q.half(), rows, idx, num_splits=splits, config=cfg, kv_scale=kv_scale,
            precision=torch.bfloat16,
        )  # fmt: skip
    other = torch.empty(*q.shape[:2], 512, dtype=torch.float16, device=q.device)
    with pytest.raises(ValueError, match=refused):
        overrides.decode(kmod, q, rows, idx, _SM_SCALE, out=other, config=cfg, kv_scale=kv_scale)


@pytest.mark.gpu
@pytest.mark.parametrize(("num_heads", "num_tokens", "topk"), _FP8_GRID)
def test_fp8_e4m3_rows(kmod: ModuleType, num_heads: int, num_tokens: int, topk: int) -> None:
    """fp8 e4m3 rows [N, 576] with one scale for the cache (vLLM's --kv-cache-dtype fp8 for
    MLA), under a bf16 or fp16 q, against the reference on the scaled values, within bf16's
    bounds (the Gluon e4m3 tiles hold q to bf16's precision; the tl.dot tile's fp16 dots do
    better, test_fp8_e4m3_tile_options). Unselected rows are NaN in fp8 too."""
    seed = zlib.crc32(f"e4m3-{num_heads}-{num_tokens}-{topk}".encode())
    gen = torch.Generator(device="cuda").manual_seed(seed)
    pattern = "mixed" if num_tokens > 1 else ("tail", "scattered", "plain")[topk % 3]
    dtype = (torch.bfloat16, torch.float16)[(num_heads // 8 + num_tokens) % 2]
    q, kv, idx = make_inputs(gen, num_tokens, num_heads, topk, dtype, pattern)
    kv_scale = 0.03125
    rows = (kv.float() / kv_scale).to(torch.float8_e4m3fn)
    assert rows[kv[:, 0].isnan()].float().isnan().all()
    check_call(kmod, q, rows, idx, kv_scale=kv_scale, precision=torch.bfloat16)


@pytest.mark.gpu
@pytest.mark.parametrize("num_heads", [16, 32, 64])
def test_fp8_e4m3_tile_options(kmod: ModuleType, num_heads: int) -> None:
    """fp8 e4m3 rows with the latent gathered once for both dots or once per dot
    (``FP8_TWICE``), with bf16 or fp16 dots (``FP16_DOTS``), V widened by a plain conversion
    or inline PTX (``V_ASM``, fp16 dots only), or the one gather widened by moving bits
    (``E4M3_BITS``: K and V at 2^-8 of their values, scaled back), on the 16-, 32- and
    64-head tiles, over 1 and 3 splits; then a q beyond fp16's range (2^18 times larger, the
    softmax scale 2^18 times smaller), which the fp16 dots must shift per head without
    overflow; then an fp16 q, whose dots are fp16 anyway."""
    gen = torch.Generator(device="cuda").manual_seed(zlib.crc32(f"e4m3-opt-{num_heads}".encode()))
    q, kv, idx = make_inputs(gen, 5, num_heads, 2000, torch.bfloat16, "mixed")
    kv_scale = 0.03125
    rows = (kv.float() / kv_scale).to(torch.float8_e4m3fn)
    block_h = min(64, max(16, num_heads))
    tile = {"BLOCK_H": block_h, "BLOCK_N": 16 if block_h == 64 else 32}
    tile |= {"num_warps": 8 if block_h == 64 else 4, "num_stages": 2}
    options = [(t, f, 0, 0) for t, f in itertools.product((0, 1), (0, 1))]
    options += [(0, 1, 1, 0), (1, 1, 1, 0), (0, 1, 1, 1)]
    for twice, fp16, v_asm, bits in options:
        cfg = {**tile, "FP8_TWICE": twice, "FP16_DOTS": fp16, "V_ASM": v_asm, "E4M3_BITS": bits}
        for splits in (1, 3):
            check_call(kmod, q, rows, idx, num_splits=splits, config=cfg, kv_scale=kv_scale)
    big = q * 2.0**18
    assert big.abs().max().item() > 65504.0
    for twice, v_asm, bits in [(0, 0, 0), (0, 1, 0), (1, 0, 0), (1, 1, 0), (0, 1, 1)]:
        cfg = {**tile, "FP8_TWICE": twice, "FP16_DOTS": 1, "V_ASM": v_asm, "E4M3_BITS": bits}
        check_call(kmod, big, rows, idx, _SM_SCALE * 2.0**-18, config=cfg, kv_scale=kv_scale)
    for twice, bits in [(1, 0), (0, 1)]:
        cfg = {**tile, "FP8_TWICE": twice, "V_ASM": 1, "E4M3_BITS": bits}
        check_call(kmod, q.half(), rows, idx, num_splits=3, config=cfg, kv_scale=kv_scale)


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("num_heads", "num_tokens", "topk"),
    [(8, 5, 2000), (16, 6, 2048), (5, 4, 64), (12, 2, 300), (64, 3, 2048), (40, 2, 700)]
    + [(128, 2, 1100)],
)
def test_fp8_e4m3_hopper_tile(kmod: ModuleType, num_heads: int, num_tokens: int, topk: int) -> None:
    """The swapped Gluon tile for e4m3 rows (Hopper, Triton 3.6), the default plan's choice
    there for up to 16 heads and (two warpgroups) for 33+: over 1, 3 and 16 splits at 2 and 3
    stages (3 refused from Triton 3.7), rows 640 bytes apart with NaN between them, padded head
    blocks (5, 12 and 40 heads), two head blocks (128), and a q 2^18 times larger (its per-head
    power-of-two scale keeps both e4m3 parts in range). An fp16 q (GGUF on SM120 serves float16)
    runs the same tiles within bf16's bounds; a call with too few 64-row tiles to fill the GPU
    keeps the tl.dot tile; an out of another dtype than q is refused."""
    if not kmod._has_wgmma(torch.cuda.current_device()):
        pytest.skip("the e4m3 Gluon tile needs Hopper and Triton 3.6")
    gen = torch.Generator(device="cuda").manual_seed(zlib.crc32(f"e4m3-wg-{num_heads}".encode()))
    q, kv, idx = make_inputs(gen, num_tokens, num_heads, topk, torch.bfloat16, "mixed")
    kv_scale = 0.03125
    rows = _e4m3_rows_640_apart(kv, kv_scale)
    cfg = default_config(kmod, num_heads, "fp8", wgmma=True)
    assert cfg["WGMMA"] == 1 and cfg["BLOCK_H"] == (
        8 if num_heads <= 8 else 16 if num_heads <= 16 else 64
    )

    def launch(stages: int) -> object:
        tile = {**cfg, "num_stages": stages}
        return overrides.decode(kmod, q, rows, idx, _SM_SCALE, config=tile, kv_scale=kv_scale)

    for stages in _stages_built(kmod, (2, 3), launch, "WGMMA needs"):
        for splits in (1, 3, 16):
            tile = {**cfg, "num_stages": stages}
            check_call(kmod, q, rows, idx, num_splits=splits, config=tile, kv_scale=kv_scale)
    check_call(kmod, q * 2.0**18, rows, idx, _SM_SCALE * 2.0**-18, config=cfg, kv_scale=kv_scale)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    fills = num_tokens * -(-topk // 64) >= sms
    planned = cfg if fills else default_config(kmod, num_heads, "fp8", wgmma=False)
    for q_any in (q, q.half()):
        by_default = overrides.decode(kmod, q_any, rows, idx, _SM_SCALE, kv_scale=kv_scale)
        by_plan = overrides.decode(
            kmod, q_any, rows, idx, _SM_SCALE, config=planned, kv_scale=kv_scale
        )
        assert all(map(torch.equal, by_default, by_plan)), f"the plan must take {planned}"
    _fp16_q_in_bf16_bounds(kmod, q, rows, idx, cfg, kv_scale, refused="WGMMA needs")


@pytest.mark.gpu
@pytest.mark.parametrize("num_heads", [8, 16, 64])
def test_fp8_e4m3_tiles_score_in_float32_sums(kmod: ModuleType, num_heads: int) -> None:
    """e4m3 warpgroup MMAs keep 13 of the accumulator's mantissa bits, so Hopper's e4m3 tile
    sums its scores in float32 per 32 or 64 columns (backend/DESIGN.md, "Precision of the e4m3
    tiles"): at logits near 20 (K's values 10x the other tests') its lse errs by 1-3e-4 of the
    largest |lse|, where one chain of MMAs over all 576 columns errs by 0.8-2e-3 (held to be 3x
    coarser or more, so the test shows the sums at work). The mma.sync tile, which Hopper runs as
    fp16 MMAs, errs by under 1e-6 of it. K's own e4m3 rounding (3 mantissa bits) moves the logits by
    a few percent of their size, far more than either."""
    if not kmod._has_wgmma(torch.cuda.current_device()):
        pytest.skip("the e4m3 Gluon tile needs Hopper and Triton 3.6")
    gen = torch.Generator(device="cuda").manual_seed(5 + num_heads)
    q, kv, idx = make_inputs(gen, 4, num_heads, 2048, torch.bfloat16, "plain")
    large = kv.float() * 10.0
    kv_scale = float(large.nan_to_num(0.0).abs().max()) / 448.0
    rows = (large / kv_scale).to(torch.float8_e4m3fn)
    ref_o, ref_l = kmod.reference_sparse_mla(q, rows, idx, _SM_SCALE, kv_scale)
    largest = ref_l.abs().max().item()
    assert largest > 15.0, f"the logits this test is about: |lse| up to {largest:.1f}"

    def errors(cfg: dict[str, int]) -> tuple[float, float]:
        out, lse = overrides.decode(kmod, q, rows, idx, _SM_SCALE, config=cfg, kv_scale=kv_scale)
        rel_lse = (lse - ref_l).abs().max().item() / largest
        return rel_lse, ((out.float() - ref_o).norm() / ref_o.norm()).item()

    hopper = default_config(kmod, num_heads, "fp8", wgmma=True)
    assert hopper.get("WGMMA") == 1
    assert overrides.tile_of(kmod, hopper, "fp8").chain_columns() == (32 if num_heads <= 16 else 64)
    rel_lse, rel_out = errors(hopper)
    assert rel_lse < 6e-4, f"Hopper tile: lse error {rel_lse:.2e} of the largest |lse|"
    assert rel_out < 4e-3, f"Hopper tile: relative L2 error {rel_out:.2e}"
    chain_lse, _ = errors({**hopper, "SCORE_COLS": 0})
    assert chain_lse > 3 * rel_lse, f"one chain {chain_lse:.2e} against the sums' {rel_lse:.2e}"
    with pytest.raises(ValueError, match="SCORE_COLS 48"):
        errors({**hopper, "SCORE_COLS": 48})
    if kmod._gluon_mma_usable(torch.cuda.get_device_capability(), proxy=True):
        mma = default_config(
            kmod, num_heads, "fp8", limits=kmod.DeviceLimits((12, 0), 101376), gluon_mma=True
        )
        assert mma.get("MMA_V2") == 1
        rel_lse, rel_out = errors(mma)
        assert rel_lse < 1e-5, f"mma.sync tile: lse error {rel_lse:.2e} of the largest |lse|"
        assert rel_out < 5e-3, f"mma.sync tile: relative L2 error {rel_out:.2e}"


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("num_heads", "num_tokens", "topk"),
    [(8, 5, 2000), (16, 6, 2048), (5, 4, 64), (12, 2, 300), (1, 3, 700)],
)
def test_fp8_e4m3_mma_tile(kmod: ModuleType, num_heads: int, num_tokens: int, topk: int) -> None:
    """The e4m3 Gluon tile with mma.sync (SM89 and SM120's choice for up to 16 heads under
    Triton 3.6; run here on Hopper, which has mma.sync too): over 1, 3 and 16 splits at 2 and 3
    stages (3 refused from Triton 3.7; 16 heads on 4 and 8 warps), rows 640 bytes apart with NaN
    between them, padded head blocks (1, 5 and 12 heads), a q 2^18 times larger, an fp16 q
    (within bf16's bounds); an 8-head block on 8 warps and an out of another dtype than q are
    refused."""
    capability = torch.cuda.get_device_capability()
    if not kmod._gluon_mma_usable(capability, proxy=True):
        pytest.skip("the e4m3 mma.sync tile needs Gluon under this Triton and an SM89+ GPU")
    gen = torch.Generator(device="cuda").manual_seed(zlib.crc32(f"e4m3-mma-{num_heads}".encode()))
    q, kv, idx = make_inputs(gen, num_tokens, num_heads, topk, torch.bfloat16, "mixed")
    kv_scale = 0.03125
    rows = _e4m3_rows_640_apart(kv, kv_scale)
    sm120 = kmod.DeviceLimits((12, 0), 101376)
    cfg = default_config(kmod, num_heads, "fp8", limits=sm120, gluon_mma=True)
    assert cfg["MMA_V2"] == 1 and cfg["BLOCK_H"] == (8 if num_heads <= 8 else 16)
    warps = (4, 8) if cfg["BLOCK_H"] == 16 else (4,)  # 16 heads: one or two groups of 4 warps

    def launch(stages: int) -> object:
        tile = {**cfg, "num_stages": stages}
        return overrides.decode(kmod, q, rows, idx, _SM_SCALE, config=tile, kv_scale=kv_scale)

    swept = _stages_built(kmod, (2, 3), launch, "MMA_V2 needs")
    for stages, num_warps in itertools.product(swept, warps):
        for splits in (1, 3, 16):
            tile = {**cfg, "num_stages": stages, "num_warps": num_warps}
            check_call(kmod, q, rows, idx, num_splits=splits, config=tile, kv_scale=kv_scale)
    check_call(kmod, q * 2.0**18, rows, idx, _SM_SCALE * 2.0**-18, config=cfg, kv_scale=kv_scale)
    with pytest.raises(ValueError, match="MMA_V2 needs"):
        overrides.decode(
            kmod, q, rows, idx, _SM_SCALE, config={**cfg, "BLOCK_H": 8, "num_warps": 8}
        )
    _fp16_q_in_bf16_bounds(kmod, q, rows, idx, cfg, kv_scale, refused="MMA_V2 needs")


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("num_heads", "num_tokens", "topk", "dtype"),
    [
        (64, 5, 2000, torch.bfloat16),
        (64, 4, 2048, torch.float16),
        (40, 3, 300, torch.bfloat16),
        (128, 3, 700, torch.bfloat16),
        (33, 2, 64, torch.float16),
        (32, 3, 2000, torch.bfloat16),
        (20, 2, 700, torch.float16),
        (16, 5, 2000, torch.bfloat16),
        (8, 4, 2048, torch.float16),
        (12, 3, 300, torch.bfloat16),
        (1, 2, 64, torch.bfloat16),
    ],
)
def test_16bit_mma_tile(
    kmod: ModuleType, num_heads: int, num_tokens: int, topk: int, dtype: torch.dtype
) -> None:
    """The Gluon tiles with mma.sync and q in registers over 16-bit rows (run here on Hopper,
    which has mma.sync too): 64 heads on 8 warps along the heads (32-row tiles at 2 stages and
    16-row tiles at 4), 32 and 16 heads on 8 and 4 warps (two along the keys); the scores on
    two groups of columns (the plan's), one, and four where the heads fill them; over 1, 3 and
    16 splits, NaN in every row not selected, padded head blocks, two blocks (128), a q 2^18
    (fp16: 2^14) times larger; a q of another dtype than the rows, stages that cannot hold q
    and three groups of columns are refused."""
    if not kmod._gluon_mma_usable(torch.cuda.get_device_capability(), proxy=True):
        pytest.skip("the mma.sync tiles need the Gluon kernels under this Triton and an SM80+ GPU")
    gen = torch.Generator(device="cuda").manual_seed(zlib.crc32(f"mma16-{num_heads}".encode()))
    q, kv, idx = make_inputs(gen, num_tokens, num_heads, topk, dtype, "mixed")
    block_h = 16 if num_heads <= 16 else 32 if num_heads <= 32 else 64
    sm120 = kmod.DeviceLimits((12, 0), 101376)
    cfg = default_config(kmod, num_heads, "16bit", limits=sm120, gluon_mma=True)
    assert cfg == {"BLOCK_H": block_h, "BLOCK_N": 32,
                   "num_warps": 8 if block_h == 64 else block_h // 4, "num_stages": 2,
                   "WAVES": 1, "MMA_V2": 1, "COL_WARPS": 2,
                   **({"ROUNDS": 4} if block_h == 64 else {})}  # fmt: skip
    for block_n, stages in ((32, 2), (16, 4)) if block_h == 64 else ((32, 2),):
        tile = {**cfg, "BLOCK_N": block_n, "num_stages": stages}
        for splits in (1, 3, 16):
            check_call(kmod, q, kv, idx, num_splits=splits, config=tile)
        four = {**tile, "COL_WARPS": 4}
        grouped = overrides.tile_of(kmod, four, "16bit").column_groups_fit("16bit")
        assert grouped == (block_h > 16)  # 16 heads a warp
        for groups in (1, 4) if block_h > 16 else (1,):
            check_call(kmod, q, kv, idx, num_splits=3, config={**tile, "COL_WARPS": groups})
    big = 2.0**18 if dtype == torch.bfloat16 else 2.0**14  # within fp16's range
    check_call(kmod, q * big, kv, idx, _SM_SCALE / big, config=cfg)
    refused = "MMA_V2 with 64 heads needs" if block_h == 64 else "MMA_V2 with up to 32 heads needs"
    with pytest.raises(ValueError, match=refused):
        overrides.decode(kmod, q, kv, idx, _SM_SCALE, config={**cfg, "num_stages": 1})
    with pytest.raises(ValueError, match=refused):
        overrides.decode(kmod, q, kv, idx, _SM_SCALE, config={**cfg, "COL_WARPS": 3})
    other = torch.float16 if dtype == torch.bfloat16 else torch.bfloat16
    with pytest.raises(ValueError, match=refused):
        overrides.decode(kmod, q.to(other), kv, idx, _SM_SCALE, config=cfg)


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("num_heads", "num_tokens", "topk"),
    [(64, 5, 2000), (40, 3, 300), (128, 3, 700), (33, 2, 64), (32, 4, 2000), (20, 3, 300)],
)
def test_fp8_e4m3_mma_tile_32_64_heads(
    kmod: ModuleType, num_heads: int, num_tokens: int, topk: int
) -> None:
    """The mma.sync tiles with q in registers over fp8 e4m3 rows (q's two e4m3 parts, V widened
    in registers; a 99 KB GPU's choice for 17+ heads under Triton 3.6; run here on Hopper): 64
    heads in 32-row tiles at 4 stages, 16-row at 8 and 64-row at 2, 32 heads in 32-row tiles at
    2, 3 and 4 stages (3 refused from Triton 3.7); over 1, 3 and 16 splits, rows 640 bytes apart
    with NaN between them, padded head blocks, two blocks (128), a q 2^18 times larger, an fp16
    q (within bf16's bounds); stages that cannot hold q and an out of another dtype than q are
    refused."""
    if not kmod._gluon_mma_usable(torch.cuda.get_device_capability(), proxy=True):
        pytest.skip("the mma.sync tiles need the Gluon kernels under this Triton and an SM80+ GPU")
    gen = torch.Generator(device="cuda").manual_seed(zlib.crc32(f"mma8-{num_heads}".encode()))
    q, kv, idx = make_inputs(gen, num_tokens, num_heads, topk, torch.bfloat16, "mixed")
    kv_scale = 0.03125
    rows = _e4m3_rows_640_apart(kv, kv_scale)
    sm120 = kmod.DeviceLimits((12, 0), 101376)
    cfg = default_config(kmod, num_heads, "fp8", limits=sm120, gluon_mma=True)
    wide = num_heads > 32
    assert cfg == {"BLOCK_H": 64 if wide else 32, "BLOCK_N": 32, "num_warps": 8,
                   "num_stages": 4 if wide else 2, "WAVES": 1, "MMA_V2": 1,
                   **({"ROUNDS": 4} if wide else {})}  # fmt: skip

    def launch(stages: int) -> object:
        tile = {**cfg, "BLOCK_N": 32, "num_stages": stages}
        return overrides.decode(kmod, q, rows, idx, _SM_SCALE, config=tile, kv_scale=kv_scale)

    refused = "MMA_V2 with 64 heads needs" if wide else "MMA_V2 with up to 32 heads needs"
    stages_32 = _stages_built(kmod, (2, 3, 4), launch, refused) if not wide else ()
    tiles = ((32, 4), (16, 8), (64, 2)) if wide else tuple((32, n) for n in stages_32)
    for block_n, stages in tiles:
        for splits in (1, 3, 16):
            tile = {**cfg, "BLOCK_N": block_n, "num_stages": stages}
            check_call(kmod, q, rows, idx, num_splits=splits, config=tile, kv_scale=kv_scale)
    check_call(kmod, q * 2.0**18, rows, idx, _SM_SCALE * 2.0**-18, config=cfg, kv_scale=kv_scale)
    with pytest.raises(ValueError, match=refused):
        bad = {**cfg, "num_stages": 2 if wide else 1}
        overrides.decode(kmod, q, rows, idx, _SM_SCALE, config=bad, kv_scale=kv_scale)
    _fp16_q_in_bf16_bounds(kmod, q, rows, idx, cfg, kv_scale, refused=refused)
    with pytest.raises(ValueError, match=refused):  # q's two e4m3 parts: one group
        bad = {**cfg, "COL_WARPS": 2}
        overrides.decode(kmod, q, rows, idx, _SM_SCALE, config=bad, kv_scale=kv_scale)


@pytest.mark.gpu
@pytest.mark.parametrize("kv_format", ["16bit", "fp8", "fp8_ds_mla"])
@pytest.mark.parametrize("num_heads", [8, 32, 64, 128])
def test_tiles_of_smaller_gpus(kmod: ModuleType, kv_format: str, num_heads: int) -> None:
    """The tiles the plan picks for 99 KB (SM120, SM86/89) and SM100 GPUs, run here as
    overrides: correct over 1 and 8 splits, fp8 rows with strided NaN padding between them."""
    gen = torch.Generator(device="cuda").manual_seed(
        zlib.crc32(f"tiles-{kv_format}-{num_heads}".encode())
    )
    q, kv, idx = make_inputs(gen, 6, num_heads, 2048, torch.bfloat16, "mixed")
    kv_scale = 1.0
    if kv_format == "fp8":
        kv_scale = 0.03125
        kv = _e4m3_rows_640_apart(kv, kv_scale)
    elif kv_format == "fp8_ds_mla":
        kv = kmod.quantize_fp8_ds_mla(kv)
    for limits in (kmod.DeviceLimits((12, 0), 101376), kmod.DeviceLimits((10, 0), 232448)):
        gluon_mma = kmod._gluon_mma_usable(limits.capability)  # the plan's pick with Triton 3.6
        cfg = default_config(kmod, num_heads, kv_format, limits=limits, gluon_mma=gluon_mma)
        for splits in (1, 8):
            check_call(kmod, q, kv, idx, num_splits=splits, config=cfg, kv_scale=kv_scale)


@pytest.mark.gpu
def test_out_of_range_rows_are_invalid(kmod: ModuleType) -> None:
    gen = torch.Generator(device="cuda").manual_seed(5)
    q, kv, idx = make_inputs(gen, 3, 16, 256, torch.float16, "plain", num_rows=1000)
    idx[1, ::3] = 1000 + torch.arange(idx[1, ::3].numel(), device="cuda", dtype=torch.int32)
    idx[2] = 5000
    check_call(kmod, q, kv, idx)


@pytest.mark.gpu
@pytest.mark.parametrize("num_heads", [8, 64])
def test_workspace_and_graph_replay(kmod: ModuleType, num_heads: int) -> None:
    """A caller-owned workspace works (16-bit partials in its front from the Gluon tiles on
    Hopper, fp32 ones from the tl.dot tiles), a captured CUDA graph replays correctly, and a
    workspace that is not flat is refused."""
    gen = torch.Generator(device="cuda").manual_seed(11)
    q, kv, idx = make_inputs(gen, 8, num_heads, 2048, torch.bfloat16, "tail")
    splits = 16
    numel = kmod.sparse_mla_workspace_numel(8, num_heads, splits)
    ws = torch.empty(numel, dtype=torch.float32, device="cuda")
    out = torch.empty(8, num_heads, 512, dtype=q.dtype, device="cuda")
    lse = torch.empty(8, num_heads, dtype=torch.float32, device="cuda")
    with pytest.raises(ValueError, match="workspace must be flat"):
        overrides.decode(kmod, q, kv, idx, _SM_SCALE, num_splits=splits, workspace=ws[None])
    overrides.decode(kmod, q, kv, idx, _SM_SCALE, out=out, lse=lse, num_splits=splits, workspace=ws)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        overrides.decode(
            kmod, q, kv, idx, _SM_SCALE, out=out, lse=lse, num_splits=splits, workspace=ws
        )
    q2, kv2, idx2 = make_inputs(gen, 8, num_heads, 2048, torch.bfloat16, "scattered")
    n = min(kv.shape[0], kv2.shape[0])
    q.copy_(q2)
    kv[:n].copy_(kv2[:n])
    idx.copy_(idx2)
    out.fill_(float("nan"))
    lse.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    ref_o, ref_l = kmod.reference_sparse_mla(q, kv, idx, _SM_SCALE)
    assert not torch.isnan(out).any()
    rel = ((out.float() - ref_o).norm() / ref_o.norm()).item()
    assert rel < 1.2e-2
    assert (lse - ref_l).abs().max().item() < 2e-3


@pytest.mark.parametrize(
    "num_heads, kv_format, q_dtype",
    [
        (8, "16bit", "bf16"),
        (64, "16bit", "fp16"),
        (8, "fp8", "bf16"),
        (8, "fp8", "fp16"),  # GGUF on SM120 serves float16
        (16, "fp8_ds_mla", "bf16"),
    ],
)
def test_the_kernel_summary_names_the_tile_a_full_batch_runs(
    kmod: ModuleType, monkeypatch: pytest.MonkeyPatch, num_heads: int, kv_format: str, q_dtype: str
) -> None:
    """What the rendered backend logs at start-up (`sparse_mla_kernel_summary`, which `glmops
    status` shows) is the tile a decode call that fills the GPU runs: the plan the call makes,
    recorded, against the summary's words."""
    dtype = _DTYPES[q_dtype]
    gen = torch.Generator(device="cuda").manual_seed(7)
    q, kv, idx = make_inputs(gen, 128, num_heads, 2048, dtype, "mixed")
    if kv_format == "fp8":
        kv = (kv.float() / 0.25).to(torch.float8_e4m3fn)
    elif kv_format == "fp8_ds_mla":
        kv = kmod.quantize_fp8_ds_mla(kv)
    planned = []
    plan = kmod._plan
    monkeypatch.setattr(kmod, "_plan", lambda *a, **k: planned.append(plan(*a, **k)) or planned[-1])
    overrides.decode(kmod, q, kv, idx, _SM_SCALE, kv_scale=0.25 if kv_format == "fp8" else 1.0)
    (tile, _), *_ = planned
    summary = kmod.sparse_mla_kernel_summary(num_heads, kv_format, q.device, dtype)
    kind = (
        "Gluon warpgroup-MMA"
        if "Wgmma" in type(tile).__name__
        else "Gluon mma.sync"
        if "Mma" in type(tile).__name__
        else "tl.dot"
    )
    words = f"{kind} tile {tile.block_h}x{tile.block_n}, {tile.warps} warps"
    assert f"): {words}" in summary, (tile, summary)
