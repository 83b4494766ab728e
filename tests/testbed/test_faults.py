"""Fault injection on testbed hosts: signals at random points, `kill -9` during an upload, a
host whose network is cut mid-task, a host rebooted mid-run, two runs at once, and a full disk.
In every case nothing is lost and nothing is half-written, and a re-run converges. The suite
prints its counts (cases tried, cases passed) at the end."""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from glmops.testbed import Testbed
from glmops.testbed.inventory import host_address
from tests.support.engine import Runner
from tests.support.testbed import booted, host_read

pytestmark = pytest.mark.testbed

FIRST_INDEX = 185
HOSTS = [f"tb{FIRST_INDEX + i}" for i in range(3)]
SIGNAL_TRIALS = 6


class Tally:
    """Cases tried and passed, printed when the module ends."""

    def __init__(self) -> None:
        self.tried = 0
        self.passed = 0

    def case(self, ok: bool) -> bool:
        self.tried += 1
        self.passed += int(ok)
        return ok


@pytest.fixture(scope="module")
def tally() -> Iterator[Tally]:
    counts = Tally()
    yield counts
    print(
        f"\nfault injection: {counts.tried} cases tried, {counts.passed} passed",
        file=sys.__stderr__,
    )


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    with booted(tmp_path_factory.mktemp("faults-testbed"), FIRST_INDEX, len(HOSTS)) as testbed:
        yield testbed


@pytest.fixture
def inventory(bed: Testbed, tmp_path: Path) -> Path:
    path = tmp_path / "hosts.yml"
    shutil.copy(bed.inventory_path, path)
    return path


def _cli(inventory: Path, playbook: Path, *extra: str) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "GLMOPS_RUN_DIR": str(inventory.parent / "runs"),
        "GLMOPS_HOME": str(inventory.parent / "home"),
    }
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "glmops.cli",
            "run",
            str(playbook),
            "-i",
            str(inventory),
            *extra,
        ],
        cwd=inventory.parent,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _running(bed: Testbed, host: str, word: str) -> bool:
    return bed.exec(host, ["pgrep", "-f", word]).returncode == 0


def _leftovers(bed: Testbed, host: str, folder: str) -> list[str]:
    """Temporary files a write left in `folder` (a finished or ended write leaves none)."""
    listed = bed.exec(host, ["sh", "-c", f"ls -a {folder} 2>/dev/null | grep glmops- || true"])
    return listed.stdout.split()


MULTI = """
- hosts: testbed
  gather_facts: false
  tasks:
    - name: folder
      file: {{path: /srv/faults, state: directory, mode: "0755"}}
    - name: config
      copy: {{dest: /srv/faults/app.conf, content: "{{{{ text }}}}\\n"}}
      notify: record restart
    - name: work
      shell: "sleep 0.{marker} && sleep 1.{marker}"
    - name: more config
      copy: {{dest: /srv/faults/other.conf, content: "{{{{ text }}}}-other\\n"}}
    - name: more work
      shell: "sleep 1.{marker}"
  handlers:
    - name: record restart
      shell: echo "{{{{ text }}}}" >> /srv/faults/restarts
"""


def test_signals_at_random_points_lose_nothing(
    bed: Testbed, inventory: Path, tally: Tally, run_playbook: Runner
) -> None:
    rng = random.Random(20261201)
    playbook = inventory.parent / "multi.yml"
    failures = []
    for trial in range(SIGNAL_TRIALS):
        marker = str(rng.randrange(10**6, 10**7))
        playbook.write_text(MULTI.format(marker=marker))
        signum = signal.SIGINT if trial % 2 == 0 else signal.SIGTERM
        text = f"v{trial}"
        proc = _cli(inventory, playbook, "-e", f"text={text}")
        time.sleep(rng.uniform(0.5, 3.5))
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=120)
        # Done (0), stopped (128 + n), or killed before the run began (-n: nothing started).
        expected = {0, 128 + signum, -signum}
        problems = [] if proc.returncode in expected else [f"rc {proc.returncode}"]
        time.sleep(0.5)
        for host in HOSTS:
            if _running(bed, host, marker):
                problems.append(f"{host}: a command kept running")
            if leftovers := _leftovers(bed, host, "/srv/faults"):
                problems.append(f"{host}: temporary files left: {leftovers}")
            conf = host_read(bed, host, "/srv/faults/app.conf")
            if conf is not None and not conf.endswith("\n"):
                problems.append(f"{host}: half a file: {conf!r}")
        # The re-run converges, and a restart notified before the signal is not lost.
        again = _cli(inventory, playbook, "-e", f"text={text}")
        again.communicate(timeout=180)
        if again.returncode != 0:
            problems.append(f"re-run rc {again.returncode}")
        for host in HOSTS:
            if host_read(bed, host, "/srv/faults/app.conf") != f"{text}\n":
                problems.append(f"{host}: app.conf not converged")
            restarts = (host_read(bed, host, "/srv/faults/restarts") or "").split()
            if not restarts or restarts[-1] != text:
                problems.append(f"{host}: restart for {text} lost (restarts: {restarts})")
        if not tally.case(not problems):
            failures.append((trial, signum.name, problems, err[-400:]))
    assert not failures, failures


def test_kill_9_during_an_upload_never_leaves_a_partial_file(
    bed: Testbed, inventory: Path, tally: Tally
) -> None:
    payload = inventory.parent / "files" / "big.bin"
    payload.parent.mkdir()
    payload.write_bytes(os.urandom(48 * 2**20))
    digest = hashlib.sha256(payload.read_bytes()).hexdigest()
    playbook = inventory.parent / "upload.yml"
    playbook.write_text(
        "- hosts: testbed\n  gather_facts: false\n  tasks:\n"
        "    - copy: {src: big.bin, dest: /srv/big.bin}\n"
    )
    for host in HOSTS:
        bed.exec(host, ["sh", "-c", "rm -f /srv/big.bin; echo old > /srv/big.bin"])
    proc = _cli(inventory, playbook)
    time.sleep(1.5)
    proc.kill()
    proc.wait()
    ok = True
    for host in HOSTS:
        seen = bed.exec(host, ["sha256sum", "/srv/big.bin"]).stdout.split()[:1]
        old = hashlib.sha256(b"old\n").hexdigest()
        ok &= seen in ([old], [digest])  # the old file or the whole new one, nothing between
    again = _cli(inventory, playbook)
    again.communicate(timeout=300)
    ok &= again.returncode == 0
    for host in HOSTS:
        seen = bed.exec(host, ["sha256sum", "/srv/big.bin"]).stdout.split()[:1]
        ok &= seen == [digest] and _leftovers(bed, host, "/srv") == []
    assert tally.case(ok)


def test_a_host_cut_off_mid_task_is_unreachable_and_the_others_finish(
    bed: Testbed, inventory: Path, tally: Tally, run_playbook: Runner
) -> None:
    address = host_address(FIRST_INDEX)
    text = inventory.read_text()
    inventory.write_text(
        text.replace(f"address: {address}", f"address: {address}, connect_timeout: 3")
    )
    marker = str(uuid.uuid4().int % 10**6 + 10**6)
    rules = [
        ["OUTPUT", "-d", address, "-j", "DROP"],
        ["INPUT", "-s", address, "-j", "DROP"],
    ]

    def cut() -> None:
        time.sleep(2)
        for rule in rules:
            subprocess.run(["iptables", "-I", *rule], check=True)

    cutter = threading.Thread(target=cut)
    cutter.start()
    try:
        outcome = run_playbook(
            f"""
        - hosts: testbed
          gather_facts: false
          tasks:
            - name: long
              shell: sleep 6.{marker}
              timeout: 10
            - name: after
              command: "true"
        """,
            inventory,
        )
    finally:
        cutter.join()
        for rule in rules:
            subprocess.run(["iptables", "-D", *rule], check=False)
    cut_host = HOSTS[0]
    ok = outcome.exit_code == 4 and outcome.recap()[cut_host]["unreachable"] == 1
    for host in HOSTS[1:]:
        ok &= outcome.status("after", host) == "changed"
    assert tally.case(ok), outcome.results()


def test_two_runs_at_once_change_each_host_once(
    bed: Testbed, inventory: Path, tally: Tally
) -> None:
    playbook = inventory.parent / "twice.yml"
    playbook.write_text(
        "- hosts: testbed\n  gather_facts: false\n  tasks:\n"
        '    - copy: {dest: /srv/twice.conf, content: "{{ v }}\\n"}\n'
        "      notify: count\n"
        "    - shell: sleep 2\n"
        "  handlers:\n"
        "    - name: count\n"
        "      shell: echo x >> /srv/twice.count\n"
    )
    for host in HOSTS:
        bed.exec(host, ["rm", "-f", "/srv/twice.conf", "/srv/twice.count"])
    first, second = _cli(inventory, playbook, "-e", "v=1"), _cli(inventory, playbook, "-e", "v=1")
    first.communicate(timeout=120)
    second.communicate(timeout=120)
    # Each host was changed by one run or the other (the loser stops there, naming the
    # winner), never by both: the handler ran at most once.
    ok = {first.returncode, second.returncode} <= {0, 2}
    for host in HOSTS:
        ok &= host_read(bed, host, "/srv/twice.count") in ("x\n", None)
    again = _cli(inventory, playbook, "-e", "v=1")
    again.communicate(timeout=120)
    ok &= again.returncode == 0
    for host in HOSTS:
        ok &= host_read(bed, host, "/srv/twice.count") == "x\n"
    assert tally.case(ok), (first.returncode, second.returncode)


def test_a_full_disk_fails_the_copy_and_keeps_the_old_file(
    bed: Testbed, inventory: Path, tally: Tally, run_playbook: Runner
) -> None:
    host = HOSTS[1]
    mounted = bed.exec(
        host, ["sh", "-c", "mkdir -p /mnt/small && mount -t tmpfs -o size=1m tmpfs /mnt/small"]
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs in the test host: {mounted.stderr}")
    try:
        bed.exec(host, ["sh", "-c", "echo old > /mnt/small/data"])
        outcome = run_playbook(
            f"""
        - hosts: {host}
          gather_facts: false
          tasks:
            - copy: {{dest: /mnt/small/data, content: "{{{{ 'x' * 3000000 }}}}"}}
        """,
            inventory,
        )
        ok = outcome.exit_code == 2 and "No space left" in outcome.results()[0]["msg"]
        ok &= host_read(bed, host, "/mnt/small/data") == "old\n"
        ok &= _leftovers(bed, host, "/mnt/small") == []
    finally:
        bed.exec(host, ["umount", "/mnt/small"])
    assert tally.case(ok), outcome.results()


def test_a_host_rebooted_mid_run_fails_alone_and_a_rerun_converges(
    bed: Testbed, inventory: Path, tally: Tally
) -> None:
    rebooted = HOSTS[2]
    marker = str(uuid.uuid4().int % 10**6 + 10**6)
    playbook = inventory.parent / "reboot.yml"
    playbook.write_text(
        "- hosts: testbed\n  gather_facts: false\n  tasks:\n"
        f"    - name: long\n      shell: sleep 8.{marker}\n"
        f"    - name: after\n      copy: {{dest: /srv/after-{marker}, content: done}}\n"
    )
    proc = _cli(inventory, playbook, "--json")
    time.sleep(3)
    bed.reboot(rebooted)
    out, err = proc.communicate(timeout=180)
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    recap = next(e for e in events if e["event"] == "recap")["hosts"]
    ok = proc.returncode in (2, 4)
    ok &= recap[rebooted]["failed"] + recap[rebooted]["unreachable"] >= 1
    for host in HOSTS:
        expected = None if host == rebooted else "done"
        ok &= host_read(bed, host, f"/srv/after-{marker}") == expected
    again = _cli(inventory, playbook)
    again.communicate(timeout=180)
    ok &= again.returncode == 0
    ok &= all(host_read(bed, h, f"/srv/after-{marker}") == "done" for h in HOSTS)
    assert tally.case(ok), (proc.returncode, recap, err[-800:])
