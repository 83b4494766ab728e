"""Testbed parts that need no root: simulated nvidia-smi, inventory, names, supervisor."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from glmops.testbed import GPU_PROFILES, Testbed, TestbedError, core, inventory, procs, rootfs
from glmops.testbed.hosts import SIMULATOR_SRC, HostDir, nspawn_argv, wait_ssh
from glmops.testbed.profiles import get_profile

SUPERVISOR = Path(core.__file__).with_name("supervisor.py")


def smi(tmp_path: Path, profile: str, *args: str) -> subprocess.CompletedProcess:
    pfile = tmp_path / f"{profile}.json"
    pfile.write_text(GPU_PROFILES[profile].to_json("tb1"))
    env = {**os.environ, "GLMOPS_TESTBED_GPU_PROFILE": str(pfile)}
    return subprocess.run(
        [sys.executable, str(SIMULATOR_SRC), *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.parametrize(
    ("profile", "count", "name", "cap", "mem"),
    [
        ("rtx-pro-6000-x8", 8, "NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "12.0", 97887),
        ("h200", 1, "NVIDIA H200", "9.0", 143771),
        ("b200-x8", 8, "NVIDIA B200", "10.0", 183359),
    ],
)
def test_simulated_query_gpu_parses(tmp_path, profile, count, name, cap, mem):
    fields = "index,name,uuid,compute_cap,memory.total,driver_version,pci.bus_id,persistence_mode"
    proc = smi(tmp_path, profile, f"--query-gpu={fields}", "--format=csv,noheader,nounits")
    assert proc.returncode == 0, proc.stdout
    rows = [line.split(", ") for line in proc.stdout.splitlines()]
    assert len(rows) == count
    for i, (idx, gname, uuid, ccap, mtot, drv, bus, pers) in enumerate(rows):
        assert (int(idx), gname, ccap, int(mtot)) == (i, name, cap, mem)
        assert tuple(int(x) for x in ccap.split(".")) >= (9, 0)
        assert uuid.startswith("GPU-") and bus.startswith("00000000:") and pers == "Enabled"
        assert drv == GPU_PROFILES[profile].driver_version
    assert len({r[2] for r in rows}) == count  # distinct uuids


def test_simulated_header_units_and_selection(tmp_path):
    proc = smi(
        tmp_path, "h200", "--query-gpu=name,compute_cap,driver_version,memory.total", "--format=csv"
    )
    assert proc.stdout.splitlines() == [
        "name, compute_cap, driver_version, memory.total [MiB]",
        "NVIDIA H200, 9.0, 580.159.04, 143771 MiB",
    ]
    one = smi(
        tmp_path,
        "rtx-pro-6000-x8",
        "-i",
        "3",
        "--query-gpu",
        "index,count",
        "--format=csv,noheader",
    )
    assert one.stdout == "3, 8\n"


def test_simulated_list_summary_and_errors(tmp_path):
    listing = smi(tmp_path, "b200-x8", "-L").stdout.splitlines()
    assert len(listing) == 8 and listing[0].startswith("GPU 0: NVIDIA B200 (UUID: GPU-")
    summary = smi(tmp_path, "rtx-pro-6000-x8").stdout
    assert "CUDA Version: 13.0" in summary and "Driver Version: 580.95.05" in summary
    assert "SIMULATED" in summary
    bad = smi(tmp_path, "h200", "--query-gpu=name,bogus", "--format=csv")
    assert bad.returncode == 2 and 'Field "bogus" is not a valid field' in bad.stdout


def test_simulator_says_it_is_simulated():
    head = SIMULATOR_SRC.read_text().splitlines()[:6]
    assert head[0].startswith("#!") and "python3" in head[0]
    assert any("SIMULATED" in line and "TESTBED ONLY" in line for line in head)
    assert any("never installed on a real host" in line for line in head)


def test_profile_json_and_lookup():
    data = json.loads(GPU_PROFILES["rtx-pro-6000-x8"].to_json("tb2"))
    assert data["simulated"] is True and data["cuda_version"] == "13.0"
    assert data["driver_version"] == "580.95.05" and len(data["gpus"]) == 8
    assert GPU_PROFILES["h200"].driver_version == "580.159.04"
    assert {"b200-x8", "h200", "rtx-pro-6000-x8"} <= set(GPU_PROFILES)
    with pytest.raises(TestbedError, match=f"known: {', '.join(sorted(GPU_PROFILES))}$"):
        get_profile("a100")


def test_inventory_layout_and_canonical_keys(tmp_path):
    text = inventory.render(
        [("tb1", "10.231.1.2", None), ("tb2", "10.231.2.2", "rtx-pro-6000-x8")],
        tmp_path / "id_ed25519",
    )
    assert text.startswith("# glmops testbed inventory")
    assert "NOT real GPU hosts" in text.splitlines()[0]
    assert "`deploy`" in text and "testbed-sudo" in text
    doc = yaml.safe_load(text)
    assert doc["all"]["vars"] == {"user": "root", "key_file": str(tmp_path / "id_ed25519")}
    assert doc["all"]["children"]["testbed"]["hosts"] == {
        "tb1": {"address": "10.231.1.2"},
        "tb2": {"address": "10.231.2.2", "testbed_gpu_profile": "rtx-pro-6000-x8"},
    }
    assert "ssh_" not in text


def test_names_and_paths(tmp_path, monkeypatch):
    monkeypatch.delenv("GLMOPS_TESTBED_DIR", raising=False)
    assert Testbed().state_dir == Path("/var/lib/glmops-testbed")
    monkeypatch.setenv("GLMOPS_TESTBED_DIR", str(tmp_path))
    tb = Testbed()
    assert tb.key_path == tmp_path / "id_ed25519"
    assert tb.inventory_path == tmp_path / "inventory" / "hosts.yml"
    assert Testbed(tmp_path / "x").key_path == tmp_path / "x" / "id_ed25519"
    assert inventory.host_address(7) == "10.231.7.2"
    hd = HostDir(tmp_path / "hosts" / "tb3", "tb3", 3)
    argv = nspawn_argv(hd, Path("/base"))
    for flag in (
        "--boot",
        "--register=no",
        "--keep-unit",
        "--machine=tb3",
        "--hostname=tb3",
        "--network-namespace-path=/run/netns/tb3",
        f"--overlay=/base:{hd.upper}:/",
    ):
        assert flag in argv


def test_base_cache_key_follows_package_list(monkeypatch, tmp_path):
    monkeypatch.setenv("GLMOPS_TESTBED_CACHE", str(tmp_path))
    key = rootfs.base_key()
    assert rootfs.base_path() == tmp_path / f"base-{key}"
    assert "python3-venv" in rootfs.PACKAGES and "openssh-server" in rootfs.PACKAGES
    monkeypatch.setattr(rootfs, "PACKAGES", (*rootfs.PACKAGES, "vim"))
    assert rootfs.base_key() != key


def test_preflight_names_the_fix(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(TestbedError, match="needs root"):
        core.preflight()
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(core.shutil, "which", lambda tool: None)
    with pytest.raises(TestbedError) as err:
        core.preflight()
    assert "systemd-nspawn (package systemd-container)" in str(err.value)
    assert (
        "apt-get install -y debootstrap systemd-container iproute2 iptables openssh-client"
        in str(err.value)
    )


def _run_supervisor(host_dir: Path, script: str) -> int:
    subprocess.run(
        [sys.executable, str(SUPERVISOR), str(host_dir), "--", "sh", "-c", script], check=True
    )
    pid = procs.read_pid(host_dir / "supervisor.pid")
    assert pid is not None
    return pid


def _wait_gone(pid: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while procs.alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not procs.alive(pid)


def test_supervisor_relaunches_on_reboot_exit_code(tmp_path):
    # Stand-in for nspawn: "reboots" (exit 133) twice, then powers off (exit 0).
    counter = tmp_path / "n"
    script = f"echo x >> {counter}; [ $(wc -l < {counter}) -ge 3 ] && exit 0; exit 133"
    pid = _run_supervisor(tmp_path, script)
    _wait_gone(pid)
    assert (tmp_path / "boots").read_text().strip() == "3"
    log = (tmp_path / "nspawn.log").read_text()
    assert log.count("nspawn exited with 133") == 2 and "nspawn exited with 0" in log
    assert not (tmp_path / "supervisor.pid").exists()


def test_supervisor_is_detached_and_forwards_sigterm(tmp_path):
    pid = _run_supervisor(tmp_path, "trap 'exit 0' TERM; while :; do sleep 0.1; done")
    try:
        assert os.getsid(pid) == pid  # own session: survives the caller and its terminal
        deadline = time.monotonic() + 5
        while procs.read_pid(tmp_path / "nspawn.pid") is None and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        os.kill(pid, signal.SIGTERM)  # never leave the stand-in running
    _wait_gone(pid)
    log = (tmp_path / "nspawn.log").read_text()
    # 0 once the stand-in's trap is installed, -15 if SIGTERM beat it: forwarded either way
    assert re.search(r"nspawn exited with (0|-15)\n", log), log


def test_wait_error_names_host_and_log(tmp_path):
    hd = HostDir(tmp_path / "hosts" / "tb9", "tb9", 9)
    hd.root.mkdir(parents=True)
    hd.log.write_text("Failed to mount overlay\n")
    with pytest.raises(TestbedError) as err:
        wait_ssh([(hd, "10.231.9.2")], timeout=1)
    msg = str(err.value)
    assert "tb9 (10.231.9.2)" in msg and str(hd.log) in msg and "Failed to mount overlay" in msg


def test_down_without_state_is_a_noop(tmp_path):
    Testbed(tmp_path / "never-made").down()  # no root needed, nothing to do
    assert not (tmp_path / "never-made").exists()
