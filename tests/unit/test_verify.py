"""verify's own logic: its testinfra backend, and the patch manifest against the venv's vLLM."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from glmops.cli.verify import INVENTORY_ENV, GlmopsBackend, patched_layout_problem
from glmops.gpu.facts import parse_facts
from glmops.gpu.patchset import payload
from glmops.gpu.patchset.profiles import profile_by_name


def facts(vllm: str | None, profile: str | None):
    """A host whose venv holds vLLM `vllm`, patched for `profile` (the manifest's own field)."""
    manifest = None
    if profile:
        written = payload(profile_by_name(profile), [], "/opt/vllm/lib/python3.12/site-packages")
        manifest = {"profile": written["profile"], "files": {}}
    venv = {"path": "/opt/vllm", "vllm_version": vllm} if vllm else None
    return parse_facts({"gpus": [], "venv": venv, "patch_manifest": manifest})


def test_a_manifest_for_the_installed_layout_passes() -> None:
    assert patched_layout_problem(facts("0.16.0", "v0_16")) is None
    assert patched_layout_problem(facts("0.33.0", "v0_33")) is None


def test_a_manifest_for_another_layout_fails() -> None:
    """vLLM upgraded under an old patch: the manifest alone used to decide, so this passed."""
    problem = patched_layout_problem(facts("0.33.0", "v0_16"))
    assert problem and "layout v0_16" in problem and "layout v0_33" in problem
    assert patched_layout_problem(facts("0.16.0", "v0_33"))


def test_no_manifest_or_no_version_says_nothing() -> None:
    assert patched_layout_problem(facts("0.33.0", None)) is None
    assert patched_layout_problem(facts(None, "v0_16")) is None


def test_an_unknown_profile_name_fails() -> None:
    f = parse_facts(
        {"venv": {"path": "/v", "vllm_version": "0.33.0"}, "patch_manifest": {"profile": "0.99"}}
    )
    problem = patched_layout_problem(f)
    assert problem and "no patch-set layout" in problem


def test_verify_backend_runs_helpers_through_the_engine_launcher(
    local_inventory: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`glmops://here` over a local connection: commands and helper replies come back."""
    monkeypatch.setenv(INVENTORY_ENV, str(local_inventory))
    backend = GlmopsBackend("here")
    assert backend.run("echo %s", "a b").stdout == "a b\n"
    reply = backend.run_helper("file_digests", {"paths": [str(local_inventory)]})
    want = hashlib.sha256(local_inventory.read_bytes()).hexdigest()
    assert reply == {
        "failed": False,
        "changed": False,
        "digests": {str(local_inventory): want},
        "msg": "1 file(s) hashed",
    }
