"""What glmops knows per GPU family, in one table.

One entry per compute-capability family: its architecture, what the driver must be (open kernel
modules, minimum CUDA and driver branch), the `--dtype` GGUF needs there, the attention backends
a patched vLLM may pick for GLM-5, best first (a vLLM layout has some of them: its patch-set
profile's `backends`), and the GPUs the testbed simulates. Driver policy, serving,
`vllm_install` and the testbed read it; adding a GPU family is one entry here plus its facts fixture
(`python3 -m glmops.testbed.facts_fixtures` writes it).

Backends: FlashMLASparse is bf16-only on majors 9 and 10; FlashInfer's SM120 sparse backend takes
bf16 + fp8_ds_mla only; where no upstream sparse kernel serves the device the patch set's
TRITON_MLA_SPARSE does, and it is the last SM100 fallback.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from dataclasses import dataclass, field

CC = tuple[int, int]
TRITON = "TRITON_MLA_SPARSE"
OPEN_REQUIRED = "open-required"
OPEN_RECOMMENDED = "open-recommended"
PROPRIETARY_REQUIRED = "proprietary-required"


@dataclass(frozen=True)
class Backends:
    """Backends acceptable for GLM-5 on one family, best first, and the rule that says so.

    A vLLM layout has only some of them (its patch-set profile's `backends`): those are expected.
    """

    bf16: tuple[str, ...]  # for bf16 (vLLM's auto)
    other: tuple[str, ...]  # for any other dtype
    why_bf16: str
    why_other: str

    def names(self, available: Collection[str], bf16: bool) -> tuple[str, ...]:
        return tuple(name for name in (self.bf16 if bf16 else self.other) if name in available)

    def why(self, bf16: bool) -> str:
        return self.why_bf16 if bf16 else self.why_other


def _everywhere(names: tuple[str, ...], why: str) -> Backends:
    """The same backends for every dtype."""
    return Backends(names, names, why, why)


NO_RULE = _everywhere((), "no rule for this GPU generation")


@dataclass(frozen=True)
class Simulated:
    """A host of these GPUs as the testbed's simulated nvidia-smi reports it (real values)."""

    profile: str  # `glmops testbed up --gpu-profile <profile>`
    gpu_name: str
    count: int
    memory_total_mib: int
    driver_version: str
    cuda_version: str
    power_limit_w: int
    pci_device_id: str  # the PCI device id, for the facts fixture
    pci_class: str = "0x030200"  # 3D controller; workstation cards are VGA (0x030000)


@dataclass(frozen=True)
class GpuFamily:
    """One compute-capability family and everything glmops derives from it."""

    key: str  # "sm120"
    architecture: str  # the name driver policy reports
    first: CC  # the family's oldest capability; it ends where a newer family of its major
    # begins (or with its major: last_major)
    modules: str  # OPEN_REQUIRED | OPEN_RECOMMENDED | PROPRIETARY_REQUIRED
    min_cuda: CC | None = None
    min_branch: int | None = None  # oldest driver branch that supports min_cuda
    machine: str | None = None  # only hosts of this CPU architecture (Grace Hopper: aarch64)
    gguf_dtype: str | None = None  # --dtype for GGUF where vLLM's GGUF refuses bfloat16
    backends: Backends = NO_RULE
    simulated: Simulated | None = None
    examples: tuple[str, ...] = field(default=())
    last_major: int | None = None  # the family spans majors first[0]..last_major

    def matches(self, cc: CC, machine: str | None) -> bool:
        """cc is `first` or newer within the family's majors, on the family's CPU architecture
        (family() then prefers the newest `first`)."""
        majors = self.first[0] <= cc[0] <= (self.last_major or self.first[0])
        return majors and self.first <= cc and self.machine in (None, machine)


def _triton_only(sm: str) -> Backends:
    """Where no upstream sparse MLA kernel serves the device, the patch set's Triton one does."""
    return _everywhere(
        (TRITON,),
        f"no upstream sparse MLA kernel serves {sm} for this dtype; the patch set's Triton "
        "backend does",
    )


HOPPER_BACKENDS = Backends(
    bf16=("FLASHMLA_SPARSE", "FLASH_ATTN_MLA_SPARSE", "FLASHINFER_MLA_SPARSE_SM90"),
    other=(),
    why_bf16="Hopper has native sparse MLA kernels",
    why_other="FlashMLASparse is bf16-only and the patch set adds no Hopper fallback; "
    "set vllm_expected_backend if this combination is intended",
)

FAMILIES: tuple[GpuFamily, ...] = (
    GpuFamily(
        "sm120",
        "Blackwell",
        (12, 0),
        OPEN_REQUIRED,
        (12, 8),
        570,
        gguf_dtype="float16",
        backends=_triton_only("SM12x"),
        simulated=Simulated(
            "rtx-pro-6000-x8",
            "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
            8,
            97887,
            "580.95.05",
            "13.0",
            600,
            "0x2bb1",
            "0x030000",
        ),
        examples=("RTX PRO 6000", "GB10 (12.1)"),
    ),
    GpuFamily(
        "sm110",
        "Blackwell",
        (11, 0),
        OPEN_REQUIRED,
        (12, 8),
        570,
        gguf_dtype="float16",
        backends=_triton_only("SM11x"),
        examples=("Thor",),
    ),
    GpuFamily(
        "sm100",
        "Blackwell",
        (10, 0),
        OPEN_REQUIRED,
        (12, 8),
        570,
        gguf_dtype="float16",
        backends=Backends(
            bf16=("FLASH_ATTN_MLA_SPARSE_FA4", "FLASHINFER_MLA_SPARSE", "FLASHMLA_SPARSE"),
            other=("FLASHINFER_MLA_SPARSE", TRITON),
            why_bf16="Blackwell datacenter has native sparse kernels",
            why_other="FlashMLASparse is bf16-only; the patch set's Triton backend is the "
            "last SM100 fallback",
        ),
        simulated=Simulated(
            "b200-x8", "NVIDIA B200", 8, 183359, "580.95.05", "13.0", 1000, "0x2901"
        ),
        examples=("B200", "B300 (10.3)"),
    ),
    GpuFamily(
        "sm90-grace",
        "Grace Hopper",
        (9, 0),
        OPEN_REQUIRED,
        (11, 8),
        520,
        machine="aarch64",
        backends=HOPPER_BACKENDS,
        examples=("GH200",),
    ),
    GpuFamily(
        "sm90",
        "Hopper",
        (9, 0),
        OPEN_RECOMMENDED,
        (11, 8),
        520,
        backends=HOPPER_BACKENDS,
        simulated=Simulated("h200", "NVIDIA H200", 1, 143771, "580.159.04", "13.0", 700, "0x2335"),
        examples=("H100", "H200"),
    ),
    GpuFamily(
        "sm89",
        "Ada Lovelace",
        (8, 9),
        OPEN_RECOMMENDED,
        (11, 8),
        520,
        backends=_triton_only("SM8x"),
        simulated=Simulated("l40s-x8", "NVIDIA L40S", 8, 46068, "580.95.05", "13.0", 350, "0x26b9"),
        examples=("L40S", "RTX 4090"),
    ),
    GpuFamily(
        "sm80",
        "Ampere",
        (8, 0),
        OPEN_RECOMMENDED,
        (11, 0),
        450,
        backends=_triton_only("SM8x"),
        examples=("A100", "A6000 (8.6)"),
    ),
    GpuFamily("sm75", "Turing", (7, 5), OPEN_RECOMMENDED, (10, 0), 410),
    GpuFamily("sm70", "Volta", (7, 0), PROPRIETARY_REQUIRED),
    GpuFamily("sm60", "Pascal", (6, 0), PROPRIETARY_REQUIRED),
    GpuFamily("sm50", "Maxwell", (5, 0), PROPRIETARY_REQUIRED),
    GpuFamily("sm30", "Kepler or older", (0, 0), PROPRIETARY_REQUIRED, last_major=4),
)


def family(cc: CC, machine: str | None = None) -> GpuFamily:
    """The family of compute capability `cc` on a host of CPU architecture `machine`: of the
    entries that match, one for this CPU architecture first, then the newest `first`.

    A capability newer than every entry is assumed to need what the newest family needs (the
    driver is forward compatible), with no serving rules until it has its own entry."""
    matching = [f for f in FAMILIES if f.matches(cc, machine)]
    if matching:
        return max(matching, key=lambda f: (f.machine is not None, f.first))
    newest = max(FAMILIES, key=lambda f: f.first)
    return dataclasses.replace(
        newest, key=f"sm{cc[0]}{cc[1]}", first=cc, backends=NO_RULE, simulated=None
    )


def gguf_dtype(cc: CC | None) -> str | None:
    """The --dtype GGUF needs on `cc`, or None where vLLM's default (bfloat16) works."""
    return family(cc).gguf_dtype if cc is not None else None


def simulated() -> dict[str, tuple[GpuFamily, Simulated]]:
    """Testbed profile name -> (family, simulated host), for every family the testbed offers."""
    return {f.simulated.profile: (f, f.simulated) for f in FAMILIES if f.simulated}


def cc_text(cc: CC) -> str:
    """(12, 0) -> "12.0", the spelling nvidia-smi and the facts use."""
    return f"{cc[0]}.{cc[1]}"
