"""Issue 3 item 5 on real PyPI wheels (CPU): read -> detect -> plan -> apply -> compile ->
vLLM's own selection -> re-plan ok -> restore byte-identical; unsupported layouts refused."""

from __future__ import annotations

import json
import py_compile
import shutil
from pathlib import Path

import pytest

from glmops.gpu.patchset import (
    ANCHOR_FILES,
    UnsupportedLayout,
    detect_profile,
    payload,
    plan_patchset,
)
from tests.support import vllm_wheels
from tests.support.patchset import UNSUPPORTED, run_helper, tree_hashes

pytestmark = pytest.mark.wheels
EXPECTED_PROFILE = {"0.16.0": "v0_16", "0.33.0": "v0_33"}
# gguf: the in-tree loader's 4 files, then vllm-gguf-plugin's 4 (not installed in these trees;
# test_gguf.py patches 0.33 with it); 0.33 has no in-tree GGUF loader.
GGUF_STATUS = {"0.16.0": ["apply"] * 4 + ["ok"] * 4, "0.33.0": ["ok"] * 8}
INDEXER_STATUS = {"0.16.0": "apply", "0.33.0": "ok"}  # 0.33: DeepGEMM supports SM120


def read(sp: Path) -> dict[str, str | None]:
    out = run_helper(
        "vllm_patch.py", {"mode": "read", "files": list(ANCHOR_FILES), "site_packages": str(sp)}
    )
    assert not out["failed"], out["msg"]
    return out["files"]


def apply(sp: Path, tmp_path: Path, changes, profile, check: bool = False) -> dict:
    pfile = tmp_path / "payload.json"
    pfile.write_text(json.dumps(payload(profile, changes, str(sp))))
    return run_helper(
        "vllm_patch.py", {"mode": "apply", "payload_file": str(pfile), "check": check}
    )


def test_patch_cycle(vllm_version, vllm_tree, vllm_scratch, cpu_preflight, tmp_path):
    sp = vllm_scratch
    root = sp.parent
    pristine = tree_hashes(root)

    sources = read(sp)
    profile = detect_profile(sources)
    assert profile.name == EXPECTED_PROFILE[vllm_version]
    changes = plan_patchset(profile, sources)
    assert [(c.item, c.status) for c in changes] == [
        ("backend", "apply"),
        ("registry", "apply"),
        ("priorities", "apply"),
        *[("gguf", status) for status in GGUF_STATUS[vllm_version]],
        *[("indexer", INDEXER_STATUS[vllm_version])] * 3,
    ]
    changes = [c for c in changes if c.changed]
    assert all(c.diff().startswith(("--- a/", "--- /dev/null")) for c in changes)

    # check mode changes nothing
    out = apply(sp, tmp_path, changes, profile, check=True)
    assert not out["failed"] and out["changed"]
    assert tree_hashes(root) == pristine

    out = apply(sp, tmp_path, changes, profile)
    assert not out["failed"] and out["changed"], out["msg"]
    for c in changes:
        py_compile.compile(str(sp / c.path), doraise=True, cfile=str(tmp_path / "x.pyc"))

    # vLLM's own selection code, unpatched tree vs patched tree (one process per tree)
    queries = [
        {"capability": "12.0", "dtype": "float16"},
        {"capability": "9.0", "dtype": "bfloat16"},
        {"capability": "10.0", "dtype": "bfloat16"},
    ]
    native = cpu_preflight(vllm_tree, queries=queries)["results"]
    patched = cpu_preflight(sp, queries=queries)["results"]

    assert native[0]["selected"] is None
    assert "No valid attention backend found" in native[0]["error"]
    assert patched[0]["selected"] == "TRITON_MLA_SPARSE", patched[0]
    assert patched[0]["selected_path"].endswith("triton_mla_sparse.TritonMLASparseBackend")
    for before, after in zip(native[1:], patched[1:], strict=True):
        assert before["selected"] not in (None, "TRITON_MLA_SPARSE"), before
        assert after["selected"] == before["selected"], after
        ours = next(c for c in after["candidates"] if c["backend"] == "TRITON_MLA_SPARSE")
        assert ours["valid"]
        assert ours["priority"] == max(c["priority"] for c in after["candidates"])

    # second round: plan says ok, apply is a no-op
    again = plan_patchset(profile, read(sp))
    assert {c.status for c in again} == {"ok"}
    assert {c.reason for c in again if c.path in {ch.path for ch in changes}} == {"already applied"}
    patched_hashes = tree_hashes(root)
    out = apply(sp, tmp_path, again, profile)
    assert not out["failed"] and not out["changed"]
    assert tree_hashes(root) == patched_hashes

    manifest = run_helper("vllm_patch.py", {"mode": "manifest", "site_packages": str(sp)})
    m = manifest["manifest"]
    assert m["profile"] == profile.name and set(m["files"]) == {c.path for c in changes}
    assert m["files"]["vllm/v1/attention/backends/mla/triton_mla_sparse.py"]["created"]

    out = run_helper("vllm_patch.py", {"mode": "restore", "site_packages": str(sp)})
    assert not out["failed"] and out["changed"], out["msg"]
    assert tree_hashes(root) == pristine  # byte-identical, backups and manifest gone


def test_stale_plan_refused(vllm_scratch, tmp_path):
    """A file edited between READ and APPLY makes the whole apply refuse, nothing written."""
    sp = vllm_scratch
    sources = read(sp)
    profile = detect_profile(sources)
    changes = plan_patchset(profile, sources)
    cuda = sp / "vllm/platforms/cuda.py"
    cuda.write_text(cuda.read_text() + "\n# local edit\n")
    before = tree_hashes(sp.parent)
    out = apply(sp, tmp_path, changes, profile)
    assert out["failed"] and not out["changed"] and "changed since it was read" in out["msg"]
    assert tree_hashes(sp.parent) == before


def test_other_release_refused(tmp_path):
    sp = vllm_wheels.scratch_copy(UNSUPPORTED, tmp_path / "venv")
    before = tree_hashes(sp.parent)
    with pytest.raises(UnsupportedLayout) as err:
        detect_profile(read(sp))
    assert "missing" in str(err.value) and "vllm/" in str(err.value)
    assert tree_hashes(sp.parent) == before


@pytest.mark.parametrize(
    "version,path,symbol",
    [
        (
            "0.16.0",
            "vllm/v1/attention/backends/mla/flashmla_sparse.py",
            "triton_convert_req_index_to_global_index",
        ),
        (
            "0.33.0",
            "vllm/model_executor/layers/attention/sparse_mla_attention.py",
            "_forward_mqa_kernel",
        ),
    ],
)
def test_removed_anchor_named(version, path, symbol, tmp_path):
    sp = tmp_path / "site-packages"
    shutil.copytree(vllm_wheels.fetch_vllm_source(version) / "vllm", sp / "vllm")
    target = sp / path
    target.write_text(target.read_text().replace(f"def {symbol}(", f"def {symbol}_gone("))
    before = tree_hashes(tmp_path)
    with pytest.raises(UnsupportedLayout) as err:
        detect_profile(read(sp))
    assert path in str(err.value) and symbol in str(err.value)
    assert tree_hashes(tmp_path) == before


def test_reinstall_then_patch_again(vllm_version, vllm_tree, vllm_scratch, tmp_path):
    """pip reinstall puts pristine files back but leaves the state dir: patch applies again,
    backups stay valid, and unpatch still restores byte-identical files."""
    sp = vllm_scratch
    pristine = tree_hashes(sp)
    sources = read(sp)
    profile = detect_profile(sources)
    assert apply(sp, tmp_path, plan_patchset(profile, sources), profile)["changed"]
    for rel in ("vllm/platforms/cuda.py", "vllm/v1/attention/backends/registry.py"):
        shutil.copyfile(vllm_tree / rel, sp / rel)  # the "reinstall"
    again = plan_patchset(profile, read(sp))
    assert {c.item for c in again if c.changed} == {"registry", "priorities"}
    out = apply(sp, tmp_path, again, profile)
    assert out["changed"] and not out["failed"], out["msg"]
    assert {c.status for c in plan_patchset(profile, read(sp))} == {"ok"}
    out = run_helper("vllm_patch.py", {"mode": "restore", "site_packages": str(sp)})
    assert not out["failed"] and not out["skipped"]
    assert tree_hashes(sp) == pristine
