"""Start-up cost of the command line: a verb loads only what it needs (`--version` and
`--syntax-check` never load SSH, the executor or the terminal UI)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("paramiko", "fabric", "rich", "glmops.engine.executor")

PROBE = """
import json, runpy, sys
sys.argv = ["glmops", *json.loads(sys.argv[1])]
try:
    runpy.run_module("glmops.cli", run_name="__main__")
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def loaded(*argv: str) -> tuple[str, set[str]]:
    """What the command printed, and every module it had loaded when it was done."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(argv)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
    )
    return done.stdout, set(json.loads(done.stderr.strip().splitlines()[-1]))


def test_version_loads_neither_the_engine_nor_ssh() -> None:
    out, modules = loaded("--version")
    assert out.startswith("glmops, version ")
    assert not {m for m in modules if m.split(".")[0] in HEAVY or m in HEAVY}


def test_a_syntax_check_loads_the_playbook_but_not_what_runs_it(tmp_path: Path) -> None:
    playbook = tmp_path / "play.yml"
    playbook.write_text("- hosts: all\n  tasks:\n    - file: {path: /tmp/x, state: directory}\n")
    out, modules = loaded("run", "--syntax-check", str(playbook))
    assert "glmops.engine.playbook" in modules, out
    assert not {m for m in modules if m.split(".")[0] in HEAVY or m in HEAVY}
