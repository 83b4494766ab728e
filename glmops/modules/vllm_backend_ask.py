"""vllm_backend_ask: the attention backend vLLM uses, asked from its own selector on the host.

For hosts where vLLM logs no selection line (its CPU platform returns CPU_ATTN silently, so
vllm_backend_check would wait in vain): once the unit runs, the venv's vLLM answers which
backend `get_attn_backend` returns for the served model's config and dtype (host helper
vllm_backend_probe); it must be one of `expected`. Observes only: skipped under --check.
"""

from __future__ import annotations

from typing import Any, cast

from glmops.engine.context import TaskContext
from glmops.engine.results import Status, TaskResult
from glmops.hosthelpers.vllm_backend_probe import BackendReply
from glmops.modules._serving import UNIT_ARGS, collect_artifacts, dead, probe
from glmops.modules.base import Arg, Module, Plan, register


@register
class VllmBackendAsk(Module):
    """`vllm_backend_ask: {python: /opt/vllm/bin/python, config: DIR, expected: [CPU_ATTN]}`."""

    name = "vllm_backend_ask"
    args = {
        **UNIT_ARGS,
        "python": Arg(str, required=True, doc="the venv's python"),
        "config": Arg(str, required=True, doc="folder with the served model's config.json"),
        "dtype": Arg(str, default="bfloat16", doc="the dtype the unit serves with"),
        "expected": Arg(list, required=True, doc="acceptable backend names"),
        "why": Arg(str, default="", doc="the rule behind `expected`, for the message"),
    }

    def plan(self, ctx: TaskContext) -> Plan:
        return Plan(None, f"ask {self.params['python']}'s vLLM which attention backend it uses")

    def apply(self, ctx: TaskContext, plan: Plan) -> TaskResult:
        p = self.params
        expected = [str(n).upper() for n in p["expected"]]
        unit = probe(ctx, {"unit": p["unit"], "http": False, "journal_lines": 0}).get("unit", {})
        data: dict[str, Any] = {"expected": expected, "source": "vLLM's selector on the host"}
        why = dead(unit, None)
        if why:
            return self._fail(ctx, f"{p['unit']}: {why}", data)
        reply = cast(
            BackendReply,
            ctx.run_helper(
                "vllm_backend_probe",
                {"config": p["config"], "dtype": p["dtype"]},
                python=p["python"],
                timeout=300,
            ),
        )
        data.update(
            backend=reply.get("backend"),
            backend_cls=reply.get("backend_cls"),
            platform=reply.get("platform"),
        )
        if reply.get("failed"):
            return self._fail(ctx, f"vLLM's selector failed: {reply.get('msg')}", data)
        backend = str(reply.get("backend") or "")
        if backend not in expected:
            return self._fail(
                ctx, f"vLLM uses {backend}, expected {' or '.join(expected)} ({p['why']})", data
            )
        return TaskResult(
            Status.OK,
            f"vLLM ({reply.get('platform')}) uses {backend} for this model, as expected: "
            f"{p['why']}",
            data=data,
        )

    def _fail(self, ctx: TaskContext, why: str, data: dict[str, Any]) -> TaskResult:
        folder = collect_artifacts(ctx, self.params["unit"], self.params["venv"], why)
        data["artifacts"] = str(folder)
        return TaskResult(Status.FAILED, f"{why}. Artifacts in {folder}", data=data)
