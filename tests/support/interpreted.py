"""Runs a module of the test tree in a process of its own: under another Triton than the
installed one (``tests.support.tritons.triton_env``), or under Triton's interpreter, which
Triton decides on when it is first imported (whether its own library functions, ``tl.zeros``
..., are interpreted) and which caches kernels by their source text, so neither can be left to
the pytest process, which imports Triton (and the kernels) for other tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def run_module(
    module: str, payload: object, timeout: int = 900, env: Mapping[str, str] | None = None
) -> Any:
    """``python3 -m module`` from the repository root, ``payload`` as JSON on its stdin; returns
    the JSON value its last line of output holds. ``env``: the environment to start from
    (default this process's; tests.support.tritons.triton_env puts another Triton first)."""
    run = subprocess.run(
        [sys.executable, "-m", module],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**(os.environ if env is None else env), "PYTHONDONTWRITEBYTECODE": "1"},
        timeout=timeout,
        check=False,
    )
    assert run.returncode == 0, f"{module}:\n{run.stderr[-4000:]}"
    return json.loads(run.stdout.splitlines()[-1])


def run_interpreted(
    module: str, payload: object, timeout: int = 900, env: Mapping[str, str] | None = None
) -> Any:
    """``run_module`` with ``TRITON_INTERPRET=1``: the module's kernels run in NumPy."""
    env = {**(os.environ if env is None else env), "TRITON_INTERPRET": "1"}
    return run_module(module, payload, timeout, env)
