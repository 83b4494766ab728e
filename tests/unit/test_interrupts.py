"""SIGINT/SIGTERM and timeouts: the run stops, running commands end with their children, the
recap says what was interrupted, and pending notifications survive for the next run.

The CLI runs as a real process on a local-connection host, so the signals are real."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.support.engine import Runner


def _alive(pattern: str) -> bool:
    """Whether any process has exactly this unique word in its command line."""
    return subprocess.run(["pgrep", "-f", pattern], capture_output=True).returncode == 0


def _wait_for(predicate, timeout: float = 15) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "hosts.yml").write_text(
        f"all:\n  vars: {{state_dir: '{tmp_path}/state'}}\n"
        "  hosts:\n    here: {connection: local}\n"
    )
    return tmp_path


def _playbook(project: Path, marker: str) -> Path:
    path = project / "play.yml"
    path.write_text(
        f"""
- hosts: all
  gather_facts: false
  tasks:
    - name: change
      copy: {{dest: "{project}/conf", content: "{{{{ v }}}}"}}
      notify: note it
    - name: long
      shell: "sleep 3{marker} & sleep 4{marker}; wait"
      tags: [long]
    - name: after
      shell: touch {project}/after
  handlers:
    - name: note it
      shell: echo handled >> {project}/handled
"""
    )
    return path


def _start(project: Path, playbook: Path, *extra: str) -> subprocess.Popen[str]:
    env = {**os.environ, "GLMOPS_RUN_DIR": str(project / "runs")}
    return subprocess.Popen(
        [sys.executable, "-m", "glmops.cli", "run", str(playbook), "-i", "hosts.yml", *extra],
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_stops_the_run_ends_commands_and_keeps_notifications(
    project: Path, signum: int, code: int
) -> None:
    marker = str(uuid.uuid4().int % 10**8 + 10**8)
    playbook = _playbook(project, marker)
    proc = _start(project, playbook, "-e", "v=1")
    try:
        assert _wait_for(lambda: _alive(f"sleep 4{marker}")), "the long task never started"
        started = time.monotonic()
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == code, err
    assert time.monotonic() - started < 10
    assert "RECAP" in out and "interrupted" in err and "here in 'long'" in err, err
    assert not _alive(f"sleep 3{marker}") and not _alive(f"sleep 4{marker}"), "left running"
    assert not (project / "after").exists(), "a task started after the interrupt"
    assert not (project / "handled").exists(), "a handler ran after the interrupt"
    # The next run replays the notification the interrupted run left pending.
    again = _start(project, playbook, "-e", "v=1", "--skip-tags", "long")
    out, err = again.communicate(timeout=60)
    assert (project / "handled").read_text() == "handled\n", err


def test_a_second_sigint_exits_at_once_and_kills_what_ignores_sigterm(project: Path) -> None:
    marker = str(uuid.uuid4().int % 10**8 + 10**8)
    playbook = project / "stubborn.yml"
    playbook.write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n"
        f"    - shell: \"trap '' TERM; sleep 5{marker} & trap '' TERM; sleep 6{marker}; wait\"\n"
    )
    proc = _start(project, playbook)
    try:
        assert _wait_for(lambda: _alive(f"sleep 6{marker}"))
        proc.send_signal(signal.SIGINT)
        time.sleep(0.3)
        started = time.monotonic()
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert time.monotonic() - started < 1.5
    assert _wait_for(lambda: not _alive(f"sleep 5{marker}") and not _alive(f"sleep 6{marker}"), 3)


def test_a_timeout_ends_the_commands_children(run_playbook: Runner, local_inventory: Path) -> None:
    marker = str(uuid.uuid4().int % 10**8 + 10**8)
    outcome = run_playbook(
        f"""
    - hosts: all
      gather_facts: false
      tasks:
        - name: hangs
          shell: "sleep 7{marker} & sleep 8{marker}; wait"
          timeout: 1
    """,
        local_inventory,
    )
    assert outcome.exit_code == 2
    assert "timed out" in outcome.results()[0]["msg"]
    assert _wait_for(lambda: not _alive(f"sleep 7{marker}"), 5), "the child kept running"


def _kill_leftovers(pattern: str) -> None:
    """End the processes this test started (found by its unique word), by pid."""
    found = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout
    for pid in found.split():
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGKILL)


def test_one_changing_run_per_host_and_a_dead_run_leaves_no_lock(
    project: Path, run_playbook: Runner
) -> None:
    marker = str(uuid.uuid4().int % 10**8 + 10**8)
    slow = project / "slow.yml"
    slow.write_text(
        f"- hosts: all\n  gather_facts: false\n  tasks:\n    - shell: sleep 9{marker}\n"
    )
    quick = f"""
    - hosts: all
      gather_facts: false
      tasks:
        - copy: {{dest: "{project}/quick", content: "x"}}
    """
    inventory = project / "hosts.yml"
    holder = _start(project, slow)
    try:
        assert _wait_for(lambda: _alive(f"sleep 9{marker}"))
        blocked = run_playbook(quick, inventory)
        assert blocked.exit_code == 2
        message = blocked.results()[0]["msg"]
        assert f"another glmops run is changing this host: pid {holder.pid} on controller" in (
            message
        ), message
        assert not (project / "quick").exists()
        assert run_playbook(quick, inventory, check=True).exit_code == 3, "check was blocked"
        holder.kill()  # kill -9: no chance to release anything
        holder.wait()
        after = run_playbook(quick, inventory)
        assert after.exit_code == 0, after.results()
        assert (project / "quick").read_text() == "x"
    finally:
        holder.kill()
        _kill_leftovers(f"sleep 9{marker}")
