"""The sweep2 point lists of bench.py (``--plan NAME``), one per round of backend/NOTES.md:
each returns (B, H, config, split count) points, ``None`` for the plan's own config or split
count. The docstring of each says what its round compared and how to run it."""

from __future__ import annotations

TOPK = 2048  # the top-k of every benchmark case and sweep point


def plan_v2() -> list[tuple[int, int, dict[str, int], int]]:
    """Targeted second sweep: V-half split for large H, combine width and split for small B."""
    pts: list[tuple[int, int, dict[str, int], int]] = []
    big = [
        {"BLOCK_H": 64, "BLOCK_N": 64, "num_warps": 8, "num_stages": 2},
        {"BLOCK_H": 64, "BLOCK_N": 128, "num_warps": 8, "num_stages": 1},
        {"BLOCK_H": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2, "DV_SPLIT": 2},
        {"BLOCK_H": 64, "BLOCK_N": 32, "num_warps": 4, "num_stages": 3, "DV_SPLIT": 2},
        {"BLOCK_H": 64, "BLOCK_N": 64, "num_warps": 8, "num_stages": 2, "DV_SPLIT": 2},
        {"BLOCK_H": 64, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2, "DV_SPLIT": 2},
    ]
    h128 = [{"BLOCK_H": 128, "BLOCK_N": 32, "num_warps": 8, "num_stages": 2, "DV_SPLIT": 2}]
    for batch, heads, splits in [
        (128, 64, (1, 2)),
        (128, 128, (1, 2)),
        (32, 128, (1, 2, 4)),
        (8, 64, (4, 8, 16)),
        (32, 64, (2, 4)),
    ]:
        for cfg in big + (h128 if heads == 128 else []):
            pts += [(batch, heads, cfg, sp) for sp in splits]
    small = [
        {"BLOCK_H": 16, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2},
        {"BLOCK_H": 16, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2},
        {"BLOCK_H": 16, "BLOCK_N": 16, "num_warps": 4, "num_stages": 2},
        {"BLOCK_H": 16, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2, "COMBINE_DV": 512},
    ]
    for batch, splits in [
        (1, (32, 64, 128)),
        (8, (16, 32, 64, 128)),
        (32, (8, 16, 32)),
        (128, (2, 4, 8)),
    ]:
        for cfg in small:
            pts += [(batch, 8, cfg, sp) for sp in splits if 2048 // sp >= cfg["BLOCK_N"]]
    return pts


def plan_r3() -> list[tuple[int, int, dict[str, int], int]]:
    """Round 3, small heads (the TP=8 regime): the merge launched as a programmatic dependent
    (PDL), and wider or deeper gather tiles that keep more bytes in flight per program."""
    base = {"BLOCK_H": 16, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2}
    configs = [
        {**base, "PDL": 0},
        {**base, "PDL": 1},
        {**base, "num_stages": 4, "PDL": 1},
        {**base, "BLOCK_N": 64, "PDL": 1},
        {**base, "BLOCK_N": 64, "num_stages": 3, "PDL": 1},
        {**base, "BLOCK_N": 64, "num_warps": 8, "PDL": 1},
        {**base, "BLOCK_N": 128, "num_warps": 8, "num_stages": 1, "PDL": 1},
        {**base, "BLOCK_N": 16, "PDL": 1},
    ]
    cases = [
        (8, 8, (8, 16, 32, 64)),
        (8, 16, (8, 16, 32, 64)),
        (128, 8, (1, 2, 4)),
        (128, 16, (1, 2, 4)),
        (1, 8, (32, 64)),
        (32, 8, (4, 8, 16)),
    ]
    return [
        (batch, heads, cfg, sp)
        for batch, heads, splits in cases
        for cfg in configs
        for sp in splits
        if TOPK // sp >= cfg["BLOCK_N"]
    ]


CaseRow = tuple[int, int, tuple[int, ...], list[dict[str, int]]]
Point = tuple[int, int, dict[str, int], int]


def _expand(cases: list[CaseRow]) -> list[Point]:
    """(B, H, split counts, configs) rows -> one sweep point per config and split count."""
    return [(b, h, cfg, sp) for b, h, splits, cfgs in cases for cfg in cfgs for sp in splits]


def plan_r4() -> list[tuple[int, int, dict[str, int], int]]:
    """Round 4: the next tile's indices prefetched by hand (``PREFETCH_IDX``) so that 3-4
    pipeline stages keep gathers in flight across the dot products; small and large heads."""
    small = [
        {"BLOCK_H": 16, "BLOCK_N": n, "num_warps": w, "num_stages": s, "PREFETCH_IDX": 1}
        for n, w, s in [(32, 4, 2), (32, 4, 3), (32, 4, 4), (16, 4, 3), (64, 4, 3), (64, 8, 3)]
    ]
    large = [
        {"BLOCK_H": 64, "BLOCK_N": n, "num_warps": 8, "num_stages": s, "PREFETCH_IDX": 1}
        for n, s in [(64, 2), (32, 3), (32, 4), (16, 4)]
    ]
    cases = [
        (1, 8, (32, 64), small),
        (8, 8, (8, 16, 32), small),
        (8, 16, (16, 32), small),
        (32, 8, (8, 16), small),
        (128, 8, (2, 4), small),
        (128, 16, (2, 4), small),
        (8, 64, (8, 16), large),
        (32, 64, (2, 4), large),
        (128, 64, (1, 2), large),
        (128, 128, (1, 2), large),
    ]
    return _expand(cases)


def plan_fp8() -> list[tuple[int, int, dict[str, int], int]]:
    """fp8_ds_mla rows (run with --dtypes fp8): tiles and splits for the 656-byte rows, whose
    dequantization holds the tile in fp32 registers before the dots."""
    small = [
        {"BLOCK_H": 16, "BLOCK_N": n, "num_warps": w, "num_stages": st, "PREFETCH_IDX": pf}
        for n, w, st, pf in [
            (32, 4, 3, 1),
            (32, 4, 2, 0),
            (16, 4, 3, 1),
            (32, 8, 3, 1),
            (64, 8, 2, 0),
        ]
    ]
    large = [
        {"BLOCK_H": 64, "BLOCK_N": n, "num_warps": 8, "num_stages": st}
        for n, st in [(64, 2), (32, 2), (32, 3)]
    ]
    cases = [
        (1, 8, (32, 64), small),
        (8, 8, (8, 16, 32), small),
        (32, 8, (4, 8, 16), small),
        (128, 8, (1, 2, 4), small),
        (128, 16, (1, 2, 4), small),
        (8, 64, (8, 16), large),
        (128, 64, (1, 2), large),
        (128, 128, (1, 2), large),
    ]
    return _expand(cases)


def plan_r6() -> list[tuple[int, int, dict[str, int], int]]:
    """Round 6: the Hopper warpgroup-MMA tile (Gluon, ``WGMMA``) for 64+ heads at two tile
    shapes, against the tl.dot 64-head tile in the same run (run with --split-alone to see the
    merge's share). Round 6's committed sweeps also name variants since removed from the kernel
    (EARLY_ISSUE, L2_PREFETCH, OVERLAP_PV, LAZY_RESCALE): NOTES.md round 6 says what each was."""
    wgmma = [
        {"BLOCK_H": 64, "BLOCK_N": n, "num_warps": 8, "num_stages": st, "WGMMA": 1}
        for n, st in [(64, 2), (32, 3)]
    ]
    old = [{"BLOCK_H": 64, "BLOCK_N": 64, "num_warps": 8, "num_stages": 2, "WGMMA": 0}]
    cases = [
        (1, 64, (32,), old + wgmma),
        (8, 64, (8, 16), old + wgmma),
        (32, 64, (4,), old + wgmma),
        (128, 64, (1,), old + wgmma),
        (1, 128, (32,), old + wgmma),
        (8, 128, (8,), old + wgmma),
        (32, 128, (2,), old + wgmma),
        (128, 128, (1,), old + wgmma),
    ]
    return _expand(cases)


# The 16-head tl.dot tile, named in full: on Hopper the default for 8-16 heads is the swapped
# Gluon tile since round 8.
TL_DOT_16 = {"BLOCK_H": 16, "BLOCK_N": 32, "num_warps": 4, "num_stages": 3, "PREFETCH_IDX": 1}


def plan_r7() -> list[tuple[int, int, dict[str, int], int]]:
    """Round 7: the Gluon tile (keys split across the warpgroups now) tried at 8-16 heads
    (padded to 64) against the 16-head tl.dot tile, and the defaults at 64+ heads. Round 7's
    first two committed sweeps name variants since removed from the kernel (SPLIT_S, STAGE_OUT,
    PART16): NOTES.md round 7 says what each was."""
    gluon = {"BLOCK_H": 64, "num_warps": 8, "WGMMA": 1}
    tiles = ((64, 2), (32, 3), (32, 4), (16, 4))
    small = [TL_DOT_16] + [{**gluon, "BLOCK_N": n, "num_stages": st} for n, st in tiles]
    large = [{}]
    cases = [
        (1, 8, (32, 64), small),
        (8, 8, (8, 16, 32), small),
        (8, 16, (8, 16, 32), small),
        (32, 8, (4, 8), small),
        (128, 8, (1, 2), small),
        (8, 64, (16,), large),
        (128, 64, (1,), large),
        (8, 128, (8,), large),
        (128, 128, (1,), large),
    ]
    return _expand(cases)


def plan_r7s() -> list[tuple[int, int, dict[str, int], int]]:
    """Round 7: split counts around the default for the Gluon tile with 16-bit partials."""
    cases = [
        (1, 64, (16, 32, 64), [{}]),
        (1, 128, (16, 32), [{}]),
        (8, 64, (8, 16, 32), [{}]),
        (8, 128, (4, 8, 16), [{}]),
        (32, 64, (2, 4, 8), [{}]),
        (32, 128, (1, 2, 4), [{}]),
        (128, 64, (1, 2), [{}]),
        (128, 128, (1, 2), [{}]),
    ]
    return _expand(cases)


def plan_r8() -> list[tuple[int, int, dict[str, int], int]]:
    """Round 8: the swapped small-head Gluon tile (keys as the MMA's M, 8 or 16 heads as its
    N) against the 16-head tl.dot tile, with and without an early (PDL) merge."""
    swapped = [
        {"BLOCK_H": bh, "BLOCK_N": 64, "num_warps": 4, "num_stages": st, "WGMMA": 1, "PDL": pdl}
        for bh, st in ((16, 2), (8, 2), (8, 3))
        for pdl in (0, 1)
    ]
    small = [TL_DOT_16] + swapped
    cases = [
        (1, 8, (16, 32), small),
        (8, 8, (8, 16, 32), small),
        (8, 16, (8, 16, 32), small),
        (32, 8, (2, 4, 8), small),
        (32, 16, (2, 4, 8), small),
        (128, 8, (1, 2), small),
        (128, 16, (1, 2), small),
    ]
    return _expand(cases)


def plan_sm120() -> list[tuple[int, int, dict[str, int], int]]:
    """64+ heads within a 99 KB block (SM120, SM86/89): 32-head blocks (the first plan), 64-head
    blocks of 16-row tiles, 32-head blocks with 8 warps. Run with --dtypes bf16 or e4m3."""
    tiles = [
        {"BLOCK_H": h, "BLOCK_N": n, "num_warps": w, "num_stages": st}
        for h, n, w, st in [(32, 32, 4, 2), (64, 16, 8, 2), (64, 16, 8, 3), (32, 32, 8, 2)]
    ]
    cases = [
        (b, h, sp, tiles) for b, sp in ((8, (8, 16)), (32, (2, 4)), (128, (1,))) for h in (64, 128)
    ]
    return _expand(cases)


def plan_r11() -> list[tuple[int, int, dict[str, int], int]]:
    """fp8 e4m3 rows (run with --dtypes e4m3): more rows in flight per SM for the 16-head tile
    (64-row tiles, 8 warps, deeper pipelines), and the 64-head tile with the latent gathered
    per dot and V widened before shared memory (64x32), against the default tiles."""
    fp8 = {"FP8_TWICE": 1, "FP16_DOTS": 1, "V_ASM": 1}
    small = [
        {"BLOCK_H": 16, "BLOCK_N": n, "num_warps": w, "num_stages": st, **fp8}
        for n, w, st in [(32, 4, 3), (64, 4, 2), (64, 8, 2), (64, 8, 3), (32, 8, 3), (16, 4, 4)]
    ]
    large = [
        {"BLOCK_H": 64, "BLOCK_N": 64, "num_warps": 8, "num_stages": 2},
        {"BLOCK_H": 64, "BLOCK_N": 32, "num_warps": 8, "num_stages": 2, **fp8},
        {"BLOCK_H": 64, "BLOCK_N": 16, "num_warps": 8, "num_stages": 3, **fp8},
    ]
    cases = [
        (32, 8, (4, 8), small),
        (128, 8, (1, 2, 4), small),
        (128, 16, (1, 2), small),
        (32, 64, (2, 4), large),
        (128, 64, (1, 2), large),
    ]
    return _expand(cases)


def plan_r11e() -> list[tuple[int, int, dict[str, int], int]]:
    """fp8 e4m3 rows (run with --dtypes e4m3): the 16-head tile with the latent gathered once
    for both dots (V widened once, by inline PTX, so K and V read the same fp16 tile), with
    the indices prefetched (two gathers in flight), and widened by moving bits
    (``E4M3_BITS``); the default tile first and last (the run's spread); and the 64x32 tile
    with one gather."""
    tile = {"BLOCK_H": 16, "BLOCK_N": 32, "num_warps": 4, "FP16_DOTS": 1, "V_ASM": 1}
    default = {**tile, "num_stages": 3, "FP8_TWICE": 1}
    once = {**tile, "FP8_TWICE": 0}
    small = [
        default,
        {**once, "num_stages": 3},
        {**once, "num_stages": 3, "PREFETCH_IDX": 1},
        {**once, "num_stages": 4, "PREFETCH_IDX": 1},
        {**once, "num_stages": 3, "PREFETCH_IDX": 1, "E4M3_BITS": 1},
        {**default, "num_warps": 4},  # the default again, as a separate point
    ]
    large = [
        {"BLOCK_H": 64, "BLOCK_N": 64, "num_warps": 8, "num_stages": 2},
        {"BLOCK_H": 64, "BLOCK_N": 32, "num_warps": 8, "num_stages": 2, "FP16_DOTS": 1, "V_ASM": 1},
    ]
    cases = [
        (128, 8, (2, 1), small),
        (128, 16, (2,), small),
        (32, 8, (8,), small),
        (32, 16, (8,), small),
        (8, 8, (16,), small),
        (1, 8, (64,), small),
        (128, 64, (1,), large),
        (32, 64, (4,), large),
    ]
    return _expand(cases)


def plan_r11f() -> list[tuple[int, int, dict[str, int], int]]:
    """fp8 e4m3 rows (run with --dtypes e4m3): the 32-head tile with one gather widened by
    moving bits (92 KB: fits 99 KB GPUs) against the H200's 32-head tile (per-dot gathers,
    V by inline PTX, 107 KB) and the 99 KB GPUs' (per-dot gathers, 74 KB), at 32 heads and,
    as 32-head blocks, at 64 and 128 (the SM120 tile for 64+ heads)."""
    tile = {"BLOCK_H": 32, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2, "FP16_DOTS": 1}
    tiles = [
        {**tile, "FP8_TWICE": 1, "V_ASM": 1},
        {**tile, "FP8_TWICE": 1},
        {**tile, "V_ASM": 1, "E4M3_BITS": 1},
        {**tile, "FP8_TWICE": 1, "V_ASM": 1, "num_warps": 4},  # the first again
    ]
    cases = [(128, 32, (1,), tiles), (32, 32, (4,), tiles), (8, 32, (16,), tiles)]
    cases += [(128, 64, (1,), tiles), (32, 64, (4,), tiles), (8, 128, (8,), tiles)]
    return _expand(cases)


def _hopper_small_tile(heads: int) -> dict[str, int]:
    """The default Hopper tile of up to 16 heads (the swapped tile; for e4m3 rows, its e4m3
    twin): 8 or 16 heads as the MMA's N, 64-row tiles, 2 stages, one program per SM."""
    return {"WGMMA": 1, "BLOCK_H": 8 if heads <= 8 else 16, "BLOCK_N": 64, "num_warps": 4,
            "num_stages": 2, "WAVES": 1}  # fmt: skip


#: (B, H, split count) of the small-head Hopper sweeps: the benchmark's split counts.
_SMALL_HEAD_CASES = [(128, 8, 1), (128, 16, 1), (32, 8, 4), (32, 16, 4), (8, 8, 16), (8, 16, 16)]


def plan_r12g() -> list[tuple[int, int, dict[str, int], int]]:
    """fp8 e4m3 rows (run with --dtypes e4m3 --check): the swapped Hopper tile for e4m3 rows
    (``_sparse_mla_wgmma_e4m3_kernel``: e4m3 MMAs for the scores on the gathered tile, V
    widened by bits into an fp16 tile) at 2 and 3 stages, against the 16-head tl.dot tile, which
    runs first and last."""
    tl_dot = {"BLOCK_H": 16, "BLOCK_N": 32, "num_warps": 4, "num_stages": 3, "PREFETCH_IDX": 1,
              "FP16_DOTS": 1, "V_ASM": 1, "E4M3_BITS": 1}  # fmt: skip
    cases = []
    for b, h, splits in [(128, 8, (1, 2)), (128, 16, (1, 2)), (32, 8, (4, 8)), (32, 16, (4, 8)),
                         (8, 8, (16, 32)), (8, 16, (16, 32)), (1, 8, (32, 64))]:  # fmt: skip
        gluon = [{**_hopper_small_tile(h), "num_stages": st} for st in (2, 3)]
        cases.append((b, h, splits, [tl_dot, *gluon, {**tl_dot, "num_warps": 4}]))
    return _expand(cases)


def plan_r12v() -> list[tuple[int, int, dict[str, int], int]]:
    """fp8 e4m3 rows (run with --dtypes e4m3 --check): the e4m3 Hopper tile with two V
    buffers (``V_BUFFERS``: a tile's P.V runs while the next tile's scores and V widening do)
    against one, which runs first and last. ``V_BUFFERS`` needs the kernel change in
    ``sweeps/sparse_mla_e4m3_wgmma_v_buffers_rejected.diff`` (without it the launch has no
    such argument)."""
    cases = []
    for b, h, sp in _SMALL_HEAD_CASES:
        tile = _hopper_small_tile(h)
        two = {**tile, "V_BUFFERS": 2}
        cases.append((b, h, (sp,), [tile, two, {**tile, "V_BUFFERS": 1}, {**two, "num_warps": 4}]))
    return _expand(cases)


def plan_r12c() -> list[tuple[int, int, dict[str, int], int]]:
    """fp8 e4m3 rows (run with --dtypes e4m3 --check): the e4m3 Hopper tile with V widened by
    the hardware conversion (``V_CVT``), 16, 32 or (8 heads) 64 rows at a time
    (``V_CHUNK``), against the bits, 16 rows at a time, which run first and last. The
    kernel now always converts, 32 rows at a time; the switches are in
    ``sweeps/sparse_mla_e4m3_wgmma_v_widening_switches.diff``."""
    cases = []
    for b, h, sp in [(128, 8, 1), (128, 16, 1), (32, 8, 4), (32, 16, 4), (8, 8, 16)]:
        tile = _hopper_small_tile(h)
        cvt = {**tile, "V_CVT": 1}
        tiles = [tile, cvt, {**tile, "V_CHUNK": 32}, {**cvt, "V_CHUNK": 32}]
        tiles += [{**cvt, "V_CHUNK": 64}] * (h <= 8) + [{**tile, "V_CHUNK": 16}]
        cases.append((b, h, (sp,), tiles))
    return _expand(cases)


def plan_r12() -> list[tuple[int, int, dict[str, int], int]]:
    """fp8 e4m3 rows (run with --dtypes e4m3): V widened by moving bits in the H200's 32-head
    tile (the latent gathered per dot; K still converted after its copy), against that tile,
    at 32 heads and as 32-head blocks at 64 and 128 against the 64-head tile; and the 16-head
    tile with more programs or warps per SM (16-row tiles: 164 registers, 3 per SM; 8 warps:
    128 registers), the default first and last. The bits with ``FP8_TWICE`` need the kernel
    change in ``sweeps/sparse_mla_e4m3_v_bits_per_dot_rejected.diff`` (without it the launch
    drops the bits there)."""
    twice = {"BLOCK_H": 32, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2, "FP8_TWICE": 1,
             "FP16_DOTS": 1, "V_ASM": 1}  # fmt: skip
    wide = [twice, {**twice, "E4M3_BITS": 1}, {"BLOCK_H": 64, "BLOCK_N": 64, "num_warps": 8,
            "num_stages": 2}, {**twice, "num_warps": 4}]  # fmt: skip
    bits = {"BLOCK_H": 16, "num_warps": 4, "PREFETCH_IDX": 1, "FP16_DOTS": 1, "V_ASM": 1,
            "E4M3_BITS": 1}  # fmt: skip
    default = {**bits, "BLOCK_N": 32, "num_stages": 3}
    small = [
        default,
        {**default, "num_warps": 8},
        {**bits, "BLOCK_N": 16, "num_stages": 3},
        {**bits, "BLOCK_N": 16, "num_stages": 4},
        {**bits, "BLOCK_N": 64, "num_warps": 8, "num_stages": 2},
        {**default, "num_stages": 2},
        {**default, "BLOCK_H": 16},  # the default again, as a separate point
    ]
    cases = [
        (128, 32, (1,), wide[:2] + wide[3:]),
        (32, 32, (4,), wide[:2] + wide[3:]),
        (8, 32, (16,), wide[:2] + wide[3:]),
        (128, 64, (1,), wide),
        (32, 64, (4,), wide),
        (8, 128, (8,), wide),
        (128, 8, (2, 4), small),
        (128, 16, (2, 4), small),
        (32, 8, (8, 16), small),
        (8, 8, (16, 32), small),
    ]
    return _expand(cases)


def plan_r13() -> list[tuple[int, int, dict[str, int], int]]:
    """fp8 e4m3 rows (run with --dtypes e4m3 --check): the e4m3 Hopper tile with V widened
    ``V_ROWS`` rows per P.V MMA (16 rows: ~100/111 KB at 8/16 heads, two programs per SM;
    32: two per SM at neither; 64: one P.V per tile, as round 12), each at the split counts
    of one and of two programs per SM; the round-12 tile (64) first and last. ``V_ROWS`` needs
    the kernel change in ``sweeps/sparse_mla_e4m3_wgmma_v_rows_q_fused_ablate_switches.diff``
    (without it the launch has no such argument; NOTES.md round 13)."""
    cases = []
    for b, h, splits in [(128, 8, (1, 2)), (128, 16, (1, 2)), (32, 8, (4, 8)), (32, 16, (4, 8)),
                         (8, 8, (16, 32)), (8, 16, (16, 32))]:  # fmt: skip
        tile = _hopper_small_tile(h)
        tiles = [tile, {**tile, "V_ROWS": 32}, {**tile, "V_ROWS": 16}, {**tile, "V_ROWS": 64}]
        cases.append((b, h, splits, tiles))
    return _expand(cases)


def plan_r13b() -> list[tuple[int, int, dict[str, int], int]]:
    """fp8 e4m3 rows (run with --dtypes e4m3 --check): the e4m3 Hopper tile with q's two e4m3
    parts as one MMA of N = 2 x heads (``Q_FUSED``: the gathered tile is read once for the
    scores, the two halves summed through shared memory), alone and with V widened 16 rows
    per P.V at two programs per SM; and two diagnostics that leave a stage out (``ABLATE`` 1:
    no V widening, 2: no P.V; their outputs are wrong by design). The round-12 tile first and
    last. The switches need the kernel change in
    ``sweeps/sparse_mla_e4m3_wgmma_v_rows_q_fused_ablate_switches.diff``."""
    cases = []
    for b, h, sp in [(128, 8, 1), (128, 16, 1), (32, 8, 4), (32, 16, 4), (8, 8, 16)]:
        tile = _hopper_small_tile(h)
        fused = {**tile, "Q_FUSED": 1}
        cases.append((b, h, (sp,), [tile, fused]))
        cases.append((b, h, (sp, 2 * sp), [{**fused, "V_ROWS": 16}]))
        cases.append((b, h, (sp,), [{**tile, "ABLATE": 1}, {**tile, "ABLATE": 2}]))
        cases.append((b, h, (sp,), [{**fused, "ABLATE": 1}, {**tile, "V_ROWS": 64}]))
    return _expand(cases)


def plan_r13c() -> list[tuple[int, int, dict[str, int], int]]:
    """fp8 e4m3 rows (run with --dtypes e4m3 --check): the e4m3 Hopper tile with P.V as e4m3
    MMAs (``PV_E4M3``: V transposed byte-wise into a K-major e4m3 tile instead of widened to
    fp16, P times 2^8 in ``P_PARTS`` e4m3 parts), against the round-12 tile (V widened), which
    runs first and last. The switches (and ``W_ROWS``/``W_VEC``, plan r13d) need the kernel
    change in ``sweeps/sparse_mla_e4m3_wgmma_pv_e4m3_and_widen_layout_switches.diff``."""
    cases = []
    for b, h, sp in _SMALL_HEAD_CASES:
        tile = _hopper_small_tile(h)
        pv = {**tile, "PV_E4M3": 1}
        tiles = [tile, pv, {**pv, "P_PARTS": 1}, {**tile, "PV_E4M3": 0}]
        cases.append((b, h, (sp,), tiles))
    return _expand(cases)


def plan_r13d() -> list[tuple[int, int, dict[str, int], int]]:
    """fp8 e4m3 rows (run with --dtypes e4m3 --check): the e4m3 Hopper tile with V widened in
    a layout of ``W_ROWS`` rows per warp (1: a warp's 32 threads along one row, whose fp16
    stores conflict 2-way in the 128-byte swizzle, ncu: 7.8 wavefronts per 512-byte store;
    4 or 8: fewer columns per warp), 16 or (``W_VEC``) 8 bytes per thread, the round-12 layout
    (1 row, 16 bytes) first and last. The kernel now widens in the 8-row layout; the switches
    are in ``sweeps/sparse_mla_e4m3_wgmma_pv_e4m3_and_widen_layout_switches.diff``."""
    cases = []
    for b, h, sp in _SMALL_HEAD_CASES:
        tile = _hopper_small_tile(h)
        tiles = [tile] + [{**tile, "W_ROWS": w} for w in (4, 8)]
        tiles += [{**tile, "W_ROWS": w, "W_VEC": 8} for w in (4, 8)] + [{**tile, "W_ROWS": 1}]
        cases.append((b, h, (sp,), tiles))
    return _expand(cases)


def plan_r13e() -> list[tuple[int, int, dict[str, int], int]]:
    """The default Hopper tile of up to 16 heads (the e4m3 tile for --dtypes e4m3, the swapped
    16-bit tile for bf16) at the benchmark's split counts: run with ``--kernel`` on an earlier
    kernel file and on this one, alternately, for a same-run comparison (NOTES.md round 13)."""
    cases = []
    for b, h, sp in _SMALL_HEAD_CASES:
        tile = _hopper_small_tile(h)
        cases.append((b, h, (sp,), [tile]))
    return _expand(cases)


def plan_r14() -> list[tuple[int, int, dict[str, int], int]]:
    """fp8 e4m3 rows (run with --dtypes e4m3,bf16 --check): the e4m3 Hopper tile with V
    widened in registers (no fp16 V tile in shared memory, so it fits 3-4 stages, or two
    programs per SM at 2 stages) at 2, 3 and 4 stages, and at 2 stages with twice the splits;
    the default first and last. With bf16 rows, the same points on the swapped 16-bit tile
    (over 227 KB at 3+ stages there: those points fail to launch)."""
    cases = []
    for b, h, sp in _SMALL_HEAD_CASES:
        tile = _hopper_small_tile(h)
        deeper = [{**tile, "num_stages": st} for st in (3, 4)]
        cases.append((b, h, (sp,), [tile, *deeper, {**tile, "num_warps": 4}]))
        cases.append((b, h, (2 * sp,), [tile]))
    return _expand(cases)


def plan_r15() -> list[tuple[int, int, dict[str, int], int]]:
    """fp8 e4m3 rows (run with --dtypes e4m3 --check): the e4m3 Gluon tile with mma.sync
    (SM89/SM120's instructions, run on Hopper) at 2 and 3 stages and with two programs per
    SM (which a 99 KB GPU cannot hold), 16 heads also on 8 warps, against the e4m3 tl.dot
    tile a 99 KB GPU gets otherwise, which runs first and last, and the Hopper e4m3 tile;
    every point at its own plan's split count."""
    tl_dot = {"BLOCK_H": 16, "BLOCK_N": 32, "num_warps": 4, "num_stages": 3, "WAVES": 2,
              "PREFETCH_IDX": 1, "FP16_DOTS": 1, "V_ASM": 1, "E4M3_BITS": 1}  # fmt: skip
    cases = []
    for b, h, _ in _SMALL_HEAD_CASES:
        mma = {k: v for k, v in _hopper_small_tile(h).items() if k != "WGMMA"} | {"MMA_V2": 1}
        mma_tiles = [mma, {**mma, "num_stages": 3}, {**mma, "WAVES": 2, "MIN_TILES": 8}]
        if h == 16:  # two groups of 4 warps, 8 heads each
            mma_tiles += [{**mma, "num_warps": 8}, {**mma, "num_warps": 8, "WAVES": 2}]
        hopper = {**_hopper_small_tile(h), "WAVES": 2, "MIN_TILES": 8}
        cases.append((b, h, (None,), [tl_dot, *mma_tiles, hopper, {**tl_dot, "WAVES": 2}]))
    return _expand(cases)


def plan_r15h() -> list[tuple[int, int, dict[str, int], int]]:
    """fp8 e4m3 rows, 16 heads (run with --dtypes e4m3 --check): the Hopper e4m3 tile on two
    warpgroups of 8 heads (8 warps, 172 registers: one program per SM) against one warpgroup
    of 16 (255 registers, two per SM where splits keep 8+ tiles), which runs first and last;
    every point at its plan's split count. The 8-warp points need the kernel change in
    ``sweeps/sparse_mla_e4m3_wgmma_two_warpgroups_rejected.diff`` (without it the launch
    refuses them)."""
    tile = {**_hopper_small_tile(16), "WAVES": 2, "MIN_TILES": 8}
    eight = {**tile, "num_warps": 8}
    tiles = [tile, eight, {**eight, "WAVES": 1}, {**eight, "num_stages": 3}, tile]
    return _expand([(b, 16, (None,), tiles) for b in (128, 32, 8)])


def plan_r14w() -> list[tuple[int, int, dict[str, int], int]]:
    """fp8 e4m3 rows with 64 and 128 heads (run with --dtypes e4m3 --check): the e4m3 Hopper
    tile with two warpgroups of 32 heads, at 2 and 3 stages, against the 64-head tl.dot tile
    it replaces, which runs first and last."""
    tl_dot = {"BLOCK_H": 64, "BLOCK_N": 64, "num_warps": 8, "num_stages": 2, "WAVES": 1}
    gluon = {**tl_dot, "WGMMA": 1}
    tiles = [tl_dot, gluon, {**gluon, "num_stages": 3}, {**tl_dot, "WAVES": 1}]
    cases = [(128, 64, (1,), tiles), (32, 64, (4,), tiles), (8, 64, (16,), tiles)]
    cases += [(128, 128, (1,), tiles), (32, 128, (2,), tiles), (8, 128, (8,), tiles)]
    return _expand(cases)


def plan_r16() -> list[tuple[int, int, dict[str, int], int]]:
    """fp8 e4m3 rows (run with --dtypes e4m3 --check, and with ``--kernel`` on the round-15
    file for the same points before the change): the tiles whose P.V now runs on warps that
    split V's columns instead of the heads. The mma.sync tile at 16 heads on 8 warps, one
    program per SM (as SM120) and two; the Hopper e4m3 tile at 64 and 128 heads, 3 stages
    (the default) and 2; every point at its plan's split count."""
    mma = {k: v for k, v in _hopper_small_tile(16).items() if k != "WGMMA"} | {"MMA_V2": 1}
    mma = {**mma, "num_warps": 8}
    cases = [(b, 16, (None,), [mma, {**mma, "WAVES": 2}]) for b in (128, 32, 8)]
    wide = {"BLOCK_H": 64, "BLOCK_N": 64, "num_warps": 8, "num_stages": 3, "WAVES": 1, "WGMMA": 1}
    for h in (64, 128):
        cases += [(b, h, (None,), [wide, {**wide, "num_stages": 2}]) for b in (128, 32, 8)]
    return _expand(cases)


def plan_r16b() -> list[tuple[int, int, dict[str, int], int]]:
    """fp8 e4m3 rows, 8 heads (run with --dtypes e4m3 --check): the mma.sync tile as planned
    (8 heads, 4 warps) against the 16-head tile on 8 warps (8 padding heads in the scores,
    P.V on twice the warps, each widening 64 of V's columns), the plan's tile first and last;
    one program per SM, as SM120."""
    mma = {k: v for k, v in _hopper_small_tile(8).items() if k != "WGMMA"} | {"MMA_V2": 1}
    padded = {**mma, "BLOCK_H": 16, "num_warps": 8}
    return _expand([(b, 8, (None,), [mma, padded, mma]) for b in (128, 32, 8)])


def plan_r16c() -> list[tuple[int, int, dict[str, int], int]]:
    """fp8 e4m3 rows, 16 heads (run with --dtypes e4m3 --check): the Hopper e4m3 tile on two
    warpgroups of 8 heads for the scores, P.V on both along V's columns (8 warps, 123
    registers: two programs per SM fit), against one warpgroup of 16 heads, which runs first
    and last. The 8-warp points need a kernel whose warpgroup count follows ``num_warps``
    (``WG = gl.num_warps() // 4`` and the launch check allowing 16 heads on 8 warps)."""
    tile = {**_hopper_small_tile(16), "WAVES": 2, "MIN_TILES": 8}
    eight = {**tile, "num_warps": 8}
    tiles = [tile, eight, {**eight, "WAVES": 1}, tile]
    return _expand([(b, 16, (None,), tiles) for b in (128, 32, 8)])


def plan_r16d() -> list[tuple[int, int, dict[str, int], int]]:
    """16-bit rows (run with --dtypes bf16 --check): the 16-head tl.dot tile a 99 KB GPU
    runs for up to 16 heads (93 KB) at the plan's two programs per SM, which the H200 holds
    and SM120 (100 KB per SM) does not, against one program per SM, as SM120 holds it; the
    plan's first and last; and 16-row tiles, whose 2 stages fit twice in 100 KB."""
    tile = {"BLOCK_H": 16, "BLOCK_N": 32, "num_warps": 4, "num_stages": 3, "WAVES": 2,
            "PREFETCH_IDX": 1}  # fmt: skip
    small = {**tile, "BLOCK_N": 16, "num_stages": 2}  # two of these fit 100 KB
    tiles = [tile, {**tile, "WAVES": 1}, small, {**small, "num_stages": 3, "WAVES": 1}, tile]
    return _expand([(b, h, (None,), tiles) for b in (128, 32, 8) for h in (8, 16)])


def plan_r17() -> list[tuple[int, int, dict[str, int], int]]:
    """16-bit rows (run with --dtypes bf16 --check): 64 and 128 heads on a 99 KB GPU. The
    32-head tl.dot blocks the plan gave it (each row gathered once per block), the 64-head
    mma.sync tile with q in registers (32-row tiles at 2 stages, 16-row at 4), and the
    H200's own 64-head tl.dot tile (221 KB, for reference); the 32-head blocks first and
    last."""
    blocks = {"BLOCK_H": 32, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2, "WAVES": 2}
    mma = {"BLOCK_H": 64, "BLOCK_N": 32, "num_warps": 8, "num_stages": 2, "WAVES": 1,
           "MMA_V2": 1}  # fmt: skip
    mma16 = {**mma, "BLOCK_N": 16, "num_stages": 4}
    wide = {"BLOCK_H": 64, "BLOCK_N": 64, "num_warps": 8, "num_stages": 2, "WAVES": 1}
    tiles = [blocks, mma, mma16, wide, mma, blocks]
    return _expand([(b, h, (None,), tiles) for b in (128, 32, 8, 1) for h in (64, 128)])


def plan_r17b() -> list[tuple[int, int, dict[str, int], int]]:
    """16-bit rows (run with --dtypes bf16 --check, and with ``--kernel`` on a variant): the
    64-head mma.sync tile alone at 64 and 128 heads, for a same-run A/B of two kernels."""
    mma = {"BLOCK_H": 64, "BLOCK_N": 32, "num_warps": 8, "num_stages": 2, "WAVES": 1,
           "MMA_V2": 1}  # fmt: skip
    return _expand([(b, h, (None,), [mma]) for b in (128, 32, 8) for h in (64, 128)])


def plan_r17c() -> list[tuple[int, int, dict[str, int], int]]:
    """fp8 e4m3 rows (run with --dtypes e4m3 --check): 64 and 128 heads on a 99 KB GPU. The
    32-head tl.dot blocks the plan gave it (the bits), the 64-head mma.sync tile with q's two
    e4m3 parts in registers (32-row tiles at 4 stages, 16-row at 8, 64-row at 2), and the
    H200's e4m3 Hopper tile (two warpgroups, for reference); the 32-head blocks first and
    last."""
    blocks = {"BLOCK_H": 32, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2, "WAVES": 2,
              "FP16_DOTS": 1, "E4M3_BITS": 1, "V_ASM": 1}  # fmt: skip
    mma = {"BLOCK_H": 64, "BLOCK_N": 32, "num_warps": 8, "num_stages": 4, "WAVES": 1,
           "MMA_V2": 1}  # fmt: skip
    hopper = {"BLOCK_H": 64, "BLOCK_N": 64, "num_warps": 8, "num_stages": 2, "WAVES": 1,
              "WGMMA": 1}  # fmt: skip
    tiles = [blocks, mma, {**mma, "BLOCK_N": 16, "num_stages": 8},
             {**mma, "BLOCK_N": 64, "num_stages": 2}, hopper, mma, blocks]  # fmt: skip
    return _expand([(b, h, (None,), tiles) for b in (128, 32, 8) for h in (64, 128)])


def plan_r17d() -> list[tuple[int, int, dict[str, int], int]]:
    """16-bit rows (run with --dtypes bf16 --check): 8, 16 and 32 heads on a 99 KB GPU. The
    16- and 32-head tl.dot tiles the plan gives it (93 and 76 KB; two programs per SM on the
    H200, one on SM120) and the same tiles one per SM, against the mma.sync tiles with q in
    registers (75-76 KB; 4 or 8 warps: two along the keys, the others along the heads, 8
    heads each; 8 heads padded to 16), one per SM as on SM120 and two per SM; the plan's
    tl.dot tile first and last."""
    tl_dot = {"BLOCK_H": 16, "BLOCK_N": 32, "num_warps": 4, "num_stages": 3, "WAVES": 2,
              "PREFETCH_IDX": 1}  # fmt: skip
    mma = {"BLOCK_H": 16, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2, "WAVES": 1,
           "MMA_V2": 1}  # fmt: skip
    tiles = [tl_dot, {**tl_dot, "WAVES": 1}, mma, {**mma, "WAVES": 2}, tl_dot]
    cases = [(b, h, (None,), tiles) for b in (128, 32, 8, 1) for h in (8, 16)]
    blocks = {"BLOCK_H": 32, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2, "WAVES": 2}
    mma32 = {**mma, "BLOCK_H": 32, "num_warps": 8}
    tiles = [blocks, {**blocks, "WAVES": 1}, mma32, {**mma32, "WAVES": 2}, blocks]
    return _expand(cases + [(b, 32, (None,), tiles) for b in (128, 32, 8)])


def plan_r17e() -> list[tuple[int, int, dict[str, int], int]]:
    """fp8 e4m3 rows, 32 heads (run with --dtypes e4m3 --check): the 32-head e4m3 tl.dot tile
    a 99 KB GPU gets (the bits, 92 KB) and the H200's (the latent gathered per dot, 107 KB),
    against the 32-head mma.sync tile with q's two e4m3 parts in registers (8 warps) at 2, 3
    and 4 stages of 32 rows; the 99 KB tl.dot tile first and last."""
    bits = {"BLOCK_H": 32, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2, "WAVES": 2,
            "FP16_DOTS": 1, "E4M3_BITS": 1, "V_ASM": 1}  # fmt: skip
    twice = {"BLOCK_H": 32, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2, "WAVES": 2,
             "FP8_TWICE": 1, "FP16_DOTS": 1, "V_ASM": 1}  # fmt: skip
    mma = {"BLOCK_H": 32, "BLOCK_N": 32, "num_warps": 8, "num_stages": 2, "WAVES": 1,
           "MMA_V2": 1}  # fmt: skip
    tiles = [bits, twice, mma, {**mma, "num_stages": 3}, {**mma, "num_stages": 4}, bits]
    return _expand([(b, 32, (None,), tiles) for b in (128, 32, 8)])


def plan_r18() -> list[tuple[int, int, dict[str, int], int]]:
    """fp8_ds_mla rows (run with --dtypes fp8 --check, on this module and with ``--kernel`` on
    the dequantizing one): 16-, 32- and 64-head tiles, 4 or 8 warps, the latent kept for P.V
    or gathered again (``FP8_TWICE``); the plan's splits; the first tile first and last."""
    tile = {"BLOCK_H": 16, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2, "WAVES": 2}
    twice = {**tile, "FP8_TWICE": 1}
    block32 = {**tile, "BLOCK_H": 32}
    common = [tile, twice, {**tile, "num_warps": 8}, block32, {**block32, "num_warps": 8}]
    small = [*common, {**tile, "BLOCK_N": 16}, {**tile, "num_stages": 3, "PREFETCH_IDX": 1}]
    wide = {"BLOCK_H": 64, "BLOCK_N": 32, "num_warps": 8, "num_stages": 2, "WAVES": 1}
    large = [*common, wide, {**wide, "BLOCK_N": 16}, {**wide, "FP8_TWICE": 1}]
    cases = [(b, 16, (None,), [*small, tile]) for b in (128, 32, 8)]
    return _expand(
        cases + [(b, h, (None,), [*large, tile]) for b in (128, 32, 8) for h in (64, 128)]
    )


def plan_r19() -> list[tuple[int, int, dict[str, int], int]]:
    """16-bit rows (run with --dtypes bf16 --check): the mma.sync tiles with q in registers
    that a 99 KB GPU runs for up to 32 heads (32-row tiles at 2 stages: one tile in flight
    while one is computed), against 16-row tiles on one warp per 8 heads at 4 and 5 stages
    (three or four in flight, 74 and 93 KB); one program per SM; the plan's tile first and
    last."""
    mma = {"BLOCK_H": 16, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2, "WAVES": 1,
           "MMA_V2": 1}  # fmt: skip
    deep = {**mma, "BLOCK_N": 16, "num_warps": 2, "num_stages": 4}
    tiles = [mma, deep, {**deep, "num_stages": 5}, mma]
    cases = [(b, h, (None,), tiles) for b in (128, 32, 8) for h in (8, 16)]
    mma32 = {**mma, "BLOCK_H": 32, "num_warps": 8}
    deep32 = {**mma32, "BLOCK_N": 16, "num_warps": 4, "num_stages": 4}
    tiles32 = [mma32, deep32, {**deep32, "num_stages": 5}, mma32]
    return _expand(cases + [(b, 32, (None,), tiles32) for b in (128, 32, 8)])


def plan_r19e() -> list[tuple[int, int, dict[str, int], int]]:
    """fp8 e4m3 rows, up to 16 heads (run with --dtypes e4m3 --check): the e4m3 mma.sync
    tile a 99 KB GPU runs (q in shared memory, 64-row tiles, 84-94 KB) and the H200's swapped
    e4m3 tile, against the tile with q's two e4m3 parts in registers: 32-row tiles on 4 warps
    at 4 and 5 stages, 16-row tiles on 2 warps at 8 and 10 (74 and 93 KB), one program per
    SM, and the 32-row 4-stage one two per SM (which the H200 holds); the 99 KB tile first
    and last."""
    cases = []
    for h in (8, 16):
        block_h = 8 if h <= 8 else 16
        small = {"BLOCK_H": block_h, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2,
                 "WAVES": 1, "MMA_V2": 1}  # fmt: skip
        hopper = {"BLOCK_H": block_h, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2,
                  "WAVES": 2, "MIN_TILES": 8, "WGMMA": 1}  # fmt: skip
        regs = {"BLOCK_H": 16, "BLOCK_N": 32, "num_warps": 4, "num_stages": 4, "WAVES": 1,
                "MMA_V2": 1}  # fmt: skip
        deep = {**regs, "BLOCK_N": 16, "num_warps": 2, "num_stages": 8}
        tiles = [small, hopper, regs, {**regs, "num_stages": 5}, deep,
                 {**deep, "num_stages": 10}, {**regs, "WAVES": 2}, small]  # fmt: skip
        cases += [(b, h, (None,), tiles) for b in (128, 32, 8)]
    return _expand(cases)


def plan_r19d() -> list[tuple[int, int, dict[str, int], int]]:
    """fp8_ds_mla rows (run with --dtypes fp8 --check): the grouped kernel's 16-head tile
    (the plan's for up to 32 heads everywhere) with its groups widened to bf16 (round 18's),
    against fp16 groups (q shifted per head), widened by conversion or by moving bits, the
    groups gathered again for P.V or kept; at 64 heads the 99 KB GPUs' 64-head grouped tile
    against the 16-head blocks with fp16 groups. The plan's tile first and last."""
    tile = {"BLOCK_H": 16, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2, "WAVES": 2,
            "FP8_GROUPS": 1, "FP8_TWICE": 1}  # fmt: skip
    fp16 = {**tile, "FP16_DOTS": 1}
    bits = {**fp16, "E4M3_BITS": 1}
    tiles = [tile, fp16, bits, {**fp16, "FP8_TWICE": 0}, {**bits, "FP8_TWICE": 0},
             {**fp16, "WAVES": 1}, tile]  # fmt: skip
    wide = {"BLOCK_H": 64, "BLOCK_N": 32, "num_warps": 8, "num_stages": 2, "WAVES": 1,
            "FP8_GROUPS": 1}  # fmt: skip
    cases = [(b, h, (None,), tiles) for b in (128, 32, 8) for h in (8, 16)]
    blocks = [wide, fp16, bits, {**fp16, "FP8_TWICE": 0}, wide]
    return _expand(cases + [(b, 64, (None,), blocks) for b in (128, 32)])


def plan_r19m() -> list[tuple[int, int, dict[str, int], int]]:
    """fp8_ds_mla rows (run with --dtypes fp8 --check): the grouped tl.dot kernel's 16-head
    tile (fp16 groups, kept; the plan's) against the e4m3 mma.sync tile reading them
    (``DS``): 8-head blocks on 4 warps (93 KB, fits a 99 KB GPU), 16-head blocks on 8 warps
    (103 KB, Hopper only), at 2 stages, one program per SM; the tl.dot tile first and last."""
    tl_dot = {"BLOCK_H": 16, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2, "WAVES": 2,
              "FP8_GROUPS": 1, "FP16_DOTS": 1}  # fmt: skip
    mma8 = {"BLOCK_H": 8, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2, "WAVES": 1,
            "MMA_V2": 1}  # fmt: skip
    mma16 = {**mma8, "BLOCK_H": 16, "num_warps": 8}
    tiles = [tl_dot, mma8, {**mma8, "num_stages": 3}, mma16, {**mma8, "WAVES": 2}, tl_dot]
    return _expand([(b, h, (None,), tiles) for b in (128, 32, 8) for h in (8, 16)])


def plan_r20e() -> list[tuple[int, int, dict[str, int], int]]:
    """fp8 e4m3 rows, up to 16 heads (run with --dtypes e4m3 --check): the H200's swapped
    e4m3 tile (the plan's) against the e4m3 mma.sync tile one program per SM (a 99 KB GPU's)
    and two per SM (84-94 KB: the H200 holds two), and 16 heads as two 8-head blocks two per
    SM; the plan's tile first and last."""
    cases = []
    for h in (8, 16):
        block_h = 8 if h <= 8 else 16
        hopper = {"BLOCK_H": block_h, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2,
                  "WAVES": 2, "MIN_TILES": 8, "WGMMA": 1}  # fmt: skip
        mma = {"BLOCK_H": block_h, "BLOCK_N": 64, "num_warps": block_h // 2, "num_stages": 2,
               "WAVES": 1, "MMA_V2": 1}  # fmt: skip
        tiles = [hopper, mma, {**mma, "WAVES": 2}]
        if h == 16:
            tiles.append({**mma, "BLOCK_H": 8, "num_warps": 4, "WAVES": 2})
        cases += [(b, h, (None,), [*tiles, hopper]) for b in (128, 32, 8)]
    return _expand(cases)


def plan_r20b() -> list[tuple[int, int, dict[str, int], int]]:
    """16-bit rows, up to 16 heads (run with --dtypes bf16 --check): the H200's swapped tile
    (the plan's) against the mma.sync tile with q in registers (a 99 KB GPU's, 74 KB) one and
    two programs per SM; the plan's tile first and last."""
    hopper = {"BLOCK_H": 8, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2, "WAVES": 1,
              "WGMMA": 1}  # fmt: skip
    mma = {"BLOCK_H": 16, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2, "WAVES": 1,
           "MMA_V2": 1}  # fmt: skip
    cases = []
    for h in (8, 16):
        swapped = {**hopper, "BLOCK_H": 8 if h <= 8 else 16}
        tiles = [swapped, mma, {**mma, "WAVES": 2}, swapped]
        cases += [(b, h, (None,), tiles) for b in (128, 32, 8)]
    return _expand(cases)


def plan_r20m() -> list[tuple[int, int, dict[str, int], int]]:
    """fp8_ds_mla rows, 16 heads (run with --dtypes fp8 --check): the e4m3 mma.sync tile
    reading them (``DS``) as one 16-head block on 8 warps (103 KB, the plan's on Hopper) one
    and two per SM, against two 8-head blocks on 4 warps (93 KB) one and two per SM; and 8
    heads one per SM against the plan's two. The plan's tile first and last."""
    mma8 = {"BLOCK_H": 8, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2, "WAVES": 2,
            "MMA_V2": 1}  # fmt: skip
    mma16 = {**mma8, "BLOCK_H": 16, "num_warps": 8, "WAVES": 1}
    tiles16 = [mma16, {**mma16, "WAVES": 2}, mma8, {**mma8, "WAVES": 1}, mma16]
    cases = [(b, 16, (None,), tiles16) for b in (128, 32, 8)]
    cases += [(b, 8, (None,), [mma8, {**mma8, "WAVES": 1}, mma8]) for b in (128, 32)]
    return _expand(cases)


def plan_r20d() -> list[tuple[int, int, dict[str, int], int]]:
    """fp8_ds_mla rows, up to 16 heads (run with --dtypes fp8 --check, on this module and with
    ``--kernel`` on an earlier one): the e4m3 mma.sync tile reading them (``DS``) with 8 heads
    two per SM (the H200's) and one (a 99 KB GPU's), with 16 heads on 8 warps, against the
    grouped tl.dot tile a 99 KB GPU ran with 16 heads before round 20; the plan's tile first
    and last."""
    mma8 = {"BLOCK_H": 8, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2, "WAVES": 2,
            "MMA_V2": 1}  # fmt: skip
    mma16 = {**mma8, "BLOCK_H": 16, "num_warps": 8, "WAVES": 1}
    grouped = {"BLOCK_H": 16, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2, "WAVES": 2,
               "FP8_GROUPS": 1, "FP16_DOTS": 1}  # fmt: skip
    cases = [(b, 8, (None,), [mma8, {**mma8, "WAVES": 1}, mma8]) for b in (128, 32, 8)]
    cases += [(b, 16, (None,), [mma16, grouped, mma16]) for b in (128, 32, 8)]
    return _expand(cases)


def plan_r20s() -> list[tuple[int, int, dict[str, int], int]]:
    """fp8 e4m3 rows, 8 and 16 heads (run with --dtypes e4m3 --check): the H200's swapped
    e4m3 tile (the plan's: 2 stages, two per SM where a split keeps 8 tiles) against 3 stages
    (121-132 KB, one per SM); the plan's tile first and last."""
    cases = []
    for h in (8, 16):
        hopper = {"BLOCK_H": h, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2, "WAVES": 2,
                  "MIN_TILES": 8, "WGMMA": 1}  # fmt: skip
        deep = {**hopper, "num_stages": 3, "WAVES": 1}
        cases += [(b, h, (None,), [hopper, deep, hopper]) for b in (128, 32)]
    return _expand(cases)


def plan_r22() -> list[tuple[int, int, dict[str, int], int]]:
    """fp8 e4m3 rows (run with --dtypes e4m3 --check): Hopper's swapped tile with its scores
    summed in float32 per 128, 64 and 32 columns (``SCORE_COLS``) against one chain of MMAs
    over all 576 (``SCORE_COLS`` 0), at 8, 16 and 64 heads; one chain first and last. (Round
    22's runs: ``sweeps/sparse_mla_h200_round22*.json``; the first also ran a form since
    removed, every group's MMAs in flight at once, and per-column sums on the mma.sync tile.)"""
    cases = []
    for h in (8, 16, 64):
        chain = {"BLOCK_H": h, "BLOCK_N": 64, "num_warps": 4 if h <= 16 else 8,
                 "num_stages": 2, "WAVES": 2 if h <= 16 else 1, "WGMMA": 1,
                 "SCORE_COLS": 0}  # fmt: skip
        if h <= 16:
            chain["MIN_TILES"] = 8
        sums = [{**chain, "SCORE_COLS": c} for c in (128, 64, 32)]
        cases += [(b, h, (None,), [chain, *sums, chain]) for b in (128, 32, 8)]
    return _expand(cases)


def plan_r22m() -> list[tuple[int, int, dict[str, int], int]]:
    """fp8 e4m3 rows (run with --dtypes e4m3 --check, on this module and with ``--kernel`` on
    an earlier one): the mma.sync tiles with q in registers that a 99 KB GPU runs with 17-32
    and 33+ heads, whose e4m3 scores round 22 sums in float32 per 128 columns."""
    mma = {"BLOCK_N": 32, "num_warps": 8, "WAVES": 1, "MMA_V2": 1}
    tiles = {
        32: {**mma, "BLOCK_H": 32, "num_stages": 2},
        64: {**mma, "BLOCK_H": 64, "num_stages": 4},
    }
    return _expand(
        [(b, h, (None,), [tiles[min(h, 64)]]) for h in (32, 64, 128) for b in (128, 32, 8)]
    )


def plan_r23() -> list[tuple[int, int, dict[str, int], int]]:
    """16-bit rows (run with --dtypes bf16 --check): the mma.sync tiles with q in registers
    that a 99 KB GPU runs, their scores one dot per warp over all 576 columns (``COL_WARPS``
    1) against a dot batched over 2 or 4 groups of columns on their own warps, summed through
    shared memory (8 * COL_WARPS heads a warp: each K fragment read from shared memory serves
    COL_WARPS times as many MMAs); the plan's form first and last."""
    mma = {"BLOCK_N": 32, "num_stages": 2, "WAVES": 1, "MMA_V2": 1}
    cases = []
    for h, block_h, warps, groups in ((8, 16, 4, (2,)), (16, 16, 4, (2,)), (32, 32, 8, (2, 4)),
                                      (64, 64, 8, (2,)), (128, 64, 8, (2,))):  # fmt: skip
        tile = {**mma, "BLOCK_H": block_h, "num_warps": warps, "COL_WARPS": 1}
        tiles = [tile, *({**tile, "COL_WARPS": g} for g in groups), tile]
        cases += [(b, h, (None,), tiles) for b in (128, 32, 8)]
    return _expand(cases)


def plan_r23b() -> list[tuple[int, int, dict[str, int], int]]:
    """16-bit rows, 64 and 128 heads (run with --dtypes bf16 --check): the 64-head mma.sync
    tile with its scores on 1, 2 or 4 groups of columns (``COL_WARPS``) over 32-row tiles at
    2 stages (78-97 KB) and 16-row tiles at 4 (76-94 KB: half the score accumulators, so 2
    groups spill 8 bytes on sm_120 where 32-row tiles spill 48); the plan's form first and
    last."""
    tile = {"BLOCK_H": 64, "BLOCK_N": 32, "num_warps": 8, "num_stages": 2, "WAVES": 1,
            "MMA_V2": 1, "COL_WARPS": 1}  # fmt: skip
    short = {**tile, "BLOCK_N": 16, "num_stages": 4}
    tiles = [tile, {**tile, "COL_WARPS": 2}, short, *({**short, "COL_WARPS": g} for g in (2, 4))]
    return _expand([(b, h, (None,), [*tiles, tile]) for h in (64, 128) for b in (128, 32, 8)])


def plan_r24() -> list[tuple[int, int, dict[str, int], int]]:
    """16-bit rows (run with --dtypes bf16 --check): split counts that are not powers of two,
    at batch sizes where the power-of-two rule leaves about a third of the H200's 132 SMs
    idle, as it does SM120's 188 at B=128, 32 and 8 (B=90, 22, 6 here); the 99 KB plan's
    mma.sync tiles and the H200's default tiles, the rule's split count first and last."""
    mma = {"BLOCK_N": 32, "num_stages": 2, "WAVES": 1, "MMA_V2": 1, "COL_WARPS": 2}
    small = {**mma, "BLOCK_H": 16, "num_warps": 4}
    wide = {**mma, "BLOCK_H": 64, "num_warps": 8}
    splits = {90: (1, 2, 4, 8, 1), 22: (4, 5, 6, 8, 4), 6: (16, 22, 32, 16)}
    cases = []
    for b, counts in splits.items():
        cases += [(b, h, counts, [small if h <= 16 else wide]) for h in (8, 16, 64)]
        cases += [(b, h, counts, [None]) for h in (8, 64)]
    return _expand(cases)


def plan_r24b() -> list[tuple[int, int, dict[str, int], int]]:
    """fp8 e4m3 rows (run with --dtypes e4m3 --check): round 24's split counts that fill idle
    SMs (the plan's, ``None``) against the power of two before them, first and last, on the
    99 KB plan's mma.sync tiles (8, 16 and 64 heads) and the H200's 64-head tile."""
    mma = {"BLOCK_N": 64, "num_stages": 2, "WAVES": 1, "MMA_V2": 1}
    tiles = {
        8: [{**mma, "BLOCK_H": 8, "num_warps": 4}],
        16: [{**mma, "BLOCK_H": 16, "num_warps": 8}],
        64: [{"BLOCK_H": 64, "BLOCK_N": 32, "num_warps": 8, "num_stages": 4, "WAVES": 1,
              "ROUNDS": 4, "MMA_V2": 1}, None],
    }  # fmt: skip
    pow2 = {22: 4, 90: 1, 6: 16}
    return _expand(
        [(b, h, (p, None, p), cfgs) for b, p in pow2.items() for h, cfgs in tiles.items()]
    )


def plan_r24f() -> list[tuple[int, int, dict[str, int], int]]:
    """fp8_ds_mla rows (run with --dtypes fp8 --check): as ``r24b``, on the 99 KB plan's tiles
    (the e4m3 mma.sync tile at 8 and 16 heads, the grouped tl.dot tile at 64) and the H200's
    own one-program-per-SM tiles (16 and 64 heads)."""
    ds = {"BLOCK_N": 64, "num_stages": 2, "WAVES": 1, "MMA_V2": 1}
    tiles = {
        8: [{**ds, "BLOCK_H": 8, "num_warps": 4}],
        16: [{**ds, "BLOCK_H": 16, "num_warps": 8, "ROPE_REGS": 1}, None],
        64: [{"BLOCK_H": 64, "BLOCK_N": 32, "num_warps": 8, "num_stages": 2, "WAVES": 1,
              "FP8_GROUPS": 1}, None],
    }  # fmt: skip
    pow2 = {22: 4, 90: 1, 6: 16}
    return _expand(
        [(b, h, (p, None, p), cfgs) for b, p in pow2.items() for h, cfgs in tiles.items()]
    )


def plan_r25() -> list[tuple[int, int, dict[str, int], int]]:
    """16-bit rows (run with --dtypes bf16 --check, on this module and with ``--kernel`` on
    an earlier one): the 99 KB plan's mma.sync tiles with q in registers at 8, 16 and 32
    heads, the plan's split counts."""
    mma = {"BLOCK_N": 32, "num_stages": 2, "WAVES": 1, "MMA_V2": 1, "COL_WARPS": 2}
    tiles = {8: (16, 4), 16: (16, 4), 32: (32, 8)}
    return _expand(
        [
            (b, h, (None,), [{**mma, "BLOCK_H": block_h, "num_warps": warps}])
            for h, (block_h, warps) in tiles.items()
            for b in (1, 8, 32, 128)
        ]
    )


def plan_r24h() -> list[tuple[int, int, dict[str, int], int]]:
    """16-bit rows, 128 heads (run with --dtypes bf16 --check): round 24's fill on the 99 KB
    64-head tile (two head blocks, up to 4 rounds), at H200 batches that leave as many SMs idle
    as SM120's B=8, 32 and 128; the power of two first and last."""
    wide = {"BLOCK_H": 64, "BLOCK_N": 32, "num_warps": 8, "num_stages": 2, "WAVES": 1,
            "ROUNDS": 4, "MMA_V2": 1, "COL_WARPS": 2}  # fmt: skip
    splits = {22: (2, 3, 4, 8, 2), 6: (8, 11, 16, 8), 90: (1, 2, 4, 1)}
    return _expand([(b, 128, counts, [wide]) for b, counts in splits.items()])


# The same tile, and the 32-head one, as backend/sparse_mla.py's _TILES has them (two per SM
# where an SM holds two): what Triton 3.5 runs on SM120 and SM86/89 for 16-bit rows with up to
# 32 heads, and the H200's own tl.dot tiles; GROUPED_16, fp8_ds_mla rows' grouped 16-head tile.
TL_DOT_16_TABLE = {**TL_DOT_16, "WAVES": 2}
TL_DOT_32 = {"BLOCK_H": 32, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2, "WAVES": 2}
GROUPED_16 = {"BLOCK_H": 16, "BLOCK_N": 32, "num_warps": 4, "num_stages": 2, "WAVES": 2,
              "FP8_GROUPS": 1, "FP16_DOTS": 1}  # fmt: skip


def plan_r26() -> list[tuple[int, int, dict[str, int], int]]:
    """16-bit rows (run with --dtypes bf16 --check, with and without --one-per-sm): the 99 KB
    GPUs' tl.dot tiles (what Triton 3.5 runs there; 76-93 KB, one per SM on a 100 KB SM, two
    on the H200) at the H200 analogs of SM120's B=8, 32 and 128 (B=6, 22, 90): the split
    count that aims for two programs per SM first, the fill's for one, the first again; 64
    heads as two 32-head blocks; B=128 at 1 and 2 splits as the control of the emulation."""
    cases = [(b, h, (8, 4, 6, 8), [TL_DOT_16_TABLE]) for b in (22,) for h in (8, 16)]
    cases += [(22, 32, (8, 4, 6, 8), [TL_DOT_32]), (90, 32, (2, 1, 2), [TL_DOT_32])]
    cases += [(90, h, (2, 1, 2), [TL_DOT_16_TABLE]) for h in (8, 16)]
    cases += [(6, h, (16, 22, 16), [TL_DOT_16_TABLE]) for h in (8, 16)]
    cases += [(32, 64, (4, 2, 3, 4), [TL_DOT_32]), (22, 64, (4, 2, 3, 4), [TL_DOT_32])]
    cases += [(128, 8, (1, 2, 1), [TL_DOT_16_TABLE])]
    return _expand(cases)


def plan_r26f() -> list[tuple[int, int, dict[str, int], int]]:
    """fp8_ds_mla rows (run with --dtypes fp8 --check --one-per-sm): the 99 KB GPUs' grouped
    tl.dot tiles; the 16-head one (74 KB, two blocks at 32 heads) as ``r26``; the 64-head one
    (87 KB, 8 warps) at more rounds of programs per SM than one (``ROUNDS``), the plan's
    count first and last."""
    g64 = {"BLOCK_H": 64, "BLOCK_N": 32, "num_warps": 8, "num_stages": 2, "WAVES": 1,
           "FP8_GROUPS": 1}  # fmt: skip
    cases = [(22, 32, (4, 2, 3, 4), [GROUPED_16]), (90, 32, (2, 1, 2), [GROUPED_16])]
    cases += [(90, 64, (1, 2, 3, 4, 1), [g64]), (22, 64, (6, 4, 12, 6), [g64])]
    cases += [(90, 128, (1, 2, 1), [g64]), (22, 128, (3, 2, 4, 6, 3), [g64])]
    return _expand(cases)


def plan_r26g() -> list[tuple[int, int, dict[str, int], int]]:
    """fp8_ds_mla rows (run with --dtypes fp8 --check --one-per-sm): the 99 KB GPUs' 16-head
    grouped tl.dot tile with 8 and 16 heads (what Triton 3.5 runs there) at the H200 analogs
    of SM120's B=128 and 32, up to 4 rounds of programs per SM, the first count last again."""
    cases = [(90, h, (1, 2, 3, 4, 1), [GROUPED_16]) for h in (8, 16)]
    return _expand(cases + [(22, 8, (8, 6, 12, 8), [GROUPED_16])])


def plan_r26e() -> list[tuple[int, int, dict[str, int], int]]:
    """fp8 e4m3 rows (run with --dtypes e4m3 --check --one-per-sm): the 99 KB GPUs' 16-head
    tl.dot tile (92 KB; what Triton 3.5 runs there) as ``r26``."""
    e16 = {"BLOCK_H": 16, "BLOCK_N": 32, "num_warps": 4, "num_stages": 3, "WAVES": 2,
           "PREFETCH_IDX": 1, "FP16_DOTS": 1, "E4M3_BITS": 1, "V_ASM": 1}  # fmt: skip
    return _expand([(22, 8, (8, 6, 8), [e16]), (90, 8, (2, 1, 2), [e16])])


def plan_r26h() -> list[tuple[int, int, dict[str, int], int]]:
    """16-bit rows (run with --dtypes bf16 --check --one-per-sm): 128 heads as four 32-head
    tl.dot blocks (a 99 KB GPU under Triton 3.5) at B=32, one round of programs against two."""
    return _expand([(32, 128, (2, 1, 2), [TL_DOT_32])])


def plan_r26m() -> list[tuple[int, int, dict[str, int], int]]:
    """16-bit rows (run with --dtypes bf16 --split-alone): where the 99 KB plan's mma.sync
    tiles spend their time besides the rows (the merge, each program's fixed cost), by split
    count: the 64-head tile at B=1, 8, 32, 128 with 64 and 128 heads, the 16-head tile at B=8
    and 32 with 8 and 16 heads."""
    mma = {"BLOCK_N": 32, "num_stages": 2, "WAVES": 1, "MMA_V2": 1, "COL_WARPS": 2}
    small = {**mma, "BLOCK_H": 16, "num_warps": 4}
    wide = {**mma, "BLOCK_H": 64, "num_warps": 8, "ROUNDS": 4}
    cases = [(1, 64, (16, 32, 64), [wide]), (8, 64, (4, 8, 16, 32), [wide])]
    cases += [(8, 128, (4, 8, 16), [wide]), (32, 64, (2, 4, 8), [wide])]
    cases += [(128, 64, (1, 2, 4), [wide])]
    cases += [(8, h, (8, 16, 22, 32), [small]) for h in (8, 16)]
    cases += [(32, h, (2, 4, 8), [small]) for h in (8, 16)]
    return _expand(cases)


def plan_r26s() -> list[tuple[int, int, dict[str, int], int]]:
    """16-bit rows (run with --dtypes bf16 --check): the H200's 16- and 32-head tl.dot tiles
    (two per SM) at batches where the partial cap keeps fewer programs than SMs (B=5, 6: 16
    splits), against the count that gives each SM one (22), the first count last again."""
    cases = [(b, h, (16, 22, 16), [TL_DOT_16_TABLE]) for b in (5, 6) for h in (8, 16)]
    return _expand(cases + [(b, 32, (16, 22, 16), [TL_DOT_32]) for b in (5, 6)])


def plan_r26t() -> list[tuple[int, int, dict[str, int], int]]:
    """16-bit rows (run with --dtypes bf16 --check): as ``r26s`` where the partial cap binds at
    16 and 32 heads (B=10-20), the first count last again."""
    cases = [(10, 16, (8, 13, 8), [TL_DOT_16_TABLE]), (12, 16, (8, 11, 8), [TL_DOT_16_TABLE])]
    return _expand(cases + [(17, 32, (4, 7, 4), [TL_DOT_32]), (20, 32, (4, 6, 4), [TL_DOT_32])])


def plan_r26u() -> list[tuple[int, int, dict[str, int], int]]:
    """fp8 e4m3 rows (run with --dtypes e4m3 --check): Hopper's e4m3 tile (the plan's, two
    per SM where each split keeps 8 tiles) where that rule leaves fewer programs than SMs
    (B=10, 17, 22), against one program per SM, the first count last again."""
    return _expand(
        [(10, 8, (8, 11, 8), [None]), (17, 16, (4, 7, 4), [None])]
        + [(22, h, (4, 6, 4), [None]) for h in (8, 16)]
    )


def plan_r26v() -> list[tuple[int, int, dict[str, int], int]]:
    """fp8_ds_mla rows (run with --dtypes fp8 --check): the grouped 16-head tl.dot tile (the
    H200's plan for 17-32 heads) where the partial cap leaves fewer programs than SMs (B=3, 5
    with 32 heads), against one program per SM, the first count last again."""
    return _expand([(3, 32, (16, 22, 16), [None]), (5, 32, (8, 13, 8), [None])])


def plan_r27p() -> list[tuple[int, int, dict[str, int], int]]:
    """16-bit rows (run with --dtypes bf16 --split-alone --merge-alone, then with --kernel on
    each of the pdl-late and pdl-exit modules that commit a16e1af's
    benchmarks/sparse_mla/kernel_variants.py writes, then the first run again; round 28
    adopted them and ran it on the module and on a16e1af's):
    the merge's share where the split grids run about one program per SM, and what launching
    it as a programmatic dependent buys: the default path and the 99 KB mma.sync tiles at the
    H200's counts, each at the plan's PDL rule, without PDL and with it."""
    mma = {"BLOCK_N": 32, "num_stages": 2, "WAVES": 1, "MMA_V2": 1, "COL_WARPS": 2}
    small = {**mma, "BLOCK_H": 16, "num_warps": 4}
    wide = {**mma, "BLOCK_H": 64, "num_warps": 8, "ROUNDS": 4}
    pdl = [None, {"PDL": 0}, {"PDL": 1}]
    cases = [(b, h, (None,), pdl) for b in (1, 8, 32) for h in (8, 16, 64, 128)]
    for b in (8, 32):
        for h in (8, 16, 64, 128):
            tile = small if h <= 16 else wide
            cases += [(b, h, (None,), [tile, {**tile, "PDL": 0}, {**tile, "PDL": 1}])]
    return _expand(cases)


def plan_r28e() -> list[tuple[int, int, dict[str, int], int]]:
    """fp8 e4m3 rows (run with --dtypes e4m3 --split-alone --merge-alone, on the module and
    with --kernel on the one before round 28): r27p's question for the e4m3 tiles, which it
    did not time, the merge's trigger having moved in all five Gluon split kernels: the H200's
    plan and SM120's e4m3 mma.sync tiles, each at the plan's PDL rule, without PDL and with
    it."""
    pdl = [None, {"PDL": 0}, {"PDL": 1}]
    cases = [(b, h, (None,), pdl) for b in (1, 8, 32) for h in (8, 16, 64, 128)]
    for b in (8, 32):
        for h in (8, 16, 64, 128):
            if h <= 16:
                tile = {"BLOCK_H": h, "BLOCK_N": 64, "num_warps": 4 if h == 8 else 8}
                tile |= {"num_stages": 2, "WAVES": 1, "MMA_V2": 1}
            else:
                tile = {"BLOCK_H": 64, "BLOCK_N": 32, "num_warps": 8, "num_stages": 4}
                tile |= {"WAVES": 1, "ROUNDS": 4, "MMA_V2": 1}
            cases += [(b, h, (None,), [tile, {**tile, "PDL": 0}, {**tile, "PDL": 1}])]
    return _expand(cases)


def plan_r28t() -> list[tuple[int, int, dict[str, int], int]]:
    """16-bit rows (run with --dtypes bf16 --split-alone --merge-alone): where the 32-head
    blocks (17-32 heads: the mma.sync tile, the H200's plan and SM120's) should let the merge
    launch, which r27p and r28e did not time: the plan's rule (at exit once the grid has
    about one program per SM), without PDL, and the trigger forced after the main loop and
    at exit."""
    variants = [None, {"PDL": 0}, {"PDL_LATE": 1}, {"PDL_LATE": 0}]
    return _expand([(b, h, (None,), variants) for b in (1, 4, 8, 16, 32) for h in (24, 32)])


PLANS = {
    "r28t": plan_r28t,
    "r28e": plan_r28e,
    "r27p": plan_r27p,
    "r26t": plan_r26t,
    "r26u": plan_r26u,
    "r26v": plan_r26v,
    "r26s": plan_r26s,
    "r26m": plan_r26m,
    "r26h": plan_r26h,
    "r26g": plan_r26g,
    "r26e": plan_r26e,
    "r26": plan_r26,
    "r26f": plan_r26f,
    "r24h": plan_r24h,
    "r25": plan_r25,
    "r24f": plan_r24f,
    "r24b": plan_r24b,
    "r24": plan_r24,
    "r23b": plan_r23b,
    "r23": plan_r23,
    "r22m": plan_r22m,
    "r22": plan_r22,
    "r20s": plan_r20s,
    "r20d": plan_r20d,
    "r20e": plan_r20e,
    "r20b": plan_r20b,
    "r20m": plan_r20m,
    "r19m": plan_r19m,
    "r19d": plan_r19d,
    "r19e": plan_r19e,
    "r19": plan_r19,
    "r18": plan_r18,
    "r17e": plan_r17e,
    "r17d": plan_r17d,
    "r17c": plan_r17c,
    "r17b": plan_r17b,
    "r17": plan_r17,
    "r16d": plan_r16d,
    "r16c": plan_r16c,
    "r16b": plan_r16b,
    "r16": plan_r16,
    "r15h": plan_r15h,
    "r15": plan_r15,
    "r14w": plan_r14w,
    "r14": plan_r14,
    "r13e": plan_r13e,
    "r13d": plan_r13d,
    "r13c": plan_r13c,
    "r13b": plan_r13b,
    "r13": plan_r13,
    "r12c": plan_r12c,
    "r12v": plan_r12v,
    "r12g": plan_r12g,
    "r12": plan_r12,
    "r11f": plan_r11f,
    "r11e": plan_r11e,
    "r11": plan_r11,
    "sm120": plan_sm120,
    "v2": plan_v2,
    "r3": plan_r3,
    "r4": plan_r4,
    "r6": plan_r6,
    "r7": plan_r7,
    "r7s": plan_r7s,
    "r8": plan_r8,
    "fp8": plan_fp8,
}


# The plans for fp8_ds_mla rows.
FP8_DS_PLANS = ("fp8", "r18", "r19d", "r19m", "r20m", "r20d", "r24f", "r26f", "r26g", "r26v")
