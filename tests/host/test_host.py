"""Host checks: is this host still serving GLM-5 the way glmops deployed it?

Each check says what it compared, so a failure reads as a finding, not a stack trace.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from glmops import gpus
from glmops.facts import HostFacts
from glmops.serving import expected_backends, parse_backend, vllm_profile
from glmops.serving.flags import serving_device, setting
from glmops.serving.patches import manifest_files, patch_state
from glmops.verify import patched_layout_problem, run_helper


def cpu_host(hostvars: dict[str, Any]) -> bool:
    """A host the inventory serves with vLLM's CPU build (vllm_device: cpu): no GPU checks."""
    return serving_device(hostvars)[0] == "cpu"


def test_driver_loaded(host: Any, facts: HostFacts, hostvars: dict[str, Any]) -> None:
    if cpu_host(hostvars):
        pytest.skip("vllm_device: cpu (served by vLLM's CPU build, no NVIDIA driver wanted)")
    version = host.file("/proc/driver/nvidia/version")
    assert version.exists, "nvidia kernel module not loaded (/proc/driver/nvidia/version absent)"
    cc = facts.compute_capability
    family = gpus.family(cc, facts.machine) if cc is not None else None
    if family is not None and family.modules == gpus.OPEN_REQUIRED:
        assert "Open Kernel Module" in version.content_string, (
            f"compute capability {cc[0]}.{cc[1]} ({family.architecture}) needs the open kernel "
            "modules"
        )


def test_gpu_count(facts: HostFacts, hostvars: dict[str, Any], exec_start: list[str]) -> None:
    if cpu_host(hostvars):
        pytest.skip("vllm_device: cpu (no GPU wanted)")
    assert facts.gpus, f"no GPU reported: {facts.reason('gpus')}"
    wanted = hostvars.get("expected_gpu_count")
    if wanted is None and "--tensor-parallel-size" in exec_start:
        wanted = int(exec_start[exec_start.index("--tensor-parallel-size") + 1])
    if wanted is not None:
        assert len(facts.gpus) == int(wanted), f"{len(facts.gpus)} GPUs, expected {wanted}"


def test_vllm_version_and_profile(facts: HostFacts, hostvars: dict[str, Any]) -> None:
    version = facts.venv.vllm_version if facts.venv else None
    assert version, f"vLLM not importable in {hostvars.get('vllm_venv')}: {facts.reason('venv')}"
    if hostvars.get("vllm_version"):
        assert version == str(hostvars["vllm_version"]), f"vLLM {version} installed"
    profile, source = vllm_profile(facts, {})
    assert profile, source
    problem = patched_layout_problem(facts)
    assert problem is None, problem


def test_patch_manifest_matches_files(
    host: Any, facts: HostFacts, hostvars: dict[str, Any]
) -> None:
    if cpu_host(hostvars) and not facts.patch_manifest:
        pytest.skip("vllm_device: cpu: the patch set adds a CUDA attention backend, none wanted")
    base = facts.venv.vllm_path if facts.venv else None
    wanted = manifest_files(facts.patch_manifest, os.path.dirname(base) if base else None)
    digests = run_helper(host, "file_digests", {"paths": sorted(wanted)})["digests"]
    state, details = patch_state(facts.patch_manifest, wanted, digests)
    assert state == "applied", f"patches {state}: {'; '.join(details)}"


def test_unit_enabled_and_active(host: Any, unit: str) -> None:
    service = host.service(unit)
    assert service.is_enabled, f"{unit} is not enabled"
    assert service.is_running, f"{unit} is not active"


def test_port_listening(host: Any, hostvars: dict[str, Any]) -> None:
    """From /proc/net/tcp{,6} (state 0A = LISTEN): needs neither ss nor netstat on the host."""
    port = int(setting(hostvars, "vllm_port"))
    table = host.run("cat /proc/net/tcp /proc/net/tcp6 2>/dev/null").stdout
    listening = {
        int(cols[1].rsplit(":", 1)[1], 16)
        for cols in (line.split() for line in table.splitlines()[1:])
        if len(cols) > 3 and cols[3] == "0A" and ":" in cols[1]
    }
    assert port in listening, f"nothing listens on TCP port {port} (listening: {sorted(listening)})"


def test_health_200(host: Any, hostvars: dict[str, Any], unit: str) -> None:
    port = int(setting(hostvars, "vllm_port"))
    reply = run_helper(host, "vllm_probe", {"unit": unit, "port": port, "models": False})
    health = reply.get("health", {})
    assert health.get("status") == 200, f"/health: {health}"


def test_selected_backend_as_expected(
    host: Any, facts: HostFacts, hostvars: dict[str, Any], unit: str, exec_start: list[str]
) -> None:
    dtype = exec_start[exec_start.index("--dtype") + 1] if "--dtype" in exec_start else "bfloat16"
    if cpu_host(hostvars):  # vLLM's CPU platform logs no selection: ask its selector
        config = str(hostvars.get("glm5_hf_config_dir") or hostvars.get("vllm_model_dir"))
        python = f"{setting(hostvars, 'vllm_venv') or '/opt/vllm'}/bin/python"
        asked = run_helper(host, "vllm_backend_probe", {"config": config, "dtype": dtype}, python)
        assert not asked.get("failed"), f"vLLM's selector: {asked.get('msg')}"
        wanted = expected_backends(None, dtype, None, device="cpu")
        assert wanted.accepts(asked.get("backend")), f"{asked.get('msg')}; expected {wanted.why}"
        return
    reply = run_helper(
        host,
        "vllm_probe",
        {"unit": unit, "http": False, "journal_grep": r"attention backend|AttentionBackendEnum\."},
    )
    selection = parse_backend(reply.get("journal_matches") or [])
    assert not selection.failed, f"vLLM found no valid attention backend: {selection.reasons}"
    assert selection.backend, "no backend selection in the journal of the current run"
    profile, _ = vllm_profile(facts, hostvars)
    expected = expected_backends(
        facts.compute_capability,
        dtype,
        profile,
        forced=hostvars.get("vllm_attention_backend"),
        override=hostvars.get("vllm_expected_backend"),
    )
    assert expected.accepts(selection.backend), (
        f"selected {selection.backend}, expected {'/'.join(expected.names) or '?'} ({expected.why})"
    )
