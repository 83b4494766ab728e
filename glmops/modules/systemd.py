"""systemd: a unit started, stopped or restarted, enabled or not; daemon-reload when needed."""

from __future__ import annotations

from glmops.engine.connection import quote
from glmops.engine.context import TaskContext
from glmops.engine.results import Status, TaskResult
from glmops.modules.base import Arg, Module, Plan, register


@register
class Systemd(Module):
    """`systemd: {name: vllm, state: started, enabled: true}`.

    systemd itself says when a unit file changed on disk (NeedDaemonReload); then
    `daemon-reload` runs before anything else, without being asked.
    """

    name = "systemd"
    free_form = "name"
    args = {
        "name": Arg(str, doc="the unit (`.service` is implied)"),
        "state": Arg(str, choices=("started", "stopped", "restarted", "reloaded")),
        "enabled": Arg(bool),
        "daemon_reload": Arg(bool, default=False, doc="reload unit files even if none changed"),
    }

    def checks(self) -> list[str]:
        name = self.params["name"]
        return [_show_command(name)] if name is not None else []

    def plan(self, ctx: TaskContext) -> Plan:
        name = self.params["name"]
        actions: list[str] = []
        if self.params["daemon_reload"]:
            actions.append("daemon-reload")
        if name is None:
            return Plan(bool(actions), "would daemon-reload" if actions else "nothing asked")
        props = self._properties(ctx, name)
        if props.get("LoadState") == "not-found" and self.params["state"] != "stopped":
            return Plan(True, f"unit {name} not found", data={"missing": True})
        if props.get("NeedDaemonReload") == "yes" and "daemon-reload" not in actions:
            actions.append("daemon-reload (unit file changed on disk)")
        state, active = self.params["state"], props.get("ActiveState")
        if state == "started" and active not in ("active", "activating", "reloading"):
            actions.append("start")
        elif state == "stopped" and active in ("active", "activating", "reloading"):
            actions.append("stop")
        elif state in ("restarted", "reloaded"):
            actions.append(state.removesuffix("ed"))
        enabled = props.get("UnitFileState") in ("enabled", "enabled-runtime", "static", "alias")
        if self.params["enabled"] is not None and enabled != self.params["enabled"]:
            actions.append("enable" if self.params["enabled"] else "disable")
        if not actions:
            return Plan(
                False,
                f"{name} is {active}"
                + (
                    f" and {props.get('UnitFileState')}"
                    if self.params["enabled"] is not None
                    else ""
                ),
            )
        return Plan(True, f"would {', '.join(actions)} {name}", data={"actions": actions})

    def apply(self, ctx: TaskContext, plan: Plan) -> TaskResult:
        if plan.data.get("missing"):
            return TaskResult(Status.FAILED, plan.reason)
        name = quote(self.params["name"]) if self.params["name"] else ""
        for action in plan.data.get("actions", ["daemon-reload"]):
            verb = action.split(" ")[0]
            command = (
                "systemctl daemon-reload" if verb == "daemon-reload" else f"systemctl {verb} {name}"
            )
            if verb in ("start", "restart"):
                # A start asked for is not a crash loop: StartLimitBurst= counts every start,
                # so without this the Nth deploy within the unit's interval would be refused.
                command = f"{{ systemctl reset-failed {name} 2>/dev/null || true; }} && {command}"
            result = ctx.run(command)
            if not result.ok:
                journal = ctx.run(f"journalctl -u {name} -n 20 --no-pager 2>/dev/null").stdout
                detail = (result.stderr.strip() + "\n" + journal.strip()).strip()[-1500:]
                return TaskResult(
                    Status.FAILED, f"systemctl {verb} failed (rc={result.rc}): {detail}"
                )
        return TaskResult(Status.CHANGED, plan.reason.removeprefix("would "))

    @staticmethod
    def _properties(ctx: TaskContext, name: str) -> dict[str, str]:
        result = ctx.run(
            _show_command(name),
            check=True,
            what=f"systemctl show {name}",
        )
        return dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)


def _show_command(name: str) -> str:
    return f"systemctl show {quote(name)} -p LoadState,ActiveState,UnitFileState,NeedDaemonReload"
