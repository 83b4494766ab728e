#!/usr/bin/env python3
"""Run a play's read-only checks in one round trip (stdlib only):
`{"commands": [...], "timeout": s}` -> `{"results": [{"rc", "stdout", "stderr", "duration"}]}`.

Each command runs as the connection runs one (`/bin/sh -c`, stdin empty), in the order given;
its output comes back whole, for the task whose plan asks for it (glmops/engine/prefetch.py).
A command past its timeout is ended and answered with rc 124, as timeout(1) would.
"""

import subprocess
import time

from _envelope import main


def run_one(command: str, timeout: float) -> dict:
    started = time.monotonic()
    try:
        done = subprocess.run(
            ["/bin/sh", "-c", command],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout,
        )
        rc, stdout, stderr = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as expired:
        rc, stdout, stderr = 124, expired.stdout or b"", expired.stderr or b""
    return {
        "rc": rc,
        "stdout": stdout.decode(errors="replace"),
        "stderr": stderr.decode(errors="replace"),
        "duration": time.monotonic() - started,
    }


def run_checks(args: dict) -> dict:
    commands = args.get("commands") or []
    timeout = float(args.get("timeout") or 60)
    results = [run_one(str(command), timeout) for command in commands]
    return {
        "failed": False,
        "changed": False,
        "msg": f"{len(results)} check(s)",
        "results": results,
    }


if __name__ == "__main__":
    main(run_checks)
