"""The rolling redeploy's preflight (playbooks/fleet-preflight.yml) on local hosts: the model
files against the manifest the controller holds, checked without hashing; one host that does
not match stops the roll before any deploy, naming the host and the file."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest

from glmops.engine.context import run_helper_here
from glmops.errors import ExitCode
from glmops.fleet.roll import FleetDeploy, RunOutcome
from glmops.model.fetch import ModelCache
from glmops.model.manifest import (
    FileEntry,
    Manifest,
    load_manifest,
    sha256_file,
    write_atomic,
)
from glmops.model.source import parse_source
from glmops.run import RunRequest, fleet_runner, load_inventory

SOURCE = {"repo": "org/tiny-GGUF", "include": ["*.gguf"], "config": {"repo": "org/tiny"}}
FILES = {
    "weights/tiny-00001-of-00002.gguf": b"GGUF" + bytes(range(256)) * 40,
    "weights/tiny-00002-of-00002.gguf": b"GGUF" + bytes(range(255, -1, -1)) * 30,
    "config/config.json": b'{"model_type": "llama"}\n',
}


def host_files(root: Path) -> None:
    for rel, data in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)


@pytest.fixture
def fleet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Two local replicas whose model files `glmops model`'s helper verified against the
    manifest the controller's cache holds (written as the model phase writes it)."""
    monkeypatch.setenv("GLMOPS_RUN_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("GLMOPS_MODEL_CACHE", str(tmp_path / "cache"))
    origin = tmp_path / "origin"
    host_files(origin)
    entries = [FileEntry(rel, len(d), sha256_file(origin / rel), "lfs") for rel, d in FILES.items()]
    sources = tuple(
        {"part": s.part, "repo": s.repo, "revision": "main", "commit": "c" * 40,
         "include": list(s.include)}
        for s in parse_source(SOURCE, "test").repos
    )  # fmt: skip
    manifest = Manifest(sources, tuple(sorted(entries, key=lambda f: f.path)))
    cache = ModelCache(tmp_path / "cache", parse_source(SOURCE, "test"))
    write_atomic(cache.manifest_path, manifest.to_json())
    for name in ("r1", "r2"):
        root = tmp_path / name
        host_files(root)
        doc = json.loads(manifest.to_json())
        args = {"mode": "verify", "model_dir": str(root), "manifest": doc, "full": True}
        reply = run_helper_here("model_files", {**args, "digest": manifest.digest})
        assert reply["complete"], reply
    shard = "weights/tiny-00001-of-00002.gguf"
    (tmp_path / "hosts.yml").write_text(
        textwrap.dedent(f"""
        all:
          vars:
            connection: local
            state_dir: {tmp_path}/state
            model_source: {json.dumps(SOURCE)}
            vllm_venv: {sys.prefix}
            vllm_package: pyyaml
            fleet_min_free_gib: 0
          hosts:
            r1: {{model_dir: {tmp_path}/r1, gguf_shards: {tmp_path}/r1/{shard}}}
            r2: {{model_dir: {tmp_path}/r2, gguf_shards: {tmp_path}/r2/{shard}}}
        """)
    )
    return tmp_path


def rolling(tmp_path: Path) -> tuple[ExitCode, list[str]]:
    """`glmops deploy --rolling`'s fleet runner, with the preflight run for real and every later
    playbook only recorded (none may run when the preflight fails)."""
    inventory = tmp_path / "hosts.yml"
    real = fleet_runner(RunRequest(Path("deploy.yml"), inventory, json_events=True))
    later: list[str] = []

    def run(playbook: Path, limit: str, extra: dict, settings: dict) -> RunOutcome:
        if playbook.name == "fleet-preflight.yml":
            return real(playbook, limit, extra, settings)
        later.append(playbook.name)
        return RunOutcome(ExitCode.OK)

    deploy = FleetDeploy(load_inventory(inventory), "all", run, json_events=True)
    return deploy.rolling([1], 0), later


def fleet_event(out: str) -> dict:
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return next(e for e in events if e["event"] == "fleet")


def test_matching_replicas_pass_and_the_roll_goes_on(
    fleet: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, later = rolling(fleet)
    out = capsys.readouterr().out
    assert code == ExitCode.OK, out
    assert later == ["deploy.yml"]
    checks = [
        json.loads(line)
        for line in out.splitlines()
        if '"task": "model files against' in line and '"event": "task"' in line
    ]
    assert {e["host"]: e["status"] for e in checks} == {"r1": "ok", "r2": "ok"}
    assert "3 files" in checks[0]["msg"] and "nothing hashed" in checks[0]["msg"]


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        ("truncate", "size 1000 bytes, the manifest says 10244"),
        ("delete", "missing"),
        ("touch", "not verified against this manifest since it last changed"),
    ],
)
def test_one_replica_off_the_manifest_stops_the_roll_before_any_change(
    fleet: Path, capsys: pytest.CaptureFixture[str], damage: str, why: str
) -> None:
    shard = fleet / "r2" / "weights" / "tiny-00001-of-00002.gguf"
    if damage == "truncate":
        os.truncate(shard, 1000)
    elif damage == "delete":
        shard.unlink()
    else:  # same bytes, written again: only a hash could tell, and the preflight hashes nothing
        shard.write_bytes(shard.read_bytes())
        os.utime(shard, ns=(shard.stat().st_atime_ns, shard.stat().st_mtime_ns + 10**9))
    before = {p: p.read_bytes() for p in (fleet / "r2").rglob("*") if p.is_file()}
    code, later = rolling(fleet)
    stopped = fleet_event(capsys.readouterr().out)["stopped"]
    assert code == ExitCode.HOST_FAILED and later == [], "nothing runs after a failed preflight"
    assert stopped.startswith("preflight failed, nothing done: r2: model files against")
    assert f"r2: model files in {fleet}/r2 do not match the controller's manifest" in stopped
    assert f"weights/tiny-00001-of-00002.gguf: {why}" in stopped
    assert "r1" not in stopped
    after = {p: p.read_bytes() for p in (fleet / "r2").rglob("*") if p.is_file()}
    assert after == before, "the preflight deletes or writes nothing"


def test_a_host_verified_against_another_manifest_and_no_manifest_at_all(
    fleet: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = ModelCache(fleet / "cache", parse_source(SOURCE, "test"))
    kept = load_manifest(cache.manifest_path)
    moved = ({**kept.sources[0], "commit": "d" * 40}, *kept.sources[1:])  # hosts hold the old
    write_atomic(cache.manifest_path, Manifest(moved, kept.files).to_json())
    code, later = rolling(fleet)
    stopped = fleet_event(capsys.readouterr().out)["stopped"]
    assert code == ExitCode.HOST_FAILED and later == []
    assert "r1: model files" in stopped and "r2: model files" in stopped
    assert "the host last verified manifest" in stopped and "not verified against" in stopped
    cache.manifest_path.unlink()
    code, later = rolling(fleet)
    stopped = fleet_event(capsys.readouterr().out)["stopped"]
    assert code == ExitCode.HOST_FAILED and later == []
    assert f"no model manifest on the controller at {cache.manifest_path}" in stopped


def test_shards_held_by_their_verified_merge_pass_unhashed(tmp_path: Path) -> None:
    """Shards gguf_split removed after a verified merge count as present while the merged file
    is as its merge recorded it (size and mtime); once it changed, only a hash could tell, so
    the unhashed check refuses it. The host's state and merge come from their own writers."""
    pytest.importorskip("gguf", reason="gguf is in the test extras (pip install -e .[test])")
    from glmops.hosthelpers import gguf_split
    from tests.support.gguf_models import split_set

    root = tmp_path / "m"
    first = split_set(root / "weights", split_max_tensors=7)
    shards = sorted(first.parent.glob("model-*-of-*.gguf"))
    entries = tuple(
        FileEntry(f"weights/{p.name}", p.stat().st_size, sha256_file(p), "lfs") for p in shards
    )
    manifest = Manifest(({"part": "weights", "repo": "a/b", "commit": "c" * 40},), entries)
    doc = json.loads(manifest.to_json())
    verify = {"mode": "verify", "model_dir": str(root), "manifest": doc, "digest": manifest.digest}
    assert run_helper_here("model_files", verify)["complete"]
    out = str(root / "weights" / "model.gguf")
    assert gguf_split.merge({"path": str(first), "output": out})["changed"]
    removed = run_helper_here("gguf_split", {"mode": "remove_shards", "path": str(first),
                                             "output": out})  # fmt: skip
    assert removed["changed"] and not any(p.exists() for p in shards)
    files = [[f.path, f.size] for f in manifest.files]
    stat = {"mode": "stat", "model_dir": str(root), "files": files, "digest": manifest.digest}
    assert run_helper_here("model_files", stat)["problems"] == []
    os.utime(out, ns=(os.stat(out).st_atime_ns, os.stat(out).st_mtime_ns + 10**9))
    problems = run_helper_here("model_files", stat)["problems"]
    why = "missing (merged into model.gguf, changed since)"
    assert sorted(problems) == [[f.path, why] for f in manifest.files]
    assert os.path.exists(out), "the unhashed check deletes nothing"
