"""Host checks: is this host still serving GLM-5 the way glmops deployed it?

Each check says what it compared, so a failure reads as a finding, not a stack trace.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from glmops.cli.verify import patched_layout_problem, run_helper
from glmops.fleet.gang import observe_command, parse_observation, record_path, verdict
from glmops.fleet.multinode import DEFAULT_MASTER_PORT
from glmops.fleet.topology import Member, Replica, replica_data
from glmops.gpu import gpus
from glmops.gpu.facts import HostFacts
from glmops.gpu.serving import expected_backends, parse_backend, vllm_profile
from glmops.gpu.serving.flags import listening_address, serving_device, setting
from glmops.gpu.serving.patches import manifest_files, patch_state


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
        flags = dict(zip(exec_start, exec_start[1:], strict=False))
        ranks = int(flags["--tensor-parallel-size"]) * int(flags.get("--pipeline-parallel-size", 1))
        # a gang spreads TP×PP over its hosts; data parallel runs local copies of it on each
        local = int(flags.get("--data-parallel-size-local", 1))
        wanted = ranks * local // int(flags.get("--nnodes", 1))
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


Gang = tuple[Replica, Member] | None


def serves_http(gang: Gang, hostvars: dict[str, Any]) -> None:
    """Skip an HTTP check on a gang worker: it runs --headless, its head serves the API."""
    if gang is not None and not gang[1].is_head:
        replica, member = gang
        port = setting(hostvars, "vllm_port")
        pytest.skip(
            f"gang {replica.name} worker (rank {member.rank}, --headless) serves no HTTP; its "
            f"head {replica.head.host} serves the API on {replica.head.address}:{port}"
        )


def _ip(hex_address: str) -> str:
    """/proc/net/tcp{,6}'s address (32-bit words in host order) -> dotted IPv4 ('' if none)."""
    if len(hex_address) == 32:  # tcp6: only IPv4-mapped addresses (::ffff:a.b.c.d) matter here
        if hex_address[:24] != "0000000000000000FFFF0000":
            return ""
        hex_address = hex_address[24:]
    return ".".join(str(int(hex_address[i : i + 2], 16)) for i in (6, 4, 2, 0))


def tcp_sockets(host: Any) -> list[tuple[str, int, str, int, str]]:
    """(local ip, local port, remote ip, remote port, state) of every TCP socket, from
    /proc/net/tcp{,6} (state 0A = LISTEN, 01 = ESTABLISHED): needs neither ss nor netstat."""
    table = host.run("cat /proc/net/tcp /proc/net/tcp6 2>/dev/null").stdout
    rows = []
    for cols in (line.split() for line in table.splitlines()):
        if len(cols) > 3 and ":" in cols[1] and ":" in cols[2]:
            (local, lport), (remote, rport) = cols[1].split(":"), cols[2].split(":")
            rows.append((_ip(local), int(lport, 16), _ip(remote), int(rport, 16), cols[3]))
    return rows


def test_port_listening(host: Any, hostvars: dict[str, Any], gang: Gang) -> None:
    serves_http(gang, hostvars)
    port = int(setting(hostvars, "vllm_port"))
    listening = {lport for _, lport, _, _, state in tcp_sockets(host) if state == "0A"}
    assert port in listening, f"nothing listens on TCP port {port} (listening: {sorted(listening)})"


def test_gang_flags(gang: Gang, hostvars: dict[str, Any], exec_start: list[str]) -> None:
    """The installed unit runs this member's part of the gang the inventory describes."""
    if gang is None:
        pytest.skip("a replica of one host: no multi-node flags")
    replica, member = gang
    flags = dict(zip(exec_start, exec_start[1:], strict=False))
    if replica.mode == "data_parallel":
        wanted = {
            "--data-parallel-size": str(replica.dp_local * len(replica.members)),
            "--data-parallel-size-local": str(replica.dp_local),
            "--data-parallel-address": replica.head.address,
            "--data-parallel-rpc-port": str(replica.dp_rpc_port),
        }
        if not member.is_head:
            wanted["--data-parallel-start-rank"] = str(replica.dp_local * member.rank)
    else:
        wanted = {
            "--nnodes": str(len(replica.members)),
            "--node-rank": str(member.rank),
            "--master-addr": replica.head.address,
            "--master-port": str(hostvars.get("vllm_master_port") or DEFAULT_MASTER_PORT),
        }
    wrong = [f"{k} {flags.get(k)} (want {v})" for k, v in wanted.items() if flags.get(k) != v]
    assert not wrong, f"gang {replica.name} rank {member.rank}: ExecStart has {', '.join(wrong)}"
    headless = "--headless" in exec_start
    assert headless != member.is_head, (
        f"rank {member.rank} is the {'head' if member.is_head else 'worker'}, but ExecStart "
        f"{'has' if headless else 'lacks'} --headless"
    )


def test_gang_member_joined(host: Any, gang: Gang, hostvars: dict[str, Any], unit: str) -> None:
    """Runs the process its gang's last restart started (a member that restarted on its own is
    not in the head's engine), and holds TCP connections with its peers: a worker with its
    head, the head with every worker."""
    if gang is None:
        pytest.skip("a replica of one host: no gang to join")
    replica, member = gang
    state_dir = str(setting(hostvars, "deploy_state_dir"))
    seen = host.run(observe_command(unit, record_path(state_dir, unit), [])).stdout
    state = parse_observation(member.host, member.rank, seen, with_config=False)
    judged = verdict(replica_data(replica), {member.host: state})
    assert not judged.degraded, f"gang {replica.name}: {'; '.join(judged.degraded)}"
    peers = [m for m in replica.members if m != member] if member.is_head else [replica.head]
    established = {remote for _, _, remote, _, st in tcp_sockets(host) if st == "01"}
    lost = [f"{m.host} ({m.address})" for m in peers if m.address not in established]
    assert not lost, (
        f"gang {replica.name} rank {member.rank}: no TCP connection with {', '.join(lost)} "
        f"(connected to: {sorted(established)})"
    )


def test_health_200(
    host: Any, hostvars: dict[str, Any], unit: str, gang: Gang, exec_start: list[str]
) -> None:
    serves_http(gang, hostvars)
    port = int(setting(hostvars, "vllm_port"))
    address = listening_address(exec_start)  # where the unit's vLLM listens
    args = {"unit": unit, "address": address, "port": port, "models": False}
    reply = run_helper(host, "vllm_probe", args)
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
