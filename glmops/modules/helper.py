"""helper: run a host-side Python helper (stdlib only) from glmops/hosthelpers/.

The helper does its own checking: it is run once with `check: true` to plan (would it change,
with a diff), then again to apply. Its reply is one JSON object with failed/changed/msg.
"""

from __future__ import annotations

from glmops.engine.context import TaskContext
from glmops.engine.results import Status, TaskResult
from glmops.modules.base import Arg, Module, Plan, register


@register
class Helper(Module):
    """`helper: {script: gguf_split, args: {mode: merge, ...}}`."""

    name = "helper"
    args = {
        "script": Arg(str, required=True, doc="file name in glmops/hosthelpers, without .py"),
        "args": Arg(dict, default={}, doc="the helper's JSON arguments"),
        "python": Arg(str, doc="interpreter on the host (default: python3)"),
        "timeout": Arg((int, float), doc="seconds the helper may run"),
    }

    def _call(self, ctx: TaskContext, check: bool) -> dict:
        return ctx.run_helper(
            self.params["script"],
            {**self.params["args"], "check": check},
            python=self.params["python"],
            timeout=self.params["timeout"],
        )

    def plan(self, ctx: TaskContext) -> Plan:
        reply = self._call(ctx, check=True)
        if reply.get("failed"):
            return Plan(
                True, reply.get("msg", "helper failed"), data={**reply, "plan_failed": True}
            )
        return Plan(bool(reply.get("changed")), reply.get("msg", ""), reply.get("diff"), reply)

    def apply(self, ctx: TaskContext, plan: Plan) -> TaskResult:
        if plan.data.get("plan_failed"):
            return TaskResult(Status.FAILED, plan.reason, data=plan.data)
        reply = self._call(ctx, check=False)
        if reply.get("failed"):
            return TaskResult(Status.FAILED, reply.get("msg", "helper failed"), data=reply)
        status = Status.CHANGED if reply.get("changed") else Status.OK
        return TaskResult(status, reply.get("msg", ""), reply.get("diff") or plan.diff, reply)
