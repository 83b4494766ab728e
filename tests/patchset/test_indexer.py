"""Item 2e: the DSA indexer logits fallback (CPU). The rendered module against a plain
reference (fp8 inputs with scales, as vLLM 0.16 passes them), tiling that changes nothing and
bounds its temporaries, the dispatch decision, and on the real wheels: plan / compile /
re-plan per profile and the patched vLLM module dispatching by capability."""

from __future__ import annotations

import json
import os
import py_compile
import shutil
import subprocess
import sys
import weakref
from pathlib import Path
from types import ModuleType

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from glmops.gpu.patchset import ANCHOR_FILES, UnsupportedLayout, detect_profile, plan_patchset
from glmops.gpu.patchset.indexer import FILES, render_fallback
from glmops.gpu.patchset.profiles import (
    INDEXER_BUILDER,
    INDEXER_FALLBACK,
    SPARSE_INDEXER,
    profile_by_name,
)
from tests.support.indexer_cases import (
    assert_logits,
    decode_inputs,
    decode_reference,
    pack_indexer_cache,
    prefill_inputs,
    prefill_reference,
)
from tests.support.interpreted import run_interpreted
from tests.support.module_file import load_module_file

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def fb(tmp_path_factory) -> ModuleType:
    """The fallback module exactly as rendered onto a 0.16 host."""
    path = tmp_path_factory.mktemp("fb") / "glmops_dsa_indexer.py"
    path.write_text(render_fallback(profile_by_name("v0_16"), {}))
    return load_module_file(path, "glmops_dsa_indexer_test")


class PeakTemporaries(TorchDispatchMode):
    """Peak bytes of the tensor storages ops allocate inside the mode (views of their inputs
    excluded), each counted until it is freed, as the allocator sees them."""

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, int] = {}
        self.current = self.peak = 0

    def _free(self, key: int) -> None:
        self.current -= self.live.pop(key, 0)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        out = func(*args, **(kwargs or {}))
        inputs = {
            id(t.untyped_storage())
            for t in tree_flatten((args, kwargs))[0]
            if isinstance(t, torch.Tensor)
        }
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.device.type == "cpu":
                st = t.untyped_storage()
                key = id(st)
                if key not in self.live and key not in inputs and st.nbytes() > 0:
                    self.live[key] = st.nbytes()
                    self.current += st.nbytes()
                    self.peak = max(self.peak, self.current)
                    weakref.finalize(st, self._free, key)
        return out


# ---- numerics ----


@pytest.mark.parametrize("exact", [False, True])
def test_prefill_logits_match_reference(fb, exact):
    q, k, scale, w, ks, ke = prefill_inputs(exact=exact)
    got = fb.mqa_logits_torch(q, (k, scale), w, ks, ke)
    assert_logits(got, prefill_reference(q, k, scale, w, ks, ke), exact)


@pytest.mark.parametrize("exact", [False, True])
def test_paged_logits_match_reference(fb, exact):
    q, kv, scale, w, lens, table, bs = decode_inputs(exact=exact)
    cache = pack_indexer_cache(kv, scale, bs)
    max_model_len = 120  # not a multiple of the block size: the last tile is cut
    got = fb.paged_mqa_logits_torch(q, cache, w, lens, table, max_model_len)
    ref = decode_reference(q, kv, scale, w, lens, table, bs, max_model_len)
    assert got.shape == (q.shape[0] * q.shape[1], max_model_len)
    assert_logits(got, ref, exact)


def test_paged_triton_kernel_matches_reference(tmp_path):
    """The embedded Triton kernel, run by Triton's interpreter on the CPU (a fresh process, see
    indexer_kernel_probe.py), against the float64 reference: exact inputs bit for bit, next_n
    1-3, positions past the block table and a cut last block; and its top-k (topk_per_row)
    against the selection torch.topk's k-th value fixes (ties: lowest positions), one and
    several programs a row, the select on the candidates between the sampled bounds and on
    the whole row where the bounds miss, and called as sparse_attn_indexer's routed
    top_k_per_row_decode. On a GPU both run compiled in
    tests/gpu/test_indexer_fallback.py."""
    module = tmp_path / "glmops_dsa_indexer.py"
    module.write_text(render_fallback(profile_by_name("v0_16"), {}))
    out = run_interpreted("tests.patchset.indexer_kernel_probe", {"module": str(module)}, 600)
    assert len(out["checked"]) == 15 and out["problems"] == [], out


def test_paged_triton_kernel_refuses_other_layouts(fb):
    """Checked before any launch, so this runs without a GPU."""
    q, kv, scale, w, lens, table, bs = decode_inputs()
    cache = pack_indexer_cache(kv, scale, bs)
    with pytest.raises(ValueError, match="kv_cache must be uint8"):
        fb.paged_mqa_logits(q, cache[..., :-1], w, lens, table, 64)
    odd = cache.view(-1)[: 10 * 12 * (64 + 4)].view(10, 12, 1, 68)  # block size 12
    with pytest.raises(ValueError, match="powers of two"):
        fb.paged_mqa_logits(q, odd, w, lens, table, 64)


def test_prefill_chunking_changes_nothing_and_bounds_memory(fb):
    q, k, scale, w, ks, ke = prefill_inputs(exact=True)
    heads, dim, n = q.shape[1], q.shape[2], k.shape[0]
    whole = fb.mqa_logits_torch(q, (k, scale), w, ks, ke, max_tile_bytes=1 << 40)
    assert len(fb.plan_prefill_tiles(ks, ke, n, heads, dim, 1 << 40)) == 1
    full = fb.prefill_tile_bytes(q.shape[0], n, heads, dim)
    for budget in (full // 2, full // 7, fb.prefill_tile_bytes(1, 1, heads, dim)):
        tiles = fb.plan_prefill_tiles(ks, ke, n, heads, dim, budget)
        assert len(tiles) > 1
        assert all(
            fb.prefill_tile_bytes(r1 - r0, c1 - c0, heads, dim) <= budget
            for r0, r1, c0, c1 in tiles
        )
        with PeakTemporaries() as mem:
            got = fb.mqa_logits_torch(q, (k, scale), w, ks, ke, max_tile_bytes=budget)
        assert torch.equal(got, whole)
        # temporaries: one tile, plus the planner's O(M) int64 copies of ks/ke on the host
        assert mem.peak - got.untyped_storage().nbytes() <= budget + 8 * 8 * q.shape[0]
    with pytest.raises(ValueError, match="cannot hold one row"):
        fb.plan_prefill_tiles(ks, ke, n, heads, dim, 100)


def test_paged_chunking_changes_nothing_and_bounds_memory(fb):
    q, kv, scale, w, lens, table, bs = decode_inputs(exact=True)
    cache = pack_indexer_cache(kv, scale, bs)
    _, next_n, heads, dim = q.shape
    whole = fb.paged_mqa_logits_torch(q, cache, w, lens, table, 128, max_tile_bytes=1 << 40)
    full = fb.decode_tile_bytes(q.shape[0], 8 * bs, next_n, heads, dim)
    for budget in (full // 3, fb.decode_tile_bytes(1, bs, next_n, heads, dim)):
        tiles = fb.plan_decode_tiles(q.shape[0], 7, bs, next_n, heads, dim, budget)
        assert len(tiles) > 1
        assert all(
            fb.decode_tile_bytes(b1 - b0, (j1 - j0) * bs, next_n, heads, dim) <= budget
            for b0, b1, j0, j1 in tiles
        )
        with PeakTemporaries() as mem:
            got = fb.paged_mqa_logits_torch(q, cache, w, lens, table, 128, max_tile_bytes=budget)
        assert torch.equal(got, whole)
        assert mem.peak - got.untyped_storage().nbytes() <= budget
    with pytest.raises(ValueError, match="cannot hold one cache block"):
        fb.plan_decode_tiles(2, 4, bs, next_n, heads, dim, 1000)


def test_glm5_shapes_stay_bounded(fb):
    """GLM-5 indexer (32 heads, dim 128) at 8k-token prefill chunks and 200k contexts: the
    default budget holds, with tiles still large enough to be efficient."""
    budget = fb.MAX_TILE_BYTES
    m, n = 8192, 8192
    ks = torch.zeros(m, dtype=torch.int32)
    ke = torch.arange(1, m + 1, dtype=torch.int32)
    tiles = fb.plan_prefill_tiles(ks, ke, n, 32, 128, budget)
    assert all(
        fb.prefill_tile_bytes(r1 - r0, c1 - c0, 32, 128) <= budget for r0, r1, c0, c1 in tiles
    )
    assert len(tiles) <= 64
    dec = fb.plan_decode_tiles(64, 200_000 // 64, 64, 2, 32, 128, budget)
    assert all(
        fb.decode_tile_bytes(b1 - b0, (j1 - j0) * 64, 2, 32, 128) <= budget
        for b0, b1, j0, j1 in dec
    )


# ---- dispatch decision ----


@pytest.mark.parametrize(
    "capability,available,override,expected",
    [
        ((12, 0), True, "auto", "torch"),
        ((12, 1), True, "auto", "torch"),
        ((8, 0), True, "auto", "torch"),
        ((8, 9), True, "auto", "torch"),
        ((9, 0), True, "auto", "deepgemm"),
        ((10, 0), True, "auto", "deepgemm"),
        ((10, 3), True, "auto", "deepgemm"),
        ((9, 0), False, "auto", "torch"),
        ((10, 0), False, "auto", "torch"),
        (None, True, "auto", "torch"),
        ((9, 0), True, "torch", "torch"),
        ((12, 0), True, "deepgemm", "deepgemm"),
    ],
)
def test_choose_logits_backend(fb, capability, available, override, expected):
    assert fb.choose_logits_backend(capability, available, override) == expected


def test_choose_logits_backend_rejects_unknown(fb):
    with pytest.raises(ValueError, match="GLMOPS_INDEXER_LOGITS"):
        fb.choose_logits_backend((12, 0), True, "cutlass")


@pytest.mark.parametrize(
    "logits_fallback,vllm_op,override,expected",
    [
        (True, True, "auto", "triton"),  # SM120 / SM8x: our logits, our top-k
        (True, False, "auto", "triton"),
        (False, True, "auto", "vllm"),  # DeepGEMM's logits: vLLM's op
        (False, False, "auto", "triton"),  # vLLM's op missing
        (True, True, "vllm", "vllm"),
        (False, True, " Triton ", "triton"),
    ],
)
def test_choose_topk_backend(fb, logits_fallback, vllm_op, override, expected):
    assert fb.choose_topk_backend(logits_fallback, vllm_op, override) == expected


def test_choose_topk_backend_rejects_unknown(fb):
    with pytest.raises(ValueError, match="GLMOPS_INDEXER_TOPK"):
        fb.choose_topk_backend(True, True, "torch")


# ---- on the real wheels ----


def _sources(site: Path) -> dict[str, str | None]:
    return {f: (site / f).read_text() if (site / f).is_file() else None for f in ANCHOR_FILES}


@pytest.mark.wheels
def test_plan_per_profile(vllm_version, vllm_scratch, tmp_path):
    sp = vllm_scratch
    sources = _sources(sp)
    profile = detect_profile(sources)
    changes = plan_patchset(profile, sources, {"items": ["indexer"]})
    assert [c.path for c in changes] == list(FILES)
    if vllm_version == "0.33.0":
        assert {c.status for c in changes} == {"ok"}
        assert all(
            "support_deep_gemm() includes capability family 120" in c.reason for c in changes
        )
        return
    assert [c.status for c in changes] == ["apply"] * 3
    for c in changes:
        (sp / c.path).write_text(c.after)
        py_compile.compile(str(sp / c.path), doraise=True, cfile=str(tmp_path / "x.pyc"))
    again = plan_patchset(profile, _sources(sp), {"items": ["indexer"]})
    assert [(c.status, c.reason) for c in again] == [("ok", "already applied")] * 3
    # the changes are small: one line in the op (and its decode top-k call routed through the
    # fallback module's dispatcher), one method in the builder
    for path, added in ((SPARSE_INDEXER, 1), (INDEXER_BUILDER, 5)):
        before, after = sources[path] or "", (sp / path).read_text()
        assert len(after.splitlines()) - len(before.splitlines()) == added
    op = (sp / SPARSE_INDEXER).read_text()
    assert "torch.ops._C.top_k_per_row_decode(" not in op
    assert op.count("        glmops_top_k_per_row_decode(") == 1
    assert "import fp8_mqa_logits, fp8_paged_mqa_logits, top_k_per_row_decode as glmops_" in op


@pytest.mark.wheels
@pytest.mark.parametrize(
    "path,old,new",
    [
        (SPARSE_INDEXER, "import fp8_mqa_logits, fp8_paged_mqa_logits", "import fp8_mqa_logits"),
        (INDEXER_BUILDER, "    _cudagraph_support: ClassVar", "    _cg_support: ClassVar"),
        (SPARSE_INDEXER, "torch.ops._C.top_k_per_row_decode(", "torch.ops._C.top_k_per_row("),
    ],
)
def test_016_anchor_missing_refused(path, old, new, tmp_path):
    """A 0.16-line tree without the indexer anchors is refused by detection, naming them."""
    from tests.support import vllm_wheels

    sp = tmp_path / "site-packages"
    shutil.copytree(vllm_wheels.fetch_vllm_source("0.16.0") / "vllm", sp / "vllm")
    target = sp / path
    text = target.read_text()
    assert old in text
    target.write_text(text.replace(old, new))
    with pytest.raises(UnsupportedLayout) as err:
        detect_profile(_sources(sp))
    assert path in str(err.value)


PROBE = r"""
import json, sys, types
from importlib.machinery import ModuleSpec
import torch

args = json.loads(sys.argv[1])
calls = []
if args["fake_deep_gemm"]:  # importable deep_gemm whose kernels record their calls
    dg = types.ModuleType("deep_gemm")
    dg.__spec__ = ModuleSpec("deep_gemm", None)
    dg.fp8_mqa_logits = lambda *a, **k: calls.append("fp8_mqa_logits") or "deepgemm"
    dg.fp8_paged_mqa_logits = lambda *a, **k: calls.append("fp8_paged_mqa_logits") or "deepgemm"
    sys.modules["deep_gemm"] = dg

import vllm.platforms as platforms
from vllm.platforms.cuda import CudaPlatform
from vllm.platforms.interface import DeviceCapability

def use(cap):
    major, minor = (int(x) for x in cap.split("."))
    class Probe(CudaPlatform):
        @classmethod
        def get_device_capability(cls, device_id=0):
            return DeviceCapability(major, minor)
    platforms._current_platform = Probe()

use("12.0")
import vllm.model_executor.layers.sparse_attn_indexer as op
from vllm.model_executor.layers import glmops_dsa_indexer as fb
from vllm.v1.attention.backends.mla.indexer import DeepseekV32IndexerMetadataBuilder as B

g = torch.Generator().manual_seed(0)
q = torch.randn(4, 2, 8, generator=g).to(torch.float8_e4m3fn)
k = torch.randn(6, 8, generator=g).to(torch.float8_e4m3fn)
sc, w = torch.rand(6, generator=g) + 0.1, torch.randn(4, 2, generator=g)
ks = torch.zeros(4, dtype=torch.int32)
ke = torch.tensor([3, 4, 5, 6], dtype=torch.int32)
bound = (op.fp8_mqa_logits, op.fp8_paged_mqa_logits, op.glmops_top_k_per_row_decode)
result = {"bound": [f.__module__ for f in bound]}
for cap in args["caps"]:
    use(cap)
    fb.use_torch_fallback.cache_clear()
    fb.use_triton_topk.cache_clear()
    calls.clear()
    out = op.fp8_mqa_logits(q, (k, sc), w, ks, ke, clean_logits=False)
    torch_path = isinstance(out, torch.Tensor)
    if torch_path:
        assert torch.equal(out, fb.mqa_logits_torch(q, (k, sc), w, ks, ke))
    result[cap] = {
        "logits": "torch" if torch_path else "deepgemm",
        "deep_gemm_calls": list(calls),
        "cudagraph": B.get_cudagraph_support(None, None).name,
        "topk": "triton" if fb.use_triton_topk() else "vllm",
    }
print(json.dumps(result))
"""


@pytest.mark.wheels
@pytest.mark.parametrize("fake_deep_gemm", [False, True], ids=["no-deep_gemm", "deep_gemm"])
def test_patched_016_dispatch(fake_deep_gemm, tmp_path):
    """Through vLLM's own module: the op's names (its decode top-k call's too) are rebound to
    the dispatch, capability 12.0 takes the torch fallback (and the builder reports NEVER) and
    glmops' top-k, 9.0 / 10.0 still reach vllm.utils.deep_gemm's kernels when deep_gemm is
    importable; absent, torch everywhere."""
    from tests.support import vllm_wheels

    sp = vllm_wheels.scratch_copy("0.16.0", tmp_path / "venv")
    sources = _sources(sp)
    for c in plan_patchset(detect_profile(sources), sources, {"items": ["indexer"]}):
        (sp / c.path).write_text(c.after)
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    caps = ["12.0", "9.0", "10.0"]
    env = dict(
        os.environ,
        PYTHONPATH=f"{sp}{os.pathsep}{vllm_wheels.fetch_vllm_deps('0.16.0')}",
        VLLM_LOGGING_LEVEL="WARNING",
        PYTHONDONTWRITEBYTECODE="1",
    )
    env.pop("GLMOPS_INDEXER_LOGITS", None)
    stub = ROOT / "tests" / "patchset" / "cpu_stub.py"
    compiled = json.dumps(vllm_wheels.compiled_modules("0.16.0"))
    args = json.dumps({"caps": caps, "fake_deep_gemm": fake_deep_gemm})
    proc = subprocess.run(
        [sys.executable, str(stub), compiled, str(probe), args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    module = INDEXER_FALLBACK.removesuffix(".py").replace("/", ".")
    assert out["bound"] == [module, module, module]
    assert out["12.0"] == {
        "logits": "torch",
        "deep_gemm_calls": [],
        "cudagraph": "NEVER",
        "topk": "triton",
    }
    for cap in ("9.0", "10.0"):
        if fake_deep_gemm:
            # vLLM's compiled ops are not loaded on this CPU machine: its top-k op is missing
            assert out[cap] == {
                "logits": "deepgemm",
                "deep_gemm_calls": ["fp8_mqa_logits"],
                "cudagraph": "UNIFORM_SINGLE_TOKEN_DECODE",
                "topk": "triton",
            }
        else:
            assert out[cap]["logits"] == "torch" and out[cap]["cudagraph"] == "NEVER"
            assert out[cap]["topk"] == "triton"
