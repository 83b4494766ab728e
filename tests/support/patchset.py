"""The patch-set tests' helpers: the supported vLLM versions, host helpers run as on a host, tree
hashes."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
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
