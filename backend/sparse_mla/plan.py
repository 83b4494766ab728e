"""The plan: which tile serves a call on a device, and how many top-k splits (DESIGN.md,
"Tiles per device" and "Splits and the merge")."""

from __future__ import annotations

import dataclasses
import functools

import torch
import triton

from .common import (
    _D_QK,
    _D_V,
    _GLUON_VERIFIED,
    _TRITON,
    H200_LIMITS,
    KV_FORMATS,
    MAX_HEADS,
    DeviceLimits,
    _blocks_per_sm,
    _device_index,
    _device_limits,
    _gluon_mma_usable,
    _gluon_off_reason,
    _gluon_takes,
    _gluon_usable,
    _has_gluon_mma,
    _has_wgmma,
    _num_sms,
)
from .tiles import (
    _TILES,
    MmaE4m3Tile,
    MmaTile,
    MmaWideTile,
    Tile,
    WgmmaE4m3Tile,
    WgmmaSwappedTile,
    WgmmaTile,
)


def _unsupported(num_heads: int, kv_format: str, limits: DeviceLimits) -> str | None:
    """Why the kernel cannot serve this head count and row format on a device, or None."""
    major, minor = limits.capability
    device = f"SM{major}{minor} ({limits.smem_per_block} B of shared memory per block)"
    if kv_format not in KV_FORMATS:
        return f"unknown KV row format {kv_format!r} (one of {', '.join(KV_FORMATS)})"
    if limits.capability < (8, 0):
        return f"{device}: the kernel needs SM80 or newer"
    if kv_format != "16bit" and limits.capability < (8, 9):
        return f"{device}: {kv_format} rows need SM89 or newer (fp8 conversion in hardware)"
    if not 1 <= num_heads <= MAX_HEADS:
        return f"{num_heads} query heads per GPU: supported are 1 to {MAX_HEADS}"
    block_h = min(64, max(16, triton.next_power_of_2(num_heads)))
    if not any(tile.fits(limits) for tile in _TILES[kv_format, block_h]):
        return f"{device}: no {kv_format} tile for {num_heads} heads fits"
    return None


def sparse_mla_supported_heads(kv_format: str, limits: DeviceLimits) -> list[int]:
    """The query head counts per GPU that the kernel serves on a device with these limits."""
    return [h for h in range(1, MAX_HEADS + 1) if _unsupported(h, kv_format, limits) is None]


def sparse_mla_check(num_heads: int, kv_format: str, device: torch.device | int) -> None:
    """Raises ValueError, naming the device and the reason, where the kernel cannot serve
    ``num_heads`` query heads over ``kv_format`` rows on ``device``: a caller's start-up check,
    so that nothing fails at the first forward."""
    limits = _device_limits(_device_index(device))
    reason = _unsupported(num_heads, kv_format, limits)
    if reason is not None:
        heads = sparse_mla_supported_heads(kv_format, limits) if kv_format in KV_FORMATS else []
        served = f"{heads[0]} to {heads[-1]} query heads" if heads else "no head count"
        raise ValueError(f"{reason} (this GPU serves {served} with {kv_format} rows)")


def sparse_mla_kernel_summary(
    num_heads: int, kv_format: str, device: torch.device | int, q_dtype: torch.dtype
) -> str:
    """The decode tile the plan gives ``num_heads`` heads over ``kv_format`` rows on ``device``
    under this Triton, with q of ``q_dtype`` (16-bit rows: of the rows' dtype), in words for a
    caller's start-up log, with why not a Gluon tile where one would serve otherwise: which
    kernels run depends on the Triton the vLLM release brings (the Gluon ones run under Triton
    3.6, vLLM 0.17 to 0.26: ``_gluon_off_reason``) and on q's dtype (fp8_ds_mla rows: bf16
    only, as the backend casts it)."""
    limits = _device_limits(_device_index(device))
    kv_dtype = q_dtype if kv_format == "16bit" else torch.uint8

    def planned(api: bool | None, q_ok: bool) -> Tile:
        wgmma = q_ok and _gluon_usable(limits.capability, api)
        gluon_mma = q_ok and _gluon_mma_usable(limits.capability, api=api)
        return _default_tile(num_heads, kv_format, wgmma, limits, gluon_mma)

    q_ok = _gluon_takes(q_dtype, kv_dtype, kv_format)
    tile, best = planned(None, q_ok), planned(True, True)
    text = tile.words()
    if tile.gluon and kv_format != "16bit":
        text += " (the tl.dot tile for batches too small to fill the GPU with 64-row tiles)"
    text += f"; Triton {triton.__version__}"
    if tile.gluon and _TRITON not in _GLUON_VERIFIED:
        text += " (GLMOPS_SPARSE_MLA_GLUON=1: the Gluon tiles are not verified under it)"
    if best.gluon and not tile.gluon:
        why = [reason] if (reason := _gluon_off_reason()) else []
        q_name = str(q_dtype).removeprefix("torch.")
        why += [] if q_ok else [f"does not take a {q_name} q over {kv_format} rows"]
        text += f" (the {best.words()} {' and '.join(why)})"
    major, minor = limits.capability
    return (
        f"{num_heads} query heads, {str(q_dtype).removeprefix('torch.')} q over {kv_format} "
        f"rows on SM{major}{minor} ({limits.smem_per_block} B of shared memory per block): {text}"
    )


# Shared memory of the 16-head fp8_ds_mla tile with q's rope part in shared memory (Triton
# 3.6, sm_89/90/120; tests/unit/test_sparse_mla_targets.py compiles both forms).
_DS_TILE_16_HEADS_SMEM = 103_168


def _rope_in_registers(kv_format: str, block_h: int, limits: DeviceLimits) -> bool:
    """Whether the 16-head e4m3 mma.sync tile over fp8_ds_mla rows keeps q's rope part in
    registers (``ROPE_REGS``): on a GPU whose blocks cannot hold its shared-memory form
    (under 103,168 bytes)."""
    ds_16 = kv_format == "fp8_ds_mla" and block_h == 16
    return ds_16 and limits.smem_per_block < _DS_TILE_16_HEADS_SMEM


def _e4m3_mma_tile(num_heads: int, waves: int, kv_format: str, limits: DeviceLimits) -> Tile:
    """``_sparse_mla_mma_e4m3_kernel``'s tile for up to 16 heads: 64-row tiles at 2 stages, 8
    heads on 4 warps or 16 on two groups of 4."""
    block_h = 8 if num_heads <= 8 else 16
    rope_regs = _rope_in_registers(kv_format, block_h, limits)
    return MmaE4m3Tile(block_h, 64, block_h // 2, 2, waves, rope_regs=rope_regs)


def _with_column_groups(tile: MmaTile, kv_format: str, limits: DeviceLimits) -> MmaTile:
    """``_sparse_mla_mma_kernel``'s scores over 16-bit rows as a dot batched over two groups
    of columns, 16 heads a warp (DESIGN.md "The Gluon tiles"), where the tile takes them and
    fits the block's shared memory with their scratch; e4m3 rows keep one (q's two parts would
    need twice the registers)."""
    grouped = dataclasses.replace(tile, col_warps=2)
    fits = kv_format == "16bit" and grouped.column_groups_fit(kv_format)
    if fits and grouped.smem_bound() <= limits.smem_per_block:
        return grouped
    return tile


def _default_tile(
    num_heads: int,
    kv_format: str = "16bit",
    wgmma: bool = False,
    limits: DeviceLimits = H200_LIMITS,
    gluon_mma: bool = False,
) -> Tile:
    """Tile by head count, row format and device: the first tl.dot tile in ``_TILES`` that
    fits the device's shared memory, or a Gluon tile. ``waves`` is how many programs per
    SM the split count aims for; ``rounds``, how many rounds of them it may queue to fill SMs
    that a power of two leaves idle (one program per SM only; default 1). ``wgmma`` (Hopper,
    16-bit rows) picks the Gluon kernels: the swapped tile for up to 16 heads (two 64-row
    stages, ~158-168 KB, one per SM), the 32-head mma.sync tile for 17-32 (e4m3 rows too) and the
    64-head tile for 33+ (DESIGN.md "The Gluon tiles").
    With fp8 e4m3 rows it picks the swapped e4m3 tile for up to 16 heads
    and, with two warpgroups, for 33+ (DESIGN.md "The Gluon tiles"); other heads and formats
    keep the tl.dot tiles. ``gluon_mma`` (SM8x, SM120: ``_gluon_mma_usable``) picks the e4m3
    tile with mma.sync for fp8 e4m3 rows with up to 16 heads (DESIGN.md "The Gluon tiles"), the
    mma.sync tiles with q in registers for 16-bit rows with up to 32 heads and e4m3 rows with 17-32,
    and for 33+ heads (16-bit or e4m3 rows) where no 64-head tl.dot tile fits (DESIGN.md "The Gluon
    tiles"). fp8_ds_mla rows take the e4m3 mma.sync tile with up to 16 heads wherever the mma.sync
    tiles or Hopper's run (DESIGN.md "fp8_ds_mla rows")."""
    reason = _unsupported(num_heads, kv_format, limits)
    if reason is not None:
        raise ValueError(f"sparse MLA decode: {reason}")
    if kv_format == "fp8_ds_mla" and (gluon_mma or wgmma) and num_heads <= 16:
        # The e4m3 mma.sync tile over fp8_ds_mla rows (``DS``): 8 heads on 4 warps (93 KB; two
        # per SM on Hopper), 16 on 8 warps (103 KB; 101,120 bytes with q's rope part in
        # registers, which a 99 KB GPU needs): 1.2-1.6x over the grouped tl.dot tile at
        # B >= 8 with 8 heads, 1.05-1.21x with 16 (DESIGN.md "fp8_ds_mla rows").
        return _e4m3_mma_tile(num_heads, 2 if wgmma and num_heads <= 8 else 1, kv_format, limits)
    if gluon_mma and kv_format == "fp8" and num_heads <= 16:
        # 84 KB at 8 heads, 94 KB at 16: one program per SM on a 99 KB GPU. 16 heads run on
        # two groups of 4 warps, 8 heads each (5-14% faster than one group on the H200).
        return _e4m3_mma_tile(num_heads, 1, kv_format, limits)
    mma_rows = kv_format == "16bit" or (kv_format == "fp8" and num_heads > 16)
    if mma_rows and num_heads <= 32 and (gluon_mma or (wgmma and num_heads > 16)):
        # q in registers, two warps along the keys and one per 8 heads (one program per SM):
        # 16-bit rows 1.06-1.33x over the 16-head tl.dot tile one per SM at B >= 8,
        # 1.27-1.69x over the 32-head one; e4m3 rows with 17-32 heads 1.02-1.37x over the
        # e4m3 tl.dot tiles (DESIGN.md "The Gluon tiles"). Hopper keeps its swapped tiles
        # for up to 16.
        block_h = 16 if num_heads <= 16 else 32
        return _with_column_groups(MmaTile(block_h, 32, block_h // 4, 2), kv_format, limits)
    block_h = min(64, max(16, triton.next_power_of_2(num_heads)))
    wide_tl_dot = any(t.block_h == 64 and t.fits(limits) for t in _TILES[kv_format, 64])
    if gluon_mma and kv_format in ("16bit", "fp8") and block_h == 64 and not wide_tl_dot:
        # 64-head blocks that gather each row once where no 64-head tl.dot tile fits (99 KB
        # GPUs), q in registers, 78 KB (16-bit rows: 96.5 KB with the column groups' scratch);
        # the stages hold q on its way there: 64 16-bit rows, 128 e4m3 ones (DESIGN.md "The Gluon
        # tiles"). Bound by its MMAs, it queues up to 4 rounds of programs per SM where powers of
        # two leave SMs idle (``_fill_splits``; DESIGN.md "Splits").
        wide = MmaWideTile(64, 32, 8, 4 if kv_format == "fp8" else 2, rounds=4)
        return _with_column_groups(wide, kv_format, limits)
    gluon = wgmma and kv_format in ("16bit", "fp8")
    if gluon and num_heads <= 16:
        # The swapped tile: 8 or 16 heads are the MMA's N, so H=8 computes no padding rows.
        # Its e4m3 twin widens V in registers (84-95 KB) and runs two programs per SM where
        # each split keeps 8+ tiles (DESIGN.md "Splits").
        block_h = 8 if num_heads <= 8 else 16
        if kv_format == "fp8":
            return WgmmaE4m3Tile(block_h, 64, 4, 2, waves=2, min_tiles=8)
        return WgmmaSwappedTile(block_h, 64, 4, 2)
    if gluon and block_h == 64:
        # The 64-head tile; for e4m3 rows, the e4m3 tile with two warpgroups sharing its
        # gathers (32 heads each for the scores, half of V's columns each for P.V; DESIGN.md "The
        # Gluon tiles"). 128 heads run two blocks.
        return (WgmmaE4m3Tile if kv_format == "fp8" else WgmmaTile)(64, 64, 8, 2)
    tile = next(tile for tile in _TILES[kv_format, block_h] if tile.fits(limits))
    # Two programs per SM where the SM holds two (Hopper, Blackwell datacenter), else one, whose
    # split count then fills the SMs (``_fill_splits``; DESIGN.md "Splits").
    smem = tile.smem.on(limits.capability) if tile.smem else 0
    return dataclasses.replace(tile, waves=min(tile.waves, _blocks_per_sm(smem, limits)))


@functools.lru_cache(maxsize=256)  # on every call's path: the fill tries many counts
def _choose_splits(
    num_tokens: int,
    programs_per_token: int,
    topk: int,
    num_heads: int,
    block_n: int,
    num_sms: int,
    waves: int,
    min_tiles: int = 1,
    rounds: int = 1,
) -> int:
    """Split count: a power of two near ``waves`` programs per SM, but once about every SM has
    a program, no more splits than keep the partials written under an eighth of the KV bytes
    gathered (the merge reads them back, so partial traffic stays under a quarter). A token's
    rows are gathered once per head block: 99 KB GPUs serve 64+ heads with 32-head blocks,
    where counting them once cost B=32/H=64 105 µs at 2 splits against 74 at 4 (H200,
    ``sweeps/sparse_mla_h200_sm120_tiles_bf16.json``).

    Each split writes H x 2 KB of fp32 partials per token (the Gluon tiles half as much; the cap
    is not binding for them at one program per SM) against topk x 1152 B of KV; at B=8
    the extra parallelism of a second program per SM costs more in partials than it buys
    (H200: H=8 14.1 us at 16 splits, 15.3 at 32; H=16 14.4 vs 17.0; DESIGN.md "Splits"). The
    cap counts 16-bit rows for fp8_ds_mla rows too: their widening, not their bytes, sets the
    pace (fp8 B=32/H=8: 55.9 us at 8 splits, 75.9 at 4; DESIGN.md "Splits"). Tiles that run
    one program per SM then fill the SMs the power of two leaves idle (``_fill_splits``; up to
    ``rounds`` rounds of programs per SM), and the others up to one program per SM where the
    caps leave them short of one.
    """
    per_split = max(1, num_tokens * programs_per_token)
    splits = _pow2_floor(max(1, (waves * num_sms) // per_split))
    # Each program of a token gathers the token's rows (all but the first from L2).
    gathered = topk * _D_QK * 2 * programs_per_token
    partial_cap = _pow2_floor(max(1, gathered // (8 * num_heads * _D_V * 4)))
    one_wave = _pow2_floor(max(1, num_sms // per_split))  # about one program per SM
    if splits > partial_cap:
        splits = min(splits, max(partial_cap, one_wave))
    # Programs beyond one per SM only where each split keeps min_tiles tiles: the e4m3 Hopper
    # tile gains from a second at B=128 (H=16: 65-66 us at 2 splits, 68-69 at 1) but not at
    # B=32 (8 tiles a split, 4 at 8 splits: H=16 24.7-24.8 us at 4, 25.1-25.3 at 8) or B=8
    # (DESIGN.md "Splits").
    long_splits = _pow2_floor(max(1, topk // (block_n * min_tiles)))
    splits = min(splits, max(one_wave, long_splits))
    max_splits = _pow2_floor(max(1, topk // block_n))  # a split keeps >= one BLOCK_N tile
    splits = max(1, min(splits, max_splits))
    # Two-per-SM tiles fill too where the partial cap, or the e4m3 Hopper tile's min_tiles, left
    # them short of one program per SM, up to one each (132 SMs: B=5-6, 9-13 with 16+ heads,
    # 17-26 with 32, the e4m3 tile at 9-12 and 17-26, fp8_ds_mla's grouped tile at 32 heads at
    # 3 and 5-6: 1.07-1.38x, DESIGN.md "Splits").
    if waves == 1 or per_split * splits < num_sms:
        fill_rounds = rounds if waves == 1 else 1
        splits = _fill_splits(splits, per_split, topk, block_n, num_sms, fill_rounds)
    return splits


def _fill_splits(splits: int, per_split: int, topk: int, block_n: int, num_sms: int,
                 rounds: int) -> int:  # fmt: skip
    """A split count from ``splits`` up, not only a power of two, that leaves no SM idle where
    one program per SM runs: powers of two keep 128 programs at B=128, 32 and 8 (up to 16
    heads), which leaves a third of SM120's 188 SMs idle. A count's modelled time is the
    rounds of programs an SM runs times each program's tiles plus one (its fixed cost: q, the
    first gather, the epilogue). ``rounds`` caps the rounds: 1 adds programs only up to one per
    SM; tiles bound by their MMAs rather than their gathers take more (the 99 KB 64-head tile).
    Counts that leave a split without rows are skipped; ties keep fewer splits (less partial
    traffic). Measured on H200 analogs of SM120's B=128, 32 and 8: DESIGN.md "Splits"."""

    def modelled(count: int) -> tuple[int, int]:
        chunk = _split_chunk(topk, count, block_n)
        waves_needed = -(-per_split * count // num_sms)
        empty = -(-topk // chunk) < count
        over = waves_needed > rounds and count != splits
        return (1 << 62 if empty or over else waves_needed * (chunk // block_n + 1), count)

    most = min(max(splits, rounds * num_sms // per_split), topk // block_n)
    return min(range(splits, most + 1), key=modelled, default=splits)


def _split_chunk(topk: int, num_splits: int, block_n: int) -> int:
    """Top-k entries per split, in whole BLOCK_N tiles (the last split takes what is left)."""
    per_split = -(-max(topk, 1) // num_splits)
    return -(-per_split // block_n) * block_n


def _pow2_floor(n: int) -> int:
    return 1 << (n.bit_length() - 1)


def _plan(
    num_tokens: int,
    num_heads: int,
    topk: int,
    device: torch.device,
    num_splits: int | None = None,
    tile: Tile | None = None,
    kv_format: str = "16bit",
    wgmma: bool | None = None,
    limits: DeviceLimits | None = None,
    gluon_mma: bool | None = None,
) -> tuple[Tile, int]:
    """The tile and split count for a call (also used by the benchmark to report them):
    ``tile`` where the caller names one (the benchmark's sweeps), checked, else the plan's.
    ``wgmma``, ``gluon_mma``: whether the Hopper Gluon kernels, or the tiles with mma.sync,
    may run (``None``: whenever the device has them); ``limits``: the device's (``None``: read
    from it; the benchmark passes a smaller GPU's)."""
    if limits is None:
        limits = _device_limits(_device_index(device))
    if tile is None:
        if wgmma is None:
            wgmma = _has_wgmma(_device_index(device))
        if gluon_mma is None:
            gluon_mma = _has_gluon_mma(_device_index(device))
        tile = _default_tile(num_heads, kv_format, wgmma, limits, gluon_mma)
        tiles_64 = num_tokens * triton.cdiv(topk, 64)
        if kv_format != "16bit" and tile.gluon and tiles_64 < _num_sms(_device_index(device)):
            # Too few 64-row tiles to fill the GPU (one token): the tl.dot tile's 32-row tiles
            # are faster there (H200, two programs per SM: B=1 8.1 against 8.6 µs, DESIGN.md
            # "The Gluon tiles").
            tile = _default_tile(num_heads, kv_format, False, limits)
    tile.validate(kv_format, limits)
    if num_splits is None:
        num_splits = _choose_splits(
            num_tokens,
            triton.cdiv(num_heads, tile.block_h) * tile.head_block_programs(),
            topk,
            num_heads,
            tile.block_n,
            _num_sms(_device_index(device)),
            tile.waves,
            tile.min_tiles,
            tile.rounds,
        )
    return tile, max(1, min(int(num_splits), max(1, triton.cdiv(topk, tile.block_n))))


def _merge_columns(rows: int, block_s: int, num_sms: int) -> int:
    """V columns per merge program, for ``rows`` (token, head) rows of ``block_s`` padded splits:
    whole 512-column rows up to 16 splits, narrower beyond (a program holds at most 8192
    partial values, DESIGN.md "The merge and its launch"), and narrower still until the merge has
    about two programs per SM: at B=8/H=8, 64 programs of whole rows took 0.5 µs longer than 512 of
    64 columns."""
    block_dv = max(64, min(_D_V, 8192 // block_s))
    while block_dv > 64 and rows * (_D_V // block_dv) < 2 * num_sms:
        block_dv //= 2
    return block_dv


def _merge_warps(block_dv: int, elem_size: int) -> int:
    """Warps of a merge program: no more than its columns fill with 16-byte pieces side by
    side, so that the sum over splits never crosses warps (DESIGN.md "The merge and its launch"; in
    chunks narrower than a warp's span it crosses lanes of one warp). With 64+ fp32 splits that is
    256 values per thread in one warp, which spills a little and still measured faster than
    4 warps (B=1/H=8: 7.95 vs 8.11 µs)."""
    lane_cols = 512 // elem_size  # columns that 32 lanes cover with 16-byte pieces
    return max(1, min(4, block_dv // lane_cols))
