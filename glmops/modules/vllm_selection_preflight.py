"""vllm_selection_preflight: before (re)starting, ask the host's vLLM which backend it picks.

Runs the patch-set helper (hosthelpers/vllm_preflight.py, issue 3) with the venv's python; a
missing or unexpected backend fails the task with vLLM's reasons, so a deploy stops before a
long model load. Read-only, so it also runs under --check.
"""

from __future__ import annotations

from importlib import resources

from glmops.context import TaskContext
from glmops.modules.base import Arg, Module, Plan, register
from glmops.results import TaskResult
from glmops.serving.preflight import parse_preflight

HELPER = "vllm_preflight"


def helper_available() -> bool:
    return resources.files("glmops.hosthelpers").joinpath(f"{HELPER}.py").is_file()


@register
class VllmSelectionPreflight(Module):
    """`vllm_selection_preflight: {python: .../bin/python, capability: "12.0", dtype: float16,
    expected: [TRITON_MLA_SPARSE]}`."""

    name = "vllm_selection_preflight"
    args = {
        "python": Arg(str, required=True, doc="the venv's python"),
        "capability": Arg(str, doc="compute capability X.Y (default: the host's)"),
        "dtype": Arg(str, default="bfloat16"),
        "expected": Arg(list, default=[], doc="acceptable backends"),
        "why": Arg(str, default=""),
        "args": Arg(dict, default={}, doc="further arguments for the helper"),
        "enabled": Arg(bool, default=True, doc="false: skip (a host without a real vLLM)"),
    }

    def plan(self, ctx: TaskContext) -> Plan:
        if not self.params["enabled"]:
            return Plan(False, "preflight disabled by the inventory (vllm_preflight: false)")
        if not helper_available():
            return Plan(
                False,
                "no selection preflight: glmops/hosthelpers/vllm_preflight.py is not in this "
                "glmops yet (patch-set issue 3); the journal backend check still runs after start",
                data={"skipped": True},
            )
        p = self.params
        args = {**p["args"], "dtype": p["dtype"]}
        if p["capability"]:
            args["capability"] = p["capability"]
        reply = ctx.run_helper(HELPER, {**args, "check": True}, python=p["python"], timeout=300)
        if reply.get("failed") and not reply.get("candidates"):
            raise ValueError(f"preflight could not ask vLLM ({p['python']}): {reply.get('msg')}")
        result = parse_preflight(reply)
        expected = [str(n).upper() for n in p["expected"]]
        data = {
            "backend": result.backend,
            "rejected": result.rejected,
            "expected": expected,
            "explain": [f"{name} rejected: {reasons}" for name, reasons in result.rejected.items()],
        }
        if result.error:
            raise ValueError(
                f"preflight: vLLM would select no attention backend: {result.error}; "
                f"reasons: {result.rejected or reply}"
            )
        if expected and result.backend not in expected:
            raise ValueError(
                f"preflight: vLLM would select {result.backend}, expected {' or '.join(expected)}"
                f" ({p['why']}); others rejected: {result.rejected}"
            )
        why = f" ({p['why']})" if p["why"] else ""
        return Plan(False, f"preflight: vLLM would select {result.backend}{why}", data=data)

    def apply(self, ctx: TaskContext, plan: Plan) -> TaskResult:  # pragma: no cover
        raise AssertionError("the preflight never plans a change")
