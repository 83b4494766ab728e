"""The tile table and the rules that say which tile a config describes and what it needs
(DESIGN.md, "Tiles per device")."""

from __future__ import annotations

from typing import NamedTuple

import torch

from .common import (
    _D_PE,
    _D_V,
    _GLUON_TRITONS,
    _KV_FMT_CODE,
    _TRITON,
    DeviceLimits,
    _device_limits,
    _gluon_mma_usable,
    _gluon_usable,
    _has_pdl,
    _num_sms,
)


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
# choices, DESIGN.md "Tiles per device"), each with the shared memory per block it needs on each MMA
# family: the larger of Triton 3.5.1's and 3.6.0's compiles, in bytes.
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
    # per dot, DESIGN.md "fp8 rows on the tl.dot tiles"). 32 heads: the latent gathered once per
    # dot, fp16 dots, V widened by inline PTX (1.2-1.4x at B >= 8); 99 KB GPUs take the 32-head tile
    # with the bits (1.09-1.22x over the per-dot gathers at 64+ heads on the H200).
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
    # bf16, gathered again for P.V), 1.03-1.13x more with the groups in fp16, kept (DESIGN.md
    # "fp8_ds_mla rows"), and everywhere on 99 KB GPUs (1.6-3x over the 16-row tile that fit there);
    # where it fits, the widening kernel's 64-head tile, 1.25-1.6x over the grouped one at 64+ heads
    # (DESIGN.md "fp8_ds_mla rows"). The grouped tiles, bound by their widening and MMAs rather than
    # their gathers, queue up to 4 rounds of programs where one runs per SM (DESIGN.md "Splits").
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
    ``_late_trigger`` puts it, it pays at every batch measured: DESIGN.md "The merge and its
    launch")."""
    return is_split and bool(cfg.get("PDL", 1)) and _has_pdl(dev)


def _late_trigger(cfg: dict[str, int], programs: int, dev: int) -> bool:
    """Where a Gluon split kernel lets the merge launch: after its main loop (True), or as its
    programs exit. The merge's programs, launched early, take the SMs the split grid leaves
    idle and slow its last programs. Measured on the H200 (16-bit and e4m3 rows): after the
    main loop is 8-11% faster than a plain launch for 8/16-head blocks at about one program per
    SM; 64-head blocks there gain most from the exit (1-6%); a grid that leaves half the SMs
    idle gains from either, least from the exit. 32-head blocks (17-32 heads) follow the
    64-head rule, unmeasured (the benchmark's ``PDL_LATE`` overrides this rule; DESIGN.md "The
    merge and its launch")."""
    return cfg["BLOCK_H"] <= 16 or 2 * programs <= _num_sms(dev)


def _e4m3_score_cols(cfg: dict[str, int]) -> int:
    """Latent columns per chain of score MMAs on Hopper's e4m3 tile, the chains summed in
    float32 (e4m3 MMAs keep 13 accumulator mantissa bits): 32 on one warpgroup (8-16 heads;
    lse 8-24x finer than one chain for 3-7% of the time), 64 on two (64 heads; 32 would cost
    9%, 64 nothing measurable). A config's ``SCORE_COLS`` wins; 0 is one chain over all 576
    columns (DESIGN.md "Precision of the e4m3 tiles")."""
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
    return tile_kind(cfg, kv_format).kernel == "_sparse_mla_mma_kernel"


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


class SplitCall(NamedTuple):
    """One launch of a split kernel besides its tile: the arguments every split kernel shares
    (``sparse_mla_decode`` builds them), the grid and the call's choices."""

    args: tuple
    programs: int
    kv_format: str
    kv_scale: float
    is_split: bool
    use_pdl: bool  # the merge launches as a programmatic dependent
    late_trigger: bool  # Gluon tiles: it may launch after their main loop, not at their exit


class Tile:
    """A split kernel and the tiles it implements: whether this Triton runs it on a GPU
    (``fits``), whether it takes a config (``problem``), its compile-time arguments for one
    (what ``launch`` passes and what the compile-for-every-target test compiles), and its
    launch. A config (``_TILES``, the plan) describes a tile's shape; ``tile_kind`` says
    which kernel runs it. A tile change is one place: its kernel's ``Tile``. (A plain class,
    not a dataclass: the rendered backend may be loaded as a module no registry knows.)"""

    def __init__(
        self, kernel: str, requirement: str = "", gluon: bool = False, scale_arg: bool = False
    ) -> None:
        self.kernel = kernel  # the split kernel's name among this module's globals
        self.requirement = requirement  # what a Gluon kernel refuses a config or call for lacking
        self.gluon = gluon  # written in Gluon: 16-bit partials, needs a Triton with its API
        self.scale_arg = scale_arg  # takes the fp8 e4m3 rows' scale after the shared arguments

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.kernel})"

    def fits(self, capability: tuple[int, int]) -> bool:
        """Whether this Triton runs the kernel on a GPU of ``capability`` (the ``tl.dot``
        kernels everywhere; which row formats a GPU serves is ``_unsupported``'s)."""
        return True

    def problem(self, cfg: dict[str, int], kv_format: str) -> bool:
        """Whether the kernel cannot run the tile ``cfg`` over ``kv_format`` rows."""
        return False

    def constexprs(
        self, cfg: dict[str, int], kv_format: str, q_dtype: torch.dtype, split: bool, pdl: bool
    ) -> dict[str, object]:
        """The kernel's compile-time arguments (``pdl``: ``USE_PDL`` for the ``tl.dot``
        kernels, ``LATE_TRIGGER`` for the Gluon ones)."""
        raise NotImplementedError

    def launch(self, cfg: dict[str, int], call: SplitCall, inputs_ok: bool, dev: int) -> None:
        """Launch the kernel for ``cfg`` on device ``dev``; a Gluon kernel first checks the
        tile, the call's buffers and dtypes (``inputs_ok``) and the GPU. (The kernels are
        looked up among the module's globals: the Gluon ones exist only where Gluon does.)"""
        runs = not self.problem(cfg, call.kv_format) and inputs_ok
        if self.gluon and not (runs and self.fits(_device_limits(dev).capability)):
            raise ValueError(self.requirement.format(tritons=_GLUON_TRITONS))
        pdl = call.late_trigger if self.gluon else call.use_pdl
        constexprs = self.constexprs(cfg, call.kv_format, call.args[0].dtype, call.is_split, pdl)
        args, scale = call.args, (float(call.kv_scale),) if self.scale_arg else ()
        if constexprs.get("DS"):  # fp8_ds_mla rows: the bytes, read as e4m3 and by casts
            args = (args[0], args[1].view(torch.float8_e4m3fn), *args[2:])
        if self.gluon:
            grid, options = call.programs, {"num_warps": cfg["num_warps"]}
        else:  # two programs own the two V halves under DV_SPLIT 2
            grid = call.programs * cfg.get("DV_SPLIT", 1)
            options = {"num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]}
        globals()[self.kernel][(grid,)](*self.arguments(args, scale), **constexprs, **options)

    def arguments(self, args: tuple, scale: tuple) -> tuple:
        """The kernel's runtime arguments: the shared ones, then the rows' scale if it takes
        one."""
        return (*args, *scale)


class _TlDotTile(Tile):
    """``_sparse_mla_split_kernel``: every GPU, every row format."""

    def constexprs(self, cfg, kv_format, q_dtype, split, pdl):  # noqa: D102
        fp8, fp16_dots = kv_format == "fp8", _fp16_dots(cfg)
        v_asm = fp8 and bool(cfg.get("V_ASM", 0)) and (q_dtype == torch.float16 or fp16_dots)
        return {
            "BLOCK_H": cfg["BLOCK_H"],
            "BLOCK_N": cfg["BLOCK_N"],
            "D_V": _D_V,
            "D_PE": _D_PE,
            "DV_SPLIT": cfg.get("DV_SPLIT", 1),
            "KV_FMT": _KV_FMT_CODE[kv_format],
            "IS_SPLIT": split,
            "USE_PDL": pdl,
            "PREFETCH_IDX": bool(cfg.get("PREFETCH_IDX", 0)),
            "FP8_TWICE": bool(cfg.get("FP8_TWICE", 0)),
            "FP16_DOTS": fp8 and q_dtype == torch.bfloat16 and fp16_dots,
            "V_ASM": v_asm,
            "E4M3_BITS": v_asm and bool(cfg.get("E4M3_BITS", 0)) and not cfg.get("FP8_TWICE", 0),
        }

    def arguments(self, args, scale):  # noqa: D102 (its scale sits among the arguments)
        return (*args[:8], *scale, *args[8:])


class _GroupsTile(Tile):
    """``_sparse_mla_ds_split_kernel``: fp8_ds_mla rows in their four scaled groups."""

    def constexprs(self, cfg, kv_format, q_dtype, split, pdl):  # noqa: D102
        return {
            "BLOCK_H": cfg["BLOCK_H"],
            "BLOCK_N": cfg["BLOCK_N"],
            "IS_SPLIT": split,
            "USE_PDL": pdl,
            "PREFETCH_IDX": bool(cfg.get("PREFETCH_IDX", 0)),
            "FP8_TWICE": bool(cfg.get("FP8_TWICE", 0)),
            "FP16_DOTS": _fp16_dots(cfg),
            "E4M3_BITS": bool(cfg.get("E4M3_BITS", 0)),
        }


class _MmaTile(Tile):
    """``_sparse_mla_mma_kernel``, q in registers: 16 or 32 heads (``wide`` False), or 64
    where no 64-head ``tl.dot`` tile fits (99 KB GPUs)."""

    wide: bool = False

    def fits(self, capability):  # noqa: D102
        return _gluon_mma_usable(capability, proxy=True)

    def problem(self, cfg, kv_format):  # noqa: D102
        block_h, block_n, warps, stages = _shape(cfg)
        rows_ok = kv_format in ("16bit", "fp8") and _column_groups_fit(cfg, kv_format)
        q_rows = (2 if kv_format == "fp8" else 1) * block_h  # q passes through the stages
        if self.wide:
            tile_ok = warps == 8 and block_n in (16, 32, 64) and block_n * stages == q_rows
            return not (rows_ok and tile_ok and _stages_build(stages))
        warps_h = block_h // 8  # one or two warps along the keys
        tile_ok = block_h in (16, 32) and warps in (warps_h, 2 * warps_h) and block_n in (16, 32)
        tile_ok = tile_ok and block_n >= 16 * (warps // warps_h) and _stages_build(stages)
        return not (rows_ok and tile_ok and stages >= 2 and block_n * stages >= q_rows)

    def constexprs(self, cfg, kv_format, q_dtype, split, pdl):  # noqa: D102
        block_h, block_n, warps, stages = _shape(cfg)
        return {
            "BLOCK_H": block_h,
            "BLOCK_N": block_n,
            "NUM_STAGES": stages,
            "IS_SPLIT": split,
            "LATE_TRIGGER": pdl,
            "W": warps,
            "COL_WARPS": cfg.get("COL_WARPS", 1),
        }


class _MmaWideTile(_MmaTile):
    wide = True


class _MmaE4m3Tile(Tile):
    """``_sparse_mla_mma_e4m3_kernel``: fp8 e4m3 or fp8_ds_mla rows, 8 or 16 heads."""

    def fits(self, capability):  # noqa: D102
        return _gluon_mma_usable(capability, proxy=True)

    def problem(self, cfg, kv_format):  # noqa: D102
        block_h, block_n, warps, stages = _shape(cfg)
        tile_ok = block_n == 64 and (block_h, warps) in ((8, 4), (16, 4), (16, 8))
        tile_ok = tile_ok and 2 <= stages <= 3 and _stages_build(stages)
        return not (tile_ok and kv_format in ("fp8", "fp8_ds_mla"))

    def constexprs(self, cfg, kv_format, q_dtype, split, pdl):  # noqa: D102
        ds = kv_format == "fp8_ds_mla"
        return {
            "BLOCK_H": cfg["BLOCK_H"],
            "NUM_STAGES": cfg["num_stages"],
            "IS_SPLIT": split,
            "LATE_TRIGGER": pdl,
            "HEAD_GROUPS": cfg["num_warps"] // 4,
            "DS": ds,
            "ROPE_REGS": ds and bool(cfg.get("ROPE_REGS", 0)),
        }


class _WgmmaTile(Tile):
    """Hopper's Gluon tiles: ``_sparse_mla_wgmma_kernel`` (64 heads, 16-bit rows),
    ``_sparse_mla_wgmma_swapped_kernel`` (8/16 heads, 16-bit rows; keys as the MMA's M) and
    ``_sparse_mla_wgmma_e4m3_kernel`` (fp8 e4m3 rows, 8/16 or 64 heads)."""

    def fits(self, capability):  # noqa: D102
        return _gluon_usable(capability)

    def problem(self, cfg, kv_format):  # noqa: D102
        block_h, block_n, warps, stages = _shape(cfg)
        if cfg.get("DV_SPLIT", 1) != 1:
            return True
        if self.kernel == "_sparse_mla_wgmma_e4m3_kernel":  # a warpgroup per 32 heads at most
            tile_ok = block_h in (8, 16, 64) and block_n == 64 and _stages_build(stages)
            return not (tile_ok and warps == (8 if block_h == 64 else 4) and 2 <= stages <= 3)
        if self.kernel == "_sparse_mla_wgmma_swapped_kernel":  # shared memory for 2 (3 at 8)
            tile_ok = block_n == 64 and warps == 4
            return not (tile_ok and 2 <= stages <= (3 if block_h == 8 else 2))
        tile_ok = block_h == 64 and block_n in (16, 32, 64) and warps == 8
        return not (tile_ok and stages >= 2 and block_n * stages <= 128)  # shared memory

    def constexprs(self, cfg, kv_format, q_dtype, split, pdl):  # noqa: D102
        swapped = self.kernel != "_sparse_mla_wgmma_kernel"
        shape = {"BLOCK_H": cfg["BLOCK_H"]} if swapped else {"BLOCK_N": cfg["BLOCK_N"]}
        constexprs = {**shape, "NUM_STAGES": cfg["num_stages"]}
        constexprs |= {"IS_SPLIT": split, "LATE_TRIGGER": pdl}
        if self.kernel == "_sparse_mla_wgmma_e4m3_kernel":
            constexprs["SCORE_COLS"] = _e4m3_score_cols(cfg)
        return constexprs


def _stages_build(stages: int) -> bool:
    """Whether this Triton builds ``stages`` stage buffers in the mma.sync kernels and the
    e4m3 warpgroup kernel: from 3.7 on it lays them out only for a power-of-two count (at 3 it
    aborts the process in ``toLinearLayout``, "shape must be a postive power of 2"); 3.6
    builds any. (The 16-bit warpgroup kernels build 3 under every Triton.)"""
    return _TRITON < (3, 7) or stages & (stages - 1) == 0


def _shape(cfg: dict[str, int]) -> tuple[int, int, int, int]:
    """A config's head block, rows per tile, warps and stages."""
    return cfg["BLOCK_H"], cfg["BLOCK_N"], cfg["num_warps"], cfg["num_stages"]


_GLUON_CALL = (
    "16-byte-aligned buffers and strides that are multiples of 16 elements, {tritons} and "
)
_POW2_STAGES = "a power-of-two count of them under Triton 3.7 onwards, whose compiler aborts on 3"
_WGMMA_RULE = (
    "WGMMA needs BLOCK_H 64 (BLOCK_N 16/32/64, 8 warps, 2 to 128 / BLOCK_N stages) or BLOCK_H "
    "8/16 (BLOCK_N 64, 4 warps, 2 stages, 3 at 8 heads), DV_SPLIT 1, q, out and 16-bit KV rows "
    "of one dtype (or fp8 e4m3 rows, BLOCK_H 8/16 with 4 warps or 64 with 8, BLOCK_N 64, 2 or "
    f"3 stages ({_POW2_STAGES}), q and out of one 16-bit dtype), {_GLUON_CALL}a Hopper GPU"
)
TL_DOT = _TlDotTile("_sparse_mla_split_kernel", scale_arg=True)
TL_DOT_GROUPS = _GroupsTile("_sparse_mla_ds_split_kernel")
MMA = _MmaTile(
    "_sparse_mla_mma_kernel",
    "MMA_V2 with up to 32 heads needs BLOCK_H 16 or 32 on one warp per 8 heads (BLOCK_N 16 or "
    "32) or two (BLOCK_N 32), stages that hold q (BLOCK_H rows, twice that for fp8 e4m3 rows; "
    f"{_POW2_STAGES}), 16-bit rows (q, out and KV of one dtype) or fp8 e4m3 rows (q and out "
    f"of one 16-bit dtype), {_COLUMN_GROUPS_RULE}, {_GLUON_CALL}an SM8x, SM90 or SM12x GPU",
    gluon=True,
    scale_arg=True,
)
MMA_WIDE = _MmaWideTile(
    "_sparse_mla_mma_kernel",
    "MMA_V2 with 64 heads needs 8 warps and BLOCK_N x stages = 64 rows (16-bit rows: q, out "
    "and KV of one dtype) or 128 (fp8 e4m3 rows, q and out of one 16-bit dtype), "
    f"{_COLUMN_GROUPS_RULE}, {_GLUON_CALL}an SM8x, SM90 or SM12x GPU",
    gluon=True,
    scale_arg=True,
)
MMA_E4M3 = _MmaE4m3Tile(
    "_sparse_mla_mma_e4m3_kernel",
    "MMA_V2 needs fp8 e4m3 rows (q and out of one 16-bit dtype) or fp8_ds_mla rows (bf16 q and "
    "out), BLOCK_H 8 (4 warps) or 16 (4 or 8 warps), BLOCK_N 64, 2 or 3 stages "
    f"({_POW2_STAGES}), {_GLUON_CALL}an SM89, SM90 or SM12x GPU",
    gluon=True,
    scale_arg=True,
)
WGMMA = _WgmmaTile("_sparse_mla_wgmma_kernel", _WGMMA_RULE, gluon=True)
WGMMA_SWAPPED = _WgmmaTile("_sparse_mla_wgmma_swapped_kernel", _WGMMA_RULE, gluon=True)
WGMMA_E4M3 = _WgmmaTile("_sparse_mla_wgmma_e4m3_kernel", _WGMMA_RULE, gluon=True, scale_arg=True)


def tile_kind(cfg: dict[str, int], kv_format: str) -> Tile:
    """Which kernel runs the tile ``cfg`` over ``kv_format`` rows: ``MMA_V2`` names the
    mma.sync tiles, ``WGMMA`` Hopper's, else a ``tl.dot`` kernel."""
    if cfg.get("MMA_V2"):
        if cfg["BLOCK_H"] == 64:
            return MMA_WIDE
        return MMA if _q_in_registers(cfg, kv_format) else MMA_E4M3
    if cfg.get("WGMMA"):
        if kv_format == "fp8":  # keys as the MMA's M, one warpgroup per 32 heads at most
            return WGMMA_E4M3
        return WGMMA_SWAPPED if cfg["BLOCK_H"] in (8, 16) else WGMMA
    if kv_format == "fp8_ds_mla" and cfg.get("FP8_GROUPS", 0):
        return TL_DOT_GROUPS
    return TL_DOT
