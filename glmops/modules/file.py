"""file: a directory, or an absent path, with mode and owner."""

from __future__ import annotations

from glmops.connection import quote
from glmops.context import TaskContext
from glmops.modules.base import Arg, Module, Plan, mode_arg, register
from glmops.results import Status, TaskResult


@register
class File(Module):
    """Make `path` a directory (`state: directory`), remove it (`absent`), or fix a file's
    mode and owner (`state: file`, which never creates one)."""

    name = "file"
    args = {
        "path": Arg(str, required=True),
        "state": Arg(str, default="directory", choices=("directory", "absent", "file")),
        "mode": mode_arg(),
        "owner": Arg(str),
        "group": Arg(str),
    }

    def plan(self, ctx: TaskContext) -> Plan:
        path, state = self.params["path"], self.params["state"]
        current = ctx.stat(path, checksum=False)
        if state == "absent":
            return (
                Plan(True, f"would remove {path}") if current else Plan(False, f"{path} is absent")
            )
        if current is None:
            if state == "file":
                return Plan(None, f"{path} does not exist (state: file never creates one)")
            return Plan(True, f"would create directory {path}")
        if state == "directory" and current.kind != "directory":
            return Plan(
                True,
                f"{path} is a {current.kind}; cannot make it a directory",
                data={"conflict": True},
            )
        fixes = _attribute_fixes(current, self.params)
        if fixes:
            return Plan(True, "would set " + ", ".join(fixes))
        return Plan(False, f"{path} is a {current.kind} with the wanted mode and owner")

    def apply(self, ctx: TaskContext, plan: Plan) -> TaskResult:
        path = quote(self.params["path"])
        if plan.data.get("conflict"):
            return TaskResult(Status.FAILED, plan.reason)
        if plan.change is None:
            return TaskResult(Status.FAILED, plan.reason)
        if self.params["state"] == "absent":
            ctx.run(f"rm -rf -- {path}", check=True, what=f"remove {path}")
            return TaskResult(Status.CHANGED, f"removed {self.params['path']}")
        steps = [f"mkdir -p -- {path}"] if self.params["state"] == "directory" else []
        steps += _attribute_commands(path, self.params)
        ctx.run(" && ".join(steps), check=True, what=f"set up {self.params['path']}")
        return TaskResult(Status.CHANGED, plan.reason.removeprefix("would ").capitalize())


def _attribute_fixes(current, params) -> list[str]:
    fixes = []
    if params["mode"] and int(params["mode"], 8) != int(current.mode, 8):
        fixes.append(f"mode {current.mode} → {params['mode']}")
    if params["owner"] and params["owner"] != current.owner:
        fixes.append(f"owner {current.owner} → {params['owner']}")
    if params["group"] and params["group"] != current.group:
        fixes.append(f"group {current.group} → {params['group']}")
    return fixes


def _attribute_commands(path: str, params) -> list[str]:
    commands = []
    if params["mode"]:
        commands.append(f"chmod {quote(params['mode'])} -- {path}")
    if params["owner"] or params["group"]:
        spec = (params["owner"] or "") + (f":{params['group']}" if params["group"] else "")
        commands.append(f"chown {quote(spec)} -- {path}")
    return commands
