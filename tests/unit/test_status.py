"""glmops.cli.status.status_row and the patch manifest comparison (pure, no host)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from glmops.cli.status import status_row
from glmops.engine.notifications import format_pending, pending_names
from glmops.gpu.patchset.profiles import BACKEND_TARGET
from glmops.gpu.serving import serve_flags
from glmops.gpu.serving.patches import manifest_files, patch_state
from tests.support.manifests import written_manifest
from tests.support.serving_inputs import BASE, facts

VARS = {**BASE, "gguf_shards": "/m", "vllm_profile": "v0_16"}
MERGED = "/m/GLM-5.gguf"


def observed(**over: Any) -> dict[str, Any]:
    exec_start = serve_flags(facts(8, "12.0"), {**VARS, "vllm_model": MERGED}).exec_start
    base = {
        "unit": {"LoadState": "loaded", "ActiveState": "active", "UnitFileState": "enabled"},
        "health": 200,
        "backend": "TRITON_MLA_SPARSE",
        "exec_start": exec_start,
        "model": {
            "shards": 10,
            "shards_ok": True,
            "first_shard": "/m/a-00001-of-00010.gguf",
            "merged_path": MERGED,
            "merged": True,
            "verified": True,
        },
        "last_deploy": {"time": "2026-11-29T10:00:00+00:00"},
    }
    return {**base, **over}


def raw_facts() -> dict[str, Any]:
    return {
        "gpus": [{"index": i, "compute_cap": "12.0"} for i in range(8)],
        "driver_version": "580.95.05",
        "kernel_module": {"flavour": "open"},
        "venv": {"path": "/v", "vllm_version": "0.16.0"},
    }


def test_healthy_host_has_no_drift() -> None:
    row = status_row("gpu1", raw_facts(), observed(), VARS)
    assert row["gpus"] == "8× cc 12.0" and row["driver"] == "580.95.05 (open)"
    assert row["vllm"] == "0.16.0 (profile v0_16)" and row["patches"] == "missing"
    assert row["model"] == "10 shards, merged + verified" and row["health"] == "200"
    assert row["backend"] == "TRITON_MLA_SPARSE (expected)" and row["drift"] == []


def test_the_kernel_the_backend_logged_is_shown() -> None:
    kernel = "8 query heads over fp8 rows on SM120 (...): tl.dot tile 16x32, 4 warps; Triton 3.8.0"
    row = status_row("gpu1", raw_facts(), observed(backend_kernel=kernel), VARS)
    assert row["backend"] == "TRITON_MLA_SPARSE (expected)" and row["kernel"] == kernel
    assert row["drift"] == []


def test_drift_is_named() -> None:
    on_host = observed()["exec_start"].replace("--max-model-len 32768", "--max-model-len 4096")
    row = status_row(
        "gpu1",
        raw_facts(),
        observed(
            exec_start=on_host,
            backend="TRITON_MLA",
            health=None,
            unit={"LoadState": "loaded", "ActiveState": "failed", "UnitFileState": "enabled"},
            # what deploy_status reads from the file the executor writes
            pending_handlers=pending_names(format_pending({"deploy.yml:deploy": ["restart vllm"]})),
            inputs={"patch_manifest_sha256": "old", "vllm_version": "0.16.0"},
        ),
        VARS,
    )
    drift = "\n".join(row["drift"])
    assert "unit flags: host has 4096; inventory wants 32768" in drift
    assert "backend: TRITON_MLA, expected TRITON_MLA_SPARSE" in drift
    assert "unit: failed/enabled" in drift and row["health"] == "down"
    assert "pending handlers from a failed run: restart vllm" in drift
    assert "patches or vLLM changed" in drift


def test_missing_unit_and_no_backend() -> None:
    row = status_row(
        "gpu1",
        raw_facts(),
        observed(
            unit={"LoadState": "not-found"},
            backend=None,
            backend_failed="{X: [y]}",
            exec_start=None,
        ),
        VARS,
    )
    assert row["unit"] == "not installed" and row["backend"].startswith("none")
    assert any("reasons {X: [y]}" in d for d in row["drift"])


def test_patch_state(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    manifest = written_manifest(site, "v0_16")
    wanted = manifest_files(manifest, str(site))
    [(path, sha)] = wanted.items()
    assert (
        path == str(site / BACKEND_TARGET)
        and sha == hashlib.sha256(Path(path).read_bytes()).hexdigest()
    )
    assert patch_state(manifest, wanted, {path: sha})[0] == "applied"
    state, details = patch_state(manifest, wanted, {path: "c" * 64})
    assert state == "drifted" and details == [
        f"{path}: sha256 {'c' * 12}, manifest says {sha[:12]}"
    ]
    assert patch_state(manifest, wanted, {})[1] == [f"{path}: absent"]
    assert patch_state(None, {}, {})[0] == "missing"
