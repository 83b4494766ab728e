"""The sweep2 point lists of bench.py (``--plan NAME``), named by what they measure: each
returns (B, H, config, split count) points, ``None`` for the plan's own config or split count.
A config may carry the benchmark's own knobs (``overrides.py``). The plans of earlier tuning
rounds are in git history (backend/DESIGN.md names the measurements that decided the kernel)."""

from __future__ import annotations

TOPK = 2048  # the top-k of every benchmark case and sweep point

CaseRow = tuple[int, int, tuple[int | None, ...], list[dict[str, int] | None]]
Point = tuple[int, int, dict[str, int] | None, int | None]


def _expand(cases: list[CaseRow]) -> list[Point]:
    """(B, H, split counts, configs) rows -> one sweep point per config and split count."""
    return [(b, h, cfg, sp) for b, h, splits, cfgs in cases for cfg in cfgs for sp in splits]


def _pdl_variants(tile: dict[str, int] | None) -> list[dict[str, int] | None]:
    """A tile at the plan's PDL rule, without PDL and with it."""
    if tile is None:
        return [None, {"PDL": 0}, {"PDL": 1}]
    return [tile, {**tile, "PDL": 0}, {**tile, "PDL": 1}]


def plan_merge_launch_16bit() -> list[Point]:
    """16-bit rows (``--dtypes bf16 --split-alone --merge-alone``): the merge's share where the
    split grids run about one program per SM, and what launching it as a programmatic
    dependent buys: the default path and the 99 KB mma.sync tiles at the H200's counts
    (DESIGN.md, "The merge and its launch")."""
    mma = {"BLOCK_N": 32, "num_stages": 2, "WAVES": 1, "MMA_V2": 1, "COL_WARPS": 2}
    small = {**mma, "BLOCK_H": 16, "num_warps": 4}
    wide = {**mma, "BLOCK_H": 64, "num_warps": 8, "ROUNDS": 4}
    cases: list[CaseRow] = [
        (b, h, (None,), _pdl_variants(None)) for b in (1, 8, 32) for h in (8, 16, 64, 128)
    ]
    for b in (8, 32):
        for h in (8, 16, 64, 128):
            cases += [(b, h, (None,), _pdl_variants(small if h <= 16 else wide))]
    return _expand(cases)


def plan_merge_launch_e4m3() -> list[Point]:
    """fp8 e4m3 rows (``--dtypes e4m3 --split-alone --merge-alone``): the same question for
    the e4m3 tiles, the H200's plan and SM120's e4m3 mma.sync tiles."""
    cases: list[CaseRow] = [
        (b, h, (None,), _pdl_variants(None)) for b in (1, 8, 32) for h in (8, 16, 64, 128)
    ]
    for b in (8, 32):
        for h in (8, 16, 64, 128):
            if h <= 16:
                tile = {"BLOCK_H": h, "BLOCK_N": 64, "num_warps": 4 if h == 8 else 8}
                tile |= {"num_stages": 2, "WAVES": 1, "MMA_V2": 1}
            else:
                tile = {"BLOCK_H": 64, "BLOCK_N": 32, "num_warps": 8, "num_stages": 4}
                tile |= {"WAVES": 1, "ROUNDS": 4, "MMA_V2": 1}
            cases += [(b, h, (None,), _pdl_variants(tile))]
    return _expand(cases)


def plan_merge_trigger_32_heads() -> list[Point]:
    """16-bit rows (``--dtypes bf16 --split-alone --merge-alone``): where 32-head blocks
    (17-32 heads, the mma.sync tile) should let the merge launch, still unmeasured: the
    plan's rule (at exit once the grid has about one program per SM), without PDL, and the
    trigger forced after the main loop and at exit (``PDL_LATE``, a benchmark knob)."""
    variants: list[dict[str, int] | None] = [None, {"PDL": 0}, {"PDL_LATE": 1}, {"PDL_LATE": 0}]
    return _expand([(b, h, (None,), variants) for b in (1, 4, 8, 16, 32) for h in (24, 32)])


def plan_fp8_ds_split_counts() -> list[Point]:
    """fp8_ds_mla rows (``--dtypes fp8 --check``): the grouped 16-head tl.dot tile (the H200's
    plan for 17-32 heads) where the partial cap leaves fewer programs than SMs (B=3, 5 with 32
    heads), against one program per SM, the first count last again (DESIGN.md, "Splits")."""
    return _expand([(3, 32, (16, 22, 16), [None]), (5, 32, (8, 13, 8), [None])])


PLANS = {
    "merge_trigger_32_heads": plan_merge_trigger_32_heads,
    "merge_launch_16bit": plan_merge_launch_16bit,
    "merge_launch_e4m3": plan_merge_launch_e4m3,
    "fp8_ds_split_counts": plan_fp8_ds_split_counts,
}

# The plans for fp8_ds_mla rows.
FP8_DS_PLANS = ("fp8_ds_split_counts",)
