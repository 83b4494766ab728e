"""Timeouts and interrupts over real SSH: the remote command's whole process group ends (also
through sudo), and an interrupted run leaves nothing running on the hosts."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from glmops.testbed import Testbed
from glmops.testbed.rootfs import DEPLOY_PASSWORD
from tests.support.engine import Runner
from tests.support.testbed import booted

pytestmark = pytest.mark.testbed

FIRST_INDEX = 181


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    with booted(tmp_path_factory.mktemp("signals-testbed"), FIRST_INDEX, 2) as testbed:
        yield testbed


@pytest.fixture
def inventory(bed: Testbed, tmp_path: Path) -> Path:
    path = tmp_path / "hosts.yml"
    shutil.copy(bed.inventory_path, path)
    return path


def _running(bed: Testbed, host: str, word: str) -> bool:
    return bed.exec(host, ["pgrep", "-f", word]).returncode == 0


def _marker() -> str:
    return str(uuid.uuid4().int % 10**8 + 10**8)


@pytest.mark.parametrize("user", ["root", "deploy"])
def test_a_timeout_ends_the_remote_process_group(
    run_playbook: Runner, inventory: Path, bed: Testbed, user: str
) -> None:
    host = f"tb{FIRST_INDEX}"
    if user != "root":
        inventory.write_text(inventory.read_text().replace("user: root", f"user: {user}"))
    marker = _marker()
    outcome = run_playbook(
        f"""
    - hosts: {host}
      gather_facts: false
      become: true
      tasks:
        - name: hangs
          shell: "sleep 7{marker} & sleep 8{marker}; wait"
          timeout: 3
    """,
        inventory,
        sudo_password=DEPLOY_PASSWORD if user != "root" else None,
    )
    assert outcome.exit_code == 2 and "timed out" in outcome.results()[0]["msg"]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (
        _running(bed, host, f"sleep 7{marker}") or _running(bed, host, f"sleep 8{marker}")
    ):
        time.sleep(0.2)
    assert not _running(bed, host, f"sleep 7{marker}"), "the command's child kept running"
    assert not _running(bed, host, f"sleep 8{marker}"), "the command kept running"


def test_sigint_ends_remote_commands_on_every_host(inventory: Path, bed: Testbed) -> None:
    hosts = [f"tb{FIRST_INDEX}", f"tb{FIRST_INDEX + 1}"]
    marker = _marker()
    playbook = inventory.parent / "play.yml"
    playbook.write_text(
        f"""
- hosts: testbed
  gather_facts: false
  tasks:
    - name: long
      shell: "sleep 3{marker} & sleep 4{marker}; wait"
    - name: after
      shell: touch /tmp/after-{marker}
"""
    )
    env = {**os.environ, "GLMOPS_RUN_DIR": str(inventory.parent / "runs")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "glmops.cli", "run", str(playbook), "-i", str(inventory)],
        cwd=inventory.parent,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not all(
            _running(bed, h, f"sleep 4{marker}") for h in hosts
        ):
            time.sleep(0.2)
        assert all(_running(bed, h, f"sleep 4{marker}") for h in hosts), "never started"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert "RECAP" in out and "interrupted" in err
    for host in hosts:
        assert not _running(bed, host, f"sleep 3{marker}"), f"left running on {host}"
        assert not _running(bed, host, f"sleep 4{marker}"), f"left running on {host}"
        assert bed.exec(host, ["test", "-e", f"/tmp/after-{marker}"]).returncode != 0
