"""The tiles: one frozen dataclass per split-kernel family, which knows the kernel that runs it,
whether it fits a device, its rule (``validate``) and its launch, and the table of tl.dot tiles
the plan chooses from (DESIGN.md, "Tiles per device"). A tile change is one place: its class.

The joined module must be in ``sys.modules`` when it runs (``assemble.load``, or any import):
``dataclasses`` resolves its string annotations through it."""

from __future__ import annotations

import dataclasses
from typing import ClassVar, NamedTuple

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
    _mma_family,
)


class SharedMemory(NamedTuple):
    """Shared memory per block a tl.dot tile needs on each MMA family (``_mma_family``): the
    larger of Triton 3.5.1's and 3.6.0's compiles, in bytes."""

    mma: int
    sm90: int
    sm100: int

    def on(self, capability: tuple[int, int]) -> int:
        return int(getattr(self, _mma_family(capability)))


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


@dataclasses.dataclass(frozen=True)
class Tile:
    """A split kernel's tile: its shape (heads per block, rows per step, warps, stages) and
    what the split count aims for (``waves`` programs per SM, up to ``rounds`` rounds of them
    where one runs per SM, ``min_tiles`` tiles a split before a second program per SM)."""

    block_h: int
    block_n: int
    warps: int
    stages: int
    waves: int = 1
    rounds: int = 1
    min_tiles: int = 1

    gluon: ClassVar[bool] = False  # written in Gluon: 16-bit partials, needs its Triton API
    scale_arg: ClassVar[bool] = False  # takes the fp8 e4m3 rows' scale
    requirement: ClassVar[str] = ""  # what a Gluon kernel refuses a tile or call for lacking

    def kernel(self, kv_format: str) -> str:
        """The split kernel's name among the module's globals."""
        raise NotImplementedError

    def fits(self, limits: DeviceLimits) -> bool:
        """Whether this Triton runs the tile on a GPU with these limits (which row formats a
        GPU serves is ``_unsupported``'s)."""
        return True

    def problem(self, kv_format: str) -> bool:
        """Whether the kernel cannot run this tile over ``kv_format`` rows (its rule)."""
        return False

    def validate(self, kv_format: str, limits: DeviceLimits | None = None) -> None:
        """Raises ValueError for a tile no launch over ``kv_format`` rows may take (on a GPU
        with ``limits``; None: what needs none), before any device query or split count."""

    def head_block_programs(self) -> int:
        """Programs per (token, split, head block): two own V's halves under ``dv_split``."""
        return 1

    def words(self) -> str:
        """The tile in a start-up line's words."""
        return f"tl.dot tile {self.block_h}x{self.block_n}, {self.warps} warps"

    def constexprs(
        self, kv_format: str, q_dtype: torch.dtype, split: bool, pdl: bool
    ) -> dict[str, object]:
        """The kernel's compile-time arguments (``pdl``: ``USE_PDL`` for the ``tl.dot``
        kernels, ``LATE_TRIGGER`` for the Gluon ones): what ``launch`` passes and what the
        compile-for-every-target test compiles."""
        raise NotImplementedError

    def arguments(self, args: tuple, scale: tuple) -> tuple:
        """The kernel's runtime arguments: the shared ones, then the rows' scale if it takes
        one."""
        return (*args, *scale)

    def launch(self, call: SplitCall, inputs_ok: bool, dev: int) -> None:
        """Launch the kernel on device ``dev``; a Gluon kernel first checks the tile, the
        call's buffers and dtypes (``inputs_ok``) and the GPU. (The kernels are looked up among
        the module's globals: the Gluon ones exist only where Gluon does.)"""
        runs = not self.problem(call.kv_format) and inputs_ok
        if self.gluon and not (runs and self.fits(_device_limits(dev))):
            raise ValueError(self.requirement.format(tritons=_GLUON_TRITONS))
        pdl = call.late_trigger if self.gluon else call.use_pdl
        constexprs = self.constexprs(call.kv_format, call.args[0].dtype, call.is_split, pdl)
        args, scale = call.args, (float(call.kv_scale),) if self.scale_arg else ()
        if constexprs.get("DS"):  # fp8_ds_mla rows: the bytes, read as e4m3 and by casts
            args = (args[0], args[1].view(torch.float8_e4m3fn), *args[2:])
        options = {"num_warps": self.warps}
        if not self.gluon:
            options["num_stages"] = self.stages
        grid = call.programs * self.head_block_programs()
        kernel = globals()[self.kernel(call.kv_format)]
        kernel[(grid,)](*self.arguments(args, scale), **constexprs, **options)


@dataclasses.dataclass(frozen=True)
class TlDotTile(Tile):
    """``_sparse_mla_split_kernel``: every GPU, every row format. Options: indices prefetched
    (``prefetch``); fp8 rows under a bf16 q: the dots in fp16, q shifted per head
    (``fp16_dots``), the latent gathered once per dot (``fp8_twice``), V widened by inline PTX
    (``v_asm``) from an fp16 tile both dots read (``e4m3_bits``); ``dv_split`` programs own
    V's column parts (16-bit rows). ``smem``: what the table measured, None for a tile it
    does not hold."""

    waves: int = 2
    prefetch: bool = False
    fp8_twice: bool = False
    fp16_dots: bool = False
    v_asm: bool = False
    e4m3_bits: bool = False
    dv_split: int = 1
    smem: SharedMemory | None = dataclasses.field(default=None, compare=False, repr=False)

    scale_arg: ClassVar[bool] = True

    def kernel(self, kv_format: str) -> str:  # noqa: D102
        return "_sparse_mla_split_kernel"

    def fits(self, limits: DeviceLimits) -> bool:  # noqa: D102
        return self.smem is None or self.smem.on(limits.capability) <= limits.smem_per_block

    def validate(self, kv_format: str, limits: DeviceLimits | None = None) -> None:  # noqa: D102
        if kv_format != "16bit" and self.dv_split != 1:
            raise ValueError("DV_SPLIT is a 16-bit-cache tuning option; fp8 rows need 1")

    def head_block_programs(self) -> int:  # noqa: D102
        return self.dv_split

    def constexprs(self, kv_format, q_dtype, split, pdl):  # noqa: D102
        fp8 = kv_format == "fp8"
        v_asm = fp8 and self.v_asm and (q_dtype == torch.float16 or self.fp16_dots)
        return {
            "BLOCK_H": self.block_h,
            "BLOCK_N": self.block_n,
            "D_V": _D_V,
            "D_PE": _D_PE,
            "DV_SPLIT": self.dv_split,
            "KV_FMT": _KV_FMT_CODE[kv_format],
            "IS_SPLIT": split,
            "USE_PDL": pdl,
            "PREFETCH_IDX": self.prefetch,
            "FP8_TWICE": self.fp8_twice,
            "FP16_DOTS": fp8 and q_dtype == torch.bfloat16 and self.fp16_dots,
            "V_ASM": v_asm,
            "E4M3_BITS": v_asm and self.e4m3_bits and not self.fp8_twice,
        }

    def arguments(self, args, scale):  # noqa: D102 (its scale sits among the arguments)
        return (*args[:8], *scale, *args[8:])


@dataclasses.dataclass(frozen=True)
class TlDotGroupsTile(Tile):
    """``_sparse_mla_ds_split_kernel``: fp8_ds_mla rows in their four scaled groups, widened
    to bf16 and gathered again for P.V (``fp8_twice``), kept in registers, or widened to fp16
    and kept (``fp16_dots``). Options and ``smem`` as ``TlDotTile``'s."""

    waves: int = 2
    prefetch: bool = False
    fp8_twice: bool = False
    fp16_dots: bool = False
    e4m3_bits: bool = False
    smem: SharedMemory | None = dataclasses.field(default=None, compare=False, repr=False)

    def kernel(self, kv_format: str) -> str:  # noqa: D102
        return "_sparse_mla_ds_split_kernel"

    def fits(self, limits: DeviceLimits) -> bool:  # noqa: D102
        return self.smem is None or self.smem.on(limits.capability) <= limits.smem_per_block

    def constexprs(self, kv_format, q_dtype, split, pdl):  # noqa: D102
        return {
            "BLOCK_H": self.block_h,
            "BLOCK_N": self.block_n,
            "IS_SPLIT": split,
            "USE_PDL": pdl,
            "PREFETCH_IDX": self.prefetch,
            "FP8_TWICE": self.fp8_twice,
            "FP16_DOTS": self.fp16_dots,
            "E4M3_BITS": self.e4m3_bits,
        }


def _stages_build(stages: int) -> bool:
    """Whether this Triton builds ``stages`` stage buffers in the mma.sync kernels and the
    e4m3 warpgroup kernel: from 3.7 on it lays them out only for a power-of-two count (at 3 it
    aborts the process in ``toLinearLayout``, "shape must be a postive power of 2"); 3.6
    builds any. (The 16-bit warpgroup kernels build 3 under every Triton.)"""
    return _TRITON < (3, 7) or stages & (stages - 1) == 0


_GLUON_CALL = (
    "16-byte-aligned buffers and strides that are multiples of 16 elements, {tritons} and "
)
_POW2_STAGES = "a power-of-two count of them under Triton 3.7 onwards, whose compiler aborts on 3"
_COLUMN_GROUPS_RULE = (
    "COL_WARPS 1, or 2 or 4 over 16-bit rows where each group of columns has a warp per "
    "8 x COL_WARPS heads and 16 rows"
)


@dataclasses.dataclass(frozen=True)
class MmaTile(Tile):
    """``_sparse_mla_mma_kernel``, q in registers, 16 or 32 heads: its scores on ``col_warps``
    groups of columns (``_COLUMN_GROUPS_RULE``)."""

    col_warps: int = 1

    gluon: ClassVar[bool] = True
    scale_arg: ClassVar[bool] = True
    requirement: ClassVar[str] = (
        "MMA_V2 with up to 32 heads needs BLOCK_H 16 or 32 on one warp per 8 heads (BLOCK_N 16 "
        "or 32) or two (BLOCK_N 32), stages that hold q (BLOCK_H rows, twice that for fp8 e4m3 "
        f"rows; {_POW2_STAGES}), 16-bit rows (q, out and KV of one dtype) or fp8 e4m3 rows (q "
        f"and out of one 16-bit dtype), {_COLUMN_GROUPS_RULE}, {_GLUON_CALL}an SM8x, SM90 or "
        "SM12x GPU"
    )

    def kernel(self, kv_format: str) -> str:  # noqa: D102
        return "_sparse_mla_mma_kernel"

    def fits(self, limits: DeviceLimits) -> bool:  # noqa: D102
        return _gluon_mma_usable(limits.capability, proxy=True)

    def words(self) -> str:  # noqa: D102
        return f"Gluon mma.sync tile {self.block_h}x{self.block_n}, {self.warps} warps"

    def column_groups_fit(self, kv_format: str) -> bool:
        """Whether the kernel can split this tile's scores into ``col_warps`` groups of
        columns: ``_COLUMN_GROUPS_RULE``."""
        groups = self.col_warps
        if groups == 1:
            return True
        warps_h = self.block_h // (8 * groups)
        if kv_format != "16bit" or groups not in (2, 4) or warps_h < 1:
            return False
        if self.warps % (groups * warps_h):
            return False
        return self.block_n >= 16 * (self.warps // (groups * warps_h))

    def smem_bound(self) -> int:
        """Shared memory over 16-bit rows, an upper bound: the gather stages, P, the column
        groups' float32 scratch (8 words of padding a row) and 256 bytes for the rest (what
        Triton 3.6 compiles is within it: tests/unit)."""
        groups = self.col_warps
        scratch = groups * self.block_n * (self.block_h + 8) * 4 if groups > 1 else 0
        gathers = self.stages * self.block_n * (_D_V + 64) * 2
        return gathers + self.block_n * self.block_h * 2 + scratch + 256

    def validate(self, kv_format: str, limits: DeviceLimits | None = None) -> None:  # noqa: D102
        grouped = self.col_warps > 1 and self.column_groups_fit(kv_format)
        if grouped and limits and self.smem_bound() > limits.smem_per_block:
            raise ValueError(
                f"sparse MLA decode: COL_WARPS {self.col_warps} with BLOCK_N {self.block_n} x "
                f"{self.stages} stages needs {self.smem_bound()} bytes of shared memory a "
                f"block; this GPU has {limits.smem_per_block}"
            )

    def problem(self, kv_format: str) -> bool:  # noqa: D102
        block_h, block_n, warps, stages = self.block_h, self.block_n, self.warps, self.stages
        rows_ok = kv_format in ("16bit", "fp8") and self.column_groups_fit(kv_format)
        q_rows = (2 if kv_format == "fp8" else 1) * block_h  # q passes through the stages
        warps_h = block_h // 8  # one or two warps along the keys
        tile_ok = block_h in (16, 32) and warps in (warps_h, 2 * warps_h) and block_n in (16, 32)
        tile_ok = tile_ok and block_n >= 16 * (warps // warps_h) and _stages_build(stages)
        return not (rows_ok and tile_ok and stages >= 2 and block_n * stages >= q_rows)

    def constexprs(self, kv_format, q_dtype, split, pdl):  # noqa: D102
        return {
            "BLOCK_H": self.block_h,
            "BLOCK_N": self.block_n,
            "NUM_STAGES": self.stages,
            "IS_SPLIT": split,
            "LATE_TRIGGER": pdl,
            "W": self.warps,
            "COL_WARPS": self.col_warps,
        }


@dataclasses.dataclass(frozen=True)
class MmaWideTile(MmaTile):
    """``_sparse_mla_mma_kernel`` with 64 heads, where no 64-head ``tl.dot`` tile fits (99 KB
    GPUs)."""

    requirement: ClassVar[str] = (
        "MMA_V2 with 64 heads needs 8 warps and BLOCK_N x stages = 64 rows (16-bit rows: q, out "
        "and KV of one dtype) or 128 (fp8 e4m3 rows, q and out of one 16-bit dtype), "
        f"{_COLUMN_GROUPS_RULE}, {_GLUON_CALL}an SM8x, SM90 or SM12x GPU"
    )

    def problem(self, kv_format: str) -> bool:  # noqa: D102
        rows_ok = kv_format in ("16bit", "fp8") and self.column_groups_fit(kv_format)
        q_rows = (2 if kv_format == "fp8" else 1) * self.block_h
        tile_ok = self.warps == 8 and self.block_n in (16, 32, 64)
        tile_ok = tile_ok and self.block_n * self.stages == q_rows
        return not (rows_ok and tile_ok and _stages_build(self.stages))


@dataclasses.dataclass(frozen=True)
class MmaE4m3Tile(Tile):
    """``_sparse_mla_mma_e4m3_kernel``: fp8 e4m3 or fp8_ds_mla rows, 8 or 16 heads, a group of
    4 warps per 8 heads; over fp8_ds_mla rows, q's rope part in registers (``rope_regs``) or
    in shared memory."""

    rope_regs: bool = False

    gluon: ClassVar[bool] = True
    scale_arg: ClassVar[bool] = True
    requirement: ClassVar[str] = (
        "MMA_V2 needs fp8 e4m3 rows (q and out of one 16-bit dtype) or fp8_ds_mla rows (bf16 q "
        "and out), BLOCK_H 8 (4 warps) or 16 (4 or 8 warps), BLOCK_N 64, 2 or 3 stages "
        f"({_POW2_STAGES}), {_GLUON_CALL}an SM89, SM90 or SM12x GPU"
    )

    def kernel(self, kv_format: str) -> str:  # noqa: D102
        return "_sparse_mla_mma_e4m3_kernel"

    def fits(self, limits: DeviceLimits) -> bool:  # noqa: D102
        return _gluon_mma_usable(limits.capability, proxy=True)

    def words(self) -> str:  # noqa: D102
        return f"Gluon mma.sync tile {self.block_h}x{self.block_n}, {self.warps} warps"

    def problem(self, kv_format: str) -> bool:  # noqa: D102
        shape = (self.block_h, self.warps) in ((8, 4), (16, 4), (16, 8))
        tile_ok = self.block_n == 64 and shape and 2 <= self.stages <= 3
        tile_ok = tile_ok and _stages_build(self.stages)
        return not (tile_ok and kv_format in ("fp8", "fp8_ds_mla"))

    def constexprs(self, kv_format, q_dtype, split, pdl):  # noqa: D102
        ds = kv_format == "fp8_ds_mla"
        return {
            "BLOCK_H": self.block_h,
            "NUM_STAGES": self.stages,
            "IS_SPLIT": split,
            "LATE_TRIGGER": pdl,
            "HEAD_GROUPS": self.warps // 4,
            "DS": ds,
            "ROPE_REGS": ds and self.rope_regs,
        }


_WGMMA_RULE = (
    "WGMMA needs BLOCK_H 64 (BLOCK_N 16/32/64, 8 warps, 2 to 128 / BLOCK_N stages) or BLOCK_H "
    "8/16 (BLOCK_N 64, 4 warps, 2 stages, 3 at 8 heads), DV_SPLIT 1, q, out and 16-bit KV rows "
    "of one dtype (or fp8 e4m3 rows, BLOCK_H 8/16 with 4 warps or 64 with 8, BLOCK_N 64, 2 or "
    f"3 stages ({_POW2_STAGES}), q and out of one 16-bit dtype), {_GLUON_CALL}a Hopper GPU"
)


@dataclasses.dataclass(frozen=True)
class WgmmaTile(Tile):
    """``_sparse_mla_wgmma_kernel``: Hopper's warpgroup MMA, 64 heads over 16-bit rows."""

    gluon: ClassVar[bool] = True
    requirement: ClassVar[str] = _WGMMA_RULE

    def kernel(self, kv_format: str) -> str:  # noqa: D102
        return "_sparse_mla_wgmma_kernel"

    def fits(self, limits: DeviceLimits) -> bool:  # noqa: D102
        return _gluon_usable(limits.capability)

    def words(self) -> str:  # noqa: D102
        return f"Gluon warpgroup-MMA tile {self.block_h}x{self.block_n}, {self.warps} warps"

    def problem(self, kv_format: str) -> bool:  # noqa: D102 (shared memory bounds the stages)
        tile_ok = self.block_h == 64 and self.block_n in (16, 32, 64) and self.warps == 8
        tile_ok = tile_ok and self.stages >= 2 and self.block_n * self.stages <= 128
        return not (tile_ok and kv_format == "16bit")

    def constexprs(self, kv_format, q_dtype, split, pdl):  # noqa: D102
        return {
            "BLOCK_N": self.block_n,
            "NUM_STAGES": self.stages,
            "IS_SPLIT": split,
            "LATE_TRIGGER": pdl,
        }


@dataclasses.dataclass(frozen=True)
class WgmmaSwappedTile(WgmmaTile):
    """``_sparse_mla_wgmma_swapped_kernel``: 8 or 16 heads over 16-bit rows, the keys as the
    MMA's M (shared memory for 2 stages, 3 at 8 heads)."""

    def kernel(self, kv_format: str) -> str:  # noqa: D102
        return "_sparse_mla_wgmma_swapped_kernel"

    def problem(self, kv_format: str) -> bool:  # noqa: D102
        tile_ok = self.block_n == 64 and self.warps == 4 and kv_format == "16bit"
        return not (tile_ok and 2 <= self.stages <= (3 if self.block_h == 8 else 2))

    def constexprs(self, kv_format, q_dtype, split, pdl):  # noqa: D102
        return {
            "BLOCK_H": self.block_h,
            "NUM_STAGES": self.stages,
            "IS_SPLIT": split,
            "LATE_TRIGGER": pdl,
        }


@dataclasses.dataclass(frozen=True)
class WgmmaE4m3Tile(WgmmaTile):
    """``_sparse_mla_wgmma_e4m3_kernel``: fp8 e4m3 rows, 8/16 heads on one warpgroup or 64 on
    two. ``score_cols``: latent columns per chain of score MMAs, the chains summed in float32
    (e4m3 MMAs keep 13 accumulator mantissa bits); 0 is one chain over all 576 columns, None
    the measured rule (``chain_columns``)."""

    score_cols: int | None = None

    scale_arg: ClassVar[bool] = True

    def kernel(self, kv_format: str) -> str:  # noqa: D102
        return "_sparse_mla_wgmma_e4m3_kernel"

    def chain_columns(self) -> int:
        """32 on one warpgroup (8-16 heads; lse 8-24x finer than one chain for 3-7% of the
        time), 64 on two (64 heads; 32 would cost 9%, 64 nothing measurable; DESIGN.md
        "Precision of the e4m3 tiles")."""
        if self.score_cols is not None:
            return self.score_cols
        return 32 if self.block_h <= 16 else 64

    def validate(self, kv_format: str, limits: DeviceLimits | None = None) -> None:  # noqa: D102
        if self.chain_columns() not in (0, 32, 64, 128):
            raise ValueError(
                f"sparse MLA decode: SCORE_COLS {self.chain_columns()}: latent columns per "
                "chain of e4m3 score MMAs, 32, 64 or 128 (0: one chain)"
            )

    def problem(self, kv_format: str) -> bool:  # noqa: D102 (a warpgroup per 32 heads at most)
        tile_ok = self.block_h in (8, 16, 64) and self.block_n == 64
        tile_ok = tile_ok and _stages_build(self.stages) and 2 <= self.stages <= 3
        tile_ok = tile_ok and kv_format == "fp8"
        return not (tile_ok and self.warps == (8 if self.block_h == 64 else 4))

    def constexprs(self, kv_format, q_dtype, split, pdl):  # noqa: D102
        return {
            "BLOCK_H": self.block_h,
            "NUM_STAGES": self.stages,
            "IS_SPLIT": split,
            "LATE_TRIGGER": pdl,
            "SCORE_COLS": self.chain_columns(),
        }


def _table_tile(
    block_h: int, block_n: int, warps: int, stages: int, waves: int, smem: tuple[int, int, int],
    **options: bool | int,
) -> TlDotTile:  # fmt: skip
    """A row of ``_TILES``: a ``TlDotTile`` and its shared memory on mma, sm90 and sm100."""
    return TlDotTile(block_h, block_n, warps, stages, waves, smem=SharedMemory(*smem), **options)


def _groups_tile(
    block_h: int, block_n: int, warps: int, stages: int, waves: int, smem: tuple[int, int, int],
    **options: bool,
) -> TlDotGroupsTile:  # fmt: skip
    """A grouped row of ``_TILES``: up to 4 rounds of programs where one runs per SM (bound
    by their widening and MMAs rather than their gathers)."""
    return TlDotGroupsTile(block_h, block_n, warps, stages, waves, 4, smem=SharedMemory(*smem),
                           **options)  # fmt: skip


# Bits to the fp16 tile both dots read: fp16 dots, V widened by inline PTX.
_BITS = {"fp16_dots": True, "e4m3_bits": True, "v_asm": True}
# The latent gathered once per dot, fp16 dots.
_TWICE = {"fp8_twice": True, "fp16_dots": True}

# tl.dot tiles per (row format, head block), best first (the first ones are the H200 sweeps'
# choices, DESIGN.md "Tiles per device"), each with the shared memory per block it needs on each MMA
# family. tests/unit/test_sparse_mla_targets.py compiles every tile the plan can choose for SM80,
# 86, 89, 90, 100 and 120 with both Tritons and checks these numbers and each target's limits.
# 16-head tiles keep two gathers in flight (indices prefetched, 3 stages) and aim for two
# programs per SM where an SM holds two (``_blocks_per_sm``); 64-head tiles one. Where a 64-head
# tile does not fit, 32-head blocks read the rows once per block (the second from L2), as
# H = 128 does with 64-head blocks everywhere.
_TILES: dict[tuple[str, int], tuple[TlDotTile | TlDotGroupsTile, ...]] = {
    ("16bit", 16): (_table_tile(16, 32, 4, 3, 2, (93184, 93184, 93184), prefetch=True),),
    ("16bit", 32): (_table_tile(32, 32, 4, 2, 2, (75904, 75904, 75904)),),
    ("16bit", 64): (
        _table_tile(64, 64, 8, 2, 1, (155904, 221440, 287536)),
        _table_tile(64, 32, 8, 2, 1, (114816, 147584, 180912)),
        _table_tile(32, 32, 4, 2, 2, (75904, 75904, 75904)),
    ),
    # fp8 e4m3 rows, 16 heads: the latent gathered once, widened once by moving bits into an
    # fp16 tile that both dots read, indices prefetched (1.07-1.2x over the latent gathered
    # per dot, DESIGN.md "fp8 rows on the tl.dot tiles"). 32 heads: the latent gathered once per
    # dot, fp16 dots, V widened by inline PTX (1.2-1.4x at B >= 8); 99 KB GPUs take the 32-head tile
    # with the bits (1.09-1.22x over the per-dot gathers at 64+ heads on the H200).
    ("fp8", 16): (_table_tile(16, 32, 4, 3, 2, (92160, 92160, 92160), prefetch=True, **_BITS),),
    ("fp8", 32): (
        _table_tile(32, 32, 4, 2, 2, (106624, 106624, 106624), **_TWICE, v_asm=True),
        _table_tile(32, 32, 4, 2, 2, (92288, 92288, 92288), **_BITS),
        _table_tile(32, 32, 4, 2, 2, (73856, 73856, 73856), **_TWICE),
    ),
    ("fp8", 64): (
        _table_tile(64, 64, 8, 2, 1, (143616, 184576, 184608)),
        _table_tile(64, 32, 8, 2, 1, (108672, 131072, 129184)),
        _table_tile(32, 32, 4, 2, 2, (92288, 92288, 92288), **_BITS),
        _table_tile(32, 32, 4, 2, 2, (73856, 73856, 73856), **_TWICE),
    ),
    # fp8_ds_mla rows: the kernel that keeps the latent in fp8 groups for 16- and 32-head
    # blocks, 1.16-1.22x over widening them to scaled values on the H200 (groups in bf16,
    # gathered again for P.V), 1.03-1.13x more with the groups in fp16, kept (DESIGN.md
    # "fp8_ds_mla rows"), and everywhere on 99 KB GPUs (1.6-3x over the 16-row tile that fit
    # there); where it fits, the widening kernel's 64-head tile, 1.25-1.6x over the grouped one
    # at 64+ heads (DESIGN.md "fp8_ds_mla rows"). The grouped tiles queue up to 4 rounds of
    # programs where one runs per SM (DESIGN.md "Splits").
    ("fp8_ds_mla", 16): (_groups_tile(16, 32, 4, 2, 2, (73856, 73856, 73856), fp16_dots=True),),
    ("fp8_ds_mla", 32): (_groups_tile(16, 32, 4, 2, 2, (73856, 73856, 73856), fp16_dots=True),),
    ("fp8_ds_mla", 64): (
        _table_tile(64, 64, 8, 2, 1, (247040, 189696, 190240)),
        _groups_tile(64, 32, 8, 2, 1, (86656, 131712, 132176)),
    ),
}
