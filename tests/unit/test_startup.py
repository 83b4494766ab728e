"""Start-up cost of the command line: a verb loads only what it needs (`--version` and
`--syntax-check` never load SSH, the executor or the terminal UI)."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

from glmops import __version__

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
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
        env=ENV,
        cwd=ROOT,
    )
    return done.stdout, set(json.loads(done.stderr.strip().splitlines()[-1]))


def test_version_loads_neither_the_engine_nor_ssh() -> None:
    out, modules = loaded("--version")
    assert out.startswith("glmops, version ")
    assert not {m for m in modules if m.split(".")[0] in HEAVY or m in HEAVY}


def test_version_loads_nothing_of_glmops_but_its_entry_and_not_the_cli_library() -> None:
    out, modules = loaded("--version")
    assert out == f"glmops, version {__version__}\n"
    assert {m for m in modules if m.split(".")[0] in ("glmops", "click")} == {
        "glmops",
        "glmops.cli",
        "glmops.cli.entry",
    }


def child_cpu_seconds(argv: list[str]) -> float:
    """CPU time (user + system) the command took: unlike wall time, barely moved by other
    work on a loaded machine."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, check=True, capture_output=True, timeout=60, cwd=ROOT, env=ENV)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def test_version_costs_little_more_cpu_than_starting_python() -> None:
    """`glmops --version` under 0.1 s: Python's own start-up plus at most 20 ms of ours (the
    least of three runs each, so a busy machine does not decide)."""
    python = min(child_cpu_seconds([sys.executable, "-c", "pass"]) for _ in range(3))
    script = "from glmops.cli.entry import main; main()"
    version = min(child_cpu_seconds([sys.executable, "-c", script, "--version"]) for _ in range(3))
    assert version < python + 0.02, (version, python)
    assert version < 0.1, version


def test_help_lists_the_verbs_without_loading_the_engine() -> None:
    out, modules = loaded("--help")
    assert "Usage: glmops" in out and "provision" in out and "testbed" in out
    assert not {m for m in modules if m.split(".")[0] in HEAVY or m in HEAVY}


def test_a_syntax_check_loads_the_playbook_but_not_what_runs_it(tmp_path: Path) -> None:
    playbook = tmp_path / "play.yml"
    playbook.write_text("- hosts: all\n  tasks:\n    - file: {path: /tmp/x, state: directory}\n")
    out, modules = loaded("run", "--syntax-check", str(playbook))
    assert "glmops.engine.playbook" in modules, out
    assert not {m for m in modules if m.split(".")[0] in HEAVY or m in HEAVY}
