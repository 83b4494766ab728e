"""vllm_drain: wait, on the host, until its vLLM holds no request, before a restart.

Run after the replica left the router: the requests it still runs or queues finish instead of
being cut off by the restart (a cut request is one the client may wait on until its own
timeout). Drained is 0 running and 0 waiting on two looks `settle` seconds apart, so a request
the router sent just before the replica left it is seen too. Bounded: past `timeout` the task
goes on (the restart cuts what is left) or, with `fail_on_timeout`, fails so the replica is not
restarted.
"""

from __future__ import annotations

from typing import cast

from glmops.engine.context import TaskContext
from glmops.engine.results import Status, TaskResult
from glmops.hosthelpers.vllm_drain import DrainReply
from glmops.modules._serving import ADDRESS_ARG
from glmops.modules.base import Arg, Module, Plan, register


@register
class VllmDrain(Module):
    """`vllm_drain: {port: 8000, timeout: 120}`: until /metrics says no request runs or waits.

    Observes only, so check mode skips it."""

    name = "vllm_drain"
    args = {
        "address": ADDRESS_ARG,
        "port": Arg(int, default=8000),
        "timeout": Arg((int, float), default=120, doc="seconds to wait for running requests"),
        "interval": Arg((int, float), default=0.5),
        "settle": Arg((int, float), default=2, doc="seconds the count must stay 0"),
        "fail_on_timeout": Arg(bool, default=False, doc="fail instead of going on"),
    }

    def plan(self, ctx: TaskContext) -> Plan:
        return Plan(None, f"wait until vLLM on port {self.params['port']} holds no request")

    def apply(self, ctx: TaskContext, plan: Plan) -> TaskResult:
        p = self.params
        reply = cast(
            DrainReply,
            ctx.run_helper(
                "vllm_drain",
                {k: p[k] for k in ("address", "port", "timeout", "interval", "settle")},
                timeout=float(p["timeout"]) + float(p["settle"]) + 30,
            ),
        )
        failed = reply.get("failed") or (reply.get("timed_out") and p["fail_on_timeout"])
        return TaskResult(
            Status.FAILED if failed else Status.OK, reply.get("msg", ""), data=dict(reply)
        )
