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

from glmops.engine.context import TaskContext
from glmops.engine.results import Status, TaskResult
from glmops.gpu.serving.journal import failure_summary, loading_phase, parse_backend
from glmops.hosthelpers.vllm_probe import ProbeReply
from glmops.modules._serving import (
    ADDRESS_ARG,
    UNIT_ARGS,
    collect_artifacts,
    dead,
    int_or_none,
    probe,
    serving_probe_args,
    stopped_why,
)
from glmops.modules.base import Arg, Module, Plan, register


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
        reply = ProbeReply(failed=False, changed=False, msg="")
        while True:
            reply = probe(ctx, args)
            unit = reply.get("unit", {})
            if restarts_before is None:
                restarts_before = int_or_none(unit.get("NRestarts"))
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
