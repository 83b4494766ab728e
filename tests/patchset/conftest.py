"""Fixtures over real vLLM wheels: an unpacked tree per supported profile, the helpers run as
on a host (subprocess, JSON envelope), and a CPU-stubbed preflight runner."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support import vllm_wheels
from tests.support.patchset import SUPPORTED, run_helper


@pytest.fixture(scope="session", params=SUPPORTED)
def vllm_version(request) -> str:
    return request.param


@pytest.fixture(scope="session")
def vllm_tree(vllm_version: str) -> Path:
    """Session-scoped, read-only unpacked wheel tree (contains `vllm/`). Copy before patching:
    see `vllm_scratch`."""
    return vllm_wheels.fetch_vllm_source(vllm_version)


@pytest.fixture
def vllm_scratch(vllm_version: str, tmp_path: Path) -> Path:
    """A writable site-packages copy of the wheel's tree, for one test."""
    return vllm_wheels.scratch_copy(vllm_version, tmp_path / "venv")


@pytest.fixture(scope="session")
def cpu_preflight(vllm_version: str):
    """Runs vllm_preflight.py against a given site-packages on CPU (see cpu_stub.py)."""
    deps = vllm_wheels.fetch_vllm_deps(vllm_version)
    compiled = vllm_wheels.compiled_modules(vllm_version)

    def run(site_packages: Path, **args) -> dict:
        env = dict(
            os.environ,
            PYTHONPATH=f"{site_packages}{os.pathsep}{deps}",
            VLLM_LOGGING_LEVEL="WARNING",
            PYTHONDONTWRITEBYTECODE="1",
        )
        prefix = [str(Path(__file__).with_name("cpu_stub.py")), json.dumps(compiled)]
        return run_helper("vllm_preflight.py", args, env=env, prefix=prefix)

    return run
