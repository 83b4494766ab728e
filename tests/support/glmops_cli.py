"""The glmops CLI as the testbed tests run it: a subprocess with ``--json``, events parsed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any


def run_cli(
    *args: str, env: dict[str, str], cwd: Path, timeout: float = 900, ok: tuple[int, ...] = (0,)
) -> tuple[int, list[dict[str, Any]], str]:
    """(exit code, JSON events, stderr) of ``python -m glmops.cli ARGS --json``. Output of a run
    whose exit code is not in ``ok`` is printed, so pytest shows it when the test fails."""
    proc = subprocess.run(
        [sys.executable, "-m", "glmops.cli", *args, "--json"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.stdout.startswith("["):  # `glmops status --json`: one JSON list of rows
        events = json.loads(proc.stdout)
    else:
        events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode not in ok:
        print(proc.stdout[-4000:], proc.stderr[-4000:])
    return proc.returncode, events, proc.stderr


def tasks_named(events: list[dict[str, Any]], prefix: str) -> list[dict[str, Any]]:
    """Task and handler events whose name starts with ``prefix``, in run order."""
    return [
        e for e in events if e.get("event") in ("task", "handler") and e["task"].startswith(prefix)
    ]
