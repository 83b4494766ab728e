"""Tuning knobs that only the benchmark sets: a sweep point's config may carry them, and they
act on the kernel module for that point alone, so the production path reads none of them.

- ``PDL_LATE`` (0/1): where a Gluon split kernel lets the merge launch (after its main loop,
  or as its programs exit), instead of the plan's ``_late_trigger`` rule.
- ``COMBINE_DV``: the merge's column chunk, instead of ``_merge_columns``.
- ``COMBINE_WARPS``: the merge's warps, instead of ``_merge_warps``.

The knobs the kernel module itself takes in ``config`` (a tile's shape, ``WGMMA``/``MMA_V2``,
``PDL``, ``SCORE_COLS``, ``DV_SPLIT``) are tested on the GPU and stay there. Stdlib only.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

BENCHMARK_KEYS = ("PDL_LATE", "COMBINE_DV", "COMBINE_WARPS")


def _replacements(cfg: dict[str, int]) -> dict[str, Any]:
    """Module attribute -> stand-in for each benchmark knob that ``cfg`` sets."""
    out: dict[str, Any] = {}
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
    them, the config to pass to ``sparse_mla_decode``. Restores the module on exit."""
    if not cfg:
        yield cfg
        return
    patches = _replacements(cfg)
    saved = {name: getattr(kmod, name) for name in patches}
    try:
        for name, stand_in in patches.items():
            setattr(kmod, name, stand_in)
        yield {key: value for key, value in cfg.items() if key not in BENCHMARK_KEYS}
    finally:
        for name, original in saved.items():
            setattr(kmod, name, original)
