"""Every kernel configuration backend/sparse_mla/'s plan can choose, compiled for SM80, 86,
89, 90, 100 and 120 with Triton's own compiler (no GPU, no launch) under the Triton of every
supported vLLM release (tests/support/tritons.py), and checked against each target's limits:
opt-in shared memory per block, 255 registers per thread, 64K registers per block. The shared
memory the plan assumes per tile (``_TILES``) must cover what the compiler allocates. The
Tritons compile in subprocesses, two at a time (sparse_mla_compile.py), into Triton's own cache
kept in the test cache (``compile_cache``: keyed by the Triton and the kernel's source), so a
machine compiles each configuration once; the tests that compile here share the installed
Triton's folder."""

from __future__ import annotations

from types import ModuleType

import pytest

from tests.support.interpreted import run_module
from tests.support.module_file import load_sparse_mla
from tests.unit import sparse_mla_compile

pytest.importorskip("torch", reason="the kernel module needs torch")
pytest.importorskip("triton", reason="the kernel module imports triton")

from tests.support.tritons import TRITONS, compile_cache, triton_env, under_each_triton

# arch -> (compute capability, opt-in shared memory per block in bytes), from NVIDIA's CUDA C++
# Programming Guide, "Technical Specifications per Compute Capability" (A100 163 KB; GA10x,
# AD10x and GB20x 99 KB; H100/H200 and B200 227 KB).
TARGETS = {
    80: ((8, 0), 166912),
    86: ((8, 6), 101376),
    89: ((8, 9), 101376),
    90: ((9, 0), 232448),
    100: ((10, 0), 232448),
    120: ((12, 0), 101376),
}
# fp8 e4m3 rows on SM86 (no fp8 conversion in hardware): the compile that the plan's refusal
# avoids, kept here so the refusal stays needed.
FP8_ON_SM86 = {
    "kernel": "_sparse_mla_split_kernel",
    "arch": 86,
    "kv_format": "fp8",
    "tile": {"expect": "error"},
    "pointers": dict(Q="bf16", KV="fp8e4nv", IDX="i32", Out="bf16", LSE="fp32", PO="fp32",
                     PLSE="fp32"),
    "constexprs": dict(BLOCK_H=16, BLOCK_N=32, D_V=512, D_PE=64, DV_SPLIT=1, KV_FMT=2,
                       PREFETCH_IDX=False, FP8_TWICE=False, FP16_DOTS=True, V_ASM=False,
                       E4M3_BITS=False, IS_SPLIT=True, USE_PDL=False),
    "num_warps": 4,
    "num_stages": 2,
}  # fmt: skip


@pytest.fixture(scope="module")
def kmod() -> ModuleType:
    return load_sparse_mla("sparse_mla_targets")


def _without_gluon_override(env: dict[str, str]) -> dict[str, str]:
    """``env`` less GLMOPS_SPARSE_MLA_GLUON: what the module runs by default is under test."""
    return {key: value for key, value in env.items() if key != "GLMOPS_SPARSE_MLA_GLUON"}


@pytest.fixture
def installed_triton_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """Compiles in this process go to the installed Triton's cache folder."""
    import triton

    monkeypatch.setenv("TRITON_CACHE_DIR", str(compile_cache(triton.__version__)))


def _compile_all(version: str) -> dict:
    request = {
        "targets": [{"arch": a, "capability": c, "smem": s} for a, (c, s) in TARGETS.items()],
        "extra_jobs": [FP8_ON_SM86],
    }
    env = {
        **_without_gluon_override(triton_env(version)),
        "TRITON_CACHE_DIR": str(compile_cache(version)),
    }
    report = run_module("tests.unit.sparse_mla_compile", request, 1500, env)
    assert report["triton"] == version, f"asked for Triton {version}, ran {report['triton']}"
    return report


@pytest.fixture(scope="module")
def compiled() -> dict[str, dict]:
    """Triton version -> the compile report."""
    return under_each_triton(_compile_all)


def _tile_shape(tile: dict) -> dict:
    """A tile's fields (``sparse_mla_compile.tile_fields``) less what only the plan reads
    (programs per SM, rounds, tiles a split): what compiles."""
    return {k: v for k, v in tile.items() if k not in ("waves", "rounds", "min_tiles")}


def test_every_triton_compiled(compiled: dict[str, dict]) -> None:
    assert set(compiled) == set(TRITONS)
    # The Gluon kernels compile under 3.6 to 3.8 and run under the Tritons a GPU suite passed
    # under; the others run tl.dot.
    assert {v for v, report in compiled.items() if report["gluon_compiles"]} == {
        "3.6.0",
        "3.7.1",
        "3.8.0",
    }
    assert {v for v, report in compiled.items() if report["gluon"]} == {
        "3.6.0",
        "3.7.1",
        "3.8.0",
    }


@pytest.mark.parametrize("arch", sorted(TARGETS))
@pytest.mark.parametrize("version", TRITONS)
def test_every_planned_config_fits_the_target(
    kmod: ModuleType, compiled: dict[str, dict], arch: int, version: str
) -> None:
    gluon_api = compiled[version]["gluon_compiles"]  # the Gluon kernels compiled there
    capability, smem = TARGETS[arch]
    jobs = [j for j in compiled[version]["jobs"] if j["arch"] == arch and "expect" not in j["tile"]]
    kinds = {j["kernel"] for j in jobs}
    assert {"_sparse_mla_split_kernel", "_sparse_mla_combine_kernel"} <= kinds
    if kmod._gluon_usable(capability, api=gluon_api):
        wgmma = {"_sparse_mla_wgmma_kernel", "_sparse_mla_wgmma_swapped_kernel"}
        assert wgmma | {"_sparse_mla_wgmma_e4m3_kernel"} <= kinds
    if kmod._gluon_mma_usable(capability, api=gluon_api):
        if smem < 155904:  # 99 KB: 64-head blocks on mma.sync
            assert "_sparse_mla_mma_kernel" in kinds
        if capability >= (8, 9):
            assert "_sparse_mla_mma_e4m3_kernel" in kinds
    if capability >= (8, 9):  # fp8_ds_mla rows have their own split kernel
        assert "_sparse_mla_ds_split_kernel" in kinds
    formats = {j["kv_format"] for j in jobs} - {None}
    assert formats == ({"16bit"} if arch in (80, 86) else set(kmod.KV_FORMATS))
    for job in jobs:
        what = f"{job['kernel']} {job['kv_format']} {job['tile']} on sm_{arch}, Triton {version}"
        assert job["error"] is None, f"{what}: {job['error']}"
        assert job["shared"] <= smem, f"{what}: {job['shared']} B of shared memory > {smem}"
        assert job["regs"] <= 255, what
        assert job["regs"] * job["num_warps"] * 32 <= 65536, what
        if job["kernel"] in ("_sparse_mla_split_kernel", "_sparse_mla_ds_split_kernel"):
            heads = min(64, max(16, job["tile"]["block_h"]))
            declared = [
                tile.smem.on(capability)
                for tile in kmod._TILES[job["kv_format"], heads]
                if _tile_shape(sparse_mla_compile.tile_fields(tile)) == _tile_shape(job["tile"])
            ]
            assert declared and job["shared"] <= declared[0], f"{what}: _TILES says {declared}"
        ds_16 = job["kv_format"] == "fp8_ds_mla" and job["tile"].get("block_h") == 16
        if job["kernel"] == "_sparse_mla_mma_e4m3_kernel" and ds_16:
            # The plan holds q's rope part in registers exactly where the other form's shared
            # memory (_DS_TILE_16_HEADS_SMEM) would not fit.
            rope_regs = smem < kmod._DS_TILE_16_HEADS_SMEM
            assert job["tile"]["rope_regs"] == rope_regs, what
            if not rope_regs:
                assert job["shared"] <= kmod._DS_TILE_16_HEADS_SMEM, what


def test_fp8_rows_are_refused_where_they_do_not_compile(
    kmod: ModuleType, compiled: dict[str, dict]
) -> None:
    for report in compiled.values():
        (job,) = [j for j in report["jobs"] if "expect" in j["tile"]]
        assert job["error"] is not None, "fp8 e4m3 rows compiled for sm_86: drop the refusal?"
    for arch in (80, 86):
        limits = kmod.DeviceLimits(*TARGETS[arch])
        for kv_format in ("fp8", "fp8_ds_mla"):
            assert kmod.sparse_mla_supported_heads(kv_format, limits) == []
            with pytest.raises(ValueError, match="SM89 or newer"):
                kmod._default_tile(8, kv_format, limits=limits)
        assert kmod.sparse_mla_supported_heads("16bit", limits) == list(range(1, 129))


def test_small_shared_memory_gets_smaller_tiles(kmod: ModuleType) -> None:
    """The 64-head tl.dot tile (155,904 B on mma.sync targets) does not fit 99 KB GPUs; they
    take 32-head blocks. SM100's tensor-memory lowering needs 287,536 B for it: 32-row tiles."""
    sm120 = kmod.DeviceLimits(*TARGETS[120])
    assert kmod._default_tile(64, limits=sm120).block_h == 32
    assert kmod._default_tile(128, "fp8", limits=sm120).block_h == 32
    assert kmod._default_tile(64, "fp8_ds_mla", limits=sm120).block_h == 64  # grouped, 87 KB
    sm100 = kmod.DeviceLimits(*TARGETS[100])
    assert kmod._default_tile(64, limits=sm100).block_n == 32
    assert kmod._default_tile(64, limits=kmod.H200_LIMITS).block_n == 64


@pytest.mark.parametrize("heads", [0, 129])
def test_head_counts_outside_the_range_are_refused(kmod: ModuleType, heads: int) -> None:
    with pytest.raises(ValueError, match="1 to 128"):
        kmod._default_tile(heads, limits=kmod.H200_LIMITS)


@pytest.mark.usefixtures("installed_triton_cache")
def test_sm120_runs_e4m3_mma_sync_natively_and_hopper_as_fp16(kmod: ModuleType) -> None:
    """The e4m3 mma.sync tile (SM89 and SM120's choice for e4m3 rows with up to 16 heads) runs
    its score MMAs as QMMA on sm_120 and sm_89, whose accumulator keeps 13 mantissa bits, and
    on sm_90 as fp16 HMMAs, which sum in float32: so the H200, which runs this tile as SM120's
    proxy, measures neither its speed nor its precision there (backend/DESIGN.md, "Precision of the
    e4m3 tiles")."""
    if not kmod._gluon_mma_usable((12, 0)):
        pytest.skip("the e4m3 mma.sync tile needs the Gluon kernels under this Triton")
    sm120 = kmod.DeviceLimits(*TARGETS[120])
    tile = kmod._default_tile(8, "fp8", limits=sm120, gluon_mma=True)
    ops = {}
    for arch in (89, 90, 120):
        job = {**sparse_mla_compile._split_job(kmod, arch, "fp8", tile), "mma_ops": True}
        assert job["kernel"] == "_sparse_mla_mma_e4m3_kernel"
        ops[arch] = sparse_mla_compile.compile_job(kmod, job)["mma_ops"]
    for arch in (89, 120):
        assert ops[arch].get("QMMA.16832.F32.E4M3.E4M3", 0) > 0, ops[arch]
    assert not any(op.startswith("QMMA") for op in ops[90]), ops[90]
    assert ops[90]["HMMA.16816.F32"] > ops[120]["HMMA.16816.F32"], (ops[90], ops[120])


@pytest.mark.usefixtures("installed_triton_cache")
def test_the_column_groups_shared_memory_bound_holds_for_what_compiles(kmod: ModuleType) -> None:
    """``MmaTile.smem_bound``, which the plan checks a tile with column groups against, bounds what
    Triton compiles for sm_120 from above, and closely, for every group count the rule admits
    over 16, 32 and 64-head tiles (32-row tiles at 2 stages, 16-row at 4, 64-row at 1)."""
    if not kmod._gluon_mma_usable((12, 0)):
        pytest.skip("the mma.sync tiles need the Gluon kernels under this Triton")
    shapes = [(16, 4, 32, 2), (32, 8, 32, 2), (64, 8, 32, 2), (64, 8, 16, 4), (64, 8, 64, 1)]
    compiled = 0
    for block_h, warps, block_n, stages in shapes:
        for groups in (1, 2, 4):
            kind = kmod.MmaWideTile if block_h == 64 else kmod.MmaTile
            tile = kind(block_h, block_n, warps, stages, col_warps=groups)
            if not tile.column_groups_fit("16bit"):
                continue
            job = sparse_mla_compile._split_job(kmod, 120, "16bit", tile)
            assert job["kernel"] == "_sparse_mla_mma_kernel"
            shared = sparse_mla_compile.compile_job(kmod, job)["shared"]
            assert shared <= tile.smem_bound() <= shared + 256, (tile, shared)
            compiled += 1
    assert compiled == 14  # 1 and 2 groups at 16 heads; 1, 2 and 4 for the others
