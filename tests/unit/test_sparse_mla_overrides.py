"""benchmarks/sparse_mla/overrides.py: a tuning config reaches the kernel module as a typed tile,
through the real ``sparse_mla_decode`` up to its launch, and its knobs act for that call only.
No GPU: the device is an H200 by its limits, and the split kernel's launch and the merge's are
recorded instead of run."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest

from benchmarks.sparse_mla import overrides
from tests.support.module_file import load_sparse_mla

torch = pytest.importorskip("torch", reason="the kernel module needs torch")
pytest.importorskip("triton", reason="the kernel module imports triton")


@pytest.fixture
def kmod(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The kernel module on a simulated H200 with the Hopper Gluon tiles; ``launched`` holds
    each split launch's (tile, call, inputs_ok), ``merged`` each merge's PDL choice."""
    module = load_sparse_mla("sparse_mla_overrides")
    launched: list[tuple[Any, Any, bool]] = []
    merged: list[bool] = []

    def launch(tile: Any, call: Any, inputs_ok: bool, dev: int) -> None:
        launched.append((tile, call, inputs_ok))

    monkeypatch.setattr(module.Tile, "launch", launch)
    monkeypatch.setattr(module, "_launch_merge", lambda *args: merged.append(args[-2]))
    monkeypatch.setattr(module, "_device_index", lambda device: 0)
    monkeypatch.setattr(module, "_device_limits", lambda index: module.H200_LIMITS)
    monkeypatch.setattr(module, "_num_sms", lambda index: 132)
    monkeypatch.setattr(module, "_has_wgmma", lambda index: True)
    monkeypatch.setattr(module, "_has_gluon_mma", lambda index: False)
    monkeypatch.setattr(module, "_has_pdl", lambda index: True)
    module.launched, module.merged = launched, merged  # type: ignore[attr-defined]
    return module


def _decode(kmod: ModuleType, rows: str = "16bit", **kwargs: Any) -> tuple[Any, Any, bool]:
    """One decode of 8 tokens (enough 64-row tiles to fill the GPU) and 64 heads over
    ``rows``; the split launch it made."""
    q = torch.zeros(8, 64, 576, dtype=torch.bfloat16)
    kv = torch.zeros(100, 576, dtype=torch.bfloat16)
    kv_scale = 1.0
    if rows == "fp8":
        kv, kv_scale = kv.to(torch.float8_e4m3fn), 0.5
    idx = torch.zeros(8, 2048, dtype=torch.int32)
    overrides.decode(kmod, q, kv, idx, 1 / 16, kv_scale=kv_scale, **kwargs)
    return kmod.launched[-1]


def test_a_config_updates_the_plans_tile_on_the_kernel_it_names(kmod: ModuleType) -> None:
    tile, call, inputs_ok = _decode(kmod)
    assert tile == kmod.WgmmaTile(64, 64, 8, 2) and inputs_ok and call.use_pdl
    assert _decode(kmod, config={"BLOCK_N": 32})[0] == kmod.TlDotTile(64, 32, 8, 2, 1)
    assert _decode(kmod, config={"BLOCK_N": 32, "WGMMA": 1})[0] == kmod.WgmmaTile(64, 32, 8, 2)
    tile, _, inputs_ok = _decode(kmod, config={"WGMMA": 1}, out=torch.zeros(8, 64, 512))
    assert tile == kmod.WgmmaTile(64, 64, 8, 2) and not inputs_ok  # the launch refuses fp32 out


def test_the_benchmark_knobs_act_for_one_call(kmod: ModuleType) -> None:
    _decode(kmod, config={"PDL": 0})
    assert kmod.merged == [False] and not kmod.launched[-1][1].use_pdl
    _decode(kmod)
    assert kmod.merged == [False, True]
    _decode(kmod, config={"PDL_LATE": 1})
    assert kmod.launched[-1][1].late_trigger
    assert not _decode(kmod)[1].late_trigger  # 64-head blocks, about one program per SM


def test_e4m3_score_chains_are_a_field_of_the_tile(kmod: ModuleType) -> None:
    tile, _, _ = _decode(kmod, "fp8")
    assert tile == kmod.WgmmaE4m3Tile(64, 64, 8, 2) and tile.chain_columns() == 64
    tile, _, _ = _decode(kmod, "fp8", config={"SCORE_COLS": 0})
    assert tile == kmod.WgmmaE4m3Tile(64, 64, 8, 2, score_cols=0) and tile.chain_columns() == 0
    launches = len(kmod.launched)
    with pytest.raises(ValueError, match="SCORE_COLS 48"):
        _decode(kmod, "fp8", config={"SCORE_COLS": 48})
    assert len(kmod.launched) == launches  # refused before the launch


def test_config_of_and_tile_of_are_inverse_on_every_planned_tile(kmod: ModuleType) -> None:
    """What the benchmark records (``config_of``) names the tile it ran (``tile_of``)."""
    sm120 = kmod.DeviceLimits((12, 0), 101376)
    for limits, wgmma, gluon_mma in ((kmod.H200_LIMITS, True, False), (sm120, False, True)):
        for kv_format in kmod.KV_FORMATS:
            for heads in (1, 8, 16, 24, 32, 64, 128):
                for gluon in (False, True):
                    args = (heads, kv_format, gluon and wgmma, limits, gluon and gluon_mma)
                    tile = kmod._default_tile(*args)
                    assert overrides.tile_of(kmod, overrides.config_of(kmod, tile), kv_format) == (
                        tile
                    )
