"""SIGINT and SIGTERM stop a run at any point (issue 44, item 5), even while a template renders
a (practically) endless loop on the controller: `glmops run` exits with 130 or 143, promptly,
with its recap."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

ENDLESS = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"


@pytest.mark.parametrize(
    ("signum", "where"),
    [
        (signal.SIGTERM, "task argument"),
        (signal.SIGINT, "task argument"),
        (signal.SIGTERM, "template file"),
    ],
)
def test_a_signal_stops_a_run_during_a_long_rendering(
    tmp_path: Path, hostile: Any, signum: int, where: str
) -> None:
    (tmp_path / "endless.j2").write_text(ENDLESS)
    render = (
        f'debug: {{msg: "{ENDLESS}"}}'
        if where == "task argument"
        else f"template: {{src: {tmp_path}/endless.j2, dest: {tmp_path}/never}}"
    )
    playbook = tmp_path / "site.yml"
    playbook.write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n"
        f"    - command: touch {tmp_path}/started\n"
        f"    - {render}\n"
        f"    - command: touch {tmp_path}/after\n"
    )
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        f"all:\n  hosts:\n    here: {{connection: local, state_dir: '{tmp_path}/state'}}\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(__file__).parents[2]),
        "GLMOPS_RUN_DIR": str(tmp_path / "runs"),
    }
    run = subprocess.Popen(
        [sys.executable, "-m", "glmops.cli", "run", str(playbook), "-i", str(inventory)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "started").exists() and run.poll() is None:
            assert time.monotonic() < deadline, "the run did not start its first task"
            time.sleep(0.05)
        time.sleep(1)  # well inside the endless rendering
        assert run.poll() is None, run.communicate()[0]
        run.send_signal(signum)
        sent = time.monotonic()
        try:
            output, _ = run.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            output = None
        took = time.monotonic() - sent
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    name = f"{signal.Signals(signum).name} during a rendering ({where})"
    hostile.check(
        name,
        output is not None and run.returncode == 128 + signum and took < 10,
        f"exit {run.returncode} after {took:.1f}s: {(output or '')[-800:]}",
    )
    assert "rendering stopped: the run was interrupted" in output
    assert not (tmp_path / "after").exists()
