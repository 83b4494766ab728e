"""Fast checks (no wheels): the rendered backend compiles for every profile and kernel mode,
and embeds backend/sparse_mla/ verbatim (one home for the kernel source); the indexer
fallback embeds backend/indexer_logits.py the same way."""

from __future__ import annotations

import pytest

from glmops.gpu.patchset import PROFILES, TEMPLATE_VERSION
from glmops.gpu.patchset.backend import render_backend
from glmops.gpu.patchset.indexer import render_fallback
from glmops.gpu.patchset.profiles import profile_by_name
from glmops.gpu.patchset.render import kernel_source


@pytest.mark.parametrize("kernel", ["sparse_mla", "dense_reuse"])
@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.name)
def test_backend_renders_and_compiles(profile, kernel):
    text = render_backend(profile, {"kernel": kernel})
    compile(text, "triton_mla_sparse.py", "exec")
    assert f"template {TEMPLATE_VERSION}, profile {profile.name}, kernel {kernel}" in text
    assert 'def get_name() -> str:\n        return "TRITON_MLA_SPARSE"' in text
    uses_vllm_decode = "from vllm.v1.attention.ops.triton_decode_attention import" in text
    assert uses_vllm_decode == (kernel == "dense_reuse")


def test_kernel_embedded_verbatim():
    text = render_backend(PROFILES[0], {"kernel": "sparse_mla"})
    assert kernel_source() in text
    assert text.count("from __future__ import annotations") == 1
    assert "def sparse_mla_decode(" in text


def test_indexer_kernel_embedded_verbatim():
    text = render_fallback(profile_by_name("v0_16"), {})
    compile(text, "glmops_dsa_indexer.py", "exec")
    assert kernel_source("indexer_logits.py") in text
    assert text.count("from __future__ import annotations") == 1
    assert "def paged_mqa_logits(" in text and "def paged_mqa_logits_torch(" in text


def test_missing_kernel_named():
    with pytest.raises(FileNotFoundError, match="no_such_kernel.py"):
        kernel_source("no_such_kernel.py")


def test_unknown_kernel_refused():
    with pytest.raises(ValueError, match="kernel must be one of"):
        render_backend(PROFILES[0], {"kernel": "flash"})
