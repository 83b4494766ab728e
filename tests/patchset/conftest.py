"""Fixtures over real vLLM wheels: an unpacked tree per supported profile, the helpers run as
on a host (subprocess, JSON envelope), and a CPU-stubbed preflight runner."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

import vllm_wheels  # noqa: E402

HELPERS = ROOT / "glmops" / "hosthelpers"
SUPPORTED = ("0.16.0", "0.33.0")
UNSUPPORTED = "0.10.2"


def run_helper(script: str, args: dict, env: dict | None = None, prefix: list | None = None):
    """Run a host helper as the engine does: JSON arguments on stdin, one JSON object out."""
    cmd = [sys.executable, *(prefix or []), str(HELPERS / script)]
    proc = subprocess.run(
        cmd, input=json.dumps(args), capture_output=True, text=True, env=env, timeout=600
    )
    assert proc.returncode == 0, f"helper crashed:\n{proc.stderr[-4000:]}"
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    assert len(lines) == 1, f"stdout must be one JSON object, got:\n{proc.stdout[-2000:]}"
    return json.loads(lines[0])


def tree_hashes(root: Path) -> dict[str, str]:
    """sha256 of every file under root (state dirs included: 'nothing changed' means it)."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


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
