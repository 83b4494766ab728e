"""meta: steps that act on the run itself rather than on the host."""

from __future__ import annotations

from glmops.engine.context import TaskContext
from glmops.engine.results import TaskResult
from glmops.modules.base import Arg, Module, Plan, register


@register
class Meta(Module):
    """`meta: flush_handlers` runs the handlers notified so far at this point of the play
    (instead of at its end), e.g. to restart a service before checking it. The executor
    carries it out; it never reaches a host."""

    name = "meta"
    free_form = "action"
    args = {"action": Arg(str, required=True, choices=("flush_handlers",))}

    def plan(self, ctx: TaskContext) -> Plan:
        raise NotImplementedError("meta is carried out by the executor")

    def apply(self, ctx: TaskContext, plan: Plan) -> TaskResult:
        raise NotImplementedError("meta is carried out by the executor")
