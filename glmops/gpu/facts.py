"""Typed host facts, parsed from the JSON that hosthelpers/facts_probe.py prints (read
through its reply schema, FactsReply, so every key read here is one the probe writes).

The probe reports a missing fact as null plus a reason in `errors`; the parser keeps that shape
(None fields, `errors` map) so policy code can tell "absent" from "zero" and explain why.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from glmops.hosthelpers.facts_probe import (
    DiskInfo,
    FactsReply,
    GpuInfo,
    KernelInfo,
    KernelModuleInfo,
    MemoryInfo,
    OsRelease,
    PythonInfo,
    VenvInfo,
)


def parse_cc(text: str | None) -> tuple[int, int] | None:
    """'12.0' -> (12, 0); anything unparsable -> None (compare as ints, never as strings)."""
    if not text:
        return None
    major, _, minor = str(text).strip().partition(".")
    try:
        return int(major), int(minor or 0)
    except ValueError:
        return None


def _int(v: Any) -> int | None:
    try:
        return int(v) if v is not None else None
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class GpuFacts:
    index: int
    name: str | None
    compute_cap: tuple[int, int] | None
    memory_total_mib: int | None
    driver_version: str | None
    persistence_mode: bool | None = None
    pci_bus_id: str | None = None
    uuid: str | None = None

    @classmethod
    def from_dict(cls, d: GpuInfo, pos: int = 0) -> GpuFacts:
        idx = _int(d.get("index"))
        return cls(
            index=pos if idx is None else idx,
            name=d.get("name"),
            compute_cap=parse_cc(d.get("compute_cap")),
            memory_total_mib=_int(d.get("memory_total_mib")),
            driver_version=d.get("driver_version"),
            persistence_mode=d.get("persistence_mode"),
            pci_bus_id=d.get("pci_bus_id"),
            uuid=d.get("uuid"),
        )


@dataclass(frozen=True)
class VenvFacts:
    path: str
    python_version: str | None
    vllm_version: str | None
    torch_version: str | None
    torch_cuda_version: str | None
    torch_cuda_arch_list: tuple[str, ...] | None
    packages: Mapping[str, str | None] = field(default_factory=dict)
    vllm_path: str | None = None

    @classmethod
    def from_dict(cls, d: VenvInfo) -> VenvFacts:
        arch = d.get("torch_cuda_arch_list")
        return cls(
            path=d.get("path", ""),
            python_version=d.get("python_version") or d.get("pyvenv_version"),
            vllm_version=d.get("vllm_version"),
            torch_version=d.get("torch_version"),
            torch_cuda_version=d.get("torch_cuda_version"),
            torch_cuda_arch_list=tuple(arch) if arch is not None else None,
            packages=dict(d.get("packages") or {}),
            vllm_path=d.get("vllm_path"),
        )

    def torch_supports(self, cc: tuple[int, int]) -> bool | None:
        """Whether torch ships SASS for this GPU (sm_XY in its arch list); None if unknown."""
        if self.torch_cuda_arch_list is None:
            return None
        return f"sm_{cc[0]}{cc[1]}" in self.torch_cuda_arch_list


@dataclass(frozen=True)
class HostFacts:
    hostname: str | None
    os_id: str | None
    os_version_id: str | None
    os_codename: str | None
    kernel_release: str | None
    machine: str | None
    cpu_count: int | None
    mem_total_bytes: int | None
    disk_free_bytes: int | None
    disk_path: str | None
    boot_id: str | None
    python_version: str | None
    gpus: tuple[GpuFacts, ...] | None  # None: could not ask; (): asked, none there
    gpu_source: str | None
    pci_gpu_count: int | None  # NVIDIA display controllers on the PCI bus (no driver needed)
    driver_version: str | None
    cuda_version: str | None  # the CUDA version the driver supports
    kernel_module: str | None  # "open" | "proprietary" | None (not loaded)
    nvidia_loaded: bool | None
    nouveau_loaded: bool | None
    driver_mismatch: bool
    secure_boot: bool | None
    dgx_release: bool
    reboot_required: bool
    venv: VenvFacts | None
    patch_manifest: Mapping[str, Any] | None
    errors: Mapping[str, str]
    raw: Mapping[str, Any] = field(repr=False, compare=False, default_factory=dict)

    @property
    def gpu_count(self) -> int:
        """GPUs the driver reports, else those seen on the PCI bus (a host without a driver)."""
        if self.gpus:
            return len(self.gpus)
        return self.pci_gpu_count or 0

    @property
    def has_nvidia_gpu(self) -> bool:
        return self.gpu_count > 0

    @property
    def compute_capabilities(self) -> tuple[tuple[int, int], ...]:
        """Distinct capabilities, lowest first (a mixed host is rare but possible)."""
        return tuple(sorted({g.compute_cap for g in self.gpus or () if g.compute_cap}))

    @property
    def compute_capability(self) -> tuple[int, int] | None:
        """The lowest capability on the host: the one every build must support."""
        ccs = self.compute_capabilities
        return ccs[0] if ccs else None

    @property
    def driver_branch(self) -> str | None:
        """'580.159.04' -> '580'."""
        return self.driver_version.split(".", 1)[0] if self.driver_version else None

    def reason(self, key: str) -> str | None:
        """Why a fact is missing, as the probe reported it."""
        return self.errors.get(key)


def parse_facts(data: Mapping[str, Any] | str | bytes) -> HostFacts:
    """Probe JSON (text or decoded) -> HostFacts; tolerant of nulls and missing keys."""
    d = cast(FactsReply, json.loads(data) if isinstance(data, (str, bytes)) else data)
    # A fact the probe could not read is null: read it as a record with no keys.
    os_ = d.get("os") or cast(OsRelease, {})
    kern = d.get("kernel") or cast(KernelInfo, {})
    disk = d.get("disk") or cast(DiskInfo, {})
    km = d.get("kernel_module") or cast(KernelModuleInfo, {})
    gpus_raw = d.get("gpus")
    gpus = None
    if gpus_raw is not None:
        gpus = tuple(GpuFacts.from_dict(g, i) for i, g in enumerate(gpus_raw))
    pci = d.get("pci_gpus")
    venv = d.get("venv")
    return HostFacts(
        hostname=d.get("hostname"),
        os_id=os_.get("id"),
        os_version_id=os_.get("version_id"),
        os_codename=os_.get("codename"),
        kernel_release=kern.get("release"),
        machine=kern.get("machine"),
        cpu_count=_int(d.get("cpu_count")),
        mem_total_bytes=_int((d.get("memory") or cast(MemoryInfo, {})).get("total_bytes")),
        disk_free_bytes=_int(disk.get("free_bytes")),
        disk_path=disk.get("path"),
        boot_id=d.get("boot_id"),
        python_version=(d.get("python") or cast(PythonInfo, {})).get("version"),
        gpus=gpus,
        gpu_source=d.get("gpu_source"),
        pci_gpu_count=len(pci) if pci is not None else None,
        driver_version=d.get("driver_version"),
        cuda_version=d.get("cuda_version"),
        kernel_module=km.get("flavour"),
        nvidia_loaded=km.get("nvidia_loaded"),
        nouveau_loaded=km.get("nouveau_loaded"),
        driver_mismatch=bool(d.get("driver_mismatch")),
        secure_boot=d.get("secure_boot"),
        dgx_release=bool(d.get("dgx_release")),
        reboot_required=bool(d.get("reboot_required")),
        venv=VenvFacts.from_dict(venv) if venv else None,
        patch_manifest=d.get("patch_manifest"),
        errors=dict(d.get("errors") or {}),
        raw=d,
    )
