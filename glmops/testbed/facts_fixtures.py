"""Facts fixtures per GPU family: the facts probe's answer against the simulated nvidia-smi.

`python3 -m glmops.testbed.facts_fixtures BASE.json DIR` writes DIR/<family key>.json for every
family in glmops.gpu.gpus that the testbed simulates. The GPU part is what the real facts probe
parses from the simulated nvidia-smi; the rest of the host (OS, kernel, venv, PCI and module
state, which the machine running this lacks) comes from BASE, a real GPU host's probe output.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from glmops.engine.context import run_helper_here
from glmops.gpu import gpus
from glmops.testbed import simulated_nvidia_smi
from glmops.testbed.profiles import GPU_PROFILES

HOST = "tb1"  # the simulated GPUs' UUIDs derive from the host name
PROBED = ("msg", "driver_version", "cuda_version", "gpus", "gpu_source")


def probe_simulated(profile: str) -> dict[str, Any]:
    """The facts probe's reply on a host whose nvidia-smi is the testbed's simulation."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "gpu-profile.json")
        path.write_text(GPU_PROFILES[profile].to_json(HOST))
        smi = Path(tmp, "nvidia-smi")
        smi.write_text(f'#!/bin/sh\nexec {sys.executable} {simulated_nvidia_smi.__file__} "$@"\n')
        smi.chmod(0o755)
        env = dict(
            os.environ,
            PATH=f"{tmp}:{os.environ.get('PATH', '')}",
            GLMOPS_TESTBED_GPU_PROFILE=str(path),
        )
        args = {"model_dir": tmp, "gpu_source": "nvidia-smi"}
        return run_helper_here("facts_probe", args, env=env)


def fixture(family: gpus.GpuFamily, base: dict[str, Any]) -> dict[str, Any]:
    """`base` (a real host's facts) with the GPUs of `family`'s simulated host."""
    sim = family.simulated
    if sim is None:
        raise ValueError(f"GPU family {family.key} has no simulated host to probe")
    probed = probe_simulated(sim.profile)
    out = json.loads(json.dumps(base))
    out.update({key: probed[key] for key in PROBED})
    out["pci_gpus"] = [
        {
            "bus_id": g["pci_bus_id"].lower()[4:],
            "device_id": sim.pci_device_id,
            "class": sim.pci_class,
            "driver": "nvidia",
        }
        for g in probed["gpus"]
    ]
    module = out["kernel_module"]
    old = module.get("loaded_version")
    module["loaded_version"] = sim.driver_version
    if old and module.get("nvrm"):
        module["nvrm"] = module["nvrm"].replace(old, sim.driver_version)
    return out


def write_all(base_path: Path, folder: Path) -> list[Path]:
    """Write one fixture per simulated GPU family; returns the paths written."""
    base = json.loads(base_path.read_text())
    written = []
    for family, _sim in gpus.simulated().values():
        path = folder / f"{family.key}.json"
        path.write_text(json.dumps(fixture(family, base), indent=1) + "\n")
        written.append(path)
    return written


if __name__ == "__main__":
    for p in write_all(Path(sys.argv[1]), Path(sys.argv[2])):
        print(p)
