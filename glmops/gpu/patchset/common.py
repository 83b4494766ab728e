"""Shared pieces of the patch items: the marker that tags every line glmops inserts, and the
FileChange record a plan is made of."""

from __future__ import annotations

import difflib
from dataclasses import dataclass

MARKER = "glmops-patch"
TEMPLATE_VERSION = "1"


def marker(item: str) -> str:
    return f"{MARKER}: {item} v{TEMPLATE_VERSION}"


def strip_marked(text: str, item: str) -> str:
    """The file as it was before glmops inserted this item's lines (any template version), so
    a plan is always computed from the pristine text and re-planning is idempotent."""
    tag = f"# {MARKER}: {item} v"
    return "".join(ln for ln in text.splitlines(keepends=True) if tag not in ln)


@dataclass(frozen=True)
class FileChange:
    path: str  # relative to site-packages
    before: str | None  # None: the file does not exist yet
    after: str
    item: str
    status: str  # 'apply' | 'ok'
    reason: str

    @property
    def changed(self) -> bool:
        return self.status == "apply"

    def diff(self) -> str:
        return unified_diff(self.path, self.before, self.after)


def unified_diff(path: str, before: str | None, after: str) -> str:
    a = (before or "").splitlines(keepends=True)
    b = after.splitlines(keepends=True)
    src = f"a/{path}" if before is not None else "/dev/null"
    return "".join(difflib.unified_diff(a, b, src, f"b/{path}"))


class PatchError(Exception):
    """The layout matched a profile but an item cannot be placed safely."""
