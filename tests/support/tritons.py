"""The Tritons the kernel must work under: the one each supported vLLM release runs, through the
torch it pins. tests/unit/test_supported_tritons.py checks the table against the wheels'
METADATA on PyPI; the compile-for-every-target test and the interpreted tier run under each.

    triton_path(version) -> None for the installed Triton, else the folder that holds that
                            Triton from PyPI (~/.cache/glmops/triton-<version>)
    triton_env(version)  -> os.environ with that folder first on PYTHONPATH, for a subprocess
    compile_cache(version) -> Triton's cache folder for compiling backend/sparse_mla/ under it
    under_each_triton(run) -> run(version) for every one, two at a time
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from tests.support.module_file import SPARSE_MLA
from tests.support.vllm_wheels import CACHE

# vLLM release -> (the torch it pins, the Triton that torch pins): the first and last release of
# each torch. The patch set's layouts cover 0.16 onwards (v0_16 up to 0.23, v0_33 from 0.24).
VLLM_TRITONS = {
    "0.16.0": ("2.9.1", "3.5.1"),
    "0.17.0": ("2.10.0", "3.6.0"),
    "0.19.1": ("2.10.0", "3.6.0"),
    "0.20.0": ("2.11.0", "3.6.0"),
    "0.26.0": ("2.11.0", "3.6.0"),
    "0.27.0": ("2.13.0", "3.7.1"),
    "0.32.0": ("2.13.0", "3.7.1"),
    "0.33.0": ("2.14.0", "3.8.0"),  # torch 2.14 pins triton~=3.8.0: the newest such is 3.8.0
    "0.34.0": ("2.14.0", "3.8.0"),
}
TRITONS = sorted({version for _, version in VLLM_TRITONS.values()})


def triton_path(version: str) -> Path | None:
    """None for the installed Triton, else the folder that holds Triton ``version`` from PyPI,
    installed there once (beside it first, then renamed: an interrupted install is never
    taken for a whole one)."""
    import triton

    if version == triton.__version__:
        return None
    dest = CACHE / f"triton-{version}"
    if not (dest / ".complete").exists():
        tmp = dest.with_name(f"{dest.name}.{os.getpid()}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(tmp)]
        subprocess.run([*pip, f"triton=={version}"], check=True)
        (tmp / ".complete").write_text(version)
        shutil.rmtree(dest, ignore_errors=True)
        try:
            tmp.rename(dest)
        except OSError:  # another process installed it meanwhile
            shutil.rmtree(tmp, ignore_errors=True)
            if not (dest / ".complete").exists():
                raise
    return dest


def triton_env(version: str) -> dict[str, str]:
    """This process's environment with Triton ``version`` first on PYTHONPATH (unchanged for the
    installed one), for a subprocess that imports it."""
    env = dict(os.environ)
    path = triton_path(version)
    if path is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(path), env.get("PYTHONPATH")]))
    return env


def compile_cache(version: str) -> Path:
    """Triton ``version``'s cache folder (``TRITON_CACHE_DIR``) for compiles of
    backend/sparse_mla/, in the test cache and keyed by the Triton and the kernel's source: a
    machine compiles a configuration once, and a changed kernel starts an empty folder (Triton
    keys each entry by source, signature, options and its own build too; the folder's key keeps
    stale entries out of the way and easy to drop)."""
    digest = hashlib.sha256()
    for part in sorted(SPARSE_MLA.glob("*.py")):
        digest.update(part.name.encode() + b"\0" + part.read_bytes())
    return CACHE / "triton-compiles" / f"{version}-{digest.hexdigest()[:16]}"


T = TypeVar("T")


def under_each_triton(run: Callable[[str], T]) -> dict[str, T]:
    """Triton version -> ``run(version)``, for every supported Triton, two at a time (each run
    is a subprocess; two keep a 2-core machine busy)."""
    with ThreadPoolExecutor(2) as pool:
        return dict(zip(TRITONS, pool.map(run, TRITONS), strict=True))
