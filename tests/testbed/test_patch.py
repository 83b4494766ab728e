"""`glmops patch` / `preflight` / `unpatch` on a testbed host whose venvs hold real vLLM wheels.

Two kinds of venv on tb41, each with a real vLLM wheel from PyPI (0.16.0 and 0.33.0):
- /opt/vllm-<v>: the wheel alone, `pip --no-deps` (no torch): the patch set only reads and
  writes vLLM's files, so check, apply, again and unpatch are proven without torch.
- /opt/vllm-<v>-cpu: the wheel beside the CPU torch and the dependencies of the cached CPU
  wheelhouse (tests/support/vllm_venvs.py), so that `glmops preflight` asks the host's real
  vLLM selection code which backend it picks: compiled kernel modules stubbed (the host has
  no GPU), everything else vLLM's own code. Driven by the CLI a user runs: patch, preflight,
  unpatch.
tests/patchset proves the same selection on this machine's own CPU torch.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from glmops.testbed import Testbed
from tests.support.engine import Runner
from tests.support.glmops_cli import run_cli, tasks_named
from tests.support.testbed import booted
from tests.support.vllm_venvs import install_with_torch
from tests.support.vllm_wheels import fetch_vllm_wheel

pytestmark = [pytest.mark.testbed, pytest.mark.wheels]

PROJECT = Path(__file__).resolve().parents[2]
HOST = "tb41"
PATCHED = ("vllm/v1/attention/backends/registry.py", "vllm/platforms/cuda.py")
#: vLLM's own pick for GLM-5's attention on Hopper (9.0, bfloat16), patched or not: the same
#: answers tests/patchset gets from these wheels (0.33 ranks FlashAttention's sparse MLA first).
NATIVE_SM90 = {"0.16.0": "FLASHMLA_SPARSE", "0.33.0": "FLASH_ATTN_MLA_SPARSE"}
STUBBED = "asked without a GPU: no usable CUDA device on the host"


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    with booted(tmp_path_factory.mktemp("patch-testbed"), 41) as testbed:
        yield testbed


def install(run_playbook: Runner, inventory: Path, version: str) -> str:
    """Push the PyPI wheel and pip-install it (no deps) into a fresh venv; returns the venv."""
    wheel = fetch_vllm_wheel(version)
    venv = f"/opt/vllm-{version}"
    outcome = run_playbook(
        f"""
    - hosts: {HOST}
      gather_facts: false
      tasks:
        - wheelhouse: {{src: "{wheel.parent}", dest: /var/cache/wheels, patterns: ["{wheel.name}"]}}
        - command: {{cmd: "python3 -m venv {venv}", creates: "{venv}/bin/python"}}
        - command:
            cmd: "{venv}/bin/pip install -q --no-deps --no-index /var/cache/wheels/{wheel.name}"
            creates: "{venv}/lib/python3.11/site-packages/vllm/__init__.py"
    """,
        inventory,
    )
    assert outcome.exit_code == 0, outcome.results()
    return venv


def digests(bed: Testbed, venv: str) -> dict[str, str]:
    site = f"{venv}/lib/python3.11/site-packages"
    found = bed.exec(
        HOST, ["sh", "-c", f"cd {site} && find vllm -name '*.py' | sort | xargs sha256sum"]
    ).stdout
    return dict(reversed(line.split()) for line in found.splitlines())


@pytest.mark.parametrize("version", ["0.16.0", "0.33.0"])
def test_patch_check_apply_again_and_unpatch(
    run_playbook: Runner, bed: Testbed, version: str
) -> None:
    inventory = bed.inventory_path
    venv = install(run_playbook, inventory, version)
    pristine = digests(bed, venv)
    patch = (PROJECT / "playbooks" / "patch.yml").read_text()
    unpatch = (PROJECT / "playbooks" / "unpatch.yml").read_text()
    extra = [f"vllm_venv={venv}"]

    check = run_playbook(patch, inventory, check=True, diff=True, extra=extra)
    assert check.exit_code == 3, check.results()
    assert "TRITON_MLA_SPARSE" in check.results()[0]["diff"]
    assert digests(bed, venv) == pristine, "--check changed vLLM's files"

    applied = run_playbook(patch, inventory, extra=extra)
    assert applied.exit_code == 0, applied.results()
    now = digests(bed, venv)
    assert "vllm/v1/attention/backends/mla/triton_mla_sparse.py" in now
    for path in PATCHED:
        assert now[path] != pristine[path], f"{path} was not patched"
    compiled = bed.exec(
        HOST,
        [
            f"{venv}/bin/python",
            "-m",
            "py_compile",
            *(
                f"{venv}/lib/python3.11/site-packages/{p}"
                for p in (*PATCHED, "vllm/v1/attention/backends/mla/triton_mla_sparse.py")
            ),
        ],
    )
    assert compiled.returncode == 0, compiled.stderr
    manifest = bed.exec(HOST, ["cat", f"{venv}/lib/python3.11/.glmops-patch/manifest.json"])
    assert manifest.returncode == 0 and '"profile"' in manifest.stdout

    again = run_playbook(patch, inventory, extra=extra)
    assert again.exit_code == 0 and again.changed() == 0, again.results()

    restored = run_playbook(unpatch, inventory, extra=extra)
    assert restored.exit_code == 0 and restored.changed() == 1, restored.results()
    assert digests(bed, venv) == pristine, "unpatch did not restore vLLM byte for byte"
    assert run_playbook(unpatch, inventory, extra=extra).changed() == 0


def test_unknown_layout_is_refused_and_nothing_changes(run_playbook: Runner, bed: Testbed) -> None:
    venv = install(run_playbook, bed.inventory_path, "0.16.0")
    registry = f"{venv}/lib/python3.11/site-packages/vllm/v1/attention/backends/registry.py"
    bed.exec(HOST, ["sed", "-i", "s/^class AttentionBackendEnum(/class RenamedEnum(/", registry])
    before = digests(bed, venv)
    outcome = run_playbook(
        (PROJECT / "playbooks" / "patch.yml").read_text(),
        bed.inventory_path,
        extra=[f"vllm_venv={venv}"],
    )
    assert outcome.exit_code == 2
    msg = outcome.results()[0]["msg"]
    assert "registry.py" in msg and "AttentionBackendEnum" in msg and "nothing was changed" in msg
    assert digests(bed, venv) == before


def glmops(env: dict[str, str], *args: str) -> tuple[int, list[dict[str, Any]]]:
    """The CLI a user runs, with --json: its exit code and its events (2 is a refusal)."""
    rc, events, _ = run_cli(*args, env=env, cwd=PROJECT, ok=(0, 2))
    return rc, events


def task(events: list[dict[str, Any]], prefix: str) -> dict[str, Any]:
    found = tasks_named(events, prefix)
    assert len(found) == 1, f"task {prefix!r} in {events}"
    return found[0]


@pytest.mark.parametrize("version", ["0.16.0", "0.33.0"])
def test_patch_preflight_unpatch_with_cpu_torch(
    run_playbook: Runner, bed: Testbed, cpu_wheelhouse: Path, version: str, tmp_path: Path
) -> None:
    """`glmops preflight` asks the host's real vLLM (its compiled modules stubbed: no GPU) what
    it picks for GLM-5's attention: nothing on SM120 before the patch (vLLM's own error, a
    refusal), TRITON_MLA_SPARSE after it, Hopper's native backend either way; `glmops unpatch`
    then restores every vllm/*.py byte for byte."""
    venv = install_with_torch(
        run_playbook,
        bed.inventory_path,
        cpu_wheelhouse,
        version,
        host=HOST,
        venv=f"/opt/vllm-{version}-cpu",
    )
    pristine = digests(bed, venv)
    doc = yaml.safe_load(bed.inventory_path.read_text())
    doc["all"].setdefault("vars", {})["vllm_venv"] = venv
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(doc))
    env = {
        **os.environ,
        "GLMOPS_INVENTORY": str(tmp_path / "hosts.yml"),
        "GLMOPS_RUN_DIR": str(tmp_path / "runs"),
    }
    sm120 = ("preflight", HOST, "--capability", "12.0", "--dtype", "float16")
    prefix = "which attention backend"

    rc, events = glmops(env, *sm120)
    refused = task(events, prefix)
    assert rc == 2 and refused["status"] == "failed", refused
    msg = refused["msg"]
    assert msg.startswith(f"preflight: vLLM {version} would select no attention backend"), msg
    assert "No valid attention backend found" in msg and "TRITON_MLA: [sparse not supported]" in msg
    assert STUBBED in msg and "Traceback" not in msg
    assert digests(bed, venv) == pristine, "the preflight changed vLLM's files"

    rc, events = glmops(env, "patch", HOST)
    assert rc == 0 and task(events, "vLLM patch set")["status"] == "changed", events

    rc, events = glmops(env, *sm120)
    picked = task(events, prefix)
    assert rc == 0 and picked["status"] == "ok", picked
    assert picked["msg"].startswith(f"preflight: vLLM {version} would select TRITON_MLA_SPARSE")
    assert STUBBED in picked["msg"]
    assert any(line.startswith("TRITON_MLA rejected") for line in picked["explain"]), picked
    assert any("stubbed: vllm." in line for line in picked["explain"]), picked

    rc, events = glmops(env, "preflight", HOST, "--capability", "9.0", "--dtype", "bfloat16")
    native = task(events, prefix)
    assert rc == 0 and native["status"] == "ok", native
    assert f"would select {NATIVE_SM90[version]} " in native["msg"], native

    rc, events = glmops(env, "unpatch", HOST)
    assert rc == 0 and task(events, "vLLM patch set removed")["status"] == "changed", events
    assert digests(bed, venv) == pristine, "unpatch did not restore vLLM byte for byte"
