"""The patch manifest (written by hosthelpers/vllm_patch.py) against the files on disk.

The manifest is read with the writer's own reader (`vllm_patch.files_left`); its paths are
relative to the site-packages folder the installed vllm package sits in.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from glmops.hosthelpers.vllm_patch import Manifest, files_left


def manifest_files(manifest: Manifest | None, base: str | None) -> dict[str, str | None]:
    """{absolute path: the sha256 the patch set left there} from a manifest; `base` is the
    site-packages folder its relative paths start from."""
    if not manifest:
        return {}
    return {
        os.path.join(base, rel) if base and not os.path.isabs(rel) else rel: sha
        for rel, sha in files_left(manifest).items()
    }


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
