"""python_venv: uv at a pinned version and a uv-managed venv with a pinned Python.

The host helper hosthelpers/python_venv.py does the work in one round trip, planning with
`check: true` first; uv comes from the pushed wheelhouse when it holds the uv wheel (hosts
without internet), else from PyPI. A venv with another Python minor version is recreated.
"""

from __future__ import annotations

from typing import cast

from glmops.engine.context import TaskContext
from glmops.engine.results import Status, TaskResult
from glmops.errors import ModuleError
from glmops.hosthelpers.python_venv import VenvReply
from glmops.modules.base import Arg, Module, Plan, register

UV_DIR = "/opt/glmops/uv"


@register
class PythonVenv(Module):
    """`python_venv: {path: /opt/vllm, python: "3.12", uv_version: 0.13.9}`."""

    name = "python_venv"
    changes_facts = True
    args = {
        "path": Arg(str, required=True, doc="the venv folder on the host"),
        "python": Arg(str, required=True, doc="Python version to pin, e.g. 3.12"),
        "uv_version": Arg(str, required=True, doc="uv version to install on the host"),
        "uv_dir": Arg(str, default=UV_DIR, doc="uv binaries (bin/) and managed Pythons"),
        "wheelhouse": Arg(str, doc="host folder that may hold the uv wheel (no internet)"),
        "python_downloads": Arg(
            str,
            default="automatic",
            choices=("automatic", "manual", "never"),
            doc="may uv download a managed Python (never: use the host's)",
        ),
    }

    def _call(self, ctx: TaskContext, check: bool) -> VenvReply:
        p = self.params
        reply = ctx.run_helper(
            "python_venv",
            {
                "venv": p["path"],
                "python": p["python"],
                "uv_version": p["uv_version"],
                "uv_dir": p["uv_dir"],
                "wheelhouse": p["wheelhouse"],
                "python_downloads": p["python_downloads"],
                "check": check,
            },
            timeout=1200,
        )
        return cast(VenvReply, reply)

    def plan(self, ctx: TaskContext) -> Plan:
        reply = self._call(ctx, check=True)
        if reply.get("failed"):
            raise ModuleError(f"python_venv: {reply.get('msg')}")
        return Plan(bool(reply.get("changed")), reply.get("msg", ""), data=dict(reply))

    def apply(self, ctx: TaskContext, plan: Plan) -> TaskResult:
        reply = self._call(ctx, check=False)
        if reply.get("failed"):
            return TaskResult(
                Status.FAILED, reply.get("msg", "python_venv failed"), data=dict(reply)
            )
        status = Status.CHANGED if reply.get("changed") else Status.OK
        return TaskResult(status, reply.get("msg", ""), data=dict(reply))
