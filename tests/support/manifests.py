"""Patch manifests written by the code that writes them on hosts (never by hand).

The patch set plans its backend item for a profile, `payload()` builds what the controller
sends, and the host helper's apply mode writes the files and the manifest into a stand-in
site-packages folder; tests of code that reads manifests use what comes back.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from glmops.gpu.patchset import backend, payload
from glmops.gpu.patchset.profiles import profile_by_name
from glmops.hosthelpers import vllm_patch


def written_manifest(site_packages: Path, profile: str) -> dict[str, Any]:
    """Apply the backend item of `profile` to an empty site-packages; return its manifest."""
    layout = profile_by_name(profile)
    change = backend.plan(layout, {}, {"kernel": "dense_reuse"})
    body = payload(layout, [change], str(site_packages))
    payload_file = site_packages.parent / f"payload-{profile}.json"
    site_packages.mkdir(parents=True, exist_ok=True)
    payload_file.write_text(json.dumps(body))
    applied = vllm_patch.mode_apply({"payload_file": str(payload_file)})
    assert not applied["failed"], applied["msg"]
    manifest = vllm_patch.mode_manifest({"site_packages": str(site_packages)})["manifest"]
    assert manifest is not None
    return manifest
