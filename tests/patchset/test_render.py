"""Fast checks (no wheels): the rendered backend compiles for every profile and kernel mode,
and embeds backend/sparse_mla.py verbatim (one home for the kernel source)."""

from __future__ import annotations

import pytest

from glmops.patchset import PROFILES, TEMPLATE_VERSION
from glmops.patchset.backend import render_backend
from glmops.patchset.render import KERNEL_SOURCE, kernel_source


@pytest.mark.parametrize("kernel", ["sparse_mla", "dense_reuse"])
@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.name)
def test_backend_renders_and_compiles(profile, kernel):
    if kernel == "sparse_mla" and not KERNEL_SOURCE.is_file():
        pytest.skip("backend/sparse_mla.py not written yet")
    text = render_backend(profile, {"kernel": kernel})
    compile(text, "triton_mla_sparse.py", "exec")
    assert f"template {TEMPLATE_VERSION}, profile {profile.name}, kernel {kernel}" in text
    assert 'def get_name() -> str:\n        return "TRITON_MLA_SPARSE"' in text
    uses_vllm_decode = "from vllm.v1.attention.ops.triton_decode_attention import" in text
    assert uses_vllm_decode == (kernel == "dense_reuse")


def test_kernel_embedded_verbatim():
    if not KERNEL_SOURCE.is_file():
        pytest.skip("backend/sparse_mla.py not written yet")
    text = render_backend(PROFILES[0], {"kernel": "sparse_mla"})
    assert kernel_source() in text
    assert text.count("from __future__ import annotations") == 1
    assert "def sparse_mla_decode(" in text


def test_unknown_kernel_refused():
    with pytest.raises(ValueError, match="kernel must be one of"):
        render_backend(PROFILES[0], {"kernel": "flash"})
