"""The KV cache dtypes the rendered TRITON_MLA_SPARSE declares, through vLLM's own selection on
real PyPI wheels (CPU): after `glmops patch`, vLLM picks it on SM120 for a bf16/fp16 cache and
for --kv-cache-dtype fp8 (both layouts), and for fp8_ds_mla where the profile's cache writer
produces that format (0.16's DeepSeek-V3.2 config turns fp8 into it); 0.33, whose sparse MLA
layer keeps fp8 as e4m3 rows for every backend but FlashMLA-Sparse, gets no fp8_ds_mla."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from glmops.gpu.patchset import ANCHOR_FILES, detect_profile, payload, plan_patchset
from tests.support.patchset import run_helper

pytestmark = pytest.mark.wheels
DS_MLA = {"0.16.0": True, "0.33.0": False}


def _patched(sp: Path, tmp_path: Path) -> None:
    out = run_helper(
        "vllm_patch.py", {"mode": "read", "files": list(ANCHOR_FILES), "site_packages": str(sp)}
    )
    profile = detect_profile(out["files"])
    changes = [c for c in plan_patchset(profile, out["files"]) if c.changed]
    pfile = tmp_path / "payload.json"
    pfile.write_text(json.dumps(payload(profile, changes, str(sp))))
    out = run_helper("vllm_patch.py", {"mode": "apply", "payload_file": str(pfile)})
    assert not out["failed"] and out["changed"], out["msg"]


def test_fp8_caches_select_the_backend(vllm_version, vllm_scratch, cpu_preflight, tmp_path):
    _patched(vllm_scratch, tmp_path)
    kv_dtypes = ["auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_ds_mla", "fp8_e5m2"]
    queries = [
        {"capability": "12.0", "dtype": dtype, "kv_cache_dtype": kv}
        for dtype in ("float16", "bfloat16")
        for kv in kv_dtypes
    ]
    replies = cpu_preflight(vllm_scratch, queries=queries)["results"]
    fp16 = dict(zip(kv_dtypes, replies[: len(kv_dtypes)], strict=True))
    bf16 = dict(zip(kv_dtypes, replies[len(kv_dtypes) :], strict=True))
    # fp16: nothing else serves sparse MLA on SM120, so vLLM picks the backend
    for kv in ("auto", "fp8", "fp8_e4m3"):
        assert fp16[kv]["selected"] == "TRITON_MLA_SPARSE", (kv, fp16[kv])
    # bf16: a candidate wherever the cache dtype is one it declares (0.33 ranks FlashInfer's
    # SM120 kernel first)
    ours = {
        kv: next(c for c in r["candidates"] if c["backend"] == "TRITON_MLA_SPARSE")
        for kv, r in bf16.items()
    }
    for kv in ("auto", "bfloat16", "fp8", "fp8_e4m3"):
        assert ours[kv]["valid"], (kv, ours[kv])
    assert ours["fp8_ds_mla"]["valid"] is DS_MLA[vllm_version], ours["fp8_ds_mla"]
    assert not ours["fp8_e5m2"]["valid"]  # the kernel reads e4m3 only
    assert any("kv" in reason.lower() for reason in ours["fp8_e5m2"]["reasons"])
    if DS_MLA[vllm_version]:
        assert bf16["fp8_ds_mla"]["selected"] == "TRITON_MLA_SPARSE", bf16["fp8_ds_mla"]
