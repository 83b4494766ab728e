"""The model phase's pieces that need no host: source declaration, host helper, key lines."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from glmops.engine.context import run_helper_here
from glmops.errors import InputError
from glmops.model.access import RunKey, authorize_script, revoke_script
from glmops.model.manifest import FileEntry, Manifest
from glmops.model.progress import progress_line
from glmops.model.source import model_dir, parse_source


def test_source_declaration_and_its_errors() -> None:
    source = parse_source(
        {
            "repo": "unsloth/GLM-5-GGUF",
            "include": "UD-Q4_K_XL/*",
            "config": {"repo": "zai-org/GLM-5"},
        },
        "group_vars/gpu.yml",
    )
    weights, config = source.repos
    assert (weights.revision, weights.include, weights.pinned) == ("main", ("UD-Q4_K_XL/*",), False)
    assert config.part == "config" and "config.json" in config.include
    pinned = parse_source({"repo": "a/b", "revision": "a" * 40, "include": ["*"]}, "x")
    assert pinned.repos[0].pinned and pinned.key != source.key
    for bad, words in (
        ({"repo": "no-slash", "include": ["*"]}, "org/name"),
        ({"repo": "a/b"}, "include"),
        ({"repo": "a/b", "include": ["*"], "revison": "x"}, "unknown key(s) revison"),
        ({"repo": "a/b", "include": ["*"], "revision": "--upload-pack=x"}, "revision"),
    ):
        with pytest.raises(InputError, match="group_vars/gpu.yml") as error:
            parse_source(bad, "group_vars/gpu.yml")
        assert words in str(error.value)
    for bad in ("models/x", '/srv/x" ,no-restrict', "/srv/a b"):  # it lands in authorized_keys
        with pytest.raises(InputError, match="absolute"):
            model_dir({"model_dir": bad})


def run_helper(args: dict) -> dict:
    return run_helper_here("model_files", args)


def manifest_for(files: dict[str, bytes]) -> Manifest:
    entries = tuple(
        FileEntry(p, len(d), hashlib.sha256(d).hexdigest(), "lfs") for p, d in sorted(files.items())
    )
    return Manifest(({"part": "weights", "repo": "a/b", "commit": "c" * 40},), entries)


def test_host_helper_verifies_against_the_manifest_and_deletes_a_bad_file(tmp_path: Path) -> None:
    files = {
        "weights/a-00001-of-00002.gguf": b"x" * 5000,
        "weights/a-00002-of-00002.gguf": b"y" * 7,
    }
    manifest = manifest_for(files)
    args = {
        "mode": "verify",
        "model_dir": str(tmp_path),
        "manifest": json.loads(manifest.to_json()),
        "digest": manifest.digest,
    }
    assert run_helper(args)["missing"] == sorted(files)
    for path, data in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_bytes(data)
    first = run_helper(args)
    assert first["complete"] and first["changed"] and first["hashed_bytes"] == 5007
    state = json.loads((tmp_path / ".glmops-model-state.json").read_text())
    assert state["digest"] == manifest.digest
    again = run_helper(args)  # trusted by size and mtime: nothing hashed, nothing written
    assert again["complete"] and not again["changed"] and again["hashed_bytes"] == 0

    shard = tmp_path / "weights/a-00001-of-00002.gguf"
    stat = shard.stat()
    shard.write_bytes(b"x" * 4999 + b"z")
    os.utime(shard, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # even with the old mtime
    assert run_helper(args)["complete"]  # the quick check cannot see it...
    full = run_helper({**args, "full": True})  # ...a full verification does
    assert full["bad"] == ["weights/a-00001-of-00002.gguf"] and not shard.exists()
    shard.write_bytes(b"x" * 4999 + b"z")
    checked = run_helper({**args, "full": True, "check": True})
    assert checked["bad"] and shard.exists()  # check mode deletes nothing


def test_host_helper_preflight_counts_missing_files_merge_and_margin(tmp_path: Path) -> None:
    (tmp_path / "m" / "weights").mkdir(parents=True)
    (tmp_path / "m" / "weights" / "have.gguf").write_bytes(b"h" * 10)
    files = [["weights/have.gguf", 10], ["weights/missing.gguf", 1000]]
    reply = run_helper(
        {
            "mode": "preflight",
            "model_dir": str(tmp_path / "m" / "not" / "yet"),
            "files": files,
            "extra_bytes": 500,
            "margin_bytes": 7,
        }
    )
    assert reply["path"] == str(tmp_path / "m")  # the nearest existing parent
    assert reply["needed"] == 10 + 1000 + 500 + 7  # another model_dir: both files count
    reply = run_helper(
        {"mode": "preflight", "model_dir": str(tmp_path / "m"), "files": files, "margin_bytes": 7}
    )
    assert reply["needed"] == 1007 and reply["ok"] is True
    huge = run_helper(
        {"mode": "preflight", "model_dir": str(tmp_path / "m"), "files": [["x", 1 << 62]]}
    )
    assert huge["ok"] is False and huge["free"] < huge["needed"]


def test_run_key_is_authorized_read_only_and_removed(tmp_path: Path) -> None:
    key = RunKey.generate()
    line = key.authorized_line("/srv/models/GLM-5", ["10.0.0.1", "10.0.0.2"])
    assert line.startswith(
        'command="rrsync -ro /srv/models/GLM-5",restrict,from="10.0.0.1,10.0.0.2"'
    )
    assert line.endswith(key.comment) and "PRIVATE" not in line and key.run_id not in repr(key)[:9]
    assert "from=" not in key.authorized_line("/m", ["gpu1.example.com"])
    ssh = tmp_path / ".ssh"
    ssh.mkdir()
    (ssh / "authorized_keys").write_text("ssh-ed25519 AAAA ops\n")
    env = {**os.environ, "HOME": str(tmp_path)}
    for script in (authorize_script(line), authorize_script(line)):
        subprocess.run(["sh", "-c", script], env=env, check=True)
    text = (ssh / "authorized_keys").read_text()
    assert text == f"ssh-ed25519 AAAA ops\n{line}\n"  # once, however often it runs
    assert oct((ssh / "authorized_keys").stat().st_mode)[-3:] == "600"
    subprocess.run(["sh", "-c", revoke_script()], env=env, check=True)
    assert (ssh / "authorized_keys").read_text() == "ssh-ed25519 AAAA ops\n"


def test_progress_line_says_bytes_rate_and_time_left() -> None:
    line = progress_line("fetch", 100_000_000_000, 402_000_000_000, 250_000_000)
    assert line == "fetch: 100.0 GB / 402.0 GB (25%), 250.0 MB/s, ETA 20 min 8 s"


def test_meter_reports_this_runs_rate_while_a_transfer_runs() -> None:
    import time

    from glmops.model.progress import Meter

    done = [1000]  # bytes already there when the run starts (a resumed transfer)
    lines: list[str] = []
    with Meter("fetch", 10_000, lambda: done[0], lines.append, interval=0.05):
        for _ in range(6):
            time.sleep(0.05)
            done[0] += 1000
    assert lines, "no progress line while the transfer ran"
    assert all(line.startswith("fetch: ") and "/s, ETA" in line for line in lines)
    assert "10.0 KB" in lines[-1]
