"""The controller-side fetch against a real Hub-compatible server (olah, offline, local repos).

The repos hold LFS pointers, so the manifest's sha256 and sizes come from the server's tree
listing exactly as from huggingface.co; small files go through the git blob-id check.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from glmops.engine.context import run_helper_here
from glmops.errors import ExitCode
from glmops.model.fetch import FetchError, HubAccess, ModelCache, download, resolve
from glmops.model.manifest import load_manifest
from glmops.model.source import parse_source
from tests.support.hub_server import HubRepo, olah_server

WEIGHTS = "unsloth-test/GLM-5-GGUF"
BASE = "zai-test/GLM-5"
TOKEN = "hf_testtoken_9c1f2e7d5b"  # a made-up token: must never appear anywhere


def blob(seed: int, size: int) -> bytes:
    return random.Random(seed).randbytes(size)


def shard_name(i: int, n: int = 3) -> str:
    return f"UD-Q4_K_XL/GLM-5-UD-Q4_K_XL-{i:05d}-of-{n:05d}.gguf"


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    work = tmp_path_factory.mktemp("hub")
    with olah_server(work) as (endpoint, mirrors):
        weights = HubRepo(mirrors, WEIGHTS)
        files = {shard_name(i): blob(i, 3_000_000 + i) for i in (1, 2, 3)}
        files["Q8_0/GLM-5-Q8_0.gguf"] = blob(9, 5000)  # another quant: not included
        files["README.md"] = b"# synthetic\n"
        for name, data in files.items():
            weights.put(name, data)
        weights_commit = weights.commit()
        base = HubRepo(mirrors, BASE)
        config = {
            "config.json": b'{"model_type": "glm_moe_dsa"}\n',
            "generation_config.json": b'{"eos_token_id": 1}\n',
            "tokenizer.json": blob(7, 40_000),  # large enough to be an LFS file
            "tokenizer_config.json": b'{"model_max_length": 202752}\n',
        }
        for name, data in config.items():
            base.put(name, data)
        base.put("model-00001-of-00002.safetensors", blob(8, 4000))  # not a config file
        base.commit()
        yield {
            "endpoint": endpoint,
            "mirrors": mirrors,
            "weights": weights,
            "weights_commit": weights_commit,
            "base": base,
            "files": {**{f"weights/{k}": v for k, v in files.items()}}
            | {f"config/{k}": v for k, v in config.items()},
        }


def source(revision: str = "main"):
    return parse_source(
        {
            "repo": WEIGHTS,
            "revision": revision,
            "include": ["UD-Q4_K_XL/*"],
            "config": {"repo": BASE, "revision": "main"},
        },
        "test",
    )


def test_manifest_from_the_hubs_lfs_metadata_and_blob_ids(hub: dict, tmp_path: Path) -> None:
    cache = ModelCache(tmp_path, source())
    notes: list[str] = []
    manifest = resolve(cache, HubAccess(hub["endpoint"], TOKEN), notes.append)
    by_path = {f.path: f for f in manifest.files}
    assert set(by_path) == {
        *(f"weights/{shard_name(i)}" for i in (1, 2, 3)),
        "config/config.json",
        "config/generation_config.json",
        "config/tokenizer.json",
        "config/tokenizer_config.json",
    }
    for path, entry in by_path.items():
        data = hub["files"][path]
        assert (entry.size, entry.sha256) == (len(data), hashlib.sha256(data).hexdigest())
    assert by_path["config/tokenizer.json"].origin == "lfs"
    assert by_path["config/config.json"].origin == "blob"
    assert manifest.sources[0]["commit"] == hub["weights_commit"]
    assert any(f"is commit {hub['weights_commit']}" in n for n in notes)
    assert manifest.gguf_first_shard() == f"weights/{shard_name(1)}"


def test_manifest_is_kept_even_when_the_branch_moves(hub: dict, tmp_path: Path) -> None:
    access = HubAccess(hub["endpoint"])
    cache = ModelCache(tmp_path, source())
    first = resolve(cache, access, print)
    stamp = cache.manifest_path.stat().st_mtime_ns
    repo: HubRepo = hub["weights"]
    repo.put("UD-Q4_K_XL/notes.txt", b"moved on\n")
    moved = repo.commit("move the branch")
    try:
        again = resolve(cache, access, print)
        assert again == first and again.sources[0]["commit"] == hub["weights_commit"] != moved
        assert cache.manifest_path.stat().st_mtime_ns == stamp
        refreshed = resolve(cache, access, print, refresh=True)
        assert refreshed.sources[0]["commit"] == moved
    finally:
        repo._git("reset", "-q", "--hard", hub["weights_commit"])


def test_download_verifies_and_refetches_a_corrupt_file(hub: dict, tmp_path: Path) -> None:
    access = HubAccess(hub["endpoint"], TOKEN)
    cache = ModelCache(tmp_path, source(hub["weights_commit"]))
    manifest = resolve(cache, access, print)
    notes: list[str] = []
    assert download(cache, manifest, access, notes.append) > 0
    for entry in manifest.files:
        assert cache.path(entry).read_bytes() == hub["files"][entry.path]
    assert download(cache, manifest, access, notes.append) == 0  # all verified: nothing moves

    entry = next(f for f in manifest.files if f.path.endswith(".gguf"))
    shard = cache.path(entry)
    data = bytearray(shard.read_bytes())
    data[1234] ^= 0x01
    shard.write_bytes(data)
    assert download(cache, manifest, access, notes.append) == entry.size
    assert shard.read_bytes() == hub["files"][entry.path]
    assert any("does not match the manifest" in n for n in notes)
    text = "\n".join(notes) + "".join(
        p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file()
    )
    assert TOKEN not in text


def test_unknown_pattern_and_repo_are_clear_errors(hub: dict, tmp_path: Path) -> None:
    access = HubAccess(hub["endpoint"])
    bad = parse_source({"repo": WEIGHTS, "include": ["UD-IQ1_S/*"]}, "test")
    with pytest.raises(FetchError, match=r"no file matches UD-IQ1_S/\*"):
        resolve(ModelCache(tmp_path, bad), access, print)
    missing = parse_source({"repo": "nobody/nothing", "include": ["*"]}, "test")
    with pytest.raises(FetchError, match="nobody/nothing@main"):
        resolve(ModelCache(tmp_path, missing), access, print)


FETCH_SCRIPT = """
import sys
from pathlib import Path
from glmops.model.fetch import HubAccess, ModelCache, download, resolve
from glmops.model.source import parse_source
src = parse_source({"repo": sys.argv[2], "include": ["big/*"]}, "test")
cache = ModelCache(Path(sys.argv[1]), src)
access = HubAccess.from_env()
download(cache, resolve(cache, access, print), access, print)
"""


def test_fetch_killed_mid_file_then_a_rerun_completes_and_verifies(
    hub: dict, tmp_path: Path
) -> None:
    repo_id = "unsloth-test/big-model"
    big = HubRepo(hub["mirrors"], repo_id)
    data = blob(42, 96_000_000)
    big.put("big/model-00001-of-00001.gguf", data)
    big.commit()
    env = {**os.environ, "HF_ENDPOINT": hub["endpoint"], "PYTHONPATH": os.getcwd()}
    proc = subprocess.Popen([sys.executable, "-c", FETCH_SCRIPT, str(tmp_path), repo_id], env=env)
    partial = None
    deadline = time.monotonic() + 120
    while partial is None and proc.poll() is None and time.monotonic() < deadline:
        found = [p for p in tmp_path.rglob("*.glmops-partial") if p.stat().st_size > 0]
        partial = found[0] if found else None
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert partial is not None, "the download finished before it could be interrupted"
    cache = ModelCache(tmp_path, parse_source({"repo": repo_id, "include": ["big/*"]}, "test"))
    manifest = load_manifest(cache.manifest_path)  # written before any large byte moved
    final = cache.path(manifest.files[0])
    assert not final.exists()  # a partial file never takes the real name
    assert partial.exists()  # kept for the next run to continue

    access = HubAccess(hub["endpoint"])
    assert download(cache, manifest, access, print) == len(data)
    assert cache.verified(manifest.files[0])
    assert hashlib.sha256(final.read_bytes()).hexdigest() == manifest.files[0].sha256
    assert not list(tmp_path.rglob("*.glmops-partial"))


def test_seed_helper_downloads_verifies_and_never_keeps_a_wrong_file(
    hub: dict, tmp_path: Path
) -> None:
    from huggingface_hub import hf_hub_url

    access = HubAccess(hub["endpoint"], TOKEN)
    manifest = resolve(ModelCache(tmp_path / "cache", source()), access, print)
    commit = manifest.sources[0]["commit"]
    files = [
        {
            "path": f.path,
            "url": hf_hub_url(
                WEIGHTS, f.path.partition("/")[2], revision=commit, endpoint=hub["endpoint"]
            ),
            "size": f.size,
            "sha256": f.sha256,
        }
        for f in manifest.files
        if f.path.startswith("weights/")
    ]
    wrong = {**files[0], "path": "weights/wrong.gguf", "sha256": "0" * 64}

    def run(entries: list[dict]) -> dict:
        args = {
            "model_dir": str(tmp_path / "host"),
            "files": entries,
            "headers": {"authorization": f"Bearer {TOKEN}"},
        }
        return run_helper_here("model_fetch", args)

    reply = run(files)
    assert not reply["failed"] and reply["received_bytes"] == sum(f["size"] for f in files)
    for f in files:
        assert (tmp_path / "host" / f["path"]).read_bytes() == hub["files"][f["path"]]
    bad = run([wrong])
    assert bad["failed"] and "does not match its sha256" in bad["msg"]
    assert not list((tmp_path / "host" / "weights").glob("wrong.gguf*"))


def snapshot(folder: Path) -> dict[str, tuple[bytes | None, int]]:
    """Every path under `folder`: its bytes (None for a folder) and its mtime."""
    return {
        str(p.relative_to(folder)): (None if p.is_dir() else p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
    }


def model_check(hub: dict, folder: Path, cache_root: Path, refresh: bool, **host_vars: Any) -> int:
    """`glmops model --check [--refresh]` on a local-connection host, as the CLI runs it;
    `host_vars` add to (or replace) the host's variables."""
    from glmops.model.phase import ModelOptions
    from glmops.run import ModelRequest, run_model
    from tests.support.local_hosts import local_hosts

    variables = {
        "model_source": {
            "repo": WEIGHTS,
            "include": ["UD-Q4_K_XL/*"],
            "config": {"repo": BASE, "revision": "main"},
        },
        "model_dir": str(folder / "host-model"),
        "hf_endpoint": hub["endpoint"],
        **host_vars,
    }
    folder.mkdir()
    inventory = local_hosts(folder, {"all": ["m1"]}, host_vars=lambda _: variables)
    options = ModelOptions(check=True, refresh=refresh, cache_root=cache_root)
    return run_model(ModelRequest(inventory, "all", options, json_events=True)).code


def notes(capsys: pytest.CaptureFixture[str]) -> str:
    """The run's notes (--json events), one a line."""
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line[:1] == "{"]
    return "\n".join(e["msg"] for e in events if e.get("event") == "note")


def test_check_mode_leaves_the_controllers_cache_as_it_was(
    hub: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """--check on an empty cache, then --check --refresh after the branch moved: the cache
    (manifest, small files, stamps) stays byte for byte and mtime for mtime as it was, while
    the report names what a run would fetch and record."""
    monkeypatch.setenv("GLMOPS_RUN_DIR", str(tmp_path / "runs"))
    cache_root = tmp_path / "cache"
    cache_root.mkdir()
    code = model_check(hub, tmp_path / "a", cache_root, refresh=False)
    out = notes(capsys)
    assert code == ExitCode.CHECK_FOUND_CHANGES, out
    assert snapshot(cache_root) == {}, "check mode wrote into the controller's cache"
    assert "would fetch 7 file(s)" in out and f"weights/{shard_name(1)}" in out, out
    assert "would record manifest" in out and "config/config.json" in out, out

    kept = resolve(ModelCache(cache_root, source()), HubAccess(hub["endpoint"]), print)
    before = snapshot(cache_root)
    repo: HubRepo = hub["weights"]
    repo.put("UD-Q4_K_XL/notes.txt", b"moved on\n")
    moved = repo.commit("move the branch")
    try:
        code = model_check(hub, tmp_path / "b", cache_root, refresh=True)
    finally:
        repo._git("reset", "-q", "--hard", hub["weights_commit"])
    out = notes(capsys)
    assert code == ExitCode.CHECK_FOUND_CHANGES, out
    assert snapshot(cache_root) == before, "check --refresh changed the controller's cache"
    assert load_manifest(ModelCache(cache_root, source()).manifest_path) == kept
    assert f"is commit {moved} (check mode: not recorded)" in out, out
    assert f"replacing {kept.digest[:12]}" in out, out
    assert "would fetch" in out and "weights/UD-Q4_K_XL/notes.txt" in out, out


def test_a_templated_model_dir_means_what_it_means_in_deploy(
    hub: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`model_dir: "{{ models_root }}/GLM-5"` is rendered as the engine renders it for deploy:
    the model phase looks in the rendered folder, not at the raw template (which is no path)."""
    monkeypatch.setenv("GLMOPS_RUN_DIR", str(tmp_path / "runs"))
    (tmp_path / "cache").mkdir()
    root = tmp_path / "models"
    (root / "GLM-5" / "config").mkdir(parents=True)  # a wrong file there, for the helper to see
    (root / "GLM-5" / "config" / "config.json").write_text("{}")
    code = model_check(
        hub,
        tmp_path / "a",
        tmp_path / "cache",
        refresh=False,
        models_root=str(root),
        model_dir="{{ models_root }}/GLM-5",
    )
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line[:1] == "{"]
    said = json.dumps(events)
    assert code == ExitCode.CHECK_FOUND_CHANGES, said
    assert "6 missing, 1 failed their check" in said, said
    assert "{{" not in said, said
