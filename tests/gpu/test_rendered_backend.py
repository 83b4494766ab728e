"""The RENDERED vLLM backend's forward path on a GPU, with vLLM's own top-k index conversion,
against a float32 reference.

What runs, and what is a stand-in (vLLM cannot be imported on the GPU machine: no deps,
another Python), so read the results with this in mind:

* Prepared here beforehand by tests/gpu/prepare_rendered.py into .thirdparty/rendered/
  (git-ignored, carried to the GPU machine): the backend file as `glmops patch` writes it onto
  a host, rendered by glmops' own renderer for profiles v0_16 and v0_33 and kernel modes
  sparse_mla and dense_reuse; and, byte for byte from the real PyPI wheels, the vLLM code that
  forward path calls: 0.16.0's `triton_convert_req_index_to_global_index` and its Triton kernel,
  0.16.0's and 0.33.0's whole `triton_decode_attention.py` (`decode_attention_fwd`, for
  dense_reuse), 0.33.0's whole `sparse_utils.py` (`flat_kv_row_view` and its own
  `triton_convert_req_index_to_global_index` with the remap kernel), and 0.33.0's launch glue
  (`kernel_launcher`, `_launch_binding_plan`, `triton_scalar_specialization_rep`).
* Here, each rendered file is loaded UNMODIFIED as
  `vllm.v1.attention.backends.mla.triton_mla_sparse`, with a minimal stand-in `vllm` package in
  sys.modules that provides only what the rendered file (and the extracted files) import at
  module level. Stand-ins (no behaviour on the forward path): base classes
  (SparseMLAAttentionImpl, FlashMLASparseBackend / -MetadataBuilder, SparseMLACommonImpl and its
  metadata / builder, AttentionBackend), enums and small types (AttentionCGSupport, MultipleOf,
  AttentionLayer, CacheDType, DeviceCapability), the FlashMLASparseMetadata dataclass (same
  field names as 0.16), `current_platform.is_rocm() -> False`, `vllm.triton_utils` (the real
  triton), and for 0.33's conversion the `VllmTritonJitKernel` base whose `launch` does what the
  real one does outside warm-up: bind inputs with the real `_launch_binding_plan`, then
  `kernel[grid](**kwargs)`. Everything that computes is real: the rendered module's code,
  glmops' kernel embedded in it, and vLLM's conversion and decode kernels.
* v0_16: the real `TritonMLASparseImpl.forward_mqa` is called with metadata carrying
  req_id_per_token, block_table, block_size 64, and the indexer's topk_indices_buffer of
  LOGICAL positions; the paged cache is [num_blocks, 64, 576].
  v0_33: what 0.33's `SparseMLACommonImpl.forward_mqa` does before the kernel call is
  replayed with 0.33's real functions (`flat_kv_row_view` for the block stride, then
  `triton_convert_req_index_to_global_index(..., BLOCK_STRIDE_ROWS=..., return_valid_counts=True)`,
  which compacts valid slots to the front), and the real `_forward_mqa_kernel` gets those
  physical indices. Half the v0_33 cases use a cache whose blocks are 80 rows apart (other
  layers' pages in between, NaN there), as 0.33 allows.
* The reference maps the logical indices through the block table in plain torch and computes
  attention in float32. Rows no index selects (and the gaps between blocks) are NaN; the
  caching allocator is filled with NaN before each call so an unwritten output element shows
  up as NaN; inputs are fresh random per case; −1 appears as tail padding, scattered holes, in
  whole rows (no valid index: out must be 0 and lse −inf), and from short contexts. Tolerances
  as in tests/gpu/test_sparse_mla.py.

Skipped (with the reason) without torch, triton, a CUDA device, or the prepared files.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib.util
import json
import logging
import sys
import zlib
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any, ClassVar, Generic, NamedTuple, TypeVar

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (GPU tests need it)")
triton = pytest.importorskip("triton", reason="triton is not installed (GPU tests need it)")
import triton.language as tl  # noqa: E402

PREPARED = Path(__file__).resolve().parents[2] / ".thirdparty" / "rendered"

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
    pytest.mark.skipif(
        not (PREPARED / "manifest.json").is_file(),
        reason="run python3 -m tests.gpu.prepare_rendered first (.thirdparty/rendered missing)",
    ),
]

_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
_SM_SCALE = 1.0 / 16.0  # GLM-5's scale
_BLOCK = 64
_TOPK = 2048  # GLM-5 index_topk; 0.16's conversion needs a multiple of 128
_D = 576
T = TypeVar("T")


# ---------------------------------------------------------------- stand-in vllm package


class DeviceCapability(NamedTuple):
    major: int
    minor: int


@dataclasses.dataclass
class MultipleOf:
    base: int


class AttentionLayer:
    pass


class AttentionCGSupport(enum.Enum):
    ALWAYS = 3
    UNIFORM_BATCH = 2
    UNIFORM_SINGLE_TOKEN_DECODE = 1
    NEVER = 0


class AttentionBackend:
    accept_output_buffer: ClassVar[bool] = False


class SparseMLAAttentionImpl(Generic[T]):
    """0.16's base: __init__ and forward_mqa are abstract there; the rendered class defines both."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError

    def forward_mqa(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


class FlashMLASparseBackend(AttentionBackend):
    pass


@dataclasses.dataclass
class FlashMLASparseMetadata:
    """0.16's field names (the fp8 parts, unused for a bf16/fp16 cache, left out)."""

    num_reqs: int
    max_query_len: int
    max_seq_len: int
    num_actual_tokens: int
    query_start_loc: torch.Tensor
    slot_mapping: torch.Tensor
    block_table: torch.Tensor
    req_id_per_token: torch.Tensor
    block_size: int = 64
    topk_tokens: int = 2048


class FlashMLASparseMetadataBuilder(Generic[T]):
    pass


@dataclasses.dataclass(kw_only=True)
class SparseMLACommonMetadata:
    pass


class SparseMLACommonMetadataBuilder(Generic[T]):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass


class SparseMLACommonImpl(Generic[T]):
    """0.33's base, reduced to what the rendered subclass reads: scale, topk_indices_buffer."""

    def __init__(
        self,
        num_heads: int,
        head_size: int,
        scale: float,
        *args: Any,
        indexer: Any = None,
        topk_indices_buffer: Any = None,
        **kwargs: Any,
    ) -> None:
        self.num_heads = num_heads
        self.head_size = head_size
        self.scale = scale
        self.topk_indices_buffer = (
            indexer.topk_indices_buffer if indexer is not None else topk_indices_buffer
        )


def _module(name: str, **attrs: Any) -> ModuleType:
    mod = sys.modules.get(name)
    if mod is None:
        mod = ModuleType(name)
        mod.__path__ = []  # a package, so children can be registered
        sys.modules[name] = mod
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(_module(parent), child, mod)
    for key, value in attrs.items():
        setattr(mod, key, value)
    return mod


def _load(name: str, path: Path, **preset: Any) -> ModuleType:
    """Load a real file as module `name` (Triton needs the source on disk); `preset` names are
    in its namespace before it runs (stand-ins an extracted segment file refers to)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    mod.__dict__.update(preset)
    sys.modules[name] = mod
    parent, _, child = name.rpartition(".")
    setattr(_module(parent), child, mod)
    spec.loader.exec_module(mod)
    return mod


def _standin_jit_base(binding: ModuleType) -> type:
    class VllmTritonJitKernel(Generic[T]):
        """Stand-in for 0.33's base: the real launch path outside warm-up (bind inputs to the
        kernel's arguments with the real _launch_binding_plan, fill strides, launch)."""

        bind_launch_inputs = True

        def _trace_dispatch(self, fn: Any) -> Any:
            return fn

        def launch(self, launch_spec: Any, inputs: dict[str, Any]) -> Any:
            grid, launch_kwargs = launch_spec[0], dict(launch_spec[1])
            outputs = launch_spec[2] if len(launch_spec) == 3 else None
            arg_names = tuple(self.kernel.arg_names)
            plan = binding._launch_binding_plan(arg_names, tuple(inputs), tuple(launch_kwargs))
            values = tuple(inputs.values())
            for index, target in plan.input_targets:
                launch_kwargs[target] = values[index]
            for target, source, dim in plan.stride_targets:
                launch_kwargs[target] = launch_kwargs[source].stride(dim)
            kernel = launch_kwargs.pop("kernel", None) or self.kernel
            if grid is not None:
                kernel[grid](**launch_kwargs)
            return outputs

    return VllmTritonJitKernel


def load_rendered(profile: str, kernel: str) -> tuple[ModuleType, dict[str, ModuleType]]:
    """Fresh stand-in `vllm` + the real extracted vLLM code + the rendered backend module."""
    manifest = json.loads((PREPARED / "manifest.json").read_text())
    for name in [n for n in sys.modules if n == "vllm" or n.startswith("vllm.")]:
        del sys.modules[name]
    vdir = PREPARED / manifest["vllm"][profile]["dir"]
    _module("vllm.config.cache", CacheDType=str)
    _module("vllm.config", VllmConfig=type("VllmConfig", (), {}))
    _module("vllm.logger", init_logger=logging.getLogger)
    _module("vllm.platforms", current_platform=SimpleNamespace(is_rocm=lambda: False))
    _module("vllm.platforms.interface", DeviceCapability=DeviceCapability)
    _module("vllm.triton_utils", triton=triton, tl=tl, HAS_TRITON=True)
    backend = _module(
        "vllm.v1.attention.backend",
        AttentionLayer=AttentionLayer,
        MultipleOf=MultipleOf,
        AttentionBackend=AttentionBackend,
        AttentionCGSupport=AttentionCGSupport,
    )
    real: dict[str, ModuleType] = {}
    if profile == "v0_16":
        backend.SparseMLAAttentionImpl = SparseMLAAttentionImpl
        real["convert"] = _load(
            "vllm.v1.attention.backends.mla.flashmla_sparse",
            vdir / "flashmla_sparse_convert.py",
            FlashMLASparseBackend=FlashMLASparseBackend,
            FlashMLASparseMetadata=FlashMLASparseMetadata,
            FlashMLASparseMetadataBuilder=FlashMLASparseMetadataBuilder,
        )
    else:
        _module(
            "vllm.model_executor.layers.attention.sparse_mla_attention",
            SparseMLACommonImpl=SparseMLACommonImpl,
            SparseMLACommonMetadata=SparseMLACommonMetadata,
            SparseMLACommonMetadataBuilder=SparseMLACommonMetadataBuilder,
        )
        launcher = _load("vllm.model_executor.warmup.jit_warmup", vdir / "jit_warmup_launcher.py")
        launcher.zip_inputs = lambda *rows: rows  # warm-up only
        binding = _load(
            "vllm.model_executor.warmup.jit_warmup_triton_helper", vdir / "jit_warmup_binding.py"
        )
        binding.LaunchSpec = tuple
        binding.TritonWarmupTensor = object  # warm-up only
        binding.VllmTritonJitKernel = _standin_jit_base(binding)
        _module("vllm.distributed", get_dcp_group=None)
        _module("vllm.utils.math_utils", cdiv=lambda a, b: -(a // -b))
        _module("vllm.v1.kv_cache_interface", AttentionSpec=object)
        _module("vllm.v1.worker.block_table", get_block_table_width=None)
        real["convert"] = _load(
            "vllm.v1.attention.backends.mla.sparse_utils", vdir / "sparse_utils.py"
        )
    real["decode"] = _load(
        "vllm.v1.attention.ops.triton_decode_attention", vdir / "triton_decode_attention.py"
    )
    rendered = PREPARED / manifest["rendered"][f"{profile}/{kernel}"]["file"]
    mod = _load("vllm.v1.attention.backends.mla.triton_mla_sparse", rendered)
    return mod, real


_LOADED: dict[tuple[str, str], tuple[ModuleType, dict[str, ModuleType]]] = {}


def rendered(profile: str, kernel: str) -> tuple[ModuleType, dict[str, ModuleType]]:
    key = (profile, kernel)
    if key not in _LOADED:
        _LOADED[key] = load_rendered(profile, kernel)
    return _LOADED[key]


# ---------------------------------------------------------------- inputs and reference


@dataclasses.dataclass
class Case:
    q: torch.Tensor  # [T, H, 576]
    kv_cache: torch.Tensor  # [num_blocks, 64, 576], possibly with a block stride > 64 rows
    block_table: torch.Tensor  # int32 [R, max_blocks]
    req_id: torch.Tensor  # int32 [T]
    logical: torch.Tensor  # int32 [T, topk], -1 = none
    seq_lens: list[int]


def make_case(
    gen: torch.Generator,
    num_tokens: int,
    num_heads: int,
    dtype: torch.dtype,
    block_stride_rows: int = _BLOCK,
) -> Case:
    dev = "cuda"
    seq_lens = [5000, 700, 3100, 64]  # long and short contexts (700, 64 < topk: natural -1)
    num_reqs = len(seq_lens)
    need = [-(s // -_BLOCK) for s in seq_lens]
    max_blocks = max(need) + 3
    num_blocks = sum(need) + 37
    perm = torch.randperm(num_blocks, generator=gen, device=dev).to(torch.int32)
    block_table = torch.full((num_reqs, max_blocks), -7, dtype=torch.int32, device=dev)
    at = 0
    for r, n in enumerate(need):
        block_table[r, :n] = perm[at : at + n]
        at += n
    req_id = torch.arange(num_tokens, device=dev, dtype=torch.int32) % num_reqs
    logical = torch.full((num_tokens, _TOPK), -1, dtype=torch.int32, device=dev)
    for t in range(num_tokens):
        ctx = seq_lens[int(req_id[t])]
        k = min(ctx, _TOPK)
        pos = torch.randperm(ctx, generator=gen, device=dev)[:k].to(torch.int32)
        logical[t, :k] = pos
        kind = t % 6
        if kind == 1:  # tail padding at a random length
            cut = int(torch.randint(0, k + 1, (1,), generator=gen, device=dev))
            logical[t, cut:] = -1
        elif kind == 2:  # scattered holes
            holes = torch.rand(_TOPK, generator=gen, device=dev) < 0.3
            logical[t, holes] = -1
        elif kind == 3:  # a row with no valid index
            logical[t] = -1
        elif kind == 4:  # valid entries spread through the row, -1 between them
            logical[t] = logical[t, torch.randperm(_TOPK, generator=gen, device=dev)]
    logical[0] = -1  # the first token of every case is empty too
    backing = torch.full((num_blocks, block_stride_rows, _D), float("nan"), dtype=dtype, device=dev)
    kv_cache = backing[:, :_BLOCK, :]
    data = (torch.randn(num_blocks, _BLOCK, _D, generator=gen, device=dev) * 0.5).to(dtype)
    # Only rows some index selects get data: a read of any other row brings NaN in.
    used = torch.zeros(num_blocks * _BLOCK, dtype=torch.bool, device=dev)
    phys = _to_physical(logical, req_id, block_table, _BLOCK)
    used[phys[phys >= 0].long()] = True
    used = used.view(num_blocks, _BLOCK)
    kv_cache[used] = data[used]
    q = (torch.rand(num_tokens, num_heads, _D, generator=gen, device=dev) * 2 - 1).to(dtype)
    return Case(q, kv_cache, block_table, req_id, logical, seq_lens)


def _to_physical(
    logical: torch.Tensor, req_id: torch.Tensor, block_table: torch.Tensor, rows_per_block: int
) -> torch.Tensor:
    """Plain-torch logical -> physical slot (block_table[req, pos // 64] * stride + pos % 64)."""
    valid = logical >= 0
    pos = logical.clamp(min=0).long()
    blocks = block_table.long()[req_id.long()[:, None], pos // _BLOCK]
    phys = blocks * rows_per_block + pos % _BLOCK
    return torch.where(valid, phys, -1)


def reference(case: Case, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """float32 attention over the cache rows the logical indices name."""
    rows = case.kv_cache.float()  # [B, 64, 576] view; gaps between blocks never touched
    flat = rows.reshape(-1, _D)
    phys = _to_physical(case.logical, case.req_id, case.block_table, _BLOCK)
    valid = phys >= 0
    kv = flat[phys.clamp(min=0)]  # [T, K, 576]
    kv = torch.where(valid[..., None], kv, torch.zeros_like(kv))
    s = torch.einsum("thd,tkd->thk", case.q.float(), kv) * scale
    s = s.masked_fill(~valid[:, None, :], float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - torch.where(torch.isinf(lse), 0.0, lse)[..., None])
    p = torch.where(valid[:, None, :], p, torch.zeros_like(p))
    out = torch.einsum("thk,tkd->thd", p, kv[..., :512])
    return out, lse


def _poison_allocator(nbytes: int) -> None:
    """Leave NaN in the caching allocator's free blocks, so the backend's new_empty outputs
    start as NaN and an unwritten element is caught."""
    junk = torch.full((nbytes // 4 + 1,), float("nan"), dtype=torch.float32, device="cuda")
    del junk


def check(out: torch.Tensor, lse: torch.Tensor | None, case: Case, dtype: torch.dtype) -> None:
    ref_o, ref_l = reference(case, _SM_SCALE)
    t, h = case.q.shape[:2]
    assert out.shape == (t, h, 512) and out.dtype == dtype
    assert lse is not None and lse.shape == (t, h)
    assert not torch.isnan(out).any(), "output has NaN: unwritten element or NaN row read"
    assert not torch.isnan(lse).any(), "lse has NaN: unwritten element or NaN row read"
    empty = (case.logical < 0).all(dim=1)
    assert empty.any() and (~empty).any()
    assert (out[empty] == 0).all(), "a token with no valid index must give zeros"
    assert torch.isneginf(lse[empty]).all(), "a token with no valid index must give -inf"
    full = ~empty
    o, r = out[full].float(), ref_o[full]
    rel = ((o - r).norm() / r.norm().clamp_min(1e-12)).item()
    bound = 2e-3 if dtype == torch.float16 else 1.2e-2
    assert rel < bound, f"relative L2 error {rel:.3e} >= {bound}"
    atol = 2e-3 if dtype == torch.float16 else 1.5e-2
    max_abs = (o - r).abs().max().item()
    assert max_abs < atol + 0.02 * r.abs().max().item(), f"max abs error {max_abs:.3e}"
    assert torch.isfinite(lse[full]).all()
    lse_err = (lse[full] - ref_l[full]).abs().max().item()
    assert lse_err < 2e-3, f"lse max abs error {lse_err:.3e}"
    print(f"rel={rel:.2e} max_abs={max_abs:.2e} lse_err={lse_err:.2e} empty={int(empty.sum())}/{t}")


# ---------------------------------------------------------------- the forward paths

_GRID = [
    pytest.param(kernel, dt, h, t, id=f"{kernel}-{dt}-H{h}-T{t}")
    for kernel in ("sparse_mla", "dense_reuse")
    for dt in ("bf16", "fp16")
    for h in (8, 16, 64)
    for t in (8, 96)  # decode-sized (top-k split) and prefill-sized (token chunks)
]


def _seed(*parts: object) -> int:
    return zlib.crc32("-".join(map(str, parts)).encode())


@pytest.mark.parametrize(("kernel", "dtype", "num_heads", "num_tokens"), _GRID)
def test_v0_16_forward_mqa(kernel: str, dtype: str, num_heads: int, num_tokens: int) -> None:
    mod, real = rendered("v0_16", kernel)
    assert mod.triton_convert_req_index_to_global_index is (
        real["convert"].triton_convert_req_index_to_global_index
    )
    if kernel == "dense_reuse":
        assert mod.decode_attention_fwd is real["decode"].decode_attention_fwd
    gen = torch.Generator(device="cuda").manual_seed(
        _seed("v0_16", kernel, dtype, num_heads, num_tokens)
    )
    dt = _DTYPES[dtype]
    case = make_case(gen, num_tokens, num_heads, dt)
    # The indexer's buffer is sized for the max batch; forward_mqa slices [:num_tokens].
    buf = torch.full((num_tokens + 5, _TOPK), 12345, dtype=torch.int32, device="cuda")
    buf[:num_tokens] = case.logical
    impl = mod.TritonMLASparseImpl(
        num_heads=num_heads,
        head_size=_D,
        scale=_SM_SCALE,
        num_kv_heads=1,
        alibi_slopes=None,
        sliding_window=None,
        kv_cache_dtype="auto",
        logits_soft_cap=None,
        attn_type="decoder",
        kv_sharing_target_layer_name=None,
        indexer=SimpleNamespace(topk_indices_buffer=buf),
        q_lora_rank=2048,
        kv_lora_rank=512,
        qk_nope_head_dim=192,
        qk_rope_head_dim=64,
        qk_head_dim=256,
        v_head_dim=256,
        kv_b_proj=None,
    )
    meta = mod.FlashMLASparseMetadata(
        num_reqs=len(case.seq_lens),
        max_query_len=1,
        max_seq_len=max(case.seq_lens),
        num_actual_tokens=num_tokens,
        query_start_loc=torch.arange(num_tokens + 1, dtype=torch.int32, device="cuda"),
        slot_mapping=torch.zeros(num_tokens, dtype=torch.int64, device="cuda"),
        block_table=case.block_table,
        req_id_per_token=case.req_id,
        block_size=_BLOCK,
        topk_tokens=_TOPK,
    )
    q = case.q if num_tokens > 64 else (case.q[..., :512], case.q[..., 512:])  # both forms
    _poison_allocator(64 << 20)
    out, lse = impl.forward_mqa(q, case.kv_cache.contiguous(), meta, AttentionLayer())
    torch.cuda.synchronize()
    check(out, lse, case, dt)


@pytest.mark.parametrize(("kernel", "dtype", "num_heads", "num_tokens"), _GRID)
def test_v0_33_forward_mqa_kernel(kernel: str, dtype: str, num_heads: int, num_tokens: int) -> None:
    mod, real = rendered("v0_33", kernel)
    conv = real["convert"]
    assert mod.flat_kv_row_view is conv.flat_kv_row_view
    if kernel == "dense_reuse":
        assert mod.decode_attention_fwd is real["decode"].decode_attention_fwd
    gen = torch.Generator(device="cuda").manual_seed(
        _seed("v0_33", kernel, dtype, num_heads, num_tokens)
    )
    dt = _DTYPES[dtype]
    stride_rows = 80 if num_tokens > 64 else _BLOCK  # other layers' pages between blocks
    case = make_case(gen, num_tokens, num_heads, dt, block_stride_rows=stride_rows)
    buf = torch.full((num_tokens + 5, _TOPK), 12345, dtype=torch.int32, device="cuda")
    buf[:num_tokens] = case.logical
    impl = mod.TritonMLASparseImpl(
        num_heads,
        _D,
        _SM_SCALE,
        1,
        None,
        None,
        "auto",
        None,
        "decoder",
        None,
        indexer=SimpleNamespace(topk_indices_buffer=buf),
    )
    # What 0.33's SparseMLACommonImpl.forward_mqa does before _forward_mqa_kernel:
    topk = impl.topk_indices_buffer[:num_tokens]
    _, block_stride_rows = conv.flat_kv_row_view(case.kv_cache, _BLOCK)
    assert block_stride_rows == stride_rows
    physical, valid_counts = conv.triton_convert_req_index_to_global_index(
        case.req_id[:num_tokens],
        case.block_table,
        topk,
        BLOCK_SIZE=_BLOCK,
        BLOCK_STRIDE_ROWS=block_stride_rows,
        NUM_TOPK_TOKENS=topk.shape[1],
        return_valid_counts=True,
    )
    expect = _to_physical(case.logical, case.req_id, case.block_table, stride_rows)
    assert torch.equal(valid_counts, (expect >= 0).sum(dim=1).to(torch.int32))
    q = case.q if num_tokens > 64 else (case.q[..., :512], case.q[..., 512:])
    _poison_allocator(64 << 20)
    out, lse = impl._forward_mqa_kernel(
        q,
        case.kv_cache,
        physical,
        valid_counts,
        layer=AttentionLayer(),
        block_size=_BLOCK,
        is_decode=num_tokens <= 64,
    )
    torch.cuda.synchronize()
    check(out, lse, case, dt)


def _v0_16_impl(mod: ModuleType, num_heads: int, kv_cache_dtype: str, buf: torch.Tensor) -> Any:
    return mod.TritonMLASparseImpl(
        num_heads=num_heads,
        head_size=_D,
        scale=_SM_SCALE,
        num_kv_heads=1,
        alibi_slopes=None,
        sliding_window=None,
        kv_cache_dtype=kv_cache_dtype,
        logits_soft_cap=None,
        attn_type="decoder",
        kv_sharing_target_layer_name=None,
        indexer=SimpleNamespace(topk_indices_buffer=buf),
        kv_lora_rank=512,
    )


@pytest.mark.parametrize("num_heads", [8, 16, 64, 128])
@pytest.mark.parametrize("num_tokens", [8, 96])
def test_v0_16_fp8_cache(num_heads: int, num_tokens: int) -> None:
    """--kv-cache-dtype fp8: the cache holds fp8 e4m3 rows of 576 values (vLLM views it as fp8
    before forward_mqa) with the layer's k_scale for all of them; against the float32 reference
    on the scaled values. Unselected rows are NaN in fp8 as well."""
    mod, _ = rendered("v0_16", "sparse_mla")
    assert "fp8" in mod.TritonMLASparseBackend.supported_kv_cache_dtypes
    gen = torch.Generator(device="cuda").manual_seed(_seed("fp8", num_heads, num_tokens))
    case = make_case(gen, num_tokens, num_heads, torch.bfloat16)
    k_scale = 0.03125
    fp8_cache = (case.kv_cache.float() / k_scale).to(torch.float8_e4m3fn)
    case.kv_cache = (fp8_cache.float() * k_scale).to(torch.bfloat16)  # exact: scale is 2^-5
    buf = torch.full((num_tokens + 5, _TOPK), 12345, dtype=torch.int32, device="cuda")
    buf[:num_tokens] = case.logical
    impl = _v0_16_impl(mod, num_heads, "fp8", buf)
    meta = mod.FlashMLASparseMetadata(
        num_reqs=len(case.seq_lens),
        max_query_len=1,
        max_seq_len=max(case.seq_lens),
        num_actual_tokens=num_tokens,
        query_start_loc=torch.arange(num_tokens + 1, dtype=torch.int32, device="cuda"),
        slot_mapping=torch.zeros(num_tokens, dtype=torch.int64, device="cuda"),
        block_table=case.block_table,
        req_id_per_token=case.req_id,
    )
    layer = AttentionLayer()
    layer._k_scale_float = k_scale
    _poison_allocator(64 << 20)
    out, lse = impl.forward_mqa(case.q, fp8_cache, meta, layer)
    torch.cuda.synchronize()
    check(out, lse, case, torch.bfloat16)


def _v0_16_meta(mod: ModuleType, case: Case, num_tokens: int) -> Any:
    return mod.FlashMLASparseMetadata(
        num_reqs=len(case.seq_lens),
        max_query_len=1,
        max_seq_len=max(case.seq_lens),
        num_actual_tokens=num_tokens,
        query_start_loc=torch.arange(num_tokens + 1, dtype=torch.int32, device="cuda"),
        slot_mapping=torch.zeros(num_tokens, dtype=torch.int64, device="cuda"),
        block_table=case.block_table,
        req_id_per_token=case.req_id,
    )


@pytest.mark.parametrize("num_heads", [8, 16, 64, 128])
@pytest.mark.parametrize("num_tokens", [8, 96])
def test_v0_16_fp8_ds_mla_cache(num_heads: int, num_tokens: int) -> None:
    """--kv-cache-dtype fp8_ds_mla (DeepSeek-V3.2's fp8 cache on 0.16): uint8 blocks of
    656-byte rows (512 fp8 e4m3 latent values, 4 fp32 scales, one per 128 columns, 64 bf16 rope
    values; FlashMLASparseBackend.get_kv_cache_shape's layout), handed to forward_mqa as uint8.
    Unselected rows are all-ones bytes: NaN in every part. Against the float32 reference on
    the dequantized rows."""
    mod, _ = rendered("v0_16", "sparse_mla")
    assert "fp8_ds_mla" in mod.TritonMLASparseBackend.supported_kv_cache_dtypes
    gen = torch.Generator(device="cuda").manual_seed(_seed("ds_mla", num_heads, num_tokens))
    case = make_case(gen, num_tokens, num_heads, torch.bfloat16)
    rows = case.kv_cache.reshape(-1, _D)
    used = ~torch.isnan(rows.float()).any(dim=1)
    packed = torch.full((rows.shape[0], 656), 255, dtype=torch.uint8, device="cuda")
    packed[used] = mod.quantize_fp8_ds_mla(rows[used])
    ds_cache = packed.view(case.kv_cache.shape[0], _BLOCK, 656)
    deq = torch.full(rows.shape, float("nan"), dtype=torch.float32, device="cuda")
    deq[used] = mod.dequantize_fp8_ds_mla(packed[used])
    case.kv_cache = deq.view(case.kv_cache.shape)
    buf = torch.full((num_tokens + 5, _TOPK), 12345, dtype=torch.int32, device="cuda")
    buf[:num_tokens] = case.logical
    impl = _v0_16_impl(mod, num_heads, "fp8_ds_mla", buf)
    _poison_allocator(64 << 20)
    out, lse = impl.forward_mqa(
        case.q, ds_cache, _v0_16_meta(mod, case, num_tokens), AttentionLayer()
    )
    torch.cuda.synchronize()
    check(out, lse, case, torch.bfloat16)


@pytest.mark.parametrize("num_heads", [8, 16, 64, 128])
@pytest.mark.parametrize("num_tokens", [8, 96])
def test_v0_33_fp8_cache(num_heads: int, num_tokens: int) -> None:
    """--kv-cache-dtype fp8 on 0.33: uint8 blocks of 576 fp8 e4m3 values per row with the
    layer's k_scale (what concat_and_cache_mla writes for this backend), viewed as e4m3 by
    forward_impl; blocks 80 rows apart for prefill-sized batches, then 0.33's real conversion
    to physical rows and the real `_forward_mqa_kernel`."""
    mod, real = rendered("v0_33", "sparse_mla")
    conv = real["convert"]
    assert "fp8" in mod.TritonMLASparseBackend.supported_kv_cache_dtypes
    gen = torch.Generator(device="cuda").manual_seed(_seed("fp8-33", num_heads, num_tokens))
    stride_rows = 80 if num_tokens > 64 else _BLOCK
    case = make_case(gen, num_tokens, num_heads, torch.bfloat16, block_stride_rows=stride_rows)
    k_scale = 0.03125
    backing = torch.full(
        (case.kv_cache.shape[0], stride_rows, _D), 0x7F, dtype=torch.uint8, device="cuda"
    )  # 0x7F: e4m3 NaN
    fp8_cache = backing[:, :_BLOCK, :].view(torch.float8_e4m3fn)
    fp8_cache.copy_((case.kv_cache.float() / k_scale).to(torch.float8_e4m3fn))
    case.kv_cache = (fp8_cache.float() * k_scale).to(torch.bfloat16)  # exact: scale is 2^-5
    buf = torch.full((num_tokens + 5, _TOPK), 12345, dtype=torch.int32, device="cuda")
    buf[:num_tokens] = case.logical
    impl = mod.TritonMLASparseImpl(
        num_heads, _D, _SM_SCALE, 1, None, None, "fp8", None, "decoder", None,
        indexer=SimpleNamespace(topk_indices_buffer=buf),
    )  # fmt: skip
    _, block_stride_rows = conv.flat_kv_row_view(fp8_cache, _BLOCK)
    assert block_stride_rows == stride_rows
    physical, valid_counts = conv.triton_convert_req_index_to_global_index(
        case.req_id[:num_tokens],
        case.block_table,
        impl.topk_indices_buffer[:num_tokens],
        BLOCK_SIZE=_BLOCK,
        BLOCK_STRIDE_ROWS=block_stride_rows,
        NUM_TOPK_TOKENS=_TOPK,
        return_valid_counts=True,
    )
    layer = AttentionLayer()
    layer._k_scale_float = k_scale
    _poison_allocator(64 << 20)
    out, lse = impl._forward_mqa_kernel(
        (case.q[..., :512], case.q[..., 512:]),
        fp8_cache,
        physical,
        valid_counts,
        layer=layer,
        block_size=_BLOCK,
        is_decode=num_tokens <= 64,
    )
    torch.cuda.synchronize()
    check(out, lse, case, torch.bfloat16)


def test_unsupported_heads_and_caches_are_refused_at_construction(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The backend states the head counts this GPU serves and refuses the rest when the layer
    is built: here as an SM86 (99 KB, no fp8 conversion) and with more heads than covered."""
    mod, _ = rendered("v0_16", "sparse_mla")
    buf = torch.zeros((4, _TOPK), dtype=torch.int32, device="cuda")
    caps = mod.TritonMLASparseBackend
    assert caps.get_supported_num_heads("auto") == list(range(1, 129))
    assert caps.get_supported_num_heads("fp8") == list(range(1, 129))  # the H200: SM90
    with pytest.raises(NotImplementedError, match="129 query heads.*1 to 128"):
        _v0_16_impl(mod, 129, "auto", buf)
    with pytest.raises(NotImplementedError, match="fp8_e5m2"):
        _v0_16_impl(mod, 64, "fp8_e5m2", buf)
    sm86 = mod.DeviceLimits((8, 6), 101376)
    monkeypatch.setattr(mod, "_device_limits", lambda index: sm86)
    assert caps.get_supported_num_heads("fp8") == []
    assert caps.get_supported_num_heads("auto") == list(range(1, 129))
    with pytest.raises(NotImplementedError, match="fp8 rows need SM89 or newer"):
        _v0_16_impl(mod, 64, "fp8", buf)
    _v0_16_impl(mod, 64, "auto", buf)  # 16-bit rows: 32-head tiles fit 99 KB
    mod33, _ = rendered("v0_33", "sparse_mla")
    with pytest.raises(NotImplementedError, match="129 query heads"):
        mod33.TritonMLASparseImpl(
            129, _D, _SM_SCALE, 1, None, None, "auto", None, "decoder", None,
            indexer=SimpleNamespace(topk_indices_buffer=buf),
        )  # fmt: skip
