"""The model manifest: every file's path, size and sha256, fixed when the source is resolved.

Written once on the controller (atomically) and kept: a re-run reads it instead of asking the
Hub again, so every host is checked against the same bytes even if a branch moved since. The
same document travels to each host, where the host helper model_files checks files against it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from glmops.hosthelpers import _envelope as envelope

FORMAT = 1


@dataclass(frozen=True)
class FileEntry:
    path: str  # relative to model_dir: "<part>/<path in the repo>"
    size: int
    sha256: str
    origin: str  # "lfs": the Hub's LFS oid; "blob": hashed here after a git blob-id check


@dataclass(frozen=True)
class Manifest:
    sources: tuple[dict[str, Any], ...]  # part, repo, revision (as declared), commit, include
    files: tuple[FileEntry, ...]

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def digest(self) -> str:
        """Identifies the exact set of bytes: a host whose state file has it is complete."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()

    def to_json(self) -> str:
        doc = {
            "format": FORMAT,
            "sources": list(self.sources),
            "files": [asdict(f) for f in self.files],
        }
        return json.dumps(doc, indent=1, sort_keys=True) + "\n"

    def part_dir(self, model_dir: str, part: str) -> str:
        return f"{model_dir.rstrip('/')}/{part}"

    def stat_request(self, model_dir: str) -> dict[str, Any]:
        """model_files' `stat` request: are the host's files as last verified against this
        manifest? (sizes and mtimes; nothing hashed)"""
        files = [[f.path, f.size] for f in self.files]
        return {"mode": "stat", "model_dir": model_dir, "files": files, "digest": self.digest}

    def gguf_first_shard(self) -> str | None:
        """The weights' first GGUF file (relative), what deploy's gguf_shards names."""
        gguf = sorted(f.path for f in self.files if f.path.endswith(".gguf"))
        first = [p for p in gguf if "-00001-of-" in p]
        return (first or gguf)[0] if first or gguf else None


def load_manifest(path: Path) -> Manifest:
    """The manifest at `path`, refused (UnsafePath, a ValueError) if any of its paths or part
    names could leave the model folder: checked here, once, and again where files are written
    or deleted."""
    doc = json.loads(path.read_text())
    if doc.get("format") != FORMAT:
        raise ValueError(f"{path}: manifest format {doc.get('format')!r}, expected {FORMAT}")
    files = tuple(FileEntry(**f) for f in doc["files"])
    try:
        for entry in files:
            envelope.relative_path(entry.path)
        for source in doc["sources"]:
            if "part" in source:
                envelope.relative_path(source["part"])
    except envelope.UnsafePath as error:
        raise envelope.UnsafePath(f"{path}: {error}") from None
    return Manifest(tuple(doc["sources"]), files)


def write_atomic(path: Path, text: str) -> None:
    """The one atomic write (hosthelpers._envelope.write_atomic), its folder made first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    envelope.write_atomic(path, text)


def sha256_file(path: Path) -> str:
    return envelope.file_sha256(str(path))


def git_blob_id(path: Path) -> str:
    """git's id of a file's content (sha1 of "blob <size>\\0" + bytes): what the Hub reports
    for files outside LFS, so a small file is checked against the Hub too."""
    return git_blob_id_of(path.read_bytes())


def git_blob_id_of(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()  # noqa: S324 - git's id
