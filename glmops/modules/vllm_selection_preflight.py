"""vllm_selection_preflight: before (re)starting, ask the host's vLLM which backend it picks.

Runs the patch-set helper (hosthelpers/vllm_preflight.py) with the venv's python; a
missing or unexpected backend fails the task with vLLM's reasons, so a deploy stops before a
long model load. Read-only, so it also runs under --check. On a host without a usable GPU
(a capability given, CUDA unavailable) the helper stubs vLLM's compiled kernel modules so that
its selection code can import; the task's message says so, since such an answer comes from
vLLM's Python alone.
"""

from __future__ import annotations

from glmops.engine.context import TaskContext
from glmops.engine.results import TaskResult
from glmops.errors import ModuleError
from glmops.gpu.serving.preflight import parse_preflight
from glmops.modules.base import Arg, Module, Plan, register

HELPER = "vllm_preflight"


def stub_note(stubbed: list[str] | None) -> str:
    """The message's note for an answer given without a GPU ("" when vLLM imported as is)."""
    if stubbed is None:
        return ""
    return (
        f" (asked without a GPU: no usable CUDA device on the host, so {len(stubbed)} compiled"
        " kernel modules of vLLM were stubbed)"
    )


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
        p = self.params
        args = {**p["args"], "dtype": p["dtype"]}
        if p["capability"]:
            args["capability"] = p["capability"]
        reply = ctx.run_helper(HELPER, {**args, "check": True}, python=p["python"], timeout=300)
        if reply.get("failed") and not reply.get("candidates"):
            raise ModuleError(f"preflight could not ask vLLM ({p['python']}): {reply.get('msg')}")
        result = parse_preflight(reply)
        expected = [str(n).upper() for n in p["expected"]]
        stubbed = reply.get("compiled_modules_stubbed")
        note = stub_note(stubbed)
        vllm = f"vLLM {reply['vllm_version']}" if reply.get("vllm_version") else "vLLM"
        explain = [f"{name} rejected: {reasons}" for name, reasons in result.rejected.items()]
        if stubbed is not None:
            explain.append(f"no usable GPU → stubbed: {', '.join(stubbed) or 'none'}")
        data = {
            "backend": result.backend,
            "rejected": result.rejected,
            "expected": expected,
            "vllm_version": reply.get("vllm_version"),
            "compiled_modules_stubbed": stubbed,
            "explain": explain,
        }
        if result.error:
            raise ModuleError(
                f"preflight: {vllm} would select no attention backend: {result.error}; "
                f"reasons: {result.rejected or reply}{note}"
            )
        if expected and result.backend not in expected:
            raise ModuleError(
                f"preflight: {vllm} would select {result.backend}, expected {' or '.join(expected)}"
                f" ({p['why']}); others rejected: {result.rejected}{note}"
            )
        why = f" ({p['why']})" if p["why"] else ""
        return Plan(False, f"preflight: {vllm} would select {result.backend}{why}{note}", data=data)

    def apply(self, ctx: TaskContext, plan: Plan) -> TaskResult:  # pragma: no cover
        raise AssertionError("the preflight never plans a change")
