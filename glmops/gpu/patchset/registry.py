"""Patch-set item: TRITON_MLA_SPARSE as a real AttentionBackendEnum member, right after TRITON_MLA.

A static member (rather than a runtime register_backend call) works on every profile and
exists before the first selection, which matters because _get_backend_priorities is @cache'd.
"""

from __future__ import annotations

import re

from .common import FileChange, PatchError, marker, strip_marked
from .profiles import REGISTRY, Profile
from .render import render

NAME = "registry"
_MEMBER = re.compile(r"^(    )TRITON_MLA = [^\n]*\n", re.MULTILINE)


def plan(profile: Profile, sources: dict[str, str | None], options: dict) -> FileChange:
    current = sources[REGISTRY]
    assert current is not None  # guaranteed by detect_profile
    pristine = strip_marked(current, NAME)
    if re.search(r"^\s+TRITON_MLA_SPARSE\s*=", pristine, re.MULTILINE):
        return FileChange(REGISTRY, current, current, NAME, "ok", "already upstream")
    m = _MEMBER.search(pristine)
    if m is None:
        raise PatchError(f"{REGISTRY}: TRITON_MLA member not found")
    snippet = render("registry_member.py.j2", indent=m.group(1), marker=marker(NAME))
    after = pristine[: m.end()] + snippet + pristine[m.end() :]
    if after == current:
        return FileChange(REGISTRY, current, current, NAME, "ok", "already applied")
    return FileChange(REGISTRY, current, after, NAME, "apply", "add TRITON_MLA_SPARSE member")
