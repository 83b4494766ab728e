"""Real testbed hosts: systemd + sshd in systemd-nspawn, checked over plain OpenSSH and nsenter.

Needs root and systemd-nspawn (CI runs as root). The hosts use tb101.. so they never collide with
a testbed the engine's own fixtures (tb1..) keep running in the same session.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from glmops.testbed import Testbed, TestbedError, procs

pytestmark = [
    pytest.mark.testbed,
    pytest.mark.skipif(os.geteuid() != 0, reason="testbed needs root"),
    pytest.mark.skipif(
        shutil.which("systemd-nspawn") is None,
        reason="systemd-nspawn missing (apt-get install systemd-container)",
    ),
]
FIRST = 101
PROFILE = "rtx-pro-6000-x8"


@pytest.fixture(scope="module")
def tb() -> Iterator[Testbed]:
    state = Path(tempfile.mkdtemp(prefix="glmops-tb-", dir="/tmp"))
    bed = Testbed(state, first_index=FIRST)
    try:
        bed.up(2, PROFILE)
    except TestbedError as err:
        bed.down()
        if "in use by another testbed" in str(err):
            pytest.skip(str(err))
        raise
    yield bed
    bed.down()
    bed.down()  # a second down is a no-op
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not {f"tb{FIRST}", f"tb{FIRST + 1}"} & {line.split()[0] for line in left.splitlines()}
    assert bed.status() == []
    machines = {f"--machine=tb{FIRST}", f"--machine=tb{FIRST + 1}"}
    assert procs.find(lambda argv: bool(machines & set(argv))) == [], "a host outlived down"
    shutil.rmtree(state, ignore_errors=True)


def ssh(
    tb: Testbed, name: str, command: str, user: str = "root", input: str | None = None
) -> subprocess.CompletedProcess:
    argv = [
        "ssh",
        "-i",
        str(tb.key_path),
        "-o",
        "UserKnownHostsFile=/dev/null",
        "-o",
        "StrictHostKeyChecking=no",
        "-o",
        "BatchMode=yes",
        "-o",
        "LogLevel=ERROR",
        "-o",
        "ConnectTimeout=10",
        f"{user}@{tb.host(name).address}",
        command,
    ]
    return subprocess.run(
        argv, input=input, capture_output=True, text=True, timeout=60, check=False
    )


def names(tb: Testbed) -> list[str]:
    return [s.name for s in tb.status()]


def test_hosts_up_with_inventory(tb):
    assert names(tb) == [f"tb{FIRST}", f"tb{FIRST + 1}"]
    for st in tb.status():
        assert st.running and st.ssh_ok and st.gpu_profile == PROFILE
        assert st.address == f"10.231.{st.name[2:]}.2"
    text = tb.inventory_path.read_text()
    assert f"tb{FIRST}: {{address: 10.231.{FIRST}.2, testbed_gpu_profile: {PROFILE}}}" in text
    assert str(tb.key_path) in text


def test_systemd_running_over_ssh(tb):
    for name in names(tb):
        deadline = time.monotonic() + 60
        while True:  # right after boot systemd may still say "starting"
            state = ssh(tb, name, "systemctl is-system-running").stdout.strip()
            if state in ("running", "degraded") or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert state in ("running", "degraded")
        assert ssh(tb, name, "hostname").stdout.strip() == name
        assert tb.exec(name, ["cat", "/proc/1/comm"]).stdout.strip() == "systemd"


def host_key(tb: Testbed, name: str) -> str:
    return tb.exec(name, ["cat", "/etc/ssh/ssh_host_ed25519_key.pub"]).stdout.split()[1]


def scanned_key(tb: Testbed, name: str) -> str:
    out = subprocess.run(
        ["ssh-keyscan", "-t", "ed25519", tb.host(name).address],
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout
    return out.split()[2]


def test_host_keys_differ_and_can_be_regenerated(tb):
    a, b = names(tb)
    assert host_key(tb, a) != host_key(tb, b)
    assert scanned_key(tb, a) == host_key(tb, a)
    machine_ids = {tb.exec(n, ["cat", "/etc/machine-id"]).stdout for n in (a, b)}
    assert len(machine_ids) == 2
    before = scanned_key(tb, b)
    tb.regenerate_host_keys(b)
    assert scanned_key(tb, b) != before
    assert ssh(tb, b, "true").returncode == 0


def test_simulated_gpus_answer(tb):
    name = names(tb)[0]
    out = ssh(
        tb,
        name,
        "nvidia-smi --query-gpu=index,name,compute_cap,memory.total,"
        "driver_version --format=csv,noheader,nounits",
    ).stdout
    rows = [r.split(", ") for r in out.splitlines()]
    assert len(rows) == 8
    assert rows[7] == [
        "7",
        "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
        "12.0",
        "97887",
        "580.95.05",
    ]
    assert "CUDA Version: 13.0" in ssh(tb, name, "nvidia-smi").stdout
    link = tb.exec(name, ["readlink", "/usr/local/bin/nvidia-smi"]).stdout.strip()
    assert link == "/usr/local/lib/glmops-testbed/simulated-nvidia-smi"
    assert (
        '"simulated": true' in tb.exec(name, ["cat", "/etc/glmops-testbed/gpu-profile.json"]).stdout
    )


def test_deploy_user_sudo_needs_the_password(tb):
    name = names(tb)[1]
    assert ssh(tb, name, "id -un", user="deploy").stdout.strip() == "deploy"
    assert ssh(tb, name, "sudo -n true", user="deploy").returncode != 0
    wrong = ssh(tb, name, "sudo -S -p '' -k id -u", user="deploy", input="nope\n")
    assert wrong.returncode != 0
    ok = ssh(tb, name, "sudo -S -p '' -k id -u", user="deploy", input="testbed-sudo\n")
    assert ok.returncode == 0 and ok.stdout.strip() == "0", ok.stderr


def test_up_again_converges_without_restarting(tb):
    before = {s.name: s.pid for s in tb.status()}
    tb.up(2, PROFILE)
    assert {s.name: s.pid for s in tb.status()} == before


def test_reboot_comes_back_with_new_boot_id(tb):
    name = names(tb)[0]
    old = tb.boot_id(name)
    supervisor = tb.host(name).pid
    ssh(tb, name, "systemctl reboot")
    deadline = time.monotonic() + 120
    new = old
    while time.monotonic() < deadline:
        try:
            new = tb.boot_id(name)
        except TestbedError:
            new = old  # between boots
        if new != old and ssh(tb, name, "true").returncode == 0:
            break
        time.sleep(0.5)
    assert new != old
    st = tb.host(name)
    assert st.running and st.ssh_ok and st.pid == supervisor
    assert tb.reboot(name) not in (old, new)  # the helper does the same, from inside
