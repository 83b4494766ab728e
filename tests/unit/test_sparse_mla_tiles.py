"""backend/sparse_mla/ as parts and as one module (no GPU): the join that the rendered backend
embeds, and the typed tiles, whose rules must take every tile the plan picks on each target."""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.module_file import SPARSE_MLA, load_module_file, load_sparse_mla

pytest.importorskip("triton", reason="the kernel module imports triton")

# arch -> (capability, opt-in shared memory per block), as tests/unit/test_sparse_mla_targets.py
TARGETS = {
    80: ((8, 0), 166912),
    86: ((8, 6), 101376),
    89: ((8, 9), 101376),
    90: ((9, 0), 232448),
    100: ((10, 0), 232448),
    120: ((12, 0), 101376),
}


@pytest.fixture(scope="module")
def kmod() -> ModuleType:
    return load_sparse_mla("sparse_mla_tiles_unit")


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def test_each_part_imports_only_what_its_sibling_defines() -> None:
    """The join drops the imports between parts, so a name must be what the part it is
    imported from defines (else the joined module would bind another, or none)."""
    assemble = load_module_file(SPARSE_MLA / "assemble.py", "assemble_unit")
    trees = {name: ast.parse((SPARSE_MLA / name).read_text()) for name in assemble.PARTS}
    defined = {name: _top_level_names(tree) for name, tree in trees.items()}
    for name, tree in trees.items():
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.level:
                source = f"{node.module}.py"
                assert source in defined, f"{name} imports from {source}, not a part"
                missing = {a.name for a in node.names} - defined[source]
                assert not missing, f"{name}: {sorted(missing)} are not defined in {source}"


def test_the_joined_module_is_one_text_with_one_future_import(kmod: ModuleType) -> None:
    text = Path(kmod.__file__).read_text()
    assert text.count("from __future__ import annotations") == 1
    assert "from ." not in text  # no import between parts survives the join
    assert text.startswith('"""Sparse MLA decode')
    for name in ("sparse_mla_decode", "sparse_mla_check", "Tile", "_plan", "_TILES"):
        assert hasattr(kmod, name), name


def test_tests_load_the_text_the_rendered_backend_embeds(kmod: ModuleType) -> None:
    from glmops.gpu.patchset.render import kernel_source

    embedded = kernel_source()
    assert "from __future__" not in embedded
    assert Path(kmod.__file__).read_text().endswith(embedded.split('"""', 2)[2] + "\n")


@pytest.mark.parametrize("arch", sorted(TARGETS))
def test_every_planned_tile_is_one_its_kernel_takes(kmod: ModuleType, arch: int) -> None:
    """The plan and each kernel's rule agree: every tile the plan can choose on a target
    (each row format, 1-128 heads, with and without the Gluon tiles) passes its own rule and
    fits the target."""
    capability, smem = TARGETS[arch]
    limits = kmod.DeviceLimits(capability, smem)
    wgmma = kmod._gluon_usable(capability, api=True)
    gluon_mma = kmod._gluon_mma_usable(capability, api=True)
    kernels = set()
    for kv_format in kmod.KV_FORMATS:
        for heads in range(1, kmod.MAX_HEADS + 1):
            if kmod._unsupported(heads, kv_format, limits) is not None:
                continue
            for gluon in (False, True):
                tile = kmod._default_tile(
                    heads, kv_format, gluon and wgmma, limits, gluon and gluon_mma
                )
                assert not tile.problem(kv_format), (kv_format, heads, tile)
                tile.validate(kv_format, limits)
                assert tile.gluon or tile.fits(limits), (kv_format, heads, tile)
                kernels.add(tile.kernel(kv_format))
    assert "_sparse_mla_split_kernel" in kernels
    if arch == 90:
        assert {"_sparse_mla_wgmma_kernel", "_sparse_mla_wgmma_e4m3_kernel"} <= kernels


def test_gluon_tiles_refuse_shapes_outside_their_rule(kmod: ModuleType) -> None:
    swapped = kmod.WgmmaSwappedTile(16, 64, 4, 2)
    assert swapped.kernel("16bit") == "_sparse_mla_wgmma_swapped_kernel"
    assert not swapped.problem("16bit")
    assert replace(swapped, stages=3).problem("16bit")  # 3 only at 8 heads
    assert not replace(swapped, block_h=8, stages=3).problem("16bit")
    assert swapped.problem("fp8") and swapped.problem("fp8_ds_mla")  # 16-bit rows only
    e4m3 = kmod.MmaE4m3Tile(8, 64, 4, 2)
    assert not e4m3.problem("fp8_ds_mla") and not e4m3.problem("fp8")
    assert e4m3.problem("16bit")
    wide = kmod.MmaWideTile(64, 32, 8, 2)
    assert wide.kernel("16bit") == "_sparse_mla_mma_kernel"
    assert not wide.problem("16bit")
    assert wide.problem("fp8")  # e4m3 rows: q's two parts need 128 rows
    assert not replace(wide, stages=4).problem("fp8")
    assert "WGMMA needs" in kmod.WgmmaTile.requirement
    assert "a Hopper GPU" in kmod.WgmmaE4m3Tile.requirement
    assert kmod.MmaE4m3Tile.requirement.startswith("MMA_V2 needs")


def test_tiles_refuse_options_before_the_plan_counts_splits(kmod: ModuleType) -> None:
    """``validate``: what no launch may take, refused by the plan with the tile's reason."""
    sm120 = kmod.DeviceLimits((12, 0), 101376)
    kmod.WgmmaE4m3Tile(16, 64, 4, 2, score_cols=0).validate("fp8", kmod.H200_LIMITS)
    with pytest.raises(ValueError, match="SCORE_COLS 48"):
        kmod.WgmmaE4m3Tile(16, 64, 4, 2, score_cols=48).validate("fp8", kmod.H200_LIMITS)
    kmod.TlDotTile(32, 32, 4, 2, dv_split=2).validate("16bit", sm120)
    with pytest.raises(ValueError, match="DV_SPLIT is a 16-bit-cache tuning option"):
        kmod.TlDotTile(32, 32, 4, 2, dv_split=2).validate("fp8", sm120)
    grouped = kmod.MmaWideTile(64, 32, 8, 2, col_warps=4)  # past 99 KB with its scratch
    grouped.validate("16bit", kmod.H200_LIMITS)
    with pytest.raises(ValueError, match="COL_WARPS 4 with BLOCK_N 32 x 2 stages needs"):
        grouped.validate("16bit", sm120)


def test_a_table_tile_fits_by_its_shared_memory(kmod: ModuleType) -> None:
    """The 64-head 16-bit tl.dot tile: 155,904 B on mma.sync targets, 287,536 on SM100."""
    wide = kmod._TILES["16bit", 64][0]
    assert wide.fits(kmod.DeviceLimits((8, 0), 166912))
    assert not wide.fits(kmod.DeviceLimits((12, 0), 101376))
    assert not wide.fits(kmod.DeviceLimits((10, 0), 232448))
    assert kmod.TlDotTile(64, 64, 8, 2).fits(kmod.DeviceLimits((12, 0), 101376))  # unmeasured


def test_gluon_tiles_fit_their_mma_family(kmod: ModuleType) -> None:
    if not kmod._GLUON_API:
        pytest.skip("this Triton runs no Gluon kernel")
    h200, sm120 = kmod.H200_LIMITS, kmod.DeviceLimits((12, 0), 101376)
    sm100 = kmod.DeviceLimits((10, 0), 232448)
    wgmma, mma = kmod.WgmmaTile(64, 64, 8, 2), kmod.MmaTile(16, 32, 4, 2)
    assert wgmma.fits(h200) and not wgmma.fits(sm120)
    assert mma.fits(sm120) and mma.fits(h200) and not mma.fits(sm100)
    assert kmod.TlDotTile(64, 32, 8, 2).fits(sm100)
