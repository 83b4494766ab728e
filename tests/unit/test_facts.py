"""Facts: the probe (run here, and against a stand-in nvidia-smi) and the controller-side parser."""

from __future__ import annotations

import ctypes
import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from glmops.engine.context import helper_command, helper_stdin
from glmops.gpu.facts import HostFacts, parse_cc, parse_facts
from glmops.testbed import simulated_nvidia_smi
from glmops.testbed.profiles import GPU_PROFILES

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "facts"


def probe(args: dict, env: dict | None = None) -> dict:
    """The probe as the engine runs it: the one launcher, everything on stdin."""
    p = subprocess.run(
        ["sh", "-c", helper_command("facts_probe", sys.executable)],
        input=helper_stdin("facts_probe", args),
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert p.returncode == 0, p.stderr
    lines = p.stdout.strip().splitlines()
    assert len(lines) == 1, p.stdout
    out = json.loads(lines[0])
    assert out["failed"] is False and out["changed"] is False and isinstance(out["msg"], str)
    return out


def has_driver() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
        return True
    except OSError:
        return shutil.which("nvidia-smi") is not None


def rtx_like() -> dict:
    """An 8x RTX PRO 6000 Blackwell host (the sm120 fixture: probe against the simulated GPUs)."""
    return json.loads((FIXTURES / "sm120.json").read_text())


def test_h200_fixture_parses() -> None:
    f = parse_facts((FIXTURES / "h200.json").read_text())
    assert (f.os_id, f.os_version_id, f.machine) == ("ubuntu", "24.04", "x86_64")
    assert f.gpu_count == 1 and f.gpus and f.gpus[0].name == "NVIDIA H200"
    assert f.compute_capability == (9, 0) and f.gpus[0].memory_total_mib == 143771
    assert (f.driver_version, f.driver_branch, f.cuda_version) == ("580.159.04", "580", "13.0")
    assert f.kernel_module == "open" and f.nvidia_loaded and f.nouveau_loaded is False
    assert f.gpu_source == "nvml" and f.gpus[0].persistence_mode is True
    assert f.boot_id and f.cpu_count == 16 and f.mem_total_bytes and f.disk_free_bytes
    assert f.venv and f.venv.torch_version == "2.11.0" and f.venv.torch_cuda_version == "13.0"
    assert f.venv.torch_supports((9, 0)) and f.venv.torch_supports((12, 0))
    assert f.venv.vllm_version is None and "not installed" in (f.reason("venv.vllm") or "")
    assert f.patch_manifest is None and f.reason("patch_manifest")


def test_h200_nvml_and_nvidia_smi_agree() -> None:
    """Recorded on the same H200: the CSV fallback reports what NVML reports."""
    a = parse_facts((FIXTURES / "h200.json").read_text())
    b = parse_facts((FIXTURES / "h200-nvidia-smi.json").read_text())
    assert b.gpu_source == "nvidia-smi"
    assert (a.gpus, a.driver_version, a.cuda_version) == (b.gpus, b.driver_version, b.cuda_version)


def test_rtx_pro_6000_x8_like() -> None:
    f = parse_facts(rtx_like())
    assert f.gpu_count == 8 and f.compute_capabilities == ((12, 0),)
    assert f.compute_capability == (12, 0) and f.pci_gpu_count == 8
    with pytest.raises(dataclasses.FrozenInstanceError):
        f.boot_id = "x"  # type: ignore[misc]


def test_mixed_host_reports_lowest_capability() -> None:
    d = rtx_like()
    d["gpus"][3]["compute_cap"] = "8.9"
    assert parse_facts(d).compute_capabilities == ((8, 9), (12, 0))
    assert parse_facts(d).compute_capability == (8, 9)


def test_nulls_everywhere_are_tolerated() -> None:
    f = parse_facts({})
    assert isinstance(f, HostFacts) and f.gpus is None and f.gpu_count == 0
    assert f.compute_capability is None and f.driver_branch is None and f.venv is None
    f = parse_facts({"gpus": [{"compute_cap": None, "index": None}], "venv": {"path": "/v"}})
    assert f.gpu_count == 1 and f.compute_capability is None and f.gpus[0].index == 0
    assert f.venv and f.venv.torch_supports((9, 0)) is None


def test_driverless_host_counts_pci_gpus() -> None:
    d = rtx_like()
    d.update(gpus=None, driver_version=None, gpu_source=None)
    f = parse_facts(d)
    assert f.gpus is None and f.gpu_count == 8 and f.has_nvidia_gpu


@pytest.mark.parametrize(
    "text, want",
    [("12.0", (12, 0)), ("9.0", (9, 0)), ("10", (10, 0)), ("", None), (None, None), ("x.y", None)],
)
def test_parse_cc(text: str | None, want: tuple[int, int] | None) -> None:
    assert parse_cc(text) == want


def test_probe_here_gives_nulls_with_reasons(tmp_path: Path) -> None:
    out = probe({"model_dir": str(tmp_path / "not" / "yet"), "venv": str(tmp_path / "venv")})
    f = parse_facts(out)
    assert f.boot_id and f.kernel_release and f.cpu_count and f.mem_total_bytes
    assert out["disk"]["probed_path"] == str(tmp_path) and out["disk"]["exists"] is False
    assert out["venv"] is None and "absent" in out["errors"]["venv"]
    assert out["patch_manifest"] is None and "absent" in out["errors"]["patch_manifest"]
    for key in ("os", "memory", "disk", "boot_id", "gpus", "venv", "patch_manifest"):
        assert out[key] is not None or key in out["errors"], key
    if has_driver():
        pytest.skip("this machine has an NVIDIA driver; the no-GPU assertions need one without")
    assert out["gpus"] is None and out["gpu_source"] is None
    assert "not found" in out["errors"]["nvidia_smi"] and "nvml" in out["errors"]
    assert parse_facts(out).gpu_count == 0


def test_probe_reads_a_venv_and_a_manifest(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    (venv / ".glmops-patch").mkdir()
    (venv / ".glmops-patch" / "manifest.json").write_text('{"patches": ["x"]}')
    out = probe({"model_dir": str(tmp_path), "venv": str(venv)})
    assert out["patch_manifest"] == {"patches": ["x"]}
    assert out["venv"]["python_version"] == ".".join(map(str, sys.version_info[:3]))
    assert "vllm" in out["venv"]["packages"]


def test_probe_against_the_testbed_nvidia_smi(tmp_path: Path) -> None:
    """The CSV fallback parses what the testbed's simulated nvidia-smi answers."""
    profile = tmp_path / "gpu-profile.json"
    profile.write_text(GPU_PROFILES["rtx-pro-6000-x8"].to_json("tb1"))
    bindir = tmp_path / "bin"
    bindir.mkdir()
    smi = bindir / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\nexec {sys.executable} {simulated_nvidia_smi.__file__} "$@"\n')
    smi.chmod(0o755)
    env = dict(
        os.environ, PATH=f"{bindir}:{os.environ['PATH']}", GLMOPS_TESTBED_GPU_PROFILE=str(profile)
    )
    out = probe({"model_dir": str(tmp_path), "gpu_source": "nvidia-smi"}, env=env)
    f = parse_facts(out)
    assert f.gpu_source == "nvidia-smi" and f.gpu_count == 8
    assert f.compute_capabilities == ((12, 0),) and f.cuda_version == "13.0"
    assert f.driver_version == "580.95.05" and all(g.persistence_mode for g in f.gpus or ())
    assert f.gpus and f.gpus[7].memory_total_mib == 97887 and f.gpus[7].uuid
