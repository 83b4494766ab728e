"""Fetch the model from the Hub once, onto the controller, with huggingface_hub.

`resolve` turns the declared source into a manifest (each branch or tag resolved to a commit,
LFS sha256 and size from the Hub's tree listing, small files checked against their git blob id
and hashed here) and keeps it; `download` brings every file into the cache, resumes what an
interrupted run left (HTTP Range), and verifies each file's sha256 before it may be served.
The token goes to huggingface_hub in-process: never in argv, never logged.

Why the bytes come through huggingface_hub's HTTP session (hf_hub_url, build_hf_headers,
get_session) with our own Range resume, and not through hf_hub_download / snapshot_download:
tried with huggingface_hub 2.4.0 (hf-xet 1.8.0) against the olah server the tests use, a
download killed after 73 of 150 MB left `<etag>.<uuid>.incomplete` behind (the name is unique
per process in that version), so the next run did not continue it: it sent a
plain GET (200, not 206) for the whole file and left the orphan on disk. hf_hub_download also
returns a file already present under its name without looking at its content (a same-size
file with a flipped byte came back as is), so our sha256 check would stay and the resume would
be lost. hf-xet could not be tried offline: olah 0.5.4 serves no xet metadata (the tree lists
`xet_hash=None`, no X-Xet headers), so huggingface_hub takes its HTTP path there too. For a
xet-backed file the Hub's resolve URL, which this module fetches, answers with a redirect to its
LFS-compatible bridge, a plain HTTP download (without xet's chunk deduplication), so such a
repo needs no other code here.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from glmops.engine import secretenv
from glmops.errors import GlmopsError
from glmops.hosthelpers._envelope import UnsafePath, confined
from glmops.model.manifest import (
    FileEntry,
    Manifest,
    git_blob_id,
    git_blob_id_of,
    load_manifest,
    sha256_file,
    write_atomic,
)
from glmops.model.progress import Meter
from glmops.model.source import ModelSource, RepoSpec

Report = Callable[[str], None]
PARTIAL = ".glmops-partial"
CHUNK = 8 << 20


class FetchError(GlmopsError):
    """The Hub could not give us the declared files, or they do not match its metadata."""


def default_cache_root() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(os.environ.get("GLMOPS_MODEL_CACHE") or Path(xdg) / "glmops" / "models")


@dataclass
class HubAccess:
    """How to reach the Hub: the endpoint (HF_ENDPOINT for mirrors) and the token (a secret)."""

    endpoint: str | None = None
    token: str | None = None

    @classmethod
    def from_env(cls, token: str | None = None, endpoint: str | None = None) -> HubAccess:
        return cls(
            endpoint=endpoint or os.environ.get("HF_ENDPOINT") or None,
            token=token or secretenv.hf_token(),
        )

    def __repr__(self) -> str:  # never show the token, e.g. in a traceback's locals
        return f"HubAccess(endpoint={self.endpoint!r}, token={'set' if self.token else None})"


class ModelCache:
    """The controller's copy: <root>/<source key>/manifest.json and files/<part>/<repo path>."""

    def __init__(self, root: Path, source: ModelSource):
        self.dir = root / source.key
        self.source = source
        self.manifest_path = self.dir / "manifest.json"
        self.files = self.dir / "files"
        self._stamps_path = self.dir / "verified.json"

    def path(self, entry: FileEntry) -> Path:
        """Where the file lives in the cache; a path that would leave it is refused."""
        return self.local(entry.path)

    def local(self, rel: str) -> Path:
        try:
            return Path(confined(str(self.files), rel))
        except UnsafePath as error:
            raise FetchError(f"the Hub listed a path glmops refuses: {error}") from None

    def stamps(self) -> dict[str, list[Any]]:
        try:
            return json.loads(self._stamps_path.read_text())
        except (OSError, ValueError):
            return {}

    def stamp(self, entry: FileEntry) -> None:
        """Record that this file, at this size and mtime, has its manifest sha256."""
        stat = self.path(entry).stat()
        stamps = self.stamps()
        stamps[entry.path] = [stat.st_size, stat.st_mtime_ns, entry.sha256]
        write_atomic(self._stamps_path, json.dumps(stamps, indent=1, sort_keys=True))

    def verified(self, entry: FileEntry) -> bool:
        """True when the file was verified and has not changed since (size and mtime)."""
        try:
            stat = self.path(entry).stat()
        except OSError:
            return False
        return self.stamps().get(entry.path) == [stat.st_size, stat.st_mtime_ns, entry.sha256]

    def bytes_present(self, manifest: Manifest) -> int:
        """Bytes on disk for the manifest's files, partial downloads included (for progress)."""
        done = 0
        for entry in manifest.files:
            path = self.path(entry)
            if path.exists():
                done += path.stat().st_size
        partial = self.files.rglob(f"*{PARTIAL}")
        return done + sum(p.stat().st_size for p in partial)


def resolve(
    cache: ModelCache, hub: HubAccess, report: Report, refresh: bool = False, *, write: bool = True
) -> Manifest:
    """The manifest: read if kept (not rewritten), else built from the Hub and written once.
    `write=False` (check mode) writes nothing anywhere: a new manifest is built in memory (the
    small files read into memory to hash them), and the report says what a run would record."""
    if cache.manifest_path.exists() and not refresh:
        return load_manifest(cache.manifest_path)
    from huggingface_hub import HfApi

    api = HfApi(endpoint=hub.endpoint, token=hub.token)
    sources, files = [], []
    for spec in cache.source.repos:
        commit = _commit(api, spec)
        if not spec.pinned:
            noted = "recorded" if write else "check mode: not recorded"
            report(f"{spec.repo}: revision {spec.revision} is commit {commit} ({noted})")
        sources.append(
            {
                "part": spec.part,
                "repo": spec.repo,
                "revision": spec.revision,
                "commit": commit,
                "include": list(spec.include),
            }
        )
        listing = _listing(api, spec, commit)
        files += [_entry(cache, hub, spec, commit, item, write) for item in listing]
    manifest = Manifest(tuple(sources), tuple(sorted(files, key=lambda f: f.path)))
    kept = load_manifest(cache.manifest_path) if cache.manifest_path.exists() else None
    if kept == manifest:
        return manifest  # unchanged: keep the file as it is
    if not write:
        instead = f", replacing {kept.digest[:12]}" if kept else ""
        report(f"would record manifest {manifest.digest[:12]} ({cache.manifest_path}{instead})")
        return manifest
    write_atomic(cache.manifest_path, manifest.to_json())
    return manifest


def _commit(api: Any, spec: RepoSpec) -> str:
    from huggingface_hub.errors import HfHubHTTPError

    try:
        info = api.model_info(spec.repo, revision=spec.revision)
    except HfHubHTTPError as error:
        raise FetchError(f"{spec.repo}@{spec.revision}: the Hub says {_short(error)}") from None
    if not info.sha:
        raise FetchError(f"{spec.repo}@{spec.revision}: the Hub gave no commit for it")
    return info.sha


def _listing(api: Any, spec: RepoSpec, commit: str) -> list[Any]:
    from huggingface_hub import RepoFile
    from huggingface_hub.utils import filter_repo_objects

    tree = api.list_repo_tree(spec.repo, revision=commit, recursive=True, expand=True)
    files = [f for f in tree if isinstance(f, RepoFile)]
    chosen = list(
        filter_repo_objects(files, allow_patterns=list(spec.include), key=lambda f: f.path)
    )
    if not chosen:
        raise FetchError(
            f"{spec.repo}@{commit}: no file matches {', '.join(spec.include)} "
            f"({len(files)} files in the repo)"
        )
    if spec.part == "config" and not any(f.path == "config.json" for f in chosen):
        raise FetchError(f"{spec.repo}@{commit}: no config.json, which vLLM needs beside a GGUF")
    return chosen


def _entry(
    cache: ModelCache, hub: HubAccess, spec: RepoSpec, commit: str, item: Any, write: bool
) -> FileEntry:
    path = f"{spec.part}/{item.path}"
    final = cache.local(path)  # refused here, before anything is read or written
    if item.lfs is not None:
        return FileEntry(path, int(item.lfs.size), item.lfs.sha256, "lfs")
    # Outside LFS the Hub gives only git's blob id: fetch the (small) file now, check it
    # against that id, and record its sha256 so hosts verify it like any other file.
    if not write:  # check mode: in memory (the Hub keeps files outside LFS small)
        data = _read(hub, spec, commit, item.path, int(item.size))
        if git_blob_id_of(data) != item.blob_id:
            raise FetchError(f"{spec.repo}@{commit}: {item.path} does not match its git blob id")
        return FileEntry(path, len(data), hashlib.sha256(data).hexdigest(), "blob")
    partial = _download(hub, spec, commit, item.path, final, int(item.size))
    if git_blob_id(partial) != item.blob_id:
        partial.unlink()
        raise FetchError(f"{spec.repo}@{commit}: {item.path} does not match its git blob id")
    entry = FileEntry(path, partial.stat().st_size, sha256_file(partial), "blob")
    os.replace(partial, final)
    cache.stamp(entry)
    return entry


def download(cache: ModelCache, manifest: Manifest, hub: HubAccess, report: Report) -> int:
    """Every manifest file into the cache, verified; returns the bytes downloaded this run."""
    commits = {s["part"]: (s["repo"], s["commit"]) for s in manifest.sources}
    missing = [f for f in manifest.files if not cache.verified(f)]
    if not missing:
        return 0
    fetched = 0
    with Meter("fetch", manifest.total_bytes, lambda: cache.bytes_present(manifest), report):
        for entry in missing:
            fetched += _fetch_one(cache, entry, commits, hub, report)
    return fetched


def _fetch_one(
    cache: ModelCache,
    entry: FileEntry,
    commits: dict[str, tuple[str, str]],
    hub: HubAccess,
    report: Report,
) -> int:
    part, _, repo_path = entry.path.partition("/")
    repo, commit = commits[part]
    spec = RepoSpec(part, repo, commit, (repo_path,))
    local = cache.path(entry)
    if local.exists() and _matches(local, entry):  # e.g. verified before the stamps were lost
        cache.stamp(entry)
        return 0
    if local.exists():
        report(f"{entry.path}: does not match the manifest; fetching it again")
        local.unlink()
    for attempt in (1, 2):
        partial = _download(hub, spec, commit, repo_path, local, entry.size)
        if _matches(partial, entry):
            os.replace(partial, local)  # the real name only for a verified file
            cache.stamp(entry)
            return entry.size
        partial.unlink()  # never keep, and so never serve, a file that fails its check
        if attempt == 1:
            report(f"{entry.path}: downloaded file fails its sha256 check; fetching again")
    raise FetchError(f"{repo}@{commit}: {repo_path} from the Hub does not match its sha256")


def _matches(path: Path, entry: FileEntry) -> bool:
    return path.stat().st_size == entry.size and sha256_file(path) == entry.sha256


def _download(
    hub: HubAccess, spec: RepoSpec, commit: str, repo_path: str, final: Path, size: int
) -> Path:
    """One file from the Hub for `final` (a confined path), resuming a partial file an earlier
    run left.

    Bytes go to `<file>.glmops-partial` (a name of its own, so it survives a killed run and is
    never taken for the file); a Range request continues it, and a server that ignores Range
    (answers 200) starts it over. A body longer than the listed `size` is cut off, deleted and
    refused (a hostile server cannot fill the disk). Returns the partial file: only the
    caller's sha256 check gives it the file's name.
    """
    from huggingface_hub import hf_hub_url
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    partial = final.with_name(final.name + PARTIAL)
    partial.parent.mkdir(parents=True, exist_ok=True)
    url = hf_hub_url(spec.repo, repo_path, revision=commit, endpoint=hub.endpoint)
    headers = build_hf_headers(token=hub.token)
    have = partial.stat().st_size if partial.exists() else 0
    if have:
        headers["Range"] = f"bytes={have}-"
    try:
        with get_session().stream("GET", url, headers=headers, timeout=60) as response:
            if response.status_code == 416:  # nothing left to send: the partial is whole
                response.close()
            else:
                hf_raise_for_status(response)
                resumed = response.status_code == 206
                with open(partial, "ab" if resumed else "wb") as out:
                    _copy_capped(response.iter_bytes(CHUNK), out, size - (have if resumed else 0))
    except TooLong as error:
        partial.unlink()
        raise FetchError(f"{spec.repo}@{commit}: {repo_path}: {error}") from None
    except Exception as error:  # the HTTP library's errors: say which file, keep the partial
        raise FetchError(f"{spec.repo}@{commit}: {repo_path}: {_short(error)}") from None
    return partial


def _read(hub: HubAccess, spec: RepoSpec, commit: str, repo_path: str, size: int) -> bytes:
    """One small file from the Hub, into memory only, at most its listed `size` bytes."""
    import io

    from huggingface_hub import hf_hub_url
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    url = hf_hub_url(spec.repo, repo_path, revision=commit, endpoint=hub.endpoint)
    data = io.BytesIO()
    headers = build_hf_headers(token=hub.token)
    try:
        with get_session().stream("GET", url, headers=headers, timeout=60) as response:
            hf_raise_for_status(response)
            _copy_capped(response.iter_bytes(CHUNK), data, size)
    except Exception as error:  # the HTTP library's errors, a body too long: say which file
        raise FetchError(f"{spec.repo}@{commit}: {repo_path}: {_short(error)}") from None
    return data.getvalue()


class TooLong(Exception):
    """The Hub sent more bytes than it listed for the file."""


def _copy_capped(chunks: Iterator[bytes], out: BinaryIO, room: int) -> None:
    """Write chunks until `room` bytes; one byte more is TooLong."""
    for chunk in chunks:
        if len(chunk) > room:
            raise TooLong("the server sent more bytes than the listing gives the file")
        out.write(chunk)
        room -= len(chunk)


def _short(error: Exception) -> str:
    return str(error).splitlines()[0][:300]
