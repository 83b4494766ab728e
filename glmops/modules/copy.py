"""copy and template: put content at a path, atomically, only when its sha256 differs."""

from __future__ import annotations

import difflib
import functools
import hashlib
from pathlib import Path

import jinja2

from glmops.engine.context import FileState, TaskContext, stat_command
from glmops.engine.results import Status, TaskResult
from glmops.engine.templating import (
    describe_template_error,
    make_environment,
    trailing_newlines,
)
from glmops.errors import ModuleError, TemplateError
from glmops.modules.base import Arg, Module, Plan, mode_arg, register
from glmops.modules.file import _attribute_commands, _attribute_fixes
from glmops.modules.modes import needs_umask

FILE_ARGS = {
    "dest": Arg(str, required=True, doc="absolute path on the host"),
    "mode": mode_arg(symbolic=True),
    "owner": Arg(str),
    "group": Arg(str),
    "backup": Arg(
        bool,
        default=False,
        doc="keep a copy of the replaced file under the state dir (the newest 5 per file)",
    ),
}


@register
class Copy(Module):
    """Put `content` (or the controller file `src`) at `dest`."""

    name = "copy"
    args = {"src": Arg(str), "content": Arg(str), **FILE_ARGS}

    def content(self, ctx: TaskContext) -> bytes:
        if self.params["content"] is not None:
            return self.params["content"].encode()
        if not self.params["src"]:
            raise ModuleError("copy: give src or content")
        return ctx.find_file(self.params["src"], "files").read_bytes()

    def checks(self) -> list[str]:
        mode = self.params["mode"]
        return [stat_command(self.params["dest"])] + (
            ["umask"] if mode and needs_umask(mode) else []
        )

    def plan(self, ctx: TaskContext) -> Plan:
        src = self.params.get("src")
        if self.name == "copy" and src and self.params["content"] is None:
            if (folder := _find_dir(ctx, src)) is not None:
                return _plan_tree(ctx, folder, self._tree_dest(folder, src))
            dest = self.params["dest"]
            if dest.endswith("/") or ((found := ctx.stat(dest)) and found.kind == "directory"):
                # Ansible's: a file copied to a directory keeps its name there
                self.params = {**self.params, "dest": dest.rstrip("/") + "/" + Path(src).name}
        wanted = self.content(ctx)
        dest = self.params["dest"]
        current = ctx.stat(dest)
        if current is not None and current.kind != "file":
            return Plan(True, f"{dest} is a {current.kind}, not a file", data={"conflict": True})
        new_sha = hashlib.sha256(wanted).hexdigest()
        data = {"content": wanted, "sha256": new_sha}
        if current is None:
            return Plan(True, f"would create {dest}", _diff(ctx, dest, None, wanted), data)
        if current.sha256 != new_sha:
            return Plan(
                True,
                f"would update {dest} (sha256 {(current.sha256 or '')[:12]} → {new_sha[:12]})",
                _diff(ctx, dest, current, wanted),
                data,
            )
        fixes = _attribute_fixes(ctx, current, self.params)
        if fixes:
            return Plan(
                True, f"would set {', '.join(fixes)} on {dest}", data={**data, "attrs": True}
            )
        return Plan(False, f"{dest} has the same sha256 ({new_sha[:12]}), mode and owner")

    def _tree_dest(self, folder: Path, src: str) -> str:
        """`src: dir/` copies the folder's contents into dest; `src: dir`, the folder itself."""
        dest = self.params["dest"].rstrip("/") or "/"
        return dest if src.endswith("/") else f"{dest}/{folder.name}"

    def apply(self, ctx: TaskContext, plan: Plan) -> TaskResult:
        dest = self.params["dest"]
        if "_tree" in plan.data:
            return _apply_tree(ctx, plan, self.params)
        if plan.data.get("conflict"):
            return TaskResult(Status.FAILED, plan.reason)
        if plan.data.get("attrs"):
            from glmops.engine.connection import quote

            ctx.run(
                " && ".join(_attribute_commands(quote(dest), self.params)),
                check=True,
                what=f"set attributes of {dest}",
            )
            return TaskResult(Status.CHANGED, plan.reason.removeprefix("would "), plan.diff)
        backup = ctx.write_file(
            dest,
            plan.data["content"],
            mode=self.params["mode"],
            owner=self.params["owner"],
            group=self.params["group"],
            backup=self.params["backup"],
        )
        msg = plan.reason.removeprefix("would ")
        data = {"sha256": plan.data["sha256"], "dest": dest}
        if backup:
            data["backup"] = backup
        return TaskResult(Status.CHANGED, msg, plan.diff, data)


@register
class Template(Copy):
    """Render the Jinja2 file `src` with the host's variables and put it at `dest`.

    A relative `src` is looked up beside the playbook, then in the playbook's parent folder,
    then in glmops' own files (its checkout, or the installed package's), in each first under
    `templates/`, then directly; the first found is used, and when none is, the error lists the
    folders searched. `{% include %}` looks beside the template first, then in those folders.
    An error in the template names its file and line."""

    name = "template"
    variable_scope = True
    args = {
        "src": Arg(str, required=True, doc="Jinja2 file, rendered with all host variables"),
        **FILE_ARGS,
    }

    def content(self, ctx: TaskContext) -> bytes:
        path = ctx.find_file(self.params["src"], "templates")
        env = _file_environment((str(path.parent), *map(str, ctx.search_paths)))
        try:
            rendered = env.get_template(path.name).render(self.scope(ctx))
            return trailing_newlines(path.read_text(), rendered).encode()
        except jinja2.TemplateError as error:
            raise TemplateError(f"template {describe_template_error(error, path)}") from None


@functools.lru_cache(maxsize=256)
def _file_environment(folders: tuple[str, ...]) -> jinja2.Environment:
    """The environment template files render in, one per search path: its cache compiles a
    file once for every host of a run, not once per host (and, checking the file's time
    on each use, again when it is edited)."""
    env = make_environment(jinja2.FileSystemLoader(list(folders)))
    env.keep_trailing_newline = False  # then Ansible's rule for the last newlines
    return env


def _find_dir(ctx: TaskContext, name: str) -> Path | None:
    """A controller folder named by `src:`, searched as files are (files/ first)."""
    candidate = Path(name)
    if candidate.is_absolute():
        return candidate if candidate.is_dir() else None
    for base in ctx.search_paths:
        for path in (base / "files" / name, base / name):
            if name.strip("/") and path.is_dir():
                return path
    return None


def _plan_tree(ctx: TaskContext, folder: Path, dest: str) -> Plan:
    """What copying a controller folder to `dest` would create or replace: the folders
    missing on the host, the files whose sha256 differs."""
    steps: list[tuple[str, bytes | None]] = []
    locals_ = [folder, *sorted(folder.rglob("*"))]
    for path in locals_:
        remote = dest if path == folder else f"{dest}/{path.relative_to(folder)}"
        current = ctx.stat(remote)
        if path.is_dir():
            if current is None:
                steps.append((remote, None))
            elif current.kind != "directory":
                return Plan(
                    True, f"{remote} is a {current.kind}, not a directory", data={"conflict": True}
                )
        else:
            data = path.read_bytes()
            if current is None or current.sha256 != hashlib.sha256(data).hexdigest():
                steps.append((remote, data))
    if not steps:
        return Plan(False, f"{dest} has the folder's {len(locals_) - 1} entries")
    shown = ", ".join(remote for remote, _ in steps[:5]) + (" ..." if len(steps) > 5 else "")
    return Plan(
        True, f"would copy {len(steps)} path(s) under {dest}: {shown}", data={"_tree": steps}
    )


def _apply_tree(ctx: TaskContext, plan: Plan, params: dict) -> TaskResult:
    if "_tree" not in plan.data or not plan.data["_tree"]:
        return TaskResult(Status.FAILED, plan.reason)
    from glmops.engine.connection import quote

    for remote, data in plan.data["_tree"]:
        if data is None:
            ctx.run(f"mkdir -p -- {quote(remote)}", check=True, what=f"create {remote}")
        else:
            ctx.write_file(
                remote,
                data,
                mode=params["mode"],
                owner=params["owner"],
                group=params["group"],
                backup=False,
            )
    return TaskResult(Status.CHANGED, plan.reason.removeprefix("would "))


def _diff(ctx: TaskContext, dest: str, current: FileState | None, wanted: bytes) -> str | None:
    """Unified diff of the file on the host against the wanted content (only with --diff)."""
    if not ctx.diff:
        return None
    before = (ctx.read(dest) or b"") if current is not None else b""
    try:
        old, new = before.decode(), wanted.decode()
    except UnicodeDecodeError:
        return f"binary file {dest} differs\n"
    lines = difflib.unified_diff(
        old.splitlines(keepends=True),
        new.splitlines(keepends=True),
        f"{dest} (on host)" if current else "/dev/null",
        f"{dest} (wanted)",
    )
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)
