"""file: a directory, a symlink, an empty file, or an absent path, with mode and owner."""

from __future__ import annotations

from glmops.connection import quote
from glmops.context import TaskContext
from glmops.errors import ModuleError
from glmops.modules.base import Arg, Module, Plan, mode_arg, register
from glmops.modules.modes import is_symbolic, needs_umask, resulting_mode
from glmops.results import Status, TaskResult


@register
class File(Module):
    """Make `path` a directory (`state: directory`), a symlink to `src` (`link`), an empty file
    if missing (`touch`), remove it (`absent`), or fix a file's mode and owner (`state: file`,
    which never creates one)."""

    name = "file"
    args = {
        "path": Arg(str, required=True),
        "state": Arg(
            str, default="directory", choices=("directory", "absent", "file", "link", "touch")
        ),
        "src": Arg(str, doc="what a link points to (state: link)"),
        "mode": mode_arg(symbolic=True),
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
        if state == "link":
            return self._plan_link(ctx, current)
        if state == "touch" and current is None:
            return Plan(True, f"would create empty file {path}")
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
        fixes = _attribute_fixes(ctx, current, self.params)
        if fixes:
            return Plan(True, "would set " + ", ".join(fixes))
        return Plan(False, f"{path} is a {current.kind} with the wanted mode and owner")

    def _plan_link(self, ctx: TaskContext, current) -> Plan:
        path, src = self.params["path"], self.params["src"]
        if not src:
            raise ModuleError("file: state link needs src (what the link points to)")
        if current is not None and current.kind not in ("link", "file"):
            raise ModuleError(f"{path} is a {current.kind}; refusing to replace it with a link")
        if current is not None and current.kind == "link":
            target = ctx.run(f"readlink -- {quote(path)}", check=True, what=f"readlink {path}")
            if target.stdout.rstrip("\n") == src:
                return Plan(False, f"{path} is a link to {src}")
            return Plan(True, f"would point {path} at {src} (now {target.stdout.strip()})")
        return Plan(True, f"would link {path} → {src}")

    def apply(self, ctx: TaskContext, plan: Plan) -> TaskResult:
        path = quote(self.params["path"])
        if plan.data.get("conflict"):
            return TaskResult(Status.FAILED, plan.reason)
        if plan.change is None:
            return TaskResult(Status.FAILED, plan.reason)
        if self.params["state"] == "absent":
            ctx.run(f"rm -rf -- {path}", check=True, what=f"remove {path}")
            return TaskResult(Status.CHANGED, f"removed {self.params['path']}")
        state = self.params["state"]
        if state == "link":
            ctx.run(
                f"ln -sfn -- {quote(self.params['src'])} {path}", check=True, what=f"link {path}"
            )
            return TaskResult(Status.CHANGED, plan.reason.removeprefix("would "))
        steps = {"directory": [f"mkdir -p -- {path}"], "touch": [f"touch -- {path}"]}.get(state, [])
        steps += _attribute_commands(path, self.params)
        ctx.run(" && ".join(steps), check=True, what=f"set up {self.params['path']}")
        done = plan.reason.removeprefix("would ")
        return TaskResult(Status.CHANGED, done[:1].upper() + done[1:])  # paths keep their case


def _attribute_fixes(ctx: TaskContext, current, params) -> list[str]:
    fixes = []
    spec = params["mode"]
    if spec:
        now = int(current.mode, 8)
        umask = _umask(ctx) if needs_umask(spec) else 0
        wanted = resulting_mode(spec, now, current.kind == "directory", umask)
        if wanted != now:
            shown = f"{wanted:04o} ({spec})" if is_symbolic(spec) else spec
            fixes.append(f"mode {current.mode} → {shown}")
    if params["owner"] and params["owner"] != current.owner:
        fixes.append(f"owner {current.owner} → {params['owner']}")
    if params["group"] and params["group"] != current.group:
        fixes.append(f"group {current.group} → {params['group']}")
    return fixes


def _umask(ctx: TaskContext) -> int:
    """The umask chmod meets on the host (it spares those bits of a clause naming no class)."""
    return int(ctx.run("umask", check=True, what="umask").stdout.strip() or "0", 8)


def _attribute_commands(path: str, params) -> list[str]:
    commands = []
    if params["mode"]:
        commands.append(f"chmod {quote(params['mode'])} -- {path}")
    if params["owner"] or params["group"]:
        spec = (params["owner"] or "") + (f":{params['group']}" if params["group"] else "")
        commands.append(f"chown {quote(spec)} -- {path}")
    return commands
