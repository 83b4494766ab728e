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

from tests.support.tritons import TRITONS, VLLM_TRITONS


def _metadata(requirement: str) -> dict:
    """The METADATA of the Linux x86_64 wheel pip would install for ``requirement`` (the newest
    that satisfies it), read from the package index: pip's dry-run report, no wheel downloaded."""
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "report.json"
        pip = [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--no-deps"]
        pip += ["--ignore-installed", "--target", str(Path(scratch) / "t"), "--report", str(report)]
        pip += ["--python-version", "3.12", "--only-binary=:all:"]
        for glibc in ("2_35", "2_31", "2_28", "2_17"):  # the tags these wheels carry
            pip += ["--platform", f"manylinux_{glibc}_x86_64"]
        subprocess.run([*pip, requirement], check=True, capture_output=True)
        (wheel,) = json.loads(report.read_text())["install"]
    return wheel["metadata"]


def _pin(project: str, version: str, dependency: str) -> Requirement:
    """What project==version requires of ``dependency``."""
    requires = _metadata(f"{project}=={version}").get("requires_dist", [])
    (pin,) = [r for r in map(Requirement, requires) if r.name == dependency]
    return pin


def test_each_vllm_release_brings_its_triton() -> None:
    """Each release's torch pin, and the Triton a fresh install of that torch gets (the newest
    its pin admits: torch 2.14 pins ``triton~=3.8.0``)."""
    pairs = sorted(set(VLLM_TRITONS.values()))  # (torch, Triton)

    def triton_for(torch_version: str) -> str:
        return _metadata(f"triton{_pin('torch', torch_version, 'triton').specifier}")["version"]

    with ThreadPoolExecutor(4) as pool:
        torch_pins = pool.map(lambda v: _pin("vllm", v, "torch"), VLLM_TRITONS)
        tritons = pool.map(triton_for, [torch_version for torch_version, _ in pairs])
        for (vllm, (torch_version, _)), pin in zip(VLLM_TRITONS.items(), torch_pins, strict=True):
            assert pin.specifier.contains(torch_version), f"vLLM {vllm}: {pin}"
        for (torch_version, triton_version), resolved in zip(pairs, tritons, strict=True):
            assert resolved == triton_version, f"torch {torch_version} gets Triton {resolved}"


def test_the_installed_triton_is_a_supported_vllms() -> None:
    triton = pytest.importorskip("triton", reason="no Triton installed")

    assert triton.__version__ in TRITONS, "the test extra's Triton is no supported vLLM's"
