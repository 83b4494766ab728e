"""Declared GPU profiles for testbed hosts (what the simulated nvidia-smi reports).

The values come from glmops.gpu.gpus (each family's `simulated` host, which mirrors a real device)
so GPU-dependent logic can be exercised on hosts without a GPU; real GPU behaviour is tested on real
GPUs only.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

from glmops.gpu import gpus
from glmops.testbed.errors import TestbedError


@dataclass(frozen=True)
class GpuProfile:
    """A homogeneous set of GPUs as a host would report them."""

    name: str
    gpu_name: str
    count: int
    compute_cap: str
    memory_total_mib: int
    driver_version: str
    cuda_version: str
    power_limit_w: int

    def to_json(self, host: str = "") -> str:
        """The profile file the simulator reads; per-GPU rows are derived, stable per host."""
        data = asdict(self)
        data["simulated"] = True
        data["host"] = host
        data["gpus"] = [
            {
                "index": i,
                "uuid": _uuid(host, self.name, i),
                "pci_bus_id": f"00000000:{0x18 + 0x10 * i:02X}:00.0",
            }
            for i in range(self.count)
        ]
        return json.dumps(data, indent=2) + "\n"


def _uuid(host: str, profile: str, index: int) -> str:
    """Deterministic GPU-<uuid> so repeated queries (and reboots) agree."""
    h = hashlib.sha256(f"{host}/{profile}/{index}".encode()).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


GPU_PROFILES: dict[str, GpuProfile] = {
    name: GpuProfile(
        name,
        sim.gpu_name,
        sim.count,
        gpus.cc_text(family.first),
        sim.memory_total_mib,
        sim.driver_version,
        sim.cuda_version,
        sim.power_limit_w,
    )
    for name, (family, sim) in gpus.simulated().items()
}


def get_profile(name: str) -> GpuProfile:
    """Look a profile up by name, listing the known ones when it is unknown."""
    try:
        return GPU_PROFILES[name]
    except KeyError:
        known = ", ".join(sorted(GPU_PROFILES))
        raise TestbedError(f"unknown GPU profile {name!r}; known: {known}") from None
