"""Detect which vLLM layout a venv holds by its features (files, symbols, signatures).

A version string says nothing about a nightly's contents, so each profile is a list of
anchors: a file under site-packages and a regex that must match in it. The first profile
whose anchors all match wins; otherwise UnsupportedLayout names the missing anchor of the
closest profile, and nothing is planned or changed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from glmops.gpu.versions import major_minor

REGISTRY = "vllm/v1/attention/backends/registry.py"
CUDA = "vllm/platforms/cuda.py"
BACKEND_BASE = "vllm/v1/attention/backend.py"
FLASHMLA_SPARSE = "vllm/v1/attention/backends/mla/flashmla_sparse.py"
SPARSE_COMMON = "vllm/model_executor/layers/attention/sparse_mla_attention.py"
SPARSE_UTILS = "vllm/v1/attention/backends/mla/sparse_utils.py"
TRITON_DECODE = "vllm/v1/attention/ops/triton_decode_attention.py"
BACKEND_TARGET = "vllm/v1/attention/backends/mla/triton_mla_sparse.py"
IN_TREE_GGUF = "in-tree"
PLUGIN_GGUF = "vllm-gguf-plugin"
# The DSA indexer item (2e): the op that calls DeepGEMM, its metadata builder, our fallback.
SPARSE_INDEXER = "vllm/model_executor/layers/sparse_attn_indexer.py"
INDEXER_BUILDER = "vllm/v1/attention/backends/mla/indexer.py"
INDEXER_FALLBACK = "vllm/model_executor/layers/glmops_dsa_indexer.py"
# Files items read beyond the anchors: the GGUF item's (2d; vLLM's in-tree loader and
# vllm-gguf-plugin's, gguf.READ_FILES) and the indexer fallback (2e).
ITEM_FILES = (
    "vllm/model_executor/model_loader/weight_utils.py",
    "vllm/engine/arg_utils.py",
    "vllm/model_executor/model_loader/gguf_loader.py",
    "vllm/model_executor/model_loader/glmops_glm_dsa_gguf.py",
    "vllm_gguf_plugin/weight_utils.py",
    "vllm_gguf_plugin/weights_adapter/__init__.py",
    "vllm_gguf_plugin/weights_adapter/glmops_glm_dsa.py",
    "vllm_gguf_plugin/plugin.py",
    "vllm_gguf_plugin/weights_adapter/default.py",
    "vllm_gguf_plugin/loader.py",
    INDEXER_FALLBACK,
)


@dataclass(frozen=True)
class Anchor:
    path: str
    symbol: str  # what a human reads in the error
    pattern: str  # regex (MULTILINE) that proves the symbol is there

    def found(self, sources: dict[str, str | None]) -> bool:
        text = sources.get(self.path)
        return text is not None and re.search(self.pattern, text, re.MULTILINE) is not None


@dataclass(frozen=True)
class Profile:
    """One vLLM layout and everything that differs by layout; the only home of layout names.

    The patch set, the templates and serving all read these fields, so a new layout is one
    profile plus its template blocks.
    """

    name: str
    description: str
    anchors: tuple[Anchor, ...]
    mla_priority_lists: int  # `return [...]` lists in the MLA branch of _get_backend_priorities
    #: Template (templates/vllm/) that fills triton_mla_sparse.py.j2's layout blocks.
    backend_template: str
    #: GGUF loader: the in-tree one reads one file; vllm-gguf-plugin loads the split shards.
    gguf_loader: str
    #: Upstream sparse MLA backends this layout has beyond FLASHMLA_SPARSE.
    extra_backends: tuple[str, ...]
    #: Release versions of this layout, [min, max) as (major, minor); max None = open. Only a
    #: fallback for hosts without a patch manifest: detection reads the anchors.
    versions: tuple[tuple[int, int], tuple[int, int] | None]

    @property
    def backends(self) -> tuple[str, ...]:
        """The sparse MLA backends this layout has once patched."""
        return ("FLASHMLA_SPARSE", "TRITON_MLA_SPARSE", *self.extra_backends)

    @property
    def gguf_single_file(self) -> bool:
        return self.gguf_loader == IN_TREE_GGUF

    def covers(self, version: str | None) -> bool:
        parsed = major_minor(version)
        low, high = self.versions
        return parsed is not None and low <= parsed and (high is None or parsed < high)


_COMMON = (
    Anchor(REGISTRY, "class AttentionBackendEnum", r"^class AttentionBackendEnum\("),
    Anchor(REGISTRY, "AttentionBackendEnum.TRITON_MLA", r"^    TRITON_MLA = "),
    Anchor(REGISTRY, "AttentionBackendEnum.FLASHMLA_SPARSE", r"^    FLASHMLA_SPARSE = "),
    Anchor(CUDA, "_get_backend_priorities", r"^def _get_backend_priorities\("),
    Anchor(CUDA, "_get_backend_priorities: if use_mla", r"^    if use_mla:$"),
    Anchor(TRITON_DECODE, "decode_attention_fwd", r"^def decode_attention_fwd\("),
)

PROFILES: tuple[Profile, ...] = (
    Profile(
        name="v0_16",
        description="SparseMLAAttentionImpl.forward_mqa + FlashMLASparseMetadataBuilder "
        "(vLLM 0.16 line)",
        anchors=_COMMON
        + (
            Anchor(
                CUDA,
                "_get_backend_priorities(use_mla, device_capability)",
                r"^def _get_backend_priorities\(\s*use_mla: bool,\s*"
                r"device_capability: DeviceCapability,\s*\)",
            ),
            Anchor(BACKEND_BASE, "class SparseMLAAttentionImpl", r"^class SparseMLAAttentionImpl"),
            Anchor(BACKEND_BASE, "SparseMLAAttentionImpl.forward_mqa", r"^    def forward_mqa\("),
            Anchor(
                FLASHMLA_SPARSE, "class FlashMLASparseBackend", r"^class FlashMLASparseBackend\("
            ),
            Anchor(
                FLASHMLA_SPARSE,
                "class FlashMLASparseMetadataBuilder",
                r"^class FlashMLASparseMetadataBuilder\(",
            ),
            Anchor(
                FLASHMLA_SPARSE,
                "triton_convert_req_index_to_global_index",
                r"^def triton_convert_req_index_to_global_index\(",
            ),
            Anchor(
                SPARSE_INDEXER,
                "from vllm.utils.deep_gemm import fp8_mqa_logits, fp8_paged_mqa_logits",
                r"^from vllm\.utils\.deep_gemm import fp8_mqa_logits, fp8_paged_mqa_logits$",
            ),
            Anchor(
                SPARSE_INDEXER,
                "torch.ops._C.top_k_per_row_decode( (the decode top-k call)",
                # as shipped, or as the indexer item routes it
                r"^        (?:torch\.ops\._C\.|glmops_)top_k_per_row_decode\((?:  # .*)?$",
            ),
            Anchor(
                INDEXER_BUILDER,
                "DeepseekV32IndexerMetadataBuilder._cudagraph_support",
                r"^class DeepseekV32IndexerMetadataBuilder\(AttentionMetadataBuilder\):\n"
                r"    _cudagraph_support: ClassVar\[AttentionCGSupport\] = \(\n[^\n]*\n    \)$",
            ),
        ),
        mla_priority_lists=2,
        backend_template="layouts/v0_16.triton_mla_sparse.py.j2",
        gguf_loader=IN_TREE_GGUF,
        extra_backends=(),
        versions=((0, 16), (0, 24)),
    ),
    Profile(
        name="v0_33",
        description="SparseMLACommonImpl._forward_mqa_kernel (vLLM 0.33 line)",
        anchors=_COMMON
        + (
            Anchor(
                CUDA,
                "_get_backend_priorities(..., num_heads, kv_cache_dtype, ...)",
                r"^def _get_backend_priorities\(\s*use_mla: bool,\s*"
                r"device_capability: DeviceCapability,\s*num_heads:",
            ),
            Anchor(SPARSE_COMMON, "class SparseMLACommonImpl", r"^class SparseMLACommonImpl\("),
            Anchor(
                SPARSE_COMMON,
                "SparseMLACommonImpl._forward_mqa_kernel(q, kv_cache, topk_indices, valid_counts)",
                r"^    def _forward_mqa_kernel\(\s*self,\s*q:[^\n]*\n\s*kv_cache:[^\n]*\n"
                r"\s*topk_indices:[^\n]*\n\s*valid_counts:",
            ),
            Anchor(
                SPARSE_COMMON,
                "class SparseMLACommonMetadataBuilder",
                r"^class SparseMLACommonMetadataBuilder\(",
            ),
            Anchor(
                SPARSE_COMMON, "class SparseMLACommonMetadata", r"^class SparseMLACommonMetadata\("
            ),
            Anchor(SPARSE_UTILS, "flat_kv_row_view", r"^def flat_kv_row_view\("),
        ),
        mla_priority_lists=3,
        backend_template="layouts/v0_33.triton_mla_sparse.py.j2",
        gguf_loader=PLUGIN_GGUF,
        extra_backends=(
            "FLASH_ATTN_MLA_SPARSE",
            "FLASHINFER_MLA_SPARSE_SM90",
            "FLASH_ATTN_MLA_SPARSE_FA4",
            "FLASHINFER_MLA_SPARSE",
        ),
        versions=((0, 24), None),
    ),
)


class UnsupportedLayout(Exception):  # noqa: N818 - public name fixed by the engine's API
    """No profile matches; the message names the missing anchor (file and symbol)."""

    def __init__(self, missing: list[Anchor], closest: str):
        self.missing = missing
        self.closest = closest
        first = missing[0]
        super().__init__(
            f"unsupported vLLM layout: missing {first.symbol} in {first.path} "
            f"(closest profile {closest}; {len(missing)} anchor(s) missing: "
            + "; ".join(f"{a.path}: {a.symbol}" for a in missing)
            + ")"
        )


def anchor_files() -> list[str]:
    """Every file READ must fetch: all profiles' anchors plus the files the items write."""
    paths = {a.path for p in PROFILES for a in p.anchors}
    paths |= {REGISTRY, CUDA, BACKEND_TARGET, *ITEM_FILES}
    return sorted(paths)


ANCHOR_FILES: tuple[str, ...] = tuple(anchor_files())


def detect_profile(sources: dict[str, str | None]) -> Profile:
    """Return the first profile whose anchors all match, else raise UnsupportedLayout."""
    best: tuple[int, Profile, list[Anchor]] | None = None
    for profile in PROFILES:
        missing = [a for a in profile.anchors if not a.found(sources)]
        if not missing:
            return profile
        if best is None or len(missing) < best[0]:
            best = (len(missing), profile, missing)
    assert best is not None
    raise UnsupportedLayout(best[2], best[1].name)


def profile_by_name(name: str) -> Profile:
    """The profile called `name`; KeyError lists the known names."""
    for profile in PROFILES:
        if profile.name == name:
            return profile
    raise KeyError(f"no vLLM layout {name!r} (known: {', '.join(p.name for p in PROFILES)})")


def profile_for_version(version: str | None) -> Profile | None:
    """The layout a vLLM release of this version has, from the profiles' version ranges."""
    return next((p for p in PROFILES if p.covers(version)), None)
