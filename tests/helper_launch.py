"""Run a host helper on this machine exactly as a host runs it: the engine's one launcher, the
shared envelope, arguments on stdin."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from glmops.context import helper_command, helper_stdin


def run_helper_here(name: str, args: dict[str, Any]) -> dict[str, Any]:
    proc = subprocess.run(
        ["sh", "-c", helper_command(name, sys.executable)],
        input=helper_stdin(name, args),
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(proc.stdout.splitlines()[-1])
