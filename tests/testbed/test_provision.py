"""`glmops provision` against real testbed hosts (systemd + sshd in systemd-nspawn, over SSH).

One host per simulated GPU profile and one without a GPU (tb31..tb34, own state dirs, so other
engineers' tb1../tb11../tb101.. hosts are never touched). The GPUs are SIMULATED (a stand-in
nvidia-smi), so the driver's apt install cannot run here: these tests check its plan (check
mode, --explain, the package list); tests/unit/test_provision_modules.py pins the commands its
apply path sends. Everything else runs for real: the wheelhouse push, uv, the venv, the vLLM
install, idempotence, --check, and a real reboot (new boot_id).

The wheelhouse is built from PyPI (never the nightly index, which CI cannot reach) into a cache
outside the repo. To stay small it holds the REAL vLLM wheel from PyPI installed with
--no-deps (vllm_no_deps=true): vLLM's full dependency set (torch with CUDA, ~several GB) is too
heavy for CI. So this proves the install path and the version pinning, not that vLLM imports;
the version is read from the venv's distribution metadata. gguf is installed with its deps.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from glmops.gpu.facts import parse_facts
from glmops.testbed import Testbed
from glmops.testbed.inventory import host_address
from tests.support.glmops_cli import run_cli
from tests.support.testbed import require_testbed

pytestmark = pytest.mark.testbed

VLLM, UV, GGUF = "0.33.0", "0.13.9", "0.19.0"
PROFILES = {"rtx-pro-6000-x8": 31, "h200": 32, "b200-x8": 33, "none": 34}
CACHE = Path(os.environ.get("GLMOPS_WHEELHOUSE_CACHE", "~/.cache/glmops/wheelhouse")).expanduser()
WHEELHOUSE = CACHE / f"provision-vllm{VLLM}-cp311"
# The testbed hosts run Debian 12 (Python 3.11) with no internet: no managed Python download.
OFFLINE = [
    "python_version=3.11",
    "vllm_source=wheelhouse",
    f"vllm_wheelhouse={WHEELHOUSE}",
    f"vllm_version={VLLM}",
    "vllm_no_deps=true",
    f"uv_version={UV}",
]


@pytest.fixture(scope="module")
def wheelhouse() -> Path:
    """uv, vLLM (no deps) and gguf (with deps) from PyPI, downloaded once into the cache."""
    done = WHEELHOUSE / ".complete"
    if done.exists():
        return WHEELHOUSE
    WHEELHOUSE.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:", "-d"]
    for args in (
        ["--no-deps", f"uv=={UV}"],
        ["--no-deps", f"vllm=={VLLM}"],
        [f"gguf=={GGUF}"],
    ):
        proc = subprocess.run([*pip, str(WHEELHOUSE), *args], capture_output=True, text=True)
        if proc.returncode != 0:
            pytest.skip(f"cannot build the wheelhouse from PyPI: {proc.stderr[-300:]}")
    done.write_text("ok\n")
    return WHEELHOUSE


@pytest.fixture(scope="module")
def beds(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Testbed]]:
    require_testbed()
    out: dict[str, Testbed] = {}
    try:
        for profile, index in PROFILES.items():
            bed = Testbed(tmp_path_factory.mktemp(f"prov-{profile}"), first_index=index)
            out[profile] = bed
            bed.up(1, None if profile == "none" else profile)
        yield out
    finally:
        for bed in out.values():
            bed.down()


@pytest.fixture(scope="module")
def inventory(beds: dict[str, Testbed], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One inventory for the four hosts (each testbed has its own key)."""
    lines = ["all:", "  vars: {vllm_venv: /opt/vllm}", "  hosts:"]
    for profile, bed in beds.items():
        i = PROFILES[profile]
        lines.append(
            f"    tb{i}: {{address: {host_address(i)}, user: root, key_file: {bed.key_path}}}"
        )
    path = tmp_path_factory.mktemp("prov-inv") / "hosts.yml"
    path.write_text("\n".join(lines) + "\n")
    return path


def host(profile: str) -> str:
    return f"tb{PROFILES[profile]}"


def glmops(inventory: Path, *args: str, extra: list[str] = ()) -> tuple[int, list[dict], str]:
    """The real CLI in a subprocess: (exit code, JSON events, human output with --explain)."""
    workdir = inventory.parent
    env = {**os.environ, "GLMOPS_HOME": str(workdir / "home"), "GLMOPS_RUN_DIR": str(workdir)}
    extras = [arg for item in extra for arg in ("-e", item)]
    return run_cli(*args, "-i", str(inventory), *extras, env=env, cwd=workdir, timeout=600)


def facts(inventory: Path, name: str) -> dict:
    """`glmops facts NAME --json`: the probe's JSON for one host."""
    proc = subprocess.run(
        [sys.executable, "-m", "glmops.cli", "facts", name, "-i", str(inventory), "--json"],
        capture_output=True,
        text=True,
        cwd=inventory.parent,
        env={**os.environ, "GLMOPS_HOME": str(inventory.parent / "home")},
    )
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    return next(e["facts"] for e in events if e["event"] == "facts" and e["host"] == name)


def by_task(events: list[dict]) -> dict[str, dict]:
    return {e["task"]: e for e in events if e.get("event") == "task"}


def changed(events: list[dict]) -> int:
    recap = next(e for e in events if e.get("event") == "recap")
    return sum(h["changed"] for h in recap["hosts"].values())


def on_host(bed: Testbed, name: str, *argv: str) -> subprocess.CompletedProcess:
    return bed.exec(name, list(argv))


EXPECTED = {
    "rtx-pro-6000-x8": (
        "compute_cap 12.0 → open kernel modules required (Blackwell)",
        "nvidia-open-580",
    ),
    "b200-x8": ("compute_cap 10.0 → open kernel modules required (Blackwell)", "nvidia-open-580"),
    "h200": (
        "compute_cap 9.0 → Turing (7.5) or newer: open kernel modules recommended",
        "nvidia-open-580",
    ),
    "none": ("driver steps skipped", None),
}


@pytest.mark.parametrize("profile", list(PROFILES))
def test_facts_and_driver_plan_per_profile(
    profile: str, beds: dict[str, Testbed], inventory: Path
) -> None:
    """Facts parse on each profile; the driver plan and its --explain reasons fit the GPU."""
    name = host(profile)
    rc, events, text = glmops(inventory, "provision", name, "--check", "--explain", "-t", "driver")
    assert rc == 0, text  # the simulated driver is on R580 already: nothing to change
    found = parse_facts(facts(inventory, name))
    rule, package = EXPECTED[profile]
    assert rule in text
    task = by_task(events)["NVIDIA driver"]
    assert task["status"] == "ok"
    if package is None:
        assert not found.has_nvidia_gpu and found.gpus is None
        assert "no NVIDIA GPU" in task["msg"]
    else:
        assert found.gpu_count >= 1 and found.cuda_version == "13.0"
        assert package in text and "on R580" in task["msg"]
        assert "persistence on for every GPU → already on" in text


def test_driver_upgrade_is_planned_with_reasons_and_check_changes_nothing(
    beds: dict[str, Testbed], inventory: Path
) -> None:
    """A driver below the wanted minimum: repo, packages, nouveau, reboot, each with why."""
    bed, name = beds["rtx-pro-6000-x8"], host("rtx-pro-6000-x8")
    boot = bed.boot_id(name)
    rc, events, text = glmops(
        inventory,
        "provision",
        name,
        "--check",
        "--explain",
        "-t",
        "driver",
        extra=["driver_min_version=580.159.04"],
    )
    assert rc == 3, text  # check mode found changes
    tasks = by_task(events)
    msg = tasks["NVIDIA driver"]["msg"]
    assert "cuda-keyring" in msg and "debian12/x86_64" in msg
    assert "install linux-headers-" in msg and "nvidia-driver-pinning-580 nvidia-open-580" in msg
    assert "blacklist nouveau" in msg and "then reboot (driver upgrade)" in msg
    assert "below the minimum 580.159.04: upgrade within R580" in text
    assert tasks["reboot for the driver"]["status"] == "changed"  # would reboot
    assert bed.boot_id(name) == boot, "check mode rebooted the host"
    blacklist = on_host(bed, name, "test", "-e", "/etc/modprobe.d/blacklist-nouveau.conf")
    assert blacklist.returncode != 0, "check mode wrote the nouveau blacklist"


def test_provision_rtx_from_wheelhouse_then_idempotent(
    beds: dict[str, Testbed], inventory: Path, wheelhouse: Path
) -> None:
    """The issue's "done when": plan, venv, vLLM from a wheelhouse, second run changes nothing."""
    bed, name = beds["rtx-pro-6000-x8"], host("rtx-pro-6000-x8")
    rc, events, text = glmops(inventory, "provision", name, "--check", extra=OFFLINE)
    assert rc == 3, text
    for path in ("/opt/vllm", "/var/cache/glmops/wheelhouse", "/opt/glmops/uv"):
        assert on_host(bed, name, "test", "-e", path).returncode != 0, f"--check made {path}"

    rc, events, text = glmops(inventory, "provision", name, "--explain", extra=OFFLINE)
    assert rc == 0, text
    tasks = by_task(events)
    assert tasks["NVIDIA driver"]["status"] == "ok"
    assert tasks["reboot for the driver"]["status"] == "skipped"
    assert tasks["push the wheelhouse"]["status"] == "changed"
    assert f"uv {UV} from wheel" in tasks["uv and the Python venv"]["msg"]
    assert tasks["vLLM and the deploy's packages"]["status"] == "changed"
    assert "driver supports CUDA 13.0 → torch cu130" in text
    meta = on_host(
        bed,
        name,
        "/opt/vllm/bin/python",
        "-c",
        "import importlib.metadata as m, sys; "
        "print(m.version('vllm'), m.version('gguf'), '%d.%d' % sys.version_info[:2])",
    )
    assert meta.stdout.split() == [VLLM, GGUF, "3.11"], meta.stderr
    venv = facts(inventory, name).get("venv") or {}
    assert venv.get("vllm_version") == VLLM and venv.get("python_version", "").startswith("3.11")

    rc, events, text = glmops(inventory, "provision", name, extra=OFFLINE)
    assert rc == 0 and changed(events) == 0, [e for e in events if e.get("status") == "changed"]
    assert "satisfies vllm==0.33.0" in by_task(events)["vLLM and the deploy's packages"]["msg"]
    rc, events, text = glmops(inventory, "provision", name, "--check", extra=OFFLINE)
    assert rc == 0 and changed(events) == 0, text


def test_reboot_for_real_changes_boot_id(beds: dict[str, Testbed], inventory: Path) -> None:
    """Detached reboot, reconnect, a NEW boot_id required; the next task runs on the new boot."""
    bed, name = beds["none"], host("none")
    before = bed.boot_id(name)
    playbook = inventory.parent / "reboot.yml"
    playbook.write_text(
        "- hosts: all\n  tasks:\n"
        "    - name: reboot\n      reboot: {reason: test, timeout: 120}\n"
        "    - name: after\n      command: cat /proc/sys/kernel/random/boot_id\n"
    )
    rc, events, text = glmops(inventory, "run", str(playbook), "-l", name)
    assert rc == 0, text
    after = bed.boot_id(name)
    assert after != before
    msg = by_task(events)["reboot"]["msg"]
    assert f"boot_id {before} -> {after}" in msg
    assert by_task(events)["after"]["status"] == "changed"
