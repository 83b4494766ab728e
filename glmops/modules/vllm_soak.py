"""vllm_soak: a replica back in rotation stays healthy for a while before the next batch.

Looks every `interval` seconds for `seconds`: the unit did not restart, /health is 200, and a
one-token completion answers. One bad look fails the task, so a replica that crashes right
after its gate stops the roll instead of the next batch taking the fleet's capacity down too.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from glmops.engine.context import TaskContext
from glmops.engine.results import Status, TaskResult
from glmops.hosthelpers.vllm_probe import ProbeReply
from glmops.modules._serving import ADDRESS_ARG, probe, serving_probe_args
from glmops.modules.base import Arg, Module, Plan, register


@register
class VllmSoak(Module):
    """`vllm_soak: {unit: vllm-glm5, port: 8000, served_model_name: m, seconds: 10}`.

    Observes only, so check mode skips it."""

    name = "vllm_soak"
    args = {
        "unit": Arg(str, default="vllm-glm5"),
        "address": ADDRESS_ARG,
        "port": Arg(int, default=8000),
        "served_model_name": Arg(str, required=True),
        "env_file": Arg(str, doc="the 0600 environment file holding VLLM_API_KEY"),
        "seconds": Arg((int, float), default=10),
        "interval": Arg((int, float), default=2),
    }

    def plan(self, ctx: TaskContext) -> Plan:
        return Plan(None, f"{self.params['unit']} healthy for {self.params['seconds']} s")

    def apply(self, ctx: TaskContext, plan: Plan) -> TaskResult:
        p = self.params
        args = serving_probe_args(p, completion=True, completion_timeout=30)
        started = time.monotonic()
        pid = None
        looks = 0
        while True:
            reply = probe(ctx, args)
            looks += 1
            why = self._bad(reply, pid)
            if why:
                elapsed = time.monotonic() - started
                return TaskResult(Status.FAILED, f"unhealthy after {elapsed:.0f} s: {why}")
            pid = reply.get("unit", {}).get("MainPID")
            if time.monotonic() - started >= float(p["seconds"]):
                return TaskResult(Status.OK, f"healthy for {p['seconds']} s ({looks} looks)")
            time.sleep(float(p["interval"]))

    @staticmethod
    def _bad(reply: ProbeReply, pid: str | None) -> str | None:
        unit = reply.get("unit", {})
        if unit.get("ActiveState") != "active":
            return f"unit {unit.get('ActiveState')}/{unit.get('SubState')}"
        if pid is not None and unit.get("MainPID") != pid:
            return f"vLLM restarted (pid {pid} -> {unit.get('MainPID')})"
        health = reply.get("health", {}).get("status")
        if health != 200:
            return f"/health answered {health} ({reply.get('health', {}).get('error')})"
        done: Mapping[str, Any] = reply.get("completion") or {}
        if done.get("status") != 200:
            return f"completion answered {done.get('status')} ({done.get('error')})"
        return None
