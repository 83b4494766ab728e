"""vllm_gang_restart: restart a gang when, as every member was observed this run, it is not
whole or changed: the deploy stops every member, then starts the workers, then the heads.

After a restart the member keeps a record (its unit's InvocationID, its files' digest, the
run as the restart's generation, the gang's members): what `glmops status` and the next deploy
compare with what runs.
"""

from __future__ import annotations

import json

from glmops.engine.connection import quote
from glmops.engine.context import TaskContext
from glmops.engine.results import Status, TaskResult
from glmops.errors import ModuleError
from glmops.fleet.gang import (
    Board,
    MemberState,
    composition,
    record_path,
    verdict,
)
from glmops.modules.base import Arg, Module, Plan, register
from glmops.modules.vllm_gang_state import STATE_ARGS, observe


@register
class VllmGangRestart(Module):
    """`vllm_gang_restart: {step: stop|start, replica: ..., unit: ..., state_dir: ...,
    files: [...]}`: when this member's gang (as every member was observed this run) needs a
    restart, stop every member (`stop`), then start the workers, then the head (`start`)."""

    name = "vllm_gang_restart"
    args = {
        "step": Arg(str, required=True, choices=("stop", "start"), doc="which half"),
        "user": Arg(str, required=True, doc="the unit's service account (vllm_user)"),
        **STATE_ARGS,
    }

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
        what = "stop every member" if self.params["step"] == "stop" else "start"
        return Plan(True, f"gang {replica['name']}, {what}: {'; '.join(judged.reasons)}")

    def apply(self, ctx: TaskContext, plan: Plan) -> TaskResult:
        unit = quote(self.params["unit"])
        if self.params["step"] == "stop":
            # Killed, not stopped gracefully: the engine spans the gang, so restarting any
            # member ends its requests anyway, and a member stopping gracefully waits on peers
            # that are gone (until TimeoutStopSec). Draining a replica is the router's part.
            # Then nothing of the service account may run on: where systemd cannot kill a
            # control group (containers), vLLM's engine and worker processes outlive their
            # unit and hold the gang's ports, so the next start could not form the gang.
            user = quote(self.params["user"])
            gone = f"! pgrep -u {user} >/dev/null"
            command = (
                f"systemctl kill --signal=SIGKILL {unit} 2>/dev/null; systemctl stop {unit}"
                f" && {{ pkill -KILL -u {user}; for _ in $(seq 20); do {gone} && break;"
                f" sleep 0.5; done; {gone}; }}"
            )
        else:
            command = (
                f"systemctl daemon-reload && {{ systemctl reset-failed {unit} 2>/dev/null;"
                f" systemctl start {unit}; }}"
            )
        result = ctx.run(command)
        if not result.ok:
            return TaskResult(Status.FAILED, f"{command}: {result.stderr.strip()}")
        if self.params["step"] == "start":
            self._record(ctx)
        return TaskResult(Status.CHANGED, plan.reason)

    def _record(self, ctx: TaskContext) -> None:
        """What this start ran: the next deploy and `glmops status` compare with it."""
        p = self.params
        state: MemberState = observe(ctx, p["replica"], p["unit"], p["state_dir"], p["files"])
        record = {
            "invocation": state.invocation,
            "config": state.config,
            "generation": ctx.log.path.name,
            "members": composition(p["replica"]),
        }
        ctx.write_file(
            record_path(p["state_dir"], p["unit"]),
            (json.dumps(record, sort_keys=True) + "\n").encode(),
            mode="0644",
            owner=None,
            group=None,
            backup=False,
        )
