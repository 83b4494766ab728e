"""wait_for: wait, on the host, until a TCP port accepts or a URL answers the wanted status."""

from __future__ import annotations

from typing import cast

from glmops.engine.context import TaskContext
from glmops.engine.results import Status, TaskResult
from glmops.errors import ModuleError
from glmops.hosthelpers.wait_for import WaitReply
from glmops.modules.base import Arg, Module, Plan, register


@register
class WaitFor(Module):
    """`wait_for: {port: 8000}` or `wait_for: {url: http://127.0.0.1:8000/health, status: 200}`.

    Observes only, so check mode skips it (it would wait for changes check mode did not make).
    """

    name = "wait_for"
    args = {
        "host": Arg(str, default="127.0.0.1", doc="address to probe, as seen from the host"),
        "port": Arg(int),
        "url": Arg(str),
        "status": Arg(int, default=200),
        "timeout": Arg((int, float), default=300),
        "sleep": Arg((int, float), default=1),
    }

    def plan(self, ctx: TaskContext) -> Plan:
        if not self.params["port"] and not self.params["url"]:
            raise ModuleError("wait_for: give port or url")
        target = self.params["url"] or f"{self.params['host']}:{self.params['port']}"
        return Plan(None, f"wait for {target}")

    def apply(self, ctx: TaskContext, plan: Plan) -> TaskResult:
        reply = cast(
            WaitReply,
            ctx.run_helper(
                "wait_for",
                {k: v for k, v in self.params.items() if v is not None},
                timeout=float(self.params["timeout"]) + 30,
            ),
        )
        status = Status.FAILED if reply.get("failed") else Status.OK
        return TaskResult(status, reply.get("msg", ""), data=dict(reply))
