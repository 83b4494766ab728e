"""Patch-set item: the DSA indexer's logits on GPUs where DeepGEMM does not run (SM120, SM8x).

0.16 line: sparse_attn_indexer.sparse_attn_indexer calls vllm.utils.deep_gemm's
fp8_mqa_logits / fp8_paged_mqa_logits with no capability check, while DeepGEMM runs only on
SM90/SM100 (is_deep_gemm_supported). The item renders a fallback module next to the op and
inserts two marked pieces: one import line after the DeepGEMM import that rebinds both names
to dispatchers (DeepGEMM where it runs; elsewhere a Triton kernel for the paged decode
logits, backend/indexer_logits.py embedded, and chunked torch for prefill), and a
get_cudagraph_support override on DeepseekV32IndexerMetadataBuilder that reports NEVER while
the fallback is active, so vLLM keeps the indexer out of FULL CUDA graphs (PIECEWISE, where
vllm::sparse_attn_indexer is a splitting op and runs eagerly). The decode top-k call,
torch.ops._C.top_k_per_row_decode(, becomes glmops_top_k_per_row_decode( (one exact
replacement, reversed before re-planning), which the import line binds to a dispatcher: glmops'
Triton topk_per_row wherever the logits fallback runs, vLLM's op elsewhere.

Layouts whose CUDA platform lists SM120 in support_deep_gemm (0.24+, e.g. 0.33 with its
vendored deep_gemm and SM120 paged-MQA page sizes) already run DeepGEMM's logits there: ok.
"""

from __future__ import annotations

import re

from .common import MARKER, TEMPLATE_VERSION, FileChange, PatchError, marker, strip_marked
from .profiles import CUDA, INDEXER_BUILDER, INDEXER_FALLBACK, SPARSE_INDEXER, Profile
from .render import kernel_source, render

NAME = "indexer"
FILES = (SPARSE_INDEXER, INDEXER_BUILDER, INDEXER_FALLBACK)
MODULE = INDEXER_FALLBACK.removesuffix(".py").replace("/", ".")
DEFAULT_MAX_TILE_BYTES = 256 * 2**20
_IMPORT = "from vllm.utils.deep_gemm import fp8_mqa_logits, fp8_paged_mqa_logits\n"
_TOPK_CALL = "        torch.ops._C.top_k_per_row_decode(\n"
_TOPK_ROUTED = "        glmops_top_k_per_row_decode(  # routed by glmops-patch (indexer item)\n"
_CG_BLOCK = re.compile(
    r"^class DeepseekV32IndexerMetadataBuilder\(AttentionMetadataBuilder\):\n"
    r"(    )_cudagraph_support: ClassVar\[AttentionCGSupport\] = \(\n[^\n]*\n    \)\n",
    re.MULTILINE,
)
_SUPPORT_DG = re.compile(
    r"^    def support_deep_gemm\(cls\)[^\n]*\n((?:(?!    \S)[^\n]*\n)*)", re.M
)


def upstream_reason(sources: dict[str, str | None]) -> str | None:
    """Why the layout needs no fallback (naming the symbol that shows it), else None."""
    m = _SUPPORT_DG.search(sources.get(CUDA) or "")
    if m and "is_device_capability_family(120)" in m.group(1):
        return (
            "already upstream: CudaPlatformBase.support_deep_gemm() includes capability "
            "family 120, so DeepGEMM's MQA logits kernels serve the indexer on SM120"
        )
    return None


def render_fallback(profile: Profile, options: dict) -> str:
    """The fallback module, with backend/indexer_logits.py (the paged-logits Triton kernel)
    embedded verbatim."""
    return render(
        "indexer_fallback.py.j2",
        kernel_source=kernel_source("indexer_logits.py"),
        marker=f"{marker(NAME)} profile={profile.name}",
        template_version=TEMPLATE_VERSION,
        profile=profile.name,
        max_tile_bytes=int(options.get("indexer_max_tile_bytes", DEFAULT_MAX_TILE_BYTES)),
    )


def _change(path: str, current: str | None, after: str, reason: str) -> FileChange:
    if after == current:
        return FileChange(path, current, current, NAME, "ok", "already applied")
    return FileChange(path, current, after, NAME, "apply", reason)


def _plan_op(current: str) -> FileChange:
    """The op: the import line that binds glmops' dispatchers, and its decode top-k call
    routed to one of them."""
    pristine = strip_marked(current, NAME).replace(_TOPK_ROUTED, _TOPK_CALL)
    if pristine.count(_IMPORT) != 1:
        raise PatchError(f"{SPARSE_INDEXER}: DeepGEMM logits import not found exactly once")
    if pristine.count(_TOPK_CALL) != 1:
        raise PatchError(
            f"{SPARSE_INDEXER}: the decode top-k call torch.ops._C.top_k_per_row_decode( "
            "not found exactly once"
        )
    line = render("indexer_import.py.j2", module=MODULE, marker=marker(NAME))
    after = pristine.replace(_IMPORT, _IMPORT + line).replace(_TOPK_CALL, _TOPK_ROUTED)
    return _change(SPARSE_INDEXER, current, after, "indexer logits and top-k through glmops")


def _plan_builder(current: str) -> FileChange:
    pristine = strip_marked(current, NAME)
    found = list(_CG_BLOCK.finditer(pristine))
    if len(found) != 1:
        raise PatchError(
            f"{INDEXER_BUILDER}: DeepseekV32IndexerMetadataBuilder._cudagraph_support not found"
        )
    m = found[0]
    snippet = render(
        "indexer_cg_support.py.j2", indent=m.group(1), module=MODULE, marker=marker(NAME)
    )
    after = pristine[: m.end()] + snippet + pristine[m.end() :]
    return _change(INDEXER_BUILDER, current, after, "no FULL CUDA graphs while fallback runs")


def _plan_fallback(profile: Profile, current: str | None, options: dict) -> FileChange:
    if current is not None and MARKER not in current:
        raise PatchError(f"{INDEXER_FALLBACK} exists and is not glmops'")
    after = render_fallback(profile, options)
    return _change(INDEXER_FALLBACK, current, after, "render indexer logits fallback")


def plan(profile: Profile, sources: dict[str, str | None], options: dict) -> list[FileChange]:
    reason = upstream_reason(sources)
    if reason is not None:
        return [
            FileChange(p, sources.get(p), sources.get(p) or "", NAME, "ok", reason) for p in FILES
        ]
    indexer, builder = sources.get(SPARSE_INDEXER), sources.get(INDEXER_BUILDER)
    if indexer is None or builder is None:
        missing = SPARSE_INDEXER if indexer is None else INDEXER_BUILDER
        raise PatchError(f"{missing} missing: the DSA indexer cannot be patched in this layout")
    return [
        _plan_op(indexer),
        _plan_builder(builder),
        _plan_fallback(profile, sources.get(INDEXER_FALLBACK), options),
    ]
