"""file: a directory, a symlink, an empty file, or an absent path, with mode and owner."""

from __future__ import annotations

import posixpath

from glmops.engine.connection import quote
from glmops.engine.context import TaskContext, stat_command
from glmops.engine.results import Status, TaskResult
from glmops.errors import ModuleError
from glmops.modules.base import Arg, Module, Plan, mode_arg, register
from glmops.modules.modes import is_symbolic, needs_umask, resulting_mode


@register
class File(Module):
    """Make `path` a directory (`state: directory`), a symlink to `src` (`link`), an empty file
    if missing (`touch`), remove it (`absent`), or fix a file's mode and owner (`state: file`,
    which never creates one). Without `state`, as in Ansible, the path keeps what it is (a
    directory's or a file's mode and owner are fixed) and a missing path is an error."""

    name = "file"
    args = {
        "path": Arg(str, required=True),
        "state": Arg(
            str,
            choices=("directory", "absent", "file", "link", "touch"),
            doc="default: what the path is now (directory or file); file when it is missing",
        ),
        "src": Arg(str, doc="what a link points to (state: link)"),
        "mode": mode_arg(symbolic=True),
        "owner": Arg(str),
        "group": Arg(str),
    }

    @classmethod
    def normalize(cls, raw: dict) -> dict:
        return path_aliases(raw, ("dest", "name"))

    def checks(self) -> list[str]:
        path, mode = self.params["path"], self.params["mode"]
        found = [stat_command(path, checksum=False)]
        if self.params["state"] == "link":
            found.append(readlink_command(path))
        return found + (["umask"] if mode and needs_umask(mode) else [])

    def plan(self, ctx: TaskContext) -> Plan:
        """What the run will do; a path that cannot become what is asked fails here, so
        `--check` fails exactly where the run would."""
        path = self.params["path"]
        current = ctx.stat(path, checksum=False)
        state = self.params["state"] or _kept_state(current)
        if state == "absent":
            return (
                Plan(True, f"would remove {path}") if current else Plan(False, f"{path} is absent")
            )
        if state == "link":
            return self._plan_link(ctx, current)
        if current is None:
            if state == "file":
                raise ModuleError(
                    f"{path} does not exist (state: file never creates one; "
                    "state: touch makes an empty file, state: directory a directory)"
                )
            made = "empty file" if state == "touch" else "directory"
            data = {"create": state}
            if state == "directory":  # Ansible gives each folder it creates the mode and owner
                data["_parents"] = _missing_parents(ctx, path)
            return Plan(True, f"would create {made} {path}", data=data)
        if state == "directory" and current.kind != "directory":
            raise ModuleError(f"{path} is a {current.kind}; cannot make it a directory")
        if state == "file" and current.kind == "directory":
            raise ModuleError(f"{path} is a directory; state: file manages files")
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
            target = ctx.run(readlink_command(path), check=True, what=f"readlink {path}")
            if target.stdout.rstrip("\n") == src:
                return Plan(False, f"{path} is a link to {src}")
            return Plan(True, f"would point {path} at {src} (now {target.stdout.strip()})")
        return Plan(True, f"would link {path} → {src}")

    def apply(self, ctx: TaskContext, plan: Plan) -> TaskResult:
        path = quote(self.params["path"])
        if self.params["state"] == "absent":
            ctx.run(f"rm -rf -- {path}", check=True, what=f"remove {path}")
            return TaskResult(Status.CHANGED, f"removed {self.params['path']}")
        if self.params["state"] == "link":
            ctx.run(
                f"ln -sfn -- {quote(self.params['src'])} {path}", check=True, what=f"link {path}"
            )
            return TaskResult(Status.CHANGED, plan.reason.removeprefix("would "))
        create = {"directory": f"mkdir -p -- {path}", "touch": f"touch -- {path}"}
        steps = [create[plan.data["create"]]] if "create" in plan.data else []
        for parent in plan.data.get("_parents", []):
            steps += _attribute_commands(quote(parent), self.params)
        steps += _attribute_commands(path, self.params)
        ctx.run(" && ".join(steps), check=True, what=f"set up {self.params['path']}")
        done = plan.reason.removeprefix("would ")
        return TaskResult(Status.CHANGED, done[:1].upper() + done[1:])  # paths keep their case


def _missing_parents(ctx: TaskContext, path: str) -> list[str]:
    """The folders above `path` that do not exist yet, outermost first."""
    missing: list[str] = []
    parent = posixpath.dirname(path.rstrip("/"))
    while parent not in ("", "/") and ctx.stat(parent, checksum=False) is None:
        missing.insert(0, parent)
        parent = posixpath.dirname(parent)
    return missing


def readlink_command(path: str) -> str:
    return f"readlink -- {quote(path)}"


def _kept_state(current) -> str:
    """Ansible's state when a task gives none: a directory stays one; anything else (a
    missing path too) is a file."""
    return "directory" if current is not None and current.kind == "directory" else "file"


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


def path_aliases(raw: dict, aliases: tuple[str, ...]) -> dict:
    """Ansible's other names for `path` (file: dest, name; lineinfile: dest, destfile, name)."""
    given = [key for key in ("path", *aliases) if key in raw]
    if len(given) > 1:
        raise ValueError(f"give one of {', '.join(given)} (they are the same argument)")
    if given and given[0] != "path":
        raw = {**raw, "path": raw[given[0]]}
        del raw[given[0]]
    return raw
