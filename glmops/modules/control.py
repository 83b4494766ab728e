"""debug, assert, fail and set_fact: modules that act on the run, not on the host.

They touch nothing on a host, so they run the same way under --check; names and meanings are
Ansible's.
"""

from __future__ import annotations

from typing import Any

from glmops.engine.context import TaskContext
from glmops.engine.templating import evaluate, evaluate_condition
from glmops.errors import ModuleError
from glmops.modules.base import Arg, Module, Plan, register


@register
class Debug(Module):
    """Show a message (`msg`) or a variable's value (`var`) in the task line."""

    name = "debug"
    free_form = "msg"
    variable_scope = True
    args = {
        "msg": Arg((str, int, float, bool, list, dict), doc="what to show"),
        "var": Arg(str, doc="a variable name or expression whose value to show"),
    }

    def plan(self, ctx: TaskContext) -> Plan:
        if self.params["var"] is not None:
            value = evaluate(
                self.params["var"], self.scope(ctx), where=f"debug var {ctx.task_name!r}"
            )
            return Plan(False, f"{self.params['var']} = {value!r}", data={"value": value})
        msg = self.params["msg"] if self.params["msg"] is not None else "Hello world!"
        return Plan(False, str(msg), data={"msg": msg})


@register
class Assert(Module):
    """Fail the task unless every expression of `that` is true."""

    name = "assert"
    variable_scope = True
    args = {
        "that": Arg((str, list), required=True, doc="an expression or a list of them"),
        "fail_msg": Arg(str, doc="the message when one is false"),
        "success_msg": Arg(str, default="all assertions passed"),
        "quiet": Arg(bool, default=False),
    }

    def plan(self, ctx: TaskContext) -> Plan:
        that = self.params["that"]
        for expression in that if isinstance(that, list) else [that]:
            if not evaluate_condition(
                expression, self.scope(ctx), where=f"assert {ctx.task_name!r}"
            ):
                raise ModuleError(self.params["fail_msg"] or f"assertion failed: {expression}")
        return Plan(False, self.params["success_msg"])


@register
class Fail(Module):
    """Fail the task with `msg` (usually under a `when:`)."""

    name = "fail"
    free_form = "msg"
    args = {"msg": Arg(str, default="failed as requested", doc="the failure message")}

    def plan(self, ctx: TaskContext) -> Plan:
        raise ModuleError(self.params["msg"])


@register
class SetFact(Module):
    """Set host variables for the rest of the run: `set_fact: {port: 8001}` (any names)."""

    name = "set_fact"
    any_args = True

    def plan(self, ctx: TaskContext) -> Plan:
        values: dict[str, Any] = dict(self.params)
        if not values:
            raise ModuleError("set_fact: give at least one name: value")
        shown = ", ".join(sorted(values))
        return Plan(False, f"set {shown}", data={"set_vars": values})
