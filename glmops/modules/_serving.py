"""What the serving modules share (vllm_ready, vllm_soak, vllm_backend_check,
vllm_backend_ask, deploy_status): one look at the vllm serve unit through the vllm_probe
helper, read through the helper's own reply schema (ProbeReply), the verdict on a unit that
will not become ready, and the artifacts saved when it does not. Not a module: the registry
skips files whose name starts with an underscore."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, cast

from glmops.engine.connection import quote
from glmops.engine.context import TaskContext
from glmops.errors import ModuleError
from glmops.gpu.serving.journal import stop_cause
from glmops.hosthelpers.vllm_probe import ProbeReply, UnitState
from glmops.modules.base import Arg

FREEZE = (
    "import importlib.metadata as m; print('\\n'.join(sorted("
    "f\"{d.metadata['Name']}=={d.version}\" for d in m.distributions())))"
)

#: Where the host's own probes reach vLLM: the address it listens on (deploy.yml passes
#: serve.vllm_host, the host's fleet address unless the inventory names another).
ADDRESS_ARG = Arg(str, default="127.0.0.1", doc="the address vLLM listens on (serve.vllm_host)")

UNIT_ARGS = {
    "unit": Arg(str, default="vllm-glm5", doc="the systemd unit running vllm serve"),
    "venv": Arg(str, doc="the vLLM venv (for the package list on failure)"),
    "timeout": Arg((int, float), default=7200, doc="deadline in seconds"),
    "interval": Arg((int, float), default=5, doc="seconds between looks"),
    "progress_every": Arg((int, float), default=30, doc="seconds between progress lines"),
}


def probe(ctx: TaskContext, args: dict[str, Any]) -> ProbeReply:
    """One look at the unit from the host (helper vllm_probe), read through its schema."""
    reply = ctx.run_helper(
        "vllm_probe", args, timeout=float(args.get("completion_timeout", 120)) + 60
    )
    if reply.get("failed"):
        raise ModuleError(f"vllm_probe: {reply.get('msg')}")
    return cast(ProbeReply, reply)


def serving_probe_args(
    params: dict[str, Any],
    *,
    completion: bool,
    completion_timeout: float,
    journal_lines: int | None = None,
) -> dict[str, Any]:
    """The vllm_probe arguments that look at a served model: the unit, /health, /v1/models
    listing `served_model_name` on `port` (with the API key from `env_file`) and, when
    `completion`, one token within `completion_timeout`; the journal's tail when asked."""
    args: dict[str, Any] = {
        "unit": params["unit"],
        "address": params.get("address", ADDRESS_ARG.default),
        "port": params["port"],
        "served_model_name": params["served_model_name"],
        "env_file": params["env_file"] or "",
        "completion": completion,
        "completion_timeout": completion_timeout,
    }
    if journal_lines is not None:
        args["journal_lines"] = journal_lines
    return args


def dead(unit: UnitState, restarts_before: int | None) -> str | None:
    """Why the unit is not going to become ready (stopped, failed, crash-restarting), or None."""
    active, sub = unit.get("ActiveState"), unit.get("SubState")
    if unit.get("LoadState") == "not-found":
        return "the unit is not installed"
    if active == "failed" or (active == "inactive"):
        return f"the unit is {active} (result: {unit.get('Result')})"
    if sub == "auto-restart":
        return "vLLM exited and systemd is restarting it (crash loop)"
    restarts = int_or_none(unit.get("NRestarts"))
    if restarts_before is not None and restarts is not None and restarts > restarts_before:
        return f"vLLM restarted {restarts - restarts_before} time(s) while loading"
    return None


def stopped_why(ctx: TaskContext, unit: str, why: str, tail: int = 15) -> str:
    """`why` the unit is dead, with the cause vLLM's journal names and the journal's tail."""
    lines = probe(ctx, {"unit": unit, "http": False, "journal_lines": 400}).get("journal") or []
    cause = stop_cause(lines)
    head = f"{cause} ({why})" if cause else why
    return head + "; journal tail:\n" + "\n".join(f"  {line}" for line in lines[-tail:])


def collect_artifacts(ctx: TaskContext, unit: str, venv: str | None, why: str) -> Path:
    """Journal tail, unit status, nvidia-smi and pip freeze into the run dir; returns the folder."""
    folder = ctx.log.host_dir(ctx.host.name) / f"{unit}-failure-{time.strftime('%H%M%S')}"
    folder.mkdir(parents=True, exist_ok=True)
    commands = {
        "journal.txt": f"journalctl -u {quote(unit)} -n 1000 --no-pager",
        "systemctl-status.txt": f"systemctl status {quote(unit)} --no-pager -l",
        "nvidia-smi.txt": "nvidia-smi; echo; nvidia-smi -q",
    }
    if venv:
        commands["pip-freeze.txt"] = f"{quote(venv + '/bin/python')} -c {quote(FREEZE)}"
    for name, command in commands.items():
        try:
            result = ctx.run(command, timeout=120)
            text = result.stdout + (f"\n[stderr]\n{result.stderr}" if result.stderr.strip() else "")
            text += f"\n[rc={result.rc}] $ {command}\n"
        except Exception as error:  # noqa: BLE001 - a missing artifact must not hide the failure
            text = f"could not collect: {error}\n"
        (folder / name).write_text(ctx.masker.mask(text))
    (folder / "why.txt").write_text(ctx.masker.mask(why) + "\n")
    return folder


def int_or_none(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
