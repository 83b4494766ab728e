"""gguf_split host helper: validate, merge (byte-identical to a one-file write), verify, skip."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

gguf = pytest.importorskip("gguf", reason="gguf is in the test extras (pip install -e .[test])")
np = pytest.importorskip("numpy")

from glmops.engine.context import helper_command, helper_stdin  # noqa: E402
from glmops.hosthelpers import gguf_split  # noqa: E402
from tests.support.gguf_models import glm_dsa_tensors as _tensors  # noqa: E402
from tests.support.gguf_models import split_set, write_model  # noqa: E402

SCRIPT = Path(gguf_split.__file__)


@pytest.fixture(scope="module")
def ref(tmp_path_factory: pytest.TempPathFactory) -> Path:
    p = tmp_path_factory.mktemp("ref") / "model.gguf"
    write_model(p)
    return p


def run_cli(args: dict) -> tuple[dict, str]:
    """The helper as the engine runs it: the one launcher, everything on stdin."""
    p = subprocess.run(
        ["sh", "-c", helper_command("gguf_split", sys.executable)],
        input=helper_stdin("gguf_split", args),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    lines = p.stdout.strip().splitlines()
    assert len(lines) == 1, p.stdout
    return json.loads(lines[0]), p.stderr


@pytest.mark.parametrize(
    "split",
    [
        {"split_max_tensors": 12},
        {"split_max_tensors": 7},
        {"split_max_tensors": 1, "small_first_shard": True},
    ],
    ids=["2-shards", "3-shards", "metadata-only-first"],
)
def test_merge_is_byte_identical_to_one_file_write(tmp_path: Path, ref: Path, split) -> None:
    first = split_set(tmp_path / "in", **split)
    out = tmp_path / "merged.gguf"
    res, err = run_cli({"mode": "merge", "path": str(first), "output": str(out)})
    assert not res["failed"] and res["changed"], res
    assert out.read_bytes() == ref.read_bytes()
    events = [json.loads(x)["event"] for x in err.splitlines()]
    assert events[0] == "start" and events[-1] == "progress"
    assert json.loads((tmp_path / "merged.gguf.glmops.json").read_text())["output"]["size"] == (
        out.stat().st_size
    )
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".part")]


def test_keep_split_keys_matches_llama_cpp(tmp_path: Path, ref: Path) -> None:
    first = split_set(tmp_path / "in", split_max_tensors=7)
    out = tmp_path / "merged.gguf"
    res = gguf_split.merge({"path": str(first), "output": str(out), "keep_split_keys": True})
    assert not res["failed"], res
    r = gguf.GGUFReader(str(out))
    assert r.fields["split.count"].contents() == 0
    assert r.fields["split.no"].contents() == 0
    assert r.fields["split.tensors.count"].contents() == len(_tensors())
    want = gguf.GGUFReader(str(ref))
    assert [t.name for t in r.tensors] == [t.name for t in want.tensors]
    assert all((a.data == b.data).all() for a, b in zip(r.tensors, want.tensors, strict=True))


def test_skip_when_merged_file_is_current_then_remerge_on_change(tmp_path: Path) -> None:
    first = split_set(tmp_path / "in", split_max_tensors=7)
    args = {"path": str(first), "output": str(tmp_path / "m.gguf")}
    assert gguf_split.merge(args)["changed"]
    t0 = time.monotonic()
    res = gguf_split.merge(args)
    assert res["skipped"] and not res["changed"] and not res["failed"], res
    assert time.monotonic() - t0 < 2.0
    shard2 = sorted(first.parent.glob("model-*.gguf"))[1]
    os.utime(shard2, ns=(shard2.stat().st_atime_ns, shard2.stat().st_mtime_ns + 10**9))
    assert gguf_split.merge(args)["changed"]
    (tmp_path / "m.gguf").write_bytes(b"GGUF")  # damaged output: fingerprint no longer matches
    assert gguf_split.merge(args)["changed"]


def test_check_mode_writes_nothing(tmp_path: Path) -> None:
    first = split_set(tmp_path / "in", split_max_tensors=7)
    out = tmp_path / "out"
    out.mkdir()
    res = gguf_split.merge({"path": str(first), "output": str(out / "m.gguf"), "check": True})
    assert res["changed"] and not res["failed"] and "would merge" in res["msg"]
    assert list(out.iterdir()) == []


def test_free_space_is_checked_first(tmp_path: Path) -> None:
    first = split_set(tmp_path / "in", split_max_tensors=7)
    res = gguf_split.merge(
        {"path": str(first), "output": str(tmp_path / "m.gguf"), "free_margin_bytes": 1 << 62}
    )
    assert res["failed"] and "not enough free space" in res["msg"]
    assert not (tmp_path / "m.gguf").exists()


def test_validate_ok_from_directory_and_first_shard(tmp_path: Path) -> None:
    first = split_set(tmp_path / "in", split_max_tensors=7)
    for path in (first, first.parent):
        res, _ = run_cli({"mode": "validate", "path": str(path)})
        assert not res["failed"], res
        assert res["tensor_count"] == len(_tensors()) and len(res["shards"]) == 3
        assert res["architecture"] == "glm-dsa" and res["alignment"] == 32


def test_validate_missing_shard_names_it(tmp_path: Path) -> None:
    first = split_set(tmp_path / "in", split_max_tensors=7)
    (first.parent / "model-00002-of-00003.gguf").unlink()
    res = gguf_split.validate({"path": str(first)})
    assert res["failed"] and "model-00002-of-00003.gguf" in res["msg"]


def test_validate_mismatched_counts(tmp_path: Path) -> None:
    first = split_set(tmp_path / "in", split_max_tensors=7)
    shard2 = first.parent / "model-00002-of-00003.gguf"
    r = gguf.GGUFReader(str(shard2), "r+")  # edit the value in place, like gguf-set-metadata
    f = r.fields["split.tensors.count"]
    f.parts[f.data[0]][0] = 99
    del r
    res = gguf_split.validate({"path": str(first)})
    assert res["failed"]
    assert any("model-00002-of-00003.gguf: split.tensors.count = 99" in e for e in res["errors"])


def test_validate_wrong_shard_in_slot(tmp_path: Path) -> None:
    first = split_set(tmp_path / "in", split_max_tensors=7)
    d = first.parent
    os.replace(d / "model-00003-of-00003.gguf", d / "tmp")
    os.replace(d / "model-00002-of-00003.gguf", d / "model-00003-of-00003.gguf")
    os.replace(d / "tmp", d / "model-00002-of-00003.gguf")
    errs = gguf_split.validate({"path": str(first)})["errors"]
    assert "model-00002-of-00003.gguf: split.no = 2, expected 1" in errs


@pytest.mark.parametrize(
    "name, why",
    [
        ("model-00002-of-00003.gguf", "not the first shard"),
        ("model-1-of-3.gguf", "name is not"),
        ("model.gguf", "name is not"),
    ],
)
def test_validate_bad_names(tmp_path: Path, name: str, why: str) -> None:
    (tmp_path / name).write_bytes(b"GGUF")
    res, _ = run_cli({"mode": "validate", "path": str(tmp_path / name)})
    assert res["failed"] and why in res["msg"] and name in res["msg"]


def test_lfs_pointer_and_truncation_are_named(tmp_path: Path) -> None:
    p = tmp_path / "x-00001-of-00001.gguf"
    p.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:00\nsize 1\n")
    assert "Git LFS" in gguf_split.validate({"path": str(p)})["msg"]
    first = split_set(tmp_path / "in", split_max_tensors=7)
    last = first.parent / "model-00003-of-00003.gguf"
    last.write_bytes(last.read_bytes()[:-100])
    msg = " ".join(gguf_split.validate({"path": str(first)})["errors"])
    assert "model-00003-of-00003.gguf: truncated" in msg


def test_verify_structure_and_split_invariant_hash(tmp_path: Path, ref: Path) -> None:
    first = split_set(tmp_path / "in", split_max_tensors=7)
    out = tmp_path / "m.gguf"
    gguf_split.merge({"path": str(first), "output": str(out)})
    a = gguf_split.verify({"path": str(out), "sha256": True, "expect_tensor_count": 20})
    b = gguf_split.verify({"path": str(first), "sha256": True})
    assert not a["failed"] and not b["failed"], (a, b)
    assert a["content_sha256"] == b["content_sha256"]
    assert a["data_bytes"] == sum(arr.nbytes for _, arr, _ in _tensors())
    out.write_bytes(out.read_bytes()[:-64])
    assert gguf_split.verify({"path": str(out)})["failed"]


def test_header_reader_reads_every_kv_type(ref: Path) -> None:
    h = gguf_split.Header(str(ref))
    want = gguf.GGUFReader(str(ref))
    assert list(h.kv) == [k for k in want.fields if not k.startswith("GGUF.")]
    assert h.get("test.i32") == -7 and h.get("test.u64") == 1 << 40 and h.get("test.bool")
    assert h.get("tokenizer.ggml.tokens") == ("array", 8, 1000)
    assert [(t[0], t[3], t[4]) for t in h.tensors] == [
        (t.name, t.data_offset - want.data_offset, t.n_bytes) for t in want.tensors
    ]


def test_shards_removed_only_after_a_verified_merge_and_the_model_files_accept_it(
    tmp_path: Path,
) -> None:
    """The seam between gguf_split (merge, remove_shards, merged_only) and model_files (verify
    against the manifest), each run as a host runs it, on one real split set."""
    from glmops.engine.context import run_helper_here
    from tests.support.model_state import manifest_of, verify_args

    root = tmp_path / "m"
    first = split_set(root / "weights", split_max_tensors=7)
    shards = sorted(first.parent.glob("model-*-of-*.gguf"))
    manifest = manifest_of(root, shards)
    entries = manifest.files
    check_files = verify_args(root, manifest)
    assert run_helper_here("model_files", check_files)["complete"]
    out = str(root / "weights" / "model.gguf")
    args = {"path": str(first), "output": out}
    refused = gguf_split.remove_shards(args)  # no merge yet: nothing is removed
    assert refused["failed"] and "not the current merge" in refused["msg"]
    assert gguf_split.merge(args)["changed"]
    assert gguf_split.remove_shards({**args, "check": True})["changed"]
    assert all(p.exists() for p in shards)  # check mode removes nothing
    removed = run_helper_here("gguf_split", {**args, "mode": "remove_shards"})
    assert removed["changed"] and not any(p.exists() for p in shards), removed
    sidecar = json.loads(Path(out + gguf_split.SIDECAR_SUFFIX).read_text())
    assert sidecar["output"]["sha256"] == gguf_split.file_sha256(out)
    assert not gguf_split.remove_shards(args)["changed"]  # a re-run converges
    kept = run_helper_here("gguf_split", {"mode": "merged_only", "path": str(first)})
    assert not kept["failed"] and kept["output"] == out and kept["hashed_bytes"] == 0
    held = run_helper_here("model_files", check_files)
    assert held["complete"] and len(held["merged"]) == len(shards), held

    data = bytearray(Path(out).read_bytes())  # one flipped byte in the tensor data
    data[-1] ^= 0xFF
    Path(out).write_bytes(bytes(data))
    bad = run_helper_here("gguf_split", {"mode": "merged_only", "path": str(first)})
    assert bad["failed"] and "changed since its verified merge" in bad["msg"]
    seen = run_helper_here("model_files", {**check_files, "check": True})
    assert not seen["complete"] and os.path.exists(out)  # check mode deletes nothing
    dropped = run_helper_here("model_files", check_files)
    assert sorted(dropped["missing"]) == [e.path for e in entries], dropped
    assert "no longer matches" in dropped["msg"] and not os.path.exists(out)


MODEL_PLAY = """
- hosts: all
  gather_facts: false
  tasks:
    - name: model
      gguf_model: {shards: "{{ root }}/m", single_file: true, remove_shards: true}
"""


def test_gguf_model_removes_the_shards_once_and_then_serves_the_merge_alone(
    run_playbook, local_inventory: Path, tmp_path: Path
) -> None:
    """The module through the real executor on a local connection: check mode removes nothing,
    a run merges and removes, a re-run changes nothing, a corrupted merge is refused."""
    first = split_set(tmp_path / "root" / "m", split_max_tensors=7)
    shards = sorted(first.parent.glob("model-*-of-*.gguf"))
    check = run_playbook(MODEL_PLAY, local_inventory, check=True, diff=True)
    assert check.exit_code == 3 and all(p.exists() for p in shards)
    [planned] = [e for e in check.results() if e["task"] == "model"]
    assert "then remove the shards once the merged file's sha256 is verified" in planned["diff"]
    real = run_playbook(MODEL_PLAY, local_inventory)
    assert real.exit_code == 0, real.results()
    [done] = [e for e in real.results() if e["task"] == "model"]
    assert f"removed {len(shards)} shards after verifying model.gguf" in done["msg"], done
    assert not any(p.exists() for p in shards)
    again = run_playbook(MODEL_PLAY, local_inventory)
    assert again.exit_code == 0 and again.status("model") == "ok", again.results()
    [kept] = [e for e in again.results() if e["task"] == "model"]
    assert "stands for its 3 removed shards" in kept["msg"], kept
    merged = first.parent / "model.gguf"
    data = bytearray(merged.read_bytes())
    data[len(data) // 2] ^= 0x01
    merged.write_bytes(bytes(data))
    refused = run_playbook(MODEL_PLAY, local_inventory)
    assert refused.exit_code == 2
    [bad] = [e for e in refused.results() if e["task"] == "model"]
    assert "changed since its verified merge" in bad["msg"] and "glmops model" in bad["msg"]
