"""vllm_ready: wait until the served model answers, with progress, a deadline and artifacts.

Ready means, in order: GET /health is 200 (a refused connection is
"still loading": vLLM opens HTTP only once the engine is up), GET /v1/models lists the served
name, and a one-token completion succeeds. Progress (elapsed time and the loading phase read
from the journal) goes to stderr and the run log. A dead or crash-looping unit fails at once; on
any failure the journal tail, nvidia-smi and the venv's package list are saved in the run
directory and the message says where.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from glmops.engine.connection import quote
from glmops.engine.context import TaskContext
from glmops.engine.results import Status, TaskResult
from glmops.errors import ModuleError
from glmops.gpu.serving.journal import failure_summary, loading_phase, parse_backend, stop_cause
from glmops.modules.base import Arg, Module, Plan, register

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


def probe(ctx: TaskContext, args: dict[str, Any]) -> dict[str, Any]:
    """One look at the unit from the host (helper vllm_probe)."""
    reply = ctx.run_helper(
        "vllm_probe", args, timeout=float(args.get("completion_timeout", 120)) + 60
    )
    if reply.get("failed"):
        raise ModuleError(f"vllm_probe: {reply.get('msg')}")
    return reply


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


def dead(unit: dict[str, str], restarts_before: int | None) -> str | None:
    """Why the unit is not going to become ready (stopped, failed, crash-restarting), or None."""
    active, sub = unit.get("ActiveState"), unit.get("SubState")
    if unit.get("LoadState") == "not-found":
        return "the unit is not installed"
    if active == "failed" or (active == "inactive"):
        return f"the unit is {active} (result: {unit.get('Result')})"
    if sub == "auto-restart":
        return "vLLM exited and systemd is restarting it (crash loop)"
    restarts = _int(unit.get("NRestarts"))
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


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


@register
class VllmReady(Module):
    """`vllm_ready: {unit: vllm-glm5, port: 8000, served_model_name: glm-5, env_file: ...}`.

    Observes only: skipped under --check (check mode started nothing to wait for).
    """

    name = "vllm_ready"
    args = {
        **UNIT_ARGS,
        "address": ADDRESS_ARG,
        "port": Arg(int, default=8000),
        "served_model_name": Arg(str, required=True),
        "env_file": Arg(
            str, doc="the 0600 environment file holding VLLM_API_KEY, read on the host"
        ),
        "completion": Arg(bool, default=True, doc="also ask for one token"),
        "completion_timeout": Arg((int, float), default=300),
    }

    def plan(self, ctx: TaskContext) -> Plan:
        return Plan(
            None, f"wait for {self.params['unit']} to serve {self.params['served_model_name']}"
        )

    def apply(self, ctx: TaskContext, plan: Plan) -> TaskResult:
        p = self.params
        args = serving_probe_args(
            p,
            completion=p["completion"],
            completion_timeout=p["completion_timeout"],
            journal_lines=300,
        )
        started = time.monotonic()
        deadline = started + float(p["timeout"])
        restarts_before: int | None = None
        last_note = 0.0
        step = "waiting for /health"
        reply: dict[str, Any] = {}
        while True:
            reply = probe(ctx, args)
            unit = reply.get("unit", {})
            if restarts_before is None:
                restarts_before = _int(unit.get("NRestarts"))
            lines = reply.get("journal") or []
            phase = loading_phase(lines) or "no vLLM output yet"
            elapsed = time.monotonic() - started
            why = dead(unit, restarts_before)
            if why:
                return self._fail(ctx, stopped_why(ctx, p["unit"], why), lines, elapsed)
            health = reply.get("health", {})
            models = reply.get("models")
            done = reply.get("completion")
            if health.get("status") == 200:
                if models is None or p["served_model_name"] not in (models.get("ids") or []):
                    step = f"/health 200; /v1/models lists {models and models.get('ids')}"
                    if models and models.get("status") in (401, 403):
                        return self._fail(ctx, "/v1/models refused the API key", lines, elapsed)
                elif not p["completion"]:
                    return self._ok(elapsed, phase, "health 200, model listed")
                elif done and done.get("status") == 200:
                    return self._ok(
                        elapsed, phase, f"health 200, model listed, 1 token: {done.get('text')!r}"
                    )
                else:
                    step = f"completion answered {done and (done.get('status'), done.get('error'))}"
            elif health.get("status") is not None:
                step = f"/health answered {health.get('status')}"
            if time.monotonic() >= deadline:
                return self._fail(
                    ctx,
                    f"not ready after {p['timeout']} s (last: {step}; phase: {phase})",
                    lines,
                    elapsed,
                )
            if time.monotonic() - last_note >= float(p["progress_every"]):
                ctx.progress(f"{p['unit']}: {elapsed:.0f}s, phase: {phase}; {step}")
                last_note = time.monotonic()
            time.sleep(float(p["interval"]))

    @staticmethod
    def _ok(elapsed: float, phase: str, what: str) -> TaskResult:
        return TaskResult(
            Status.OK, f"ready after {elapsed:.0f}s: {what}", data={"elapsed_s": round(elapsed, 1)}
        )

    def _fail(self, ctx: TaskContext, why: str, lines: list[str], elapsed: float) -> TaskResult:
        selection = parse_backend(lines)
        if selection.failed:
            why += f"; vLLM found no attention backend: {selection.reasons}"
        summary = failure_summary(lines)
        folder = collect_artifacts(ctx, self.params["unit"], self.params["venv"], why)
        detail = ("; last errors: " + " | ".join(summary)) if summary else ""
        return TaskResult(
            Status.FAILED,
            f"{self.params['unit']} not ready ({elapsed:.0f}s): {why}{detail}. "
            f"Journal, nvidia-smi and pip freeze saved in {folder}",
            data={"artifacts": str(folder), "elapsed_s": round(elapsed, 1)},
        )
