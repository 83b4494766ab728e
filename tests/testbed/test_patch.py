"""`glmops patch` / `unpatch` on a testbed host whose venv holds a real vLLM wheel from PyPI.

The wheel is installed with `pip --no-deps` (the host has no GPU and no torch: the patch set
only reads and writes vLLM's files). Which backend vLLM then selects is proven by
tests/patchset, which imports vLLM's real selection code on this machine's CPU torch.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from glmops.testbed import Testbed
from tests.conftest import Runner
from tests.testbed.conftest import booted
from tests.vllm_wheels import fetch_vllm_wheel

pytestmark = [pytest.mark.testbed, pytest.mark.wheels]

PROJECT = Path(__file__).resolve().parents[2]
HOST = "tb41"
PATCHED = ("vllm/v1/attention/backends/registry.py", "vllm/platforms/cuda.py")


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
