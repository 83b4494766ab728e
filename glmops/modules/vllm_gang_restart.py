"""vllm_gang_restart: restart a gang member when its gang, as every member was observed this
run, is not whole or changed; the deploy runs it on the workers first, then on the heads.

After a restart the member keeps a record (its unit's InvocationID, its files' digest, the
run as the restart's generation, the gang's members): what `glmops status` and the next deploy
compare with what runs.
"""

from __future__ import annotations

import json

from glmops.connection import quote
from glmops.context import TaskContext
from glmops.errors import ModuleError
from glmops.fleet.gang import (
    Board,
    MemberState,
    composition,
    record_path,
    verdict,
)
from glmops.modules.base import Module, Plan, register
from glmops.modules.vllm_gang_state import STATE_ARGS, observe
from glmops.results import Status, TaskResult


@register
class VllmGangRestart(Module):
    """`vllm_gang_restart: {replica: ..., unit: ..., state_dir: ..., files: [...]}`: restart
    this member when its gang (as every member observed it this run) needs a restart."""

    name = "vllm_gang_restart"
    args = STATE_ARGS

    def plan(self, ctx: TaskContext) -> Plan:
        replica = self.params["replica"]
        judged = verdict(replica, Board(ctx.log.path).read(replica["name"]))
        if not judged.needs_restart:
            return Plan(False, f"gang {replica['name']} is whole and unchanged")
        if judged.unobserved:
            raise ModuleError(
                f"gang {replica['name']} needs a restart ({'; '.join(judged.reasons)}), but "
                f"{', '.join(judged.unobserved)} is not in this run: deploy all its hosts"
            )
        order = "workers first, then the head"
        return Plan(True, f"restart gang {replica['name']} ({order}): {'; '.join(judged.reasons)}")

    def apply(self, ctx: TaskContext, plan: Plan) -> TaskResult:
        p = self.params
        unit = p["unit"]
        result = ctx.run(
            f"systemctl daemon-reload && systemctl reset-failed {quote(unit)} 2>/dev/null;"
            f" systemctl restart {quote(unit)}"
        )
        if not result.ok:
            return TaskResult(Status.FAILED, f"systemctl restart {unit}: {result.stderr.strip()}")
        state: MemberState = observe(ctx, p["replica"], unit, p["state_dir"], p["files"])
        record = {
            "invocation": state.invocation,
            "config": state.config,
            "generation": ctx.log.path.name,
            "members": composition(p["replica"]),
        }
        ctx.write_file(
            record_path(p["state_dir"], unit),
            (json.dumps(record, sort_keys=True) + "\n").encode(),
            mode="0644",
            owner=None,
            group=None,
            backup=False,
        )
        return TaskResult(Status.CHANGED, plan.reason)
