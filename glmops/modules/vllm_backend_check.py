"""vllm_backend_check: the attention backend vLLM actually selected, against the expected one.

Reads the current run's journal for "Using X attention backend out of potential backends" or
"Using AttentionBackendEnum.X backend" (vLLM's selector logs one of the two); "No valid
attention backend found" fails with vLLM's reasons. The selection is logged early (before
weights load), so this check can stop a deploy long before a 400 GB load would have finished.
"""

from __future__ import annotations

import time
from typing import Any

from glmops.engine.context import TaskContext
from glmops.engine.results import Status, TaskResult
from glmops.gpu.serving.journal import SELECTION_GREP, parse_backend
from glmops.modules._serving import (
    UNIT_ARGS,
    collect_artifacts,
    dead,
    int_or_none,
    probe,
    stopped_why,
)
from glmops.modules.base import Arg, Module, Plan, register


@register
class VllmBackendCheck(Module):
    """`vllm_backend_check: {unit: vllm-glm5, expected: [TRITON_MLA_SPARSE]}`.

    Observes only: skipped under --check (nothing was started to select a backend).
    """

    name = "vllm_backend_check"
    args = {
        **UNIT_ARGS,
        "timeout": Arg((int, float), default=1800, doc="seconds to wait for the selection line"),
        "expected": Arg(list, required=True, doc="acceptable backend names (empty: unknown)"),
        "why": Arg(str, default="", doc="the rule behind `expected`, for the message"),
    }

    def plan(self, ctx: TaskContext) -> Plan:
        return Plan(None, f"read the attention backend {self.params['unit']} selected")

    def apply(self, ctx: TaskContext, plan: Plan) -> TaskResult:
        p = self.params
        expected = [str(n).upper() for n in p["expected"]]
        started = time.monotonic()
        restarts: int | None = None
        last_note = 0.0
        while True:
            reply = probe(
                ctx,
                {
                    "unit": p["unit"],
                    "http": False,
                    "journal_grep": SELECTION_GREP,
                    "journal_lines": 200,
                },
            )
            unit = reply.get("unit", {})
            if restarts is None:
                restarts = int_or_none(unit.get("NRestarts"))
            selection = parse_backend(reply.get("journal_matches") or [])
            elapsed = time.monotonic() - started
            data: dict[str, Any] = {
                "backend": selection.backend,
                "candidates": selection.candidates,
                "forced": selection.forced,
                "expected": expected,
                "line": selection.line,
            }
            if selection.failed:
                why = f"vLLM found no valid attention backend. Reasons: {selection.reasons}"
                return self._fail(ctx, why, data)
            if selection.backend:
                if not expected:
                    return self._fail(
                        ctx,
                        f"vLLM selected {selection.backend}, but no backend is expected "
                        f"for this host ({p['why']})",
                        data,
                    )
                if selection.backend.upper() not in expected:
                    return self._fail(
                        ctx,
                        f"vLLM selected {selection.backend}, expected {' or '.join(expected)} "
                        f"({p['why']}); candidates: {selection.candidates}",
                        data,
                    )
                how = "forced" if selection.forced else f"out of {selection.candidates}"
                return TaskResult(
                    Status.OK,
                    f"vLLM selected {selection.backend} ({how}), as expected: {p['why']}",
                    data=data,
                )
            gone = dead(unit, restarts)
            if gone:
                why = f"{gone} before it logged a backend selection"
                return self._fail(ctx, stopped_why(ctx, p["unit"], why), data)
            if elapsed >= float(p["timeout"]):
                return self._fail(
                    ctx, f"no backend selection in the journal after {p['timeout']} s", data
                )
            if time.monotonic() - last_note >= float(p["progress_every"]):
                ctx.progress(f"{p['unit']}: {elapsed:.0f}s, waiting for the backend selection")
                last_note = time.monotonic()
            time.sleep(float(p["interval"]))

    def _fail(self, ctx: TaskContext, why: str, data: dict[str, Any]) -> TaskResult:
        folder = collect_artifacts(ctx, self.params["unit"], self.params["venv"], why)
        data["artifacts"] = str(folder)
        return TaskResult(Status.FAILED, f"{why}. Artifacts in {folder}", data=data)
