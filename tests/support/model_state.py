"""A model folder as the model phase leaves it on a host: the manifest of its files (as the
controller builds it from the Hub's sizes and sha256s) and the state file model_files' verify
writes, run on this machine as a host runs it."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from glmops.engine.context import run_helper_here
from glmops.model.manifest import FileEntry, Manifest, sha256_file


def manifest_of(root: Path, files: Sequence[Path], repo: str = "a/b") -> Manifest:
    """The manifest of `files` (under `root`, the model_dir), from their sizes and sha256."""
    entries = tuple(
        FileEntry(str(p.relative_to(root)), p.stat().st_size, sha256_file(p), "lfs") for p in files
    )
    return Manifest(({"part": "weights", "repo": repo, "commit": "c" * 40},), entries)


def verify_args(root: Path, manifest: Manifest) -> dict[str, Any]:
    """model_files' verify arguments for `root` against `manifest`."""
    return {
        "mode": "verify",
        "model_dir": str(root),
        "manifest": json.loads(manifest.to_json()),
        "digest": manifest.digest,
    }


def verified(root: Path, manifest: Manifest) -> dict[str, Any]:
    """model_files' verify run on `root` (writes the state file when all files pass)."""
    return run_helper_here("model_files", verify_args(root, manifest))
