"""The patch set as an ordered item list, and plan_patchset: pure text in, FileChanges out."""

from __future__ import annotations

from types import ModuleType

from . import backend, gguf, indexer, priorities, registry
from .common import FileChange, PatchError
from .profiles import Profile

ITEMS: tuple[ModuleType, ...] = (backend, registry, priorities, gguf, indexer)


def plan_patchset(
    profile: Profile, sources: dict[str, str | None], options: dict | None = None
) -> list[FileChange]:
    """One FileChange per item. Options: kernel ('sparse_mla' | 'dense_reuse'),
    max_scratch_bytes, items (subset of item names to plan)."""
    options = dict(options or {})
    wanted = set(options.get("items") or [m.NAME for m in ITEMS])
    changes: list[FileChange] = []
    for item in ITEMS:
        if item.NAME in wanted:
            planned = item.plan(profile, sources, options)
            changes.extend(planned if isinstance(planned, list) else [planned])
    paths = [c.path for c in changes if c.changed]
    if len(paths) != len(set(paths)):
        raise PatchError(f"two items change the same file: {paths}")
    return changes


def payload(profile: Profile, changes: list[FileChange], site_packages: str) -> dict:
    """The JSON the host helper's apply mode reads from payload_file."""
    import hashlib

    from .common import TEMPLATE_VERSION

    def sha(text: str | None) -> str | None:
        return None if text is None else hashlib.sha256(text.encode()).hexdigest()

    return {
        "site_packages": site_packages,
        "profile": profile.name,
        "template_version": TEMPLATE_VERSION,
        "changes": [
            {"path": c.path, "item": c.item, "before_sha256": sha(c.before), "after": c.after}
            for c in changes
            if c.changed
        ],
    }
