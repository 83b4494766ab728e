"""The rendered TRITON_MLA_SPARSE (both vLLM layouts, sparse_mla kernel) on a CPU: the KV cache
dtypes each layout declares, and the start-up refusals, when the attention layer is built, of
the head counts and cache dtypes a GPU cannot serve. The file is rendered by glmops' own renderer
and loaded unmodified over a stand-in `vllm` package that holds only the names it imports (base
classes, enums); the GPU's limits come from `DeviceLimits` (as `_device_limits` reads them from
the device). The forward paths run on the H200 (tests/gpu/test_rendered_backend.py)."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from glmops.gpu.patchset.backend import render_backend
from glmops.gpu.patchset.profiles import profile_by_name
from glmops.gpu.serving.journal import STATUS_GREP, parse_kernel
from tests.support.module_file import load_module_file

torch = pytest.importorskip("torch", reason="the rendered backend imports torch")
pytest.importorskip("triton", reason="the rendered backend embeds a Triton kernel")

from tests.support.tritons import triton_env  # noqa: E402 (needs triton)

ROOT = Path(__file__).resolve().parents[2]
SM120 = ((12, 0), 101376)
SM86 = ((8, 6), 101376)
H200 = ((9, 0), 232448)


class _Base:
    """Stand-in base class: subscriptable like vLLM's generic bases; records its arguments."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.init_args = (args, kwargs)

    def __class_getitem__(cls, item: Any) -> type:
        return cls


def _standin_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    names = {
        "vllm.config.cache": {"CacheDType": str},
        "vllm.logger": {"init_logger": logging.getLogger},
        "vllm.platforms.interface": {"DeviceCapability": tuple},
        "vllm.v1.attention.backend": {
            n: type(n, (_Base,), {})
            for n in ("AttentionLayer", "MultipleOf", "AttentionBackend", "SparseMLAAttentionImpl")
        }
        | {"AttentionCGSupport": SimpleNamespace(UNIFORM_BATCH=2)},
        "vllm.v1.attention.backends.mla.flashmla_sparse": {
            "FlashMLASparseBackend": type("FlashMLASparseBackend", (), {}),
            "FlashMLASparseMetadata": type("FlashMLASparseMetadata", (), {}),
            "FlashMLASparseMetadataBuilder": type("FlashMLASparseMetadataBuilder", (_Base,), {}),
            "triton_convert_req_index_to_global_index": None,
        },
        "vllm.model_executor.layers.attention.sparse_mla_attention": {
            n: type(n, (_Base,), {}) for n in ("SparseMLACommonImpl", "SparseMLACommonMetadata")
        }
        | {"SparseMLACommonMetadataBuilder": type("B", (_Base,), {})},
        "vllm.v1.attention.backends.mla.sparse_utils": {"flat_kv_row_view": None},
    }
    for name in [n for n in sys.modules if n == "vllm" or n.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, name)
    for name, attrs in names.items():
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            if ".".join(parts[:i]) not in sys.modules:
                monkeypatch.setitem(sys.modules, ".".join(parts[:i]), ModuleType(parts[i - 1]))
        for key, value in attrs.items():
            setattr(sys.modules[name], key, value)


def _rendered(profile: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gpu) -> ModuleType:
    _standin_vllm(monkeypatch)
    path = tmp_path / f"triton_mla_sparse_{profile}.py"
    path.write_text(render_backend(profile_by_name(profile), {"kernel": "sparse_mla"}))
    mod = load_module_file(path, f"rendered_{profile}")
    limits = mod.DeviceLimits(*gpu)
    monkeypatch.setattr(mod, "_device_limits", lambda index: limits)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    return mod


def _build(mod: ModuleType, profile: str, num_heads: int, kv_cache_dtype: str) -> Any:
    indexer = SimpleNamespace(topk_indices_buffer=torch.zeros(4, 2048, dtype=torch.int32))
    args = (num_heads, 576, 1 / 16, 1, None, None, kv_cache_dtype, None, "decoder", None)
    if profile == "v0_16":
        return mod.TritonMLASparseImpl(*args, indexer=indexer, kv_lora_rank=512)
    mod.SparseMLACommonImpl.topk_indices_buffer = indexer.topk_indices_buffer
    return mod.TritonMLASparseImpl(*args, indexer=indexer)


DECLARED = {
    "v0_16": ["auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_ds_mla"],
    "v0_33": ["auto", "bfloat16", "fp8", "fp8_e4m3"],
}


@pytest.mark.parametrize("profile", ["v0_16", "v0_33"])
def test_declared_cache_dtypes_are_served_on_sm120(profile, tmp_path, monkeypatch) -> None:
    mod = _rendered(profile, tmp_path, monkeypatch, SM120)
    backend = mod.TritonMLASparseBackend
    assert backend.supported_kv_cache_dtypes == DECLARED[profile]
    for kv in DECLARED[profile]:
        assert backend.get_supported_num_heads(kv) == list(range(1, 129)), kv
        for heads in (8, 64, 128):
            impl = _build(mod, profile, heads, kv)
            assert impl.kv_cache_dtype == kv
    with pytest.raises(NotImplementedError, match="129 query heads.*1 to 128"):
        _build(mod, profile, 129, "fp8")
    with pytest.raises(NotImplementedError, match="not 'fp8_e5m2'"):
        _build(mod, profile, 64, "fp8_e5m2")
    assert backend.get_supported_num_heads("fp8_e5m2") == []


@pytest.mark.parametrize("profile", ["v0_16", "v0_33"])
def test_fp8_refused_where_no_fp8_conversion(profile, tmp_path, monkeypatch) -> None:
    mod = _rendered(profile, tmp_path, monkeypatch, SM86)
    backend = mod.TritonMLASparseBackend
    assert backend.get_supported_num_heads("fp8") == []
    assert backend.get_supported_num_heads("auto") == list(range(1, 129))
    with pytest.raises(NotImplementedError, match="64 query heads.*fp8.*SM89 or newer"):
        _build(mod, profile, 64, "fp8")
    _build(mod, profile, 64, "auto")


def test_v0_16_fp8_ds_mla_builder_skips_flashmla(tmp_path, monkeypatch) -> None:
    """0.16's FlashMLASparse builder makes FlashMLA scheduler metadata for an fp8_ds_mla cache
    (a FlashMLA call, SM90/100 only); the backend's builder turns that off."""
    mod = _rendered("v0_16", tmp_path, monkeypatch, H200)
    builder_cls = mod.TritonMLASparseBackend.get_builder_cls()
    assert issubclass(builder_cls, mod.FlashMLASparseMetadataBuilder)
    builder = builder_cls("spec", ["layer"], "config", "cuda:0")
    assert builder.init_args == (("spec", ["layer"], "config", "cuda:0"), {})
    assert builder.use_fp8_kv_cache is False


@contextmanager
def _model_dtype(dtype: torch.dtype) -> Iterator[None]:
    """vLLM builds the model's layers under its dtype as torch's default."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


@pytest.mark.parametrize("profile", ["v0_16", "v0_33"])
def test_the_kernel_serving_the_layers_is_logged_once_for_glmops_status(
    profile, tmp_path, monkeypatch, caplog
) -> None:
    """Building the layers logs the tile that serves them and the Triton, once per head count,
    row format and q dtype; `glmops status` reads that line back from the journal
    (parse_kernel). A float16 model (GGUF on SM120) over an fp8 cache gets its own line: the
    same Gluon e4m3 tile, which takes either 16-bit q."""
    mod = _rendered(profile, tmp_path, monkeypatch, SM120)
    caplog.set_level(logging.INFO, logger=mod.__name__)
    with _model_dtype(torch.bfloat16):
        for _ in range(3):  # three layers
            _build(mod, profile, 8, "fp8")
    with _model_dtype(torch.float16):
        _build(mod, profile, 8, "fp8")
    lines = [r.getMessage() for r in caplog.records if r.name == mod.__name__]
    assert len(lines) == 2, lines
    # As vLLM's logger writes them to the journal, behind a worker's prefix.
    journal = [
        f"(Worker_TP0 pid=7) INFO 12-05 01:02:03 [triton_mla_sparse.py:80] {line}" for line in lines
    ]
    assert all(re.search(STATUS_GREP, line) for line in journal)
    assert mod._GLUON_API, "the test extra's Triton 3.6 runs the Gluon tiles"
    version = mod.triton.__version__
    tile = (
        f"rows on SM120 (101376 B of shared memory per block): Gluon mma.sync tile 8x64, 4 warps "
        f"(the tl.dot tile for batches too small to fill the GPU with 64-row tiles); "
        f"Triton {version}"
    )
    assert parse_kernel(journal[:1]) == f"8 query heads, bfloat16 q over fp8 {tile}"
    assert parse_kernel(journal) == f"8 query heads, float16 q over fp8 {tile}"


# (Triton, GLMOPS_SPARSE_MLA_GLUON) -> the tile SM120 gets for 8 heads over fp8 rows, and why.
TRITON_TILES = {
    ("3.5.1", None): "tl.dot tile 16x32, 4 warps; Triton 3.5.1 (the Gluon mma.sync tile 8x64, "
    "4 warps needs Triton 3.6 to 3.8)",
    ("3.8.0", None): "Gluon mma.sync tile 8x64, 4 warps (the tl.dot tile for batches too small "
    "to fill the GPU with 64-row tiles); Triton 3.8.0",
    ("3.8.0", "1"): "Gluon mma.sync tile 8x64, 4 warps (the tl.dot tile for batches too small "
    "to fill the GPU with 64-row tiles); Triton 3.8.0",
    ("3.5.1", "1"): "tl.dot tile 16x32, 4 warps; Triton 3.5.1 (the Gluon mma.sync tile 8x64, "
    "4 warps needs Triton 3.6 to 3.8)",
}


@pytest.mark.parametrize(("version", "forced"), list(TRITON_TILES))
def test_other_tritons_name_their_tile(version: str, forced: str | None) -> None:
    """Under vLLM 0.16's Triton (3.5) the Gluon kernels do not exist; under 0.27 onwards' (3.7,
    3.8) a GPU suite run has verified them, so they run by default, as under 3.6;
    GLMOPS_SPARSE_MLA_GLUON=1 cannot bring them to a Triton they do not compile under."""
    code = (
        "import sys, torch; from tests.support.module_file import load_sparse_mla; "
        "m = load_sparse_mla('k'); "
        "m._device_limits = lambda index: m.DeviceLimits((12, 0), 101376); "
        "print(m.sparse_mla_kernel_summary(8, 'fp8', 0, torch.bfloat16))"
    )
    env = triton_env(version)
    env.pop("GLMOPS_SPARSE_MLA_GLUON", None)
    if forced:
        env["GLMOPS_SPARSE_MLA_GLUON"] = forced
    run = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip() == (
        "8 query heads, bfloat16 q over fp8 rows on SM120 (101376 B of shared memory per "
        f"block): {TRITON_TILES[version, forced]}"
    )
