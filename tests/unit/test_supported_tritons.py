"""The Triton table the kernel's tests run under (tests/support/tritons.py) is what the vLLM
wheels pin: each release's torch, and that torch's Triton, read from their METADATA on PyPI."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from packaging.requirements import Requirement

pytest.importorskip("triton", reason="the table's module reads the installed Triton")

from tests.support.tritons import TRITONS, VLLM_TRITONS  # noqa: E402 (needs triton)


def _pin(project: str, version: str, dependency: str) -> Requirement:
    """What the Linux x86_64 wheel of project==version requires of ``dependency``: its METADATA,
    read from the package index by pip (no download of the wheel)."""
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "report.json"
        pip = [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--no-deps"]
        pip += ["--ignore-installed", "--target", str(Path(scratch) / "t"), "--report", str(report)]
        pip += ["--python-version", "3.12", "--only-binary=:all:"]
        for glibc in ("2_35", "2_31", "2_28", "2_17"):  # the tags these wheels carry
            pip += ["--platform", f"manylinux_{glibc}_x86_64"]
        pip.append(f"{project}=={version}")
        subprocess.run(pip, check=True, capture_output=True)
        (wheel,) = json.loads(report.read_text())["install"]
    pins = [Requirement(r) for r in wheel["metadata"].get("requires_dist", [])]
    (pin,) = [r for r in pins if r.name == dependency]
    return pin


def test_each_vllm_release_brings_its_triton() -> None:
    torches = dict(VLLM_TRITONS.values())  # torch -> Triton
    with ThreadPoolExecutor(4) as pool:
        torch_pins = pool.map(lambda v: _pin("vllm", v, "torch"), VLLM_TRITONS)
        triton_pins = pool.map(lambda v: _pin("torch", v, "triton"), torches)
        for (vllm, (torch_version, _)), pin in zip(VLLM_TRITONS.items(), torch_pins, strict=True):
            assert pin.specifier.contains(torch_version), f"vLLM {vllm}: {pin}"
        for (torch_version, triton_version), pin in zip(torches.items(), triton_pins, strict=True):
            assert pin.specifier.contains(triton_version), f"torch {torch_version}: {pin}"


def test_the_installed_triton_is_a_supported_vllms() -> None:
    import triton

    assert triton.__version__ in TRITONS, "the test extra's Triton is no supported vLLM's"
