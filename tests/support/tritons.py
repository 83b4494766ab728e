"""The Tritons the kernel must work under: the one each supported vLLM release runs, through the
torch it pins. tests/unit/test_supported_tritons.py checks the table against the wheels'
METADATA on PyPI; the compile-for-every-target test and the interpreted tier run under each.

    triton_path(version) -> None for the installed Triton, else a folder to put first on
                            PYTHONPATH, holding that Triton from PyPI (~/.cache/glmops)
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import triton

from tests.support.vllm_wheels import CACHE

# vLLM release -> (the torch it pins, the Triton that torch pins): the first and last release of
# each torch. The patch set's layouts cover 0.16 onwards (v0_16 up to 0.23, v0_33 from 0.24).
VLLM_TRITONS = {
    "0.16.0": ("2.9.1", "3.5.1"),
    "0.17.0": ("2.10.0", "3.6.0"),
    "0.19.0": ("2.10.0", "3.6.0"),
    "0.20.0": ("2.11.0", "3.6.0"),
    "0.26.0": ("2.11.0", "3.6.0"),
    "0.27.0": ("2.13.0", "3.7.1"),
    "0.32.0": ("2.13.0", "3.7.1"),
    "0.33.0": ("2.14.0", "3.8.0"),  # torch 2.14 pins triton~=3.8.0: 3.8.0 is the newest
    "0.34.0": ("2.14.0", "3.8.0"),
}
TRITONS = sorted({version for _, version in VLLM_TRITONS.values()})


def triton_path(version: str) -> Path | None:
    """None for the installed Triton, else the folder that holds Triton ``version`` from PyPI,
    installed there once (outside the repo)."""
    if version == triton.__version__:
        return None
    dest = CACHE / f"triton-{version}"
    if not (dest / "triton" / "__init__.py").exists():
        pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(dest)]
        subprocess.run([*pip, f"triton=={version}"], check=True)
    return dest
