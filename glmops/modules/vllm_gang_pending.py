"""vllm_gang_pending: will this member's gang restart in this run (observes; writes nothing)?

A rolling deploy asks before the gang stops, to take the gang's head out of the router and
drain it first, and to put it back after the head's gate; a gang that will not restart is
never taken out of rotation. The answer is vllm_gang_restart's own: the same verdict on the
same observations (every member's, published by vllm_gang_state earlier in the run).
"""

from __future__ import annotations

from glmops.engine.context import TaskContext
from glmops.fleet.gang import Board, verdict
from glmops.modules.base import Module, Plan, register
from glmops.modules.vllm_gang import REPLICA


@register
class VllmGangPending(Module):
    """`vllm_gang_pending: {replica: "{{ fleet_replica }}"}`; registers `pending`, `why`."""

    name = "vllm_gang_pending"
    args = {"replica": REPLICA}

    def plan(self, ctx: TaskContext) -> Plan:
        replica = self.params["replica"]
        judged = verdict(replica, Board(ctx.log.path).read(replica["name"]))
        why = "; ".join(judged.reasons) or "whole and unchanged"
        pending = judged.needs_restart
        reason = f"gang {replica['name']}: {'restart pending' if pending else 'no restart'}: {why}"
        return Plan(False, reason, data={"pending": pending, "why": why})
