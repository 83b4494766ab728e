"""Are a host's model files as its last verification left them? The controller's side of
model_files' `stat` mode, shared by the rolling preflight (the `model_manifest` module) and
`glmops up`'s look at hosts whose model phase is done: which manifest to hold the host to, the
request, and the reply in words. Nothing is hashed (see glmops/hosthelpers/model_files.py)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from glmops.hosthelpers.model_files import StatReply
from glmops.model.fetch import ModelCache, default_cache_root
from glmops.model.manifest import Manifest, load_manifest
from glmops.model.source import model_dir, parse_source

if TYPE_CHECKING:
    from glmops.engine.context import TaskContext

SHOWN = 5  # files named in a finding; the rest are counted


def cached_manifest(
    host: str, variables: Mapping[str, Any], cache_root: Path | None = None
) -> Manifest | str:
    """The manifest `glmops model` keeps on the controller for the host's `model_source`, or
    why there is none."""
    source = parse_source(variables["model_source"], f"host '{host}'")
    cache = ModelCache(cache_root or default_cache_root(), source)
    if not cache.manifest_path.is_file():
        return f"no model manifest on the controller at {cache.manifest_path}: run `glmops model`"
    return load_manifest(cache.manifest_path)


def stat(
    ctx: TaskContext,
    manifest: Manifest,
    variables: Mapping[str, Any],
    timeout: float | None = None,
) -> StatReply:
    """model_files' `stat` reply for the host's model folder, read through its schema."""
    request = manifest.stat_request(model_dir(variables))
    return cast(StatReply, ctx.run_helper("model_files", request, timeout=timeout))


def findings(reply: StatReply) -> str | None:
    """What model_files' `stat` reply found, in words (the first files and a count), or None
    when every file is as verified."""
    problems = reply.get("problems") or []
    if reply.get("failed"):
        return str(reply.get("msg"))
    if not problems:
        return None
    listed = "; ".join(f"{path}: {why}" for path, why in problems[:SHOWN])
    more = f" (and {len(problems) - SHOWN} more)" if len(problems) > SHOWN else ""
    return listed + more
