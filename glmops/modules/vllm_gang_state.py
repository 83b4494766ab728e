"""vllm_gang_state: observe a gang member's unit and publish it for the run (writes nothing).

Every member is observed in one play, before any restart, so that `vllm_gang_restart` on each
member reads the same observations and reaches the same decision (glmops/fleet/gang.py).
"""

from __future__ import annotations

from typing import Any

from glmops.engine.context import TaskContext
from glmops.engine.results import TaskResult
from glmops.fleet.gang import (
    Board,
    MemberState,
    observe_command,
    parse_observation,
    record_path,
)
from glmops.modules.base import Arg, Module, Plan, register
from glmops.modules.vllm_gang import REPLICA

STATE_ARGS = {
    "replica": REPLICA,
    "unit": Arg(str, required=True, doc="the member's vllm serve unit"),
    "state_dir": Arg(str, required=True, doc="where the gang restart record lives"),
    "files": Arg(list, default=[], doc="the unit's configuration files (unit, env, inputs)"),
}


def observe(
    ctx: TaskContext, replica: dict[str, Any], unit: str, state_dir: str, files: list[str]
) -> MemberState:
    """This member's unit now, and the record of the gang restart that started it."""
    rank = next(m["rank"] for m in replica["members"] if m["host"] == ctx.host.name)
    command = observe_command(unit, record_path(state_dir, unit), files)
    result = ctx.run(command)
    return parse_observation(ctx.host.name, rank, result.stdout, with_config=bool(files))


@register
class VllmGangState(Module):
    """`vllm_gang_state: {replica: ..., unit: vllm-glm5, state_dir: ..., files: [...]}`."""

    name = "vllm_gang_state"
    args = STATE_ARGS

    def plan(self, ctx: TaskContext) -> Plan:
        p = self.params
        state = observe(ctx, p["replica"], p["unit"], p["state_dir"], p["files"])
        Board(ctx.log.path).publish(p["replica"]["name"], state)
        return Plan(False, f"{p['unit']} {state.active} (observed for the gang's decision)")

    def apply(self, ctx: TaskContext, plan: Plan) -> TaskResult:  # pragma: no cover
        raise AssertionError("vllm_gang_state never plans a change")
