"""The patch manifest (written by hosthelpers/vllm_patch.py) against the files on disk.

The manifest's exact shape belongs to the patch-set work; this reads the likely spellings:
`files` as a list of {path, sha256_after|after|sha256} or as {path: {...}} / {path: sha}.
Relative paths are taken relative to the installed vllm package's parent folder.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any


def manifest_files(manifest: Mapping[str, Any] | None, base: str | None) -> dict[str, str | None]:
    """{absolute path: the sha256 the patch set left there} from a manifest."""
    if not manifest:
        return {}
    raw = manifest.get("files") or manifest.get("entries") or {}
    items: list[tuple[str, Any]]
    if isinstance(raw, Mapping):
        items = list(raw.items())
    else:
        items = [(e.get("path") or e.get("file") or "", e) for e in raw if isinstance(e, Mapping)]
    out: dict[str, str | None] = {}
    for path, entry in items:
        if not path:
            continue
        if isinstance(entry, Mapping):
            sha = next(
                (
                    entry[k]
                    for k in ("sha256_after", "after", "sha256", "after_sha256")
                    if entry.get(k)
                ),
                None,
            )
        else:
            sha = entry if isinstance(entry, str) else None
        if not os.path.isabs(path) and base:
            path = os.path.join(base, path)
        out[path] = sha
    return out


def patch_state(
    manifest: Mapping[str, Any] | None, expected: dict[str, str | None], on_disk: dict[str, Any]
) -> tuple[str, list[str]]:
    """('applied' | 'drifted' | 'missing', details) from the wanted and the actual digests."""
    if not manifest:
        return "missing", ["no patch manifest on the host"]
    if not expected:
        return "applied", ["manifest lists no files"]
    drift = []
    for path, sha in expected.items():
        actual = on_disk.get(path)
        if actual is None:
            drift.append(f"{path}: absent")
        elif sha and actual != sha:
            drift.append(f"{path}: sha256 {actual[:12]}, manifest says {sha[:12]}")
    return ("drifted", drift) if drift else ("applied", [f"{len(expected)} file(s) match"])
