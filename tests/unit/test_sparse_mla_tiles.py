"""backend/sparse_mla/ as parts and as one module (no GPU): the join that the rendered backend
embeds, and the typed tiles, whose rules must take every tile the plan picks on each target."""

from __future__ import annotations

import ast
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
    for name in ("sparse_mla_decode", "sparse_mla_check", "tile_kind", "_plan", "_TILES"):
        assert hasattr(kmod, name), name


def test_tests_load_the_text_the_rendered_backend_embeds(kmod: ModuleType) -> None:
    from glmops.gpu.patchset.render import kernel_source

    embedded = kernel_source()
    assert "from __future__" not in embedded
    assert Path(kmod.__file__).read_text().endswith(embedded.split('"""', 2)[2] + "\n")


@pytest.mark.parametrize("arch", sorted(TARGETS))
def test_every_planned_tile_is_one_its_kernel_takes(kmod: ModuleType, arch: int) -> None:
    """The plan and each kernel's rule agree: every config the plan can choose on a target
    (each row format, 1-128 heads, with and without the Gluon tiles) passes its ``Tile``."""
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
                cfg = kmod._default_config(
                    heads, kv_format, gluon and wgmma, limits, gluon and gluon_mma
                )
                tile = kmod.tile_kind(cfg, kv_format)
                assert not tile.problem(cfg, kv_format), (kv_format, heads, cfg, tile)
                assert tile.gluon == kmod._gluon_tile(cfg)
                kernels.add(tile.kernel)
    assert "_sparse_mla_split_kernel" in kernels
    if arch == 90:
        assert {"_sparse_mla_wgmma_kernel", "_sparse_mla_wgmma_e4m3_kernel"} <= kernels


def test_gluon_tiles_refuse_configs_outside_their_rule(kmod: ModuleType) -> None:
    swapped = {"BLOCK_H": 16, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2, "WGMMA": 1}
    assert kmod.tile_kind(swapped, "16bit") is kmod.WGMMA_SWAPPED
    assert not kmod.WGMMA_SWAPPED.problem(swapped, "16bit")
    assert kmod.WGMMA_SWAPPED.problem({**swapped, "num_stages": 3}, "16bit")  # 3 only at 8 heads
    assert kmod.WGMMA_SWAPPED.problem({**swapped, "DV_SPLIT": 2}, "16bit")
    assert kmod.tile_kind(swapped, "fp8") is kmod.WGMMA_E4M3
    e4m3 = {"BLOCK_H": 8, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2, "MMA_V2": 1}
    assert kmod.tile_kind(e4m3, "fp8") is kmod.MMA_E4M3
    assert not kmod.MMA_E4M3.problem(e4m3, "fp8_ds_mla")
    assert kmod.MMA_E4M3.problem(e4m3, "16bit")
    wide = {"BLOCK_H": 64, "BLOCK_N": 32, "num_warps": 8, "num_stages": 2, "MMA_V2": 1}
    assert kmod.tile_kind(wide, "16bit") is kmod.MMA_WIDE
    assert not kmod.MMA_WIDE.problem(wide, "16bit")
    assert kmod.MMA_WIDE.problem(wide, "fp8")  # e4m3 rows: q's two parts need 128 rows
    assert not kmod.MMA_WIDE.problem({**wide, "num_stages": 4}, "fp8")
    assert "WGMMA needs" in kmod.WGMMA.requirement and "a Hopper GPU" in kmod.WGMMA.requirement
    assert kmod.MMA_E4M3.requirement.startswith("MMA_V2 needs")


def test_gluon_tiles_fit_their_mma_family(kmod: ModuleType) -> None:
    if not kmod._GLUON_API:
        pytest.skip("this Triton runs no Gluon kernel")
    assert kmod.WGMMA.fits((9, 0)) and not kmod.WGMMA.fits((12, 0))
    assert kmod.MMA.fits((12, 0)) and kmod.MMA.fits((9, 0)) and not kmod.MMA.fits((10, 0))
    assert kmod.TL_DOT.fits((10, 0))
