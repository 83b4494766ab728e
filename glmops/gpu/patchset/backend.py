"""Patch-set item: the rendered triton_mla_sparse.py in vLLM's MLA backends folder.

The kernel source (backend/sparse_mla/) is embedded verbatim, so the host file is
self-contained while the kernel keeps one home in this repo. kernel="dense_reuse" renders the
original deployment's method instead (vLLM's Triton MLA decode with a page_size=1 table).
"""

from __future__ import annotations

from .common import MARKER, TEMPLATE_VERSION, FileChange, marker
from .profiles import BACKEND_TARGET, Profile
from .render import kernel_source, render

NAME = "backend"
KERNELS = ("sparse_mla", "dense_reuse")
#: What the rendered backend logs when it builds a layer, before the tile that serves it and
#: the Triton (`sparse_mla_kernel_summary`); glmops status reads it back from the journal.
KERNEL_LOG_PREFIX = "TRITON_MLA_SPARSE kernel: "
DEFAULT_MAX_SCRATCH_BYTES = 256 * 2**20


def render_backend(profile: Profile, options: dict) -> str:
    kernel = options.get("kernel", "sparse_mla")
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
    return render(
        profile.backend_template,
        marker=f"{marker(NAME)} profile={profile.name} kernel={kernel}",
        template_version=TEMPLATE_VERSION,
        profile=profile.name,
        kernel=kernel,
        kernel_source=kernel_source() if kernel == "sparse_mla" else "",
        kernel_log_prefix=KERNEL_LOG_PREFIX,
        max_scratch_bytes=int(options.get("max_scratch_bytes", DEFAULT_MAX_SCRATCH_BYTES)),
    )


def plan(profile: Profile, sources: dict[str, str | None], options: dict) -> FileChange:
    current = sources.get(BACKEND_TARGET)
    if current is not None and MARKER not in current:
        return FileChange(BACKEND_TARGET, current, current, NAME, "ok", "already upstream")
    after = render_backend(profile, options)
    if current == after:
        return FileChange(BACKEND_TARGET, current, current, NAME, "ok", "already applied")
    reason = "create backend file" if current is None else "re-render backend file"
    return FileChange(BACKEND_TARGET, current, after, NAME, "apply", reason)
