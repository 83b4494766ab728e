"""The benchmark's tuning configs: string-keyed dicts that a sweep point, a JSON result and the
GPU suite name tiles and knobs with, turned into what the kernel module takes (a typed tile
and its plan), so the production path reads none of them. Stdlib only; acts on a kernel module
(``kmod``) as ``tests.support.module_file.load_sparse_mla`` loads it.

A config updates the plan's own tile: keys that shape the tile (``_TILE_KEYS``) without
naming a Gluon kernel (``WGMMA``, ``MMA_V2``) mean the tl.dot kernel (the tuning plans were
written for it), its default tile updated by the config. Knobs that act on the module for one
call (``applied``):

- ``PDL`` (0/1): whether the merge launches as a programmatic dependent (``_early_merge``).
- ``PDL_LATE`` (0/1): where a Gluon split kernel lets the merge launch (after its main loop,
  or as its programs exit), instead of the plan's ``_late_trigger`` rule.
- ``COMBINE_DV``: the merge's column chunk, instead of ``_merge_columns``.
- ``COMBINE_WARPS``: the merge's warps, instead of ``_merge_warps``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

BENCHMARK_KEYS = ("PDL", "PDL_LATE", "COMBINE_DV", "COMBINE_WARPS")

# Config key -> tile field, for the fields a tile's class has.
FIELDS = {
    "BLOCK_H": "block_h",
    "BLOCK_N": "block_n",
    "num_warps": "warps",
    "num_stages": "stages",
    "WAVES": "waves",
    "ROUNDS": "rounds",
    "MIN_TILES": "min_tiles",
    "PREFETCH_IDX": "prefetch",
    "FP8_TWICE": "fp8_twice",
    "FP16_DOTS": "fp16_dots",
    "V_ASM": "v_asm",
    "E4M3_BITS": "e4m3_bits",
    "DV_SPLIT": "dv_split",
    "COL_WARPS": "col_warps",
    "ROPE_REGS": "rope_regs",
    "SCORE_COLS": "score_cols",
}
# Keys that a config carries only where they differ from the tile's default.
_OPTIONAL = {"ROUNDS": 1, "MIN_TILES": 1, "DV_SPLIT": 1, "COL_WARPS": 1, "SCORE_COLS": None}
_ALWAYS = ("BLOCK_H", "BLOCK_N", "num_warps", "num_stages", "WAVES")

# Keys that shape the tile: a config with any of them, and without WGMMA or MMA_V2, means the
# tl.dot kernel's default tile updated by it.
_TILE_KEYS = frozenset(
    {"BLOCK_H", "BLOCK_N", "num_warps", "num_stages", "DV_SPLIT", "PREFETCH_IDX", "FP8_TWICE"}
    | {"FP16_DOTS", "V_ASM", "E4M3_BITS", "FP8_GROUPS", "ROPE_REGS"}
)


def config_of(kmod: ModuleType, tile: Any) -> dict[str, int]:
    """A tile as a config: its shape, its options where set, and its kernel's marker."""
    cfg: dict[str, int] = {}
    for key, name in FIELDS.items():
        if not hasattr(tile, name):
            continue
        value = getattr(tile, name)
        if key in _ALWAYS:
            cfg[key] = value
        elif key in _OPTIONAL:
            if value != _OPTIONAL[key]:
                cfg[key] = value
        elif value:
            cfg[key] = int(value)
    if isinstance(tile, kmod.WgmmaTile):
        cfg["WGMMA"] = 1
    elif tile.gluon:
        cfg["MMA_V2"] = 1
    elif isinstance(tile, kmod.TlDotGroupsTile):
        cfg["FP8_GROUPS"] = 1
    return cfg


def tile_class(kmod: ModuleType, cfg: dict[str, int], kv_format: str) -> type:
    """Which kernel's tile a config names: ``MMA_V2`` the mma.sync tiles (q in registers for
    16-bit rows, 32 heads or rows under 64; 64 heads the wide one), ``WGMMA`` Hopper's, else a
    ``tl.dot`` kernel's (the grouped one over fp8_ds_mla rows with ``FP8_GROUPS``)."""
    if cfg.get("MMA_V2"):
        if cfg["BLOCK_H"] == 64:
            return kmod.MmaWideTile
        q_in_registers = kv_format == "16bit" or cfg["BLOCK_H"] == 32 or cfg["BLOCK_N"] < 64
        return kmod.MmaTile if q_in_registers else kmod.MmaE4m3Tile
    if cfg.get("WGMMA"):
        if kv_format == "fp8":
            return kmod.WgmmaE4m3Tile
        return kmod.WgmmaSwappedTile if cfg["BLOCK_H"] in (8, 16) else kmod.WgmmaTile
    if kv_format == "fp8_ds_mla" and cfg.get("FP8_GROUPS", 0):
        return kmod.TlDotGroupsTile
    return kmod.TlDotTile


def tile_of(kmod: ModuleType, cfg: dict[str, int], kv_format: str) -> Any:
    """The tile a whole config describes (``tile_class``); keys its class has no field for are
    ignored, but a Hopper tile refuses ``DV_SPLIT`` (its rule: one program per head block)."""
    cls = tile_class(kmod, cfg, kv_format)
    names = {field.name for field in dataclasses.fields(cls)}
    values = {FIELDS[key]: v for key, v in cfg.items() if FIELDS.get(key) in names}
    if issubclass(cls, kmod.WgmmaTile) and cfg.get("DV_SPLIT", 1) != 1:
        raise ValueError(cls.requirement.format(tritons=kmod._GLUON_TRITONS))
    for key in ("PREFETCH_IDX", "FP8_TWICE", "FP16_DOTS", "V_ASM", "E4M3_BITS", "ROPE_REGS"):
        if FIELDS[key] in values:
            values[FIELDS[key]] = bool(values[FIELDS[key]])
    return cls(**values)


def _column_groups(
    kmod: ModuleType, cfg: dict[str, int], config: dict[str, int], kv_format: str, limits: Any
) -> dict[str, int]:
    """The merged config's ``COL_WARPS``. Groups from the default stay only where the tile is
    still ``_sparse_mla_mma_kernel``'s, keeps the column-groups rule and fits the block's shared
    memory with their scratch (an override of the rows or stages may break either); a config's
    own groups on another kernel are refused (the tile refuses the rest of the rule)."""
    groups = cfg.get("COL_WARPS", 1)
    if groups == 1:
        return cfg
    cls = tile_class(kmod, cfg, kv_format)
    if "COL_WARPS" in config:
        if not issubclass(cls, kmod.MmaTile):
            raise ValueError(
                f"sparse MLA decode: COL_WARPS {groups}: only the mma.sync tiles with q in "
                "registers (MMA_V2 with 16 or 32 heads over 16-bit rows, or 64-head blocks) "
                "score on groups of columns"
            )
        return cfg
    if issubclass(cls, kmod.MmaTile):
        tile = tile_of(kmod, cfg, kv_format)
        if tile.column_groups_fit(kv_format) and tile.smem_bound() <= limits.smem_per_block:
            return cfg
    return {key: value for key, value in cfg.items() if key != "COL_WARPS"}


def planned_tile(
    kmod: ModuleType,
    num_tokens: int,
    num_heads: int,
    topk: int,
    device: Any,
    config: dict[str, int],
    kv_format: str = "16bit",
    wgmma: bool | None = None,
    limits: Any = None,
    gluon_mma: bool | None = None,
) -> Any:
    """The tile a config asks for on a call: the plan's own tile (as ``_plan`` picks it for
    these arguments) updated by ``config`` (``_TILE_KEYS``)."""
    if limits is None:
        limits = kmod._device_limits(kmod._device_index(device))
    if wgmma is None:
        wgmma = kmod._has_wgmma(kmod._device_index(device))
    if gluon_mma is None:
        gluon_mma = kmod._has_gluon_mma(kmod._device_index(device))
    if _TILE_KEYS & config.keys():  # the tile the config was written for, from its defaults up
        wgmma, gluon_mma = wgmma and "WGMMA" in config, gluon_mma and "MMA_V2" in config
    default, _ = kmod._plan(num_tokens, num_heads, topk, device, 1, None, kv_format, wgmma,
                            limits, gluon_mma)  # fmt: skip
    cfg = config_of(kmod, default)
    cfg.pop("ROPE_REGS", None)  # the rule below decides it for the merged tile
    if any(config[key] != cfg.get(key) for key in ("BLOCK_H", "BLOCK_N") if key in config):
        cfg.pop("ROUNDS", None)  # measured for the default tile's shape, not for a reshaped one
    cfg = {**cfg, **config}
    ds_16 = kv_format == "fp8_ds_mla" and cfg.get("MMA_V2") and cfg["BLOCK_H"] == 16
    if ds_16 and kmod._rope_in_registers(kv_format, 16, limits):
        cfg = {"ROPE_REGS": 1, **cfg}
    return tile_of(kmod, _column_groups(kmod, cfg, config, kv_format, limits), kv_format)


def plan(
    kmod: ModuleType,
    num_tokens: int,
    num_heads: int,
    topk: int,
    device: Any,
    num_splits: int | None = None,
    config: dict[str, int] | None = None,
    kv_format: str = "16bit",
    wgmma: bool | None = None,
    limits: Any = None,
    gluon_mma: bool | None = None,
) -> tuple[dict[str, int], int]:
    """The config and split count a call with ``config`` runs (the plan's own for None), as
    the benchmark reports them."""
    tile = None
    if config is not None:
        tile = planned_tile(kmod, num_tokens, num_heads, topk, device,
                            strip(config), kv_format, wgmma, limits, gluon_mma)  # fmt: skip
    args = (num_tokens, num_heads, topk, device, num_splits, tile, kv_format, wgmma, limits)
    chosen, splits = kmod._plan(*args, gluon_mma)
    return config_of(kmod, chosen), splits


def strip(config: dict[str, int]) -> dict[str, int]:
    """A config without the benchmark's knobs: what names the tile."""
    return {key: value for key, value in config.items() if key not in BENCHMARK_KEYS}


def decode(kmod: ModuleType, q: Any, kv_rows: Any, indices: Any, sm_scale: float,
           *, config: dict[str, int] | None = None, **kwargs: Any) -> Any:  # fmt: skip
    """``kmod.sparse_mla_decode`` with a tuning config: its tile updated by ``config`` on the
    Gluon kernels the call may run (as ``sparse_mla_decode`` decides them), its knobs applied
    around the call. A single-file kernel of an earlier revision takes the config itself."""
    with applied(kmod, config) as cfg:
        if not hasattr(kmod, "Tile"):
            return kmod.sparse_mla_decode(q, kv_rows, indices, sm_scale, config=cfg, **kwargs)
        if cfg is None:
            return kmod.sparse_mla_decode(q, kv_rows, indices, sm_scale, **kwargs)
        kv_format = kmod.kv_row_format(kv_rows)
        out = kwargs.get("out")
        gluon_inputs = (
            kmod._gluon_takes(q.dtype, kv_rows.dtype, kv_format)
            and q.dtype == (q.dtype if out is None else out.dtype)
            and kmod._fits_cp_async(q, kv_rows)
        )
        dev = kmod._device_index(q.device)
        wgmma = gluon_inputs and kmod._has_wgmma(dev)
        gluon_mma = gluon_inputs and kmod._has_gluon_mma(dev)
        shape = (q.shape[0], q.shape[1], indices.shape[1], q.device)
        tile = planned_tile(kmod, *shape, cfg, kv_format, wgmma, None, gluon_mma)
        return kmod.sparse_mla_decode(q, kv_rows, indices, sm_scale, tile=tile, **kwargs)


def _replacements(kmod: ModuleType, cfg: dict[str, int]) -> dict[str, Any]:
    """Module attribute -> stand-in for each benchmark knob that ``cfg`` sets."""
    out: dict[str, Any] = {}
    if "PDL" in cfg:
        early_merge = kmod._early_merge
        out["_early_merge"] = lambda *a: bool(cfg["PDL"]) and early_merge(*a)
    if "PDL_LATE" in cfg:
        out["_late_trigger"] = lambda *_: bool(cfg["PDL_LATE"])
    if "COMBINE_DV" in cfg:
        out["_merge_columns"] = lambda *_: int(cfg["COMBINE_DV"])
    if "COMBINE_WARPS" in cfg:
        out["_merge_warps"] = lambda *_: int(cfg["COMBINE_WARPS"])
    return out


@contextmanager
def applied(kmod: ModuleType, cfg: dict[str, int] | None) -> Iterator[dict[str, int] | None]:
    """Within the block, ``kmod`` follows ``cfg``'s benchmark knobs; yields ``cfg`` without
    them, the config that names the tile. Restores the module on exit."""
    if not cfg:
        yield cfg
        return
    patches = _replacements(kmod, cfg)
    saved = {name: getattr(kmod, name) for name in patches}
    try:
        for name, stand_in in patches.items():
            setattr(kmod, name, stand_in)
        yield strip(cfg)
    finally:
        for name, original in saved.items():
            setattr(kmod, name, original)
