"""The tile table and the rules that say which tile a config describes and what it needs
(DESIGN.md, "Tiles per device")."""

from __future__ import annotations

from .common import _D_V, DeviceLimits, _has_pdl, _num_sms


def _tile(
    block_h: int,
    block_n: int,
    warps: int,
    stages: int,
    waves: int,
    prefetch: int = 0,
    fp8_twice: int = 0,
    v_asm: int = 0,
    e4m3_bits: int = 0,
    groups: str = "",
    rounds: int = 1,
):
    """A tl.dot tile. ``groups``: fp8_ds_mla rows on ``_sparse_mla_ds_split_kernel``, the
    latent's groups widened to bf16 and gathered again for P.V ("again") or kept in registers
    ("kept"), or widened to fp16 and kept ("fp16"). ``rounds``: ``ROUNDS``, where one program
    per SM runs (``_fill_splits``)."""
    cfg = {"BLOCK_H": block_h, "BLOCK_N": block_n, "num_warps": warps, "num_stages": stages}
    cfg = {**cfg, "WAVES": waves, **({"PREFETCH_IDX": 1} if prefetch else {})}
    cfg = {**cfg, **({"FP8_TWICE": 1, "FP16_DOTS": 1} if fp8_twice else {})}
    cfg = {**cfg, **({"FP16_DOTS": 1, "E4M3_BITS": 1} if e4m3_bits else {})}
    cfg = {**cfg, **({"FP8_GROUPS": 1} if groups else {})}
    cfg = {**cfg, **({"FP8_TWICE": 1} if groups == "again" else {})}
    cfg = {**cfg, **({"FP16_DOTS": 1} if groups == "fp16" else {})}
    cfg = {**cfg, **({"ROUNDS": rounds} if rounds > 1 else {})}
    return {**cfg, **({"V_ASM": 1} if v_asm or e4m3_bits else {})}


def _fp16_dots(cfg: dict[str, int]) -> bool:
    """fp8 rows (e4m3, or fp8_ds_mla's groups) under a bf16 q: the tl.dot kernels' dots in
    fp16 (q shifted per head)."""
    return bool(cfg.get("FP16_DOTS", 0))


# tl.dot tiles per (row format, head block), best first (the first ones are the H200 sweeps'
# choices, NOTES.md), each with the shared memory per block it needs on each MMA family: the
# larger of Triton 3.5.1's and 3.6.0's compiles, in bytes.
# tests/unit/test_sparse_mla_targets.py compiles every tile the plan can choose for SM80, 86,
# 89, 90, 100 and 120 with both and checks these numbers and each target's limits.
# 16-head tiles keep two gathers in flight (indices prefetched, 3 stages) and aim for two
# programs per SM where an SM holds two (``_blocks_per_sm``); 64-head tiles one. Where a 64-head
# tile does not fit, 32-head blocks read the rows once per block (the second from L2), as
# H = 128 does with 64-head blocks everywhere.
_TILES: dict[tuple[str, int], tuple[tuple[dict[str, int], dict[str, int]], ...]] = {
    ("16bit", 16): ((_tile(16, 32, 4, 3, 2, 1), {"mma": 93184, "sm90": 93184, "sm100": 93184}),),
    ("16bit", 32): ((_tile(32, 32, 4, 2, 2), {"mma": 75904, "sm90": 75904, "sm100": 75904}),),
    ("16bit", 64): (
        (_tile(64, 64, 8, 2, 1), {"mma": 155904, "sm90": 221440, "sm100": 287536}),
        (_tile(64, 32, 8, 2, 1), {"mma": 114816, "sm90": 147584, "sm100": 180912}),
        (_tile(32, 32, 4, 2, 2), {"mma": 75904, "sm90": 75904, "sm100": 75904}),
    ),
    # fp8 e4m3 rows, 16 heads: the latent gathered once, widened once by moving bits into an
    # fp16 tile that both dots read, indices prefetched (1.07-1.2x over the latent gathered
    # per dot, NOTES.md). 32 heads: the latent gathered once per dot, fp16 dots, V widened by
    # inline PTX (1.2-1.4x at B >= 8); 99 KB GPUs take the 32-head tile with the bits
    # (1.09-1.22x over the per-dot gathers at 64+ heads on the H200).
    ("fp8", 16): (
        (_tile(16, 32, 4, 3, 2, 1, e4m3_bits=1), {"mma": 92160, "sm90": 92160, "sm100": 92160}),
    ),
    ("fp8", 32): (
        (_tile(32, 32, 4, 2, 2, 0, 1, 1), {"mma": 106624, "sm90": 106624, "sm100": 106624}),
        (_tile(32, 32, 4, 2, 2, e4m3_bits=1), {"mma": 92288, "sm90": 92288, "sm100": 92288}),
        (_tile(32, 32, 4, 2, 2, fp8_twice=1), {"mma": 73856, "sm90": 73856, "sm100": 73856}),
    ),
    ("fp8", 64): (
        (_tile(64, 64, 8, 2, 1), {"mma": 143616, "sm90": 184576, "sm100": 184608}),
        (_tile(64, 32, 8, 2, 1), {"mma": 108672, "sm90": 131072, "sm100": 129184}),
        (_tile(32, 32, 4, 2, 2, e4m3_bits=1), {"mma": 92288, "sm90": 92288, "sm100": 92288}),
        (_tile(32, 32, 4, 2, 2, fp8_twice=1), {"mma": 73856, "sm90": 73856, "sm100": 73856}),
    ),
    # fp8_ds_mla rows: the kernel that keeps the latent in fp8 groups (``FP8_GROUPS``) for 16-
    # and 32-head blocks, 1.16-1.22x over widening them to scaled values on the H200 (groups in
    # bf16, gathered again for P.V), 1.03-1.13x more with the groups in fp16, kept (NOTES.md
    # round 19), and everywhere on 99 KB GPUs (1.6-3x over the 16-row tile that fit there);
    # where it fits, the widening kernel's 64-head tile, 1.25-1.6x over the grouped one at 64+
    # heads (NOTES.md round 18). The grouped tiles, bound by their widening and MMAs rather than
    # their gathers, queue up to 4 rounds of programs where one runs per SM (NOTES.md round 25).
    ("fp8_ds_mla", 16): (
        (
            _tile(16, 32, 4, 2, 2, groups="fp16", rounds=4),
            {"mma": 73856, "sm90": 73856, "sm100": 73856},
        ),
    ),
    ("fp8_ds_mla", 32): (
        (
            _tile(16, 32, 4, 2, 2, groups="fp16", rounds=4),
            {"mma": 73856, "sm90": 73856, "sm100": 73856},
        ),
    ),
    ("fp8_ds_mla", 64): (
        (_tile(64, 64, 8, 2, 1), {"mma": 247040, "sm90": 189696, "sm100": 190240}),
        (
            _tile(64, 32, 8, 2, 1, groups="kept", rounds=4),
            {"mma": 86656, "sm90": 131712, "sm100": 132176},
        ),
    ),
}


def _early_merge(cfg: dict[str, int], is_split: bool, dev: int) -> bool:
    """Whether the merge launches as a programmatic dependent of the split kernel: wherever
    the GPU has PDL and a config does not turn it off (with the Gluon tiles' trigger where
    ``_late_trigger`` puts it, it pays at every batch measured: NOTES.md round 28)."""
    return is_split and bool(cfg.get("PDL", 1)) and _has_pdl(dev)


def _late_trigger(cfg: dict[str, int], programs: int, dev: int) -> bool:
    """Where a Gluon split kernel lets the merge launch: after its main loop (True), or as its
    programs exit. The merge's programs, launched early, take the SMs the split grid leaves
    idle and slow its last programs (NOTES.md round 7). Measured on the H200 (rounds 27-28,
    plans r27p and r28e, 16-bit and e4m3 rows): after the main loop is 8-11% faster than a
    plain launch for 8/16-head blocks at about one program per SM; 64-head blocks there gain
    most from the exit (1-6%); a grid that leaves half the SMs idle gains from either, least
    from the exit. 32-head blocks (17-32 heads) follow the 64-head rule, unmeasured. A
    config's ``PDL_LATE`` wins (tuning)."""
    if "PDL_LATE" in cfg:
        return bool(cfg["PDL_LATE"])
    return cfg["BLOCK_H"] <= 16 or 2 * programs <= _num_sms(dev)


def _e4m3_score_cols(cfg: dict[str, int]) -> int:
    """Latent columns per chain of score MMAs on Hopper's e4m3 tile, the chains summed in
    float32 (e4m3 MMAs keep 13 accumulator mantissa bits): 32 on one warpgroup (8-16 heads;
    lse 8-24x finer than one chain for 3-7% of the time), 64 on two (64 heads; 32 would cost
    9%, 64 nothing measurable). A config's ``SCORE_COLS`` wins; 0 is one chain over all 576
    columns (NOTES.md round 22)."""
    return cfg.get("SCORE_COLS", 32 if cfg["BLOCK_H"] <= 16 else 64)


def _q_in_registers(cfg: dict[str, int], kv_format: str) -> bool:
    """Whether an ``MMA_V2`` tile of up to 32 heads is ``_sparse_mla_mma_kernel`` (q in
    registers): always for 16-bit rows and 32 heads, for e4m3 rows with 16 heads where the
    tile's rows are fewer than the e4m3 tile's 64."""
    return kv_format == "16bit" or cfg["BLOCK_H"] == 32 or cfg["BLOCK_N"] < 64


_COLUMN_GROUPS_RULE = (
    "COL_WARPS 1, or 2 or 4 over 16-bit rows where each group of columns has a warp per "
    "8 x COL_WARPS heads and 16 rows"
)


def _column_groups_fit(cfg: dict[str, int], kv_format: str) -> bool:
    """Whether ``_sparse_mla_mma_kernel`` can split this tile's scores into ``COL_WARPS``
    groups of columns: ``_COLUMN_GROUPS_RULE``."""
    groups = cfg.get("COL_WARPS", 1)
    if groups == 1:
        return True
    warps, warps_h = cfg["num_warps"], cfg["BLOCK_H"] // (8 * groups)
    if kv_format != "16bit" or groups not in (2, 4) or warps_h < 1 or warps % (groups * warps_h):
        return False
    return cfg["BLOCK_N"] >= 16 * (warps // (groups * warps_h))


def _runs_mma_kernel(cfg: dict[str, int], kv_format: str) -> bool:
    """Whether the launcher runs this tile as ``_sparse_mla_mma_kernel`` (q in registers)."""
    return bool(cfg.get("MMA_V2")) and (cfg["BLOCK_H"] == 64 or _q_in_registers(cfg, kv_format))


def _mma_tile_smem(cfg: dict[str, int]) -> int:
    """Shared memory of ``_sparse_mla_mma_kernel`` over 16-bit rows, an upper bound: the
    gather stages, P, the column groups' float32 scratch (8 words of padding a row) and 256
    bytes for the rest (what Triton 3.6 compiles is within it: tests/unit)."""
    block_n, block_h, groups = cfg["BLOCK_N"], cfg["BLOCK_H"], cfg.get("COL_WARPS", 1)
    scratch = groups * block_n * (block_h + 8) * 4 if groups > 1 else 0
    return cfg["num_stages"] * block_n * (_D_V + 64) * 2 + block_n * block_h * 2 + scratch + 256


def _planned_column_groups(
    cfg: dict[str, int], override: dict[str, int], kv_format: str, limits: DeviceLimits
) -> dict[str, int]:
    """The merged tile's ``COL_WARPS``. Groups from the defaults stay only where the tile is
    still ``_sparse_mla_mma_kernel``'s, keeps ``_COLUMN_GROUPS_RULE`` and fits the block's
    shared memory with their scratch (an override of the rows or stages may break either);
    an override's own groups on another kernel, or past the shared memory, are refused (the
    launcher refuses the rest of the rule)."""
    groups = cfg.get("COL_WARPS", 1)
    if groups == 1:
        return cfg
    mma_kernel = _runs_mma_kernel(cfg, kv_format)
    fits = mma_kernel and _column_groups_fit(cfg, kv_format)
    smem_ok = _mma_tile_smem(cfg) <= limits.smem_per_block
    if "COL_WARPS" not in override:
        if fits and smem_ok:
            return cfg
        return {key: value for key, value in cfg.items() if key != "COL_WARPS"}
    if not mma_kernel:
        raise ValueError(
            f"sparse MLA decode: COL_WARPS {groups}: only the mma.sync tiles with q in "
            "registers (MMA_V2 with 16 or 32 heads over 16-bit rows, or 64-head blocks) score "
            "on groups of columns"
        )
    if fits and not smem_ok:
        raise ValueError(
            f"sparse MLA decode: COL_WARPS {groups} with BLOCK_N {cfg['BLOCK_N']} x "
            f"{cfg['num_stages']} stages needs {_mma_tile_smem(cfg)} bytes of shared memory a "
            f"block; this GPU has {limits.smem_per_block}"
        )
    return cfg
