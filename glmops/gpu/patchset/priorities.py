"""Patch-set item: TRITON_MLA_SPARSE appended to every MLA priority list of _get_backend_priorities.

Appending last keeps native sparse kernels (FlashMLA, FlashInfer, FA) first wherever they
validate (SM90/SM100, and FLASHINFER_MLA_SPARSE_SM120 for bf16 + fp8_ds_mla on 0.33), while
every device with no working sparse backend (SM120 fp16, SM8x) falls through to ours.
"""

from __future__ import annotations

import re

from .common import FileChange, PatchError, marker, strip_marked
from .profiles import CUDA, Profile
from .render import render

NAME = "priorities"


def _mla_block(lines: list[str]) -> tuple[int, int]:
    """Line range [start, end) of the `if use_mla:` branch inside _get_backend_priorities."""
    fn = next(i for i, ln in enumerate(lines) if ln.startswith("def _get_backend_priorities("))
    start = next(i for i in range(fn, len(lines)) if lines[i].rstrip() == "    if use_mla:")
    end = next(
        (i for i in range(start + 1, len(lines)) if re.match(r"^    \S", lines[i])), len(lines)
    )
    return start, end


def _insert(text: str, expected_lists: int) -> str:
    lines = text.splitlines(keepends=True)
    start, end = _mla_block(lines)
    closers: list[tuple[int, str]] = []
    i = start
    while i < end:
        m = re.match(r"^(\s*)return \[\s*$", lines[i])
        if m:
            j = next(k for k in range(i + 1, end) if lines[k].strip() == "]")
            closers.append((j, lines[j - 1][: len(lines[j - 1]) - len(lines[j - 1].lstrip())]))
            i = j
        i += 1
    if len(closers) != expected_lists:
        raise PatchError(
            f"{CUDA}: _get_backend_priorities has {len(closers)} MLA priority lists, "
            f"profile expects {expected_lists}"
        )
    for j, indent in reversed(closers):
        lines.insert(j, render("priority_entry.py.j2", indent=indent, marker=marker(NAME)))
    return "".join(lines)


def plan(profile: Profile, sources: dict[str, str | None], options: dict) -> FileChange:
    current = sources[CUDA]
    assert current is not None
    pristine = strip_marked(current, NAME)
    lines = pristine.splitlines(keepends=True)
    start, end = _mla_block(lines)
    if any("TRITON_MLA_SPARSE" in ln for ln in lines[start:end]):
        return FileChange(CUDA, current, current, NAME, "ok", "already upstream")
    after = _insert(pristine, profile.mla_priority_lists)
    if after == current:
        return FileChange(CUDA, current, current, NAME, "ok", "already applied")
    return FileChange(CUDA, current, after, NAME, "apply", "TRITON_MLA_SPARSE last in MLA lists")
