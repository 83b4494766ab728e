"""Runs a module of the test tree under Triton's interpreter, in a process of its own: Triton
decides when it is first imported whether its own library functions (``tl.zeros``, ...) are
interpreted, and the interpreter caches kernels by their source text, so neither can be left to
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


def run_interpreted(
    module: str, payload: object, timeout: int = 900, env: Mapping[str, str] | None = None
) -> Any:
    """``python3 -m module`` from the repository root with ``TRITON_INTERPRET=1``, ``payload``
    as JSON on its stdin; returns the JSON value its last line of output holds. ``env``: the
    environment to start from (default this process's; tests.support.tritons.triton_env puts
    another Triton first)."""
    env = {**(os.environ if env is None else env), "TRITON_INTERPRET": "1"}
    run = subprocess.run(
        [sys.executable, "-m", module],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**env, "PYTHONDONTWRITEBYTECODE": "1"},
        timeout=timeout,
        check=False,
    )
    assert run.returncode == 0, f"{module} under the interpreter:\n{run.stderr[-4000:]}"
    return json.loads(run.stdout.splitlines()[-1])
