"""`glmops status [HOST...] [--json]`: a row per host, and how it drifted from the inventory.

One read-only play (facts + the deploy_status module) gathers what is there; `status_row` (pure)
turns it into the row and compares it with what the inventory asks (the same serve_flags the
deploy renders), so the table says both "what is" and "what differs".
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from glmops.engine.executor import RunOptions
from glmops.engine.nodes import Play, Task
from glmops.engine.output import console, event_line
from glmops.errors import InputError
from glmops.fleet.gang import MemberState, verdict
from glmops.fleet.multinode import DEFAULT_MASTER_PORT, member_plan
from glmops.fleet.topology import serving_hosts
from glmops.gpu.facts import HostFacts, parse_facts
from glmops.gpu.serving import ServeError, needs_single_file, serve_flags, vllm_profile
from glmops.gpu.serving.flags import default_bind_address, exposure_warning
from glmops.gpu.serving.patches import patch_state
from glmops.run import load_inventory, run_read_only

COLUMNS = (
    "host",
    "GPUs",
    "driver",
    "vLLM",
    "patches",
    "model",
    "unit",
    "health",
    "backend",
    "last deploy",
    "gang",
    "drift",
)


def status_row(
    name: str,
    facts_raw: Mapping[str, Any],
    observed: Mapping[str, Any],
    variables: Mapping[str, Any],
) -> dict[str, Any]:
    """One host's row (plain values for --json) and its drift from the inventory."""
    facts = parse_facts(facts_raw)
    ccs = ", ".join(f"{a}.{b}" for a, b in facts.compute_capabilities) or "?"
    module = facts.kernel_module or ("not loaded" if facts.nvidia_loaded is False else "?")
    profile, _ = vllm_profile(facts, variables)
    version = facts.venv.vllm_version if facts.venv else None
    patches, drift = _patch_drift(facts, observed)
    model = dict(observed.get("model") or {})
    single = needs_single_file(facts, variables)[0] and model.get("state") != "folder"
    drift += _model_drift(model, single)
    unit_text, unit_drift = _unit(observed)
    drift += unit_drift
    replica = variables.get("fleet_replica") or {}
    if len(replica.get("members") or ()) > 1:  # the gang's flags, as the deploy renders them
        port = variables.get("vllm_master_port") or DEFAULT_MASTER_PORT
        variables = {**variables, "vllm_gang": member_plan(replica, name, port)}
    expected, flag_drift = _flag_drift(facts, observed, variables, model, single)
    drift += flag_drift
    backend_text, backend_drift = _backend(observed, expected)
    drift += backend_drift + _deploy_drift(facts, observed, version)
    health = observed.get("health")
    last = observed.get("last_deploy") or {}
    bind = str(variables.get("vllm_host") or "127.0.0.1")
    exposed = exposure_warning(bind, bool(variables.get("vllm_api_key")))
    return {
        "host": name,
        "gpus": f"{facts.gpu_count}× cc {ccs}",
        "driver": f"{facts.driver_version or '-'} ({module})",
        "vllm": f"{version or '-'} (profile {profile.name if profile else '?'})",
        "patches": patches,
        "model": _model_text(model, single),
        "unit": unit_text,
        "health": str(health) if health else "down",
        "backend": backend_text,
        "kernel": observed.get("backend_kernel"),  # what the patch set's backend said it runs
        "last_deploy": last.get("time") or "-",
        "gang": None,  # filled by gang_status: a gang's state needs every member's row
        "drift": drift,
        "warnings": [exposed] if exposed else [],
    }


def gang_status(rows: list[dict[str, Any]], seen: Mapping[str, GangSeen]) -> None:
    """Each gang member's row gets its gang's state (`whole` or `degraded`, which member and
    why), judged from every member's observation as the deploy judges it (fleet/gang.py)."""
    replicas = {seen_.replica["name"]: seen_.replica for seen_ in seen.values()}
    for name, replica in replicas.items():
        states = {
            host: member_state(host, s)
            for host, s in seen.items()
            if s.replica["name"] == name and s.observed is not None
        }
        judged = verdict(replica, states)
        unseen = [f"{host}: not observed (unreachable?)" for host in judged.unobserved]
        problems = [*judged.degraded, *unseen]
        for row in rows:
            if row["host"] not in {m["host"] for m in replica["members"]}:
                continue
            rank = next(m["rank"] for m in replica["members"] if m["host"] == row["host"])
            row["gang"] = {
                "replica": name,
                "rank": rank,
                "role": "head" if rank == 0 else "worker",
                "state": "degraded" if problems else "whole",
                "why": problems,
            }
            row.setdefault("drift", []).extend(
                f"gang {name} degraded: {p} (glmops deploy restarts the gang)" for p in problems
            )


@dataclass(frozen=True)
class GangSeen:
    """What status saw of one gang member: its replica and deploy_status's observation."""

    replica: dict[str, Any]
    observed: Mapping[str, Any] | None


def member_state(host: str, seen: GangSeen) -> MemberState:
    """A member's state for the gang verdict, from deploy_status's observation."""
    observed = seen.observed or {}
    unit = observed.get("unit") or {}
    rank = next(m["rank"] for m in seen.replica["members"] if m["host"] == host)
    return MemberState(
        host=host,
        rank=rank,
        active=f"{unit.get('ActiveState', '?')}/{unit.get('SubState', '?')}",
        invocation=str(unit.get("InvocationID", "")),
        record=observed.get("gang_record"),
    )


def _patch_drift(facts: HostFacts, observed: Mapping[str, Any]) -> tuple[str, list[str]]:
    """The patch state, and each file that differs from the manifest when it drifted."""
    patches, details = patch_state(
        facts.patch_manifest,
        observed.get("patch_expected") or {},
        observed.get("patch_on_disk") or {},
    )
    return patches, [f"patch: {d}" for d in details] if patches == "drifted" else []


def _model_drift(model: Mapping[str, Any], single: bool) -> list[str]:
    """A missing folder, an invalid split set, or a merge the host's vLLM needs but lacks."""
    if model.get("state") == "folder":
        return [] if model.get("ok") else [f"model: {model.get('why')}"]
    if model.get("state") == "invalid" or (single and not model.get("verified")):
        return [f"model: {model.get('why')}"]
    return []


def _unit(observed: Mapping[str, Any]) -> tuple[str, list[str]]:
    """The unit's state, drifted unless active and enabled."""
    unit = observed.get("unit") or {}
    text = f"{unit.get('ActiveState', '?')}/{unit.get('UnitFileState') or '-'}"
    if unit.get("LoadState") == "not-found":
        return "not installed", ["unit: not installed (never deployed?)"]
    if unit.get("ActiveState") != "active" or unit.get("UnitFileState") != "enabled":
        return text, [f"unit: {text}, inventory wants active/enabled"]
    return text, []


def _flag_drift(
    facts: HostFacts,
    observed: Mapping[str, Any],
    variables: Mapping[str, Any],
    model: Mapping[str, Any],
    single: bool,
) -> tuple[tuple[str, ...], list[str]]:
    """The backends the inventory expects, and how the unit's flags differ from a deploy's."""
    wanted_model = model.get("merged_path") if single else model.get("first_shard")
    if model.get("state") == "folder":
        wanted_model = model.get("folder")
    try:
        config = serve_flags(facts, {**variables, "vllm_model": wanted_model or "?.gguf"})
    except ServeError as error:
        return (), [f"inventory: {error}"]
    on_host = observed.get("exec_start")
    if on_host and on_host != config.exec_start:
        return config.expectation.names, ["unit flags: " + _flag_diff(on_host, config.exec_start)]
    return config.expectation.names, []


def _backend(observed: Mapping[str, Any], expected: tuple[str, ...]) -> tuple[str, list[str]]:
    """The backend vLLM selected, drifted when none or not one the host should pick."""
    backend = observed.get("backend")
    if observed.get("backend_failed"):
        reasons = observed["backend_failed"]
        return "none (vLLM found no valid backend)", [f"backend: none; reasons {reasons}"]
    if not backend:
        return "-", []
    if backend.upper() in expected:
        return f"{backend} (expected)", []
    wanted = "/".join(expected)
    return f"{backend} (expected {wanted})", [f"backend: {backend}, expected {wanted or '?'}"]


def _deploy_drift(facts: HostFacts, observed: Mapping[str, Any], version: str | None) -> list[str]:
    """Patches or vLLM changed under a running deploy, and handlers a failed run left pending."""
    drift = []
    inputs = observed.get("inputs") or {}
    manifest_sha = (
        hashlib.sha256(json.dumps(facts.patch_manifest, sort_keys=True).encode()).hexdigest()
        if facts.patch_manifest
        else None
    )
    if inputs and (
        inputs.get("patch_manifest_sha256") != manifest_sha or inputs.get("vllm_version") != version
    ):
        drift.append("patches or vLLM changed since the server was deployed: run glmops deploy")
    pending = observed.get("pending_handlers")
    if pending:
        drift.append(f"pending handlers from a failed run: {', '.join(pending)}")
    return drift


def _model_text(model: Mapping[str, Any], single: bool) -> str:
    if model.get("state") in ("unknown", "invalid"):
        return f"{model['state']}: {model.get('why')}"
    if model.get("state") == "folder":
        return f"safetensors folder {model.get('folder')}" + ("" if model.get("ok") else " MISSING")
    text = f"{model.get('shards', '?')} shards"
    if single:
        text += ", merged" if model.get("merged") else ", NOT merged"
        text += " + verified" if model.get("verified") else ""
    else:
        text += " (served as shards)"
    return text


def _gang_text(gang: Mapping[str, Any] | None) -> str:
    if not gang:
        return "-"
    state = gang["state"]
    shown = f"[red]{state}[/red]" if state == "degraded" else state
    return f"{gang['replica']} {gang['role']} (rank {gang['rank']}): {shown}"


def _flag_diff(on_host: str, wanted: str) -> str:
    have, want = on_host.split(), wanted.split()
    gone = [w for w in have if w not in want]
    new = [w for w in want if w not in have]
    return f"host has {' '.join(gone) or '-'}; inventory wants {' '.join(new) or '-'}"


def collect(
    inventory_path: Path, pattern: str, options: RunOptions | None = None, verbosity: int = 0
) -> tuple[int, list[dict[str, Any]]]:
    """Run the read-only status play and build the rows."""
    task = Task(
        name="deploy status",
        module="deploy_status",
        args={"health": True},
        source=str(inventory_path),
        line=0,
        register="deploy_status",
    )
    # the router host serves no model: it has no row
    inventory = load_inventory(inventory_path, options.extra_vars if options else None)
    serving = [h.name for h in serving_hosts(inventory, pattern)]
    if not serving:
        raise InputError(f"'{pattern}' selects no serving host (a router host serves no model)")
    play = Play(
        name="status",
        hosts=",".join(serving),
        source=str(inventory_path),
        line=0,
        tasks=[task],
        become=True,
    )  # the journal and /etc/glmops need root
    code, executor = run_read_only(inventory_path, [play], options, check=True, verbosity=verbosity)
    rows = []
    gangs: dict[str, GangSeen] = {}
    for name, session in executor.sessions.items():
        observed = session.registered.get("deploy_status")
        replica = session.host.vars.get("fleet_replica") or {}
        healthy = session.facts is not None and observed and not observed.get("failed")
        if len(replica.get("members") or ()) > 1:
            gangs[name] = GangSeen(replica, observed if healthy else None)
        if not healthy or session.facts is None or not observed:
            rows.append(
                {"host": name, "error": (observed or {}).get("msg", "unreachable"), "drift": []}
            )
            continue
        variables = executor.variables(play, inventory_path, session)
        bind = variables.get("vllm_host") or default_bind_address(
            replica,
            name,
            session.host.connection.address,
            local=session.host.connection.connection == "local",
        )  # as the deploy decides it
        rows.append(status_row(name, session.facts, observed, {**variables, "vllm_host": bind}))
    gang_status(rows, gangs)
    return code, rows


def print_status(
    inventory_path: Path,
    pattern: str,
    as_json: bool,
    options: RunOptions | None = None,
    verbosity: int = 0,
) -> int:
    code, rows = collect(inventory_path, pattern, options, verbosity)
    if as_json:
        for row in rows:
            print(event_line("status", **row))
        return code
    table = Table(title="glmops status", title_justify="left")
    for column in COLUMNS:
        table.add_column(column)
    for row in rows:
        if "error" in row:
            table.add_row(row["host"], f"[red]{row['error']}[/red]", *[""] * (len(COLUMNS) - 2))
            continue
        drift = "\n".join(row["drift"]) or "none"
        warnings = "".join(
            f"\n[yellow]warning: {escape(w)}[/yellow]" for w in row.get("warnings", [])
        )
        table.add_row(
            row["host"],
            row["gpus"],
            row["driver"],
            row["vllm"],
            row["patches"],
            row["model"],
            row["unit"],
            row["health"],
            row["backend"] + (f"\nkernel: {row['kernel']}" if row.get("kernel") else ""),
            row["last_deploy"],
            _gang_text(row.get("gang")),
            (f"[yellow]{drift}[/yellow]" if row["drift"] else "[green]none[/green]") + warnings,
        )
    console(sys.stdout).print(table)
    return code
