"""Paths from a Hub listing, a manifest or a helper stay inside their root; downloads stop at the
listed size; host names that cannot be file names are refused at load.

The controller's fetch (glmops.model.fetch) and the seed host's helper (model_fetch) download
from a hostile Hub imitation on 127.0.0.1; the host helper model_files runs here as on a host
(run_helper_here) on a temp model dir with a victim file beside it.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from glmops.engine.context import run_helper_here
from glmops.engine.inventory import load_inventory
from glmops.engine.runlog import Masker, RunLog
from glmops.errors import InputError
from glmops.hosthelpers._envelope import UnsafePath
from glmops.model.fetch import FetchError, HubAccess, ModelCache, download, resolve
from glmops.model.manifest import FileEntry, Manifest, load_manifest, write_atomic
from glmops.model.source import parse_source
from tests.security.hostile_hub import REPO, Listed, hostile_hub

BODY = b"model bytes\n"


def hostile_paths(outside: Path) -> dict[str, str]:
    """Listing paths that leave the model folder, by name of the trick."""
    return {
        "dotdot": "../../../victim/x.gguf",
        "dotdot-inner": "UD/../../../../victim/x.gguf",
        "absolute": str(outside / "abs.gguf"),
        "newline": "UD/a\nb.gguf",
        "carriage-return": "UD/a\rb.gguf",
        "escape": "UD/a\x1b[31mb.gguf",
        "empty-part": "UD//x.gguf",
    }


def source():
    return parse_source({"repo": REPO, "revision": "0" * 40, "include": ["*"]}, "test")


def files_under(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")} if folder.exists() else set()


@pytest.fixture
def dirs(tmp_path: Path) -> dict[str, Path]:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "x.gguf").write_bytes(b"the victim's own file")
    return {"cache": tmp_path / "cache", "victim": victim, "outside": tmp_path / "outside"}


@pytest.mark.parametrize("trick", list(hostile_paths(Path("/o"))))
@pytest.mark.parametrize("lfs", [True, False], ids=["lfs", "blob"])
def test_controller_refuses_a_listed_path_outside_the_cache(
    dirs: dict[str, Path], hostile, trick: str, lfs: bool
) -> None:
    path = hostile_paths(dirs["outside"])[trick]
    with hostile_hub([Listed("ok.json", b"{}", lfs=False), Listed(path, BODY, lfs=lfs)]) as hub:
        cache = ModelCache(dirs["cache"], source())
        access = HubAccess(hub.endpoint)
        try:
            manifest = resolve(cache, access, lambda _: None)
            download(cache, manifest, access, lambda _: None)
            refused = False
        except FetchError as error:
            refused = "refuses" in str(error)
    intact = (dirs["victim"] / "x.gguf").read_bytes() == b"the victim's own file"
    written = files_under(dirs["victim"]) | files_under(dirs["outside"])
    hostile.check(
        f"controller fetch, {'lfs' if lfs else 'blob'} path {trick}",
        refused and intact and written == {"x.gguf"},
        f"refused={refused}, victim intact={intact}, outside the cache: {sorted(written)}",
    )


def test_controller_refuses_a_path_through_a_link_out_of_the_cache(
    dirs: dict[str, Path], hostile
) -> None:
    weights = ModelCache(dirs["cache"], source()).files / "weights"
    weights.mkdir(parents=True)
    (weights / "UD").symlink_to(dirs["victim"])
    with hostile_hub([Listed("UD/new.gguf", BODY)]) as hub:
        cache = ModelCache(dirs["cache"], source())
        with pytest.raises(FetchError) as refused:
            download(
                cache,
                resolve(cache, HubAccess(hub.endpoint), print),
                HubAccess(hub.endpoint),
                print,
            )
    hostile.check(
        "controller fetch through a symlink",
        "outside" in str(refused.value) and files_under(dirs["victim"]) == {"x.gguf"},
        f"{refused.value}; victim folder: {files_under(dirs['victim'])}",
    )


@pytest.mark.parametrize("lfs", [True, False], ids=["lfs", "blob"])
def test_controller_stops_a_body_longer_than_listed(tmp_path: Path, hostile, lfs: bool) -> None:
    body = BODY + os.urandom(4 << 20)  # 4 MiB more than the 12 bytes the listing gives
    with hostile_hub([Listed("UD/big.gguf", body, size=len(BODY), lfs=lfs)]) as hub:
        cache = ModelCache(tmp_path, source())
        access = HubAccess(hub.endpoint)
        try:
            download(cache, resolve(cache, access, print), access, print)
            refused = False
        except FetchError as error:
            refused = "more bytes than the listing" in str(error)
    on_disk = sum(p.stat().st_size for p in (tmp_path).rglob("*.gguf*"))
    hostile.check(
        f"controller fetch, {'lfs' if lfs else 'blob'} body longer than listed",
        refused and on_disk <= len(BODY),
        f"refused={refused}, {on_disk} bytes on disk for a {len(BODY)}-byte listing",
    )


def seed_fetch(model_dir: Path, hub_url: str, path: str, body: bytes, size: int) -> dict:
    entry = {
        "path": path,
        "url": hub_url,
        "size": size,
        "sha256": hashlib.sha256(body[:size]).hexdigest(),
    }
    return run_helper_here("model_fetch", {"model_dir": str(model_dir), "files": [entry]})


@pytest.mark.parametrize("trick", list(hostile_paths(Path("/o"))))
def test_seed_host_helper_refuses_a_path_outside_model_dir(
    dirs: dict[str, Path], hostile, trick: str
) -> None:
    path = hostile_paths(dirs["outside"])[trick]
    model_dir = dirs["cache"] / "model"
    with hostile_hub([Listed(path, BODY)]) as hub:
        reply = seed_fetch(model_dir, hub.url(path), path, BODY, len(BODY))
    written = files_under(dirs["victim"]) | files_under(dirs["outside"])
    hostile.check(
        f"seed host model_fetch, path {trick}",
        reply["failed"] and "UnsafePath" not in written and written == {"x.gguf"},
        f"reply {reply['msg']!r}; outside model_dir: {sorted(written)}",
    )


def test_seed_host_helper_stops_a_body_longer_than_listed(tmp_path: Path, hostile) -> None:
    body = BODY + os.urandom(4 << 20)
    with hostile_hub([Listed("weights/big.gguf", body, size=len(BODY))]) as hub:
        reply = seed_fetch(
            tmp_path, hub.url("weights/big.gguf"), "weights/big.gguf", body, len(BODY)
        )
    on_disk = sum(p.stat().st_size for p in tmp_path.rglob("*") if p.is_file())
    hostile.check(
        "seed host model_fetch, body longer than listed",
        reply["failed"] and "more bytes than the listing" in reply["msg"] and on_disk == 0,
        f"reply {reply['msg']!r}; {on_disk} bytes left on disk",
    )


def test_seed_host_helper_refuses_a_path_through_a_link(dirs: dict[str, Path], hostile) -> None:
    model_dir = dirs["cache"] / "model"
    model_dir.mkdir(parents=True)
    (model_dir / "weights").symlink_to(dirs["victim"])
    with hostile_hub([Listed("weights/new.gguf", BODY)]) as hub:
        reply = seed_fetch(
            model_dir, hub.url("weights/new.gguf"), "weights/new.gguf", BODY, len(BODY)
        )
    hostile.check(
        "seed host model_fetch through a symlink",
        reply["failed"] and files_under(dirs["victim"]) == {"x.gguf"},
        f"reply {reply['msg']!r}; victim folder: {files_under(dirs['victim'])}",
    )


@pytest.mark.parametrize("mode", ["verify", "preflight", "stat"])
def test_host_helper_deletes_nothing_outside_model_dir(
    dirs: dict[str, Path], hostile, mode: str
) -> None:
    model_dir = dirs["cache"] / "model"
    (model_dir / "weights").mkdir(parents=True)
    wrong_size = model_dir / "weights" / "a.gguf"
    wrong_size.write_bytes(b"short")  # fails its check: deleted were the request accepted
    listed = [("weights/a.gguf", 100), ("../../victim/x.gguf", 100)]
    entries = [{"path": p, "size": s, "sha256": "0" * 64} for p, s in listed]
    args: dict = {"mode": mode, "model_dir": str(model_dir), "digest": "d"}
    if mode == "verify":
        args["manifest"] = {"files": entries}
    else:
        args["files"] = [list(pair) for pair in listed]
    reply = run_helper_here("model_files", args)
    hostile.check(
        f"host model_files {mode}, ../ in the manifest",
        reply["failed"]
        and "UnsafePath" in reply["msg"]
        and (dirs["victim"] / "x.gguf").exists()
        and wrong_size.exists(),
        f"reply {reply.get('msg')!r}; victim kept: {(dirs['victim'] / 'x.gguf').exists()}",
    )


@pytest.mark.parametrize("trick", [*hostile_paths(Path("/o")), "part"])
def test_a_tampered_manifest_is_refused_when_it_is_loaded(
    tmp_path: Path, hostile, trick: str
) -> None:
    """The controller's kept manifest (written by Manifest itself), edited on disk: its paths
    and part names are checked as it is read, before anything uses them."""
    entry = FileEntry("weights/UD/x.gguf", 5, "0" * 64, "lfs")
    manifest = Manifest(({"part": "weights", "repo": REPO, "commit": "0" * 40},), (entry,))
    path = tmp_path / "manifest.json"
    write_atomic(path, manifest.to_json())
    assert load_manifest(path) == manifest
    doc = json.loads(path.read_text())
    if trick == "part":
        doc["sources"][0]["part"] = ".."
    else:
        doc["files"][0]["path"] = hostile_paths(tmp_path / "outside")[trick]
    path.write_text(json.dumps(doc))
    try:
        load_manifest(path)
        refused = ""
    except UnsafePath as error:
        refused = str(error)
    hostile.check(
        f"kept manifest edited: {trick}",
        refused.startswith(f"{path}: "),
        f"loaded without complaint: {doc}",
    )


HOST_NAMES = {
    "dotdot": "'../../evil'",
    "slash": "'a/b'",
    "dot": "'.'",
    "dotdot-alone": "'..'",
    "option": "'-oProxyCommand=touch /tmp/x'",
    "tab": '"a\\tb"',
    "escape": '"a\\x1bb"',
    "delete": '"a\\x7fb"',
}


@pytest.mark.parametrize("trick", list(HOST_NAMES))
def test_a_host_name_that_cannot_be_a_file_name_is_refused_with_file_and_line(
    tmp_path: Path, hostile, trick: str
) -> None:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(f"all:\n  hosts:\n    good: {{}}\n    {HOST_NAMES[trick]}: {{}}\n")
    try:
        load_inventory(inventory)
        where = None
    except InputError as error:
        where = (error.source, error.line)
    hostile.check(
        f"inventory host name {trick}",
        where == (str(inventory), 4),
        f"refused at {where}, expected {inventory}:4",
    )


def test_run_log_names_stay_in_the_run_folder(tmp_path: Path, hostile) -> None:
    log = RunLog(tmp_path / "runs", Masker())
    for name in ("../escaped", "/abs", "a/../../b"):
        try:
            log.write(name, "text")
            log.host_dir(name)
            held = False
        except UnsafePath:
            held = True
        hostile.check(f"run log for host {name!r}", held, "a log file left the run folder")
    assert not (tmp_path / "runs" / "escaped.log").exists()
