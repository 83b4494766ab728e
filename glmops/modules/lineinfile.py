"""lineinfile and blockinfile: edit one line, or one marked block, of a text file in place.

The file is read, edited on the controller and written back atomically (mode and owner kept);
a second run finds the line or block already there and changes nothing. Names and meanings are
Ansible's.
"""

from __future__ import annotations

import difflib
import re

from glmops.engine.context import TaskContext, read_command
from glmops.engine.results import Status, TaskResult
from glmops.errors import ModuleError
from glmops.modules.base import Arg, Module, Plan, mode_arg, register
from glmops.modules.file import path_aliases

EDIT_ARGS = {
    "path": Arg(str, required=True, doc="the file on the host"),
    "state": Arg(str, default="present", choices=("present", "absent")),
    "create": Arg(bool, default=False, doc="create the file when it is missing"),
    "insertafter": Arg(str, doc="a regex: add after its last match (or EOF, the default)"),
    "insertbefore": Arg(str, doc="a regex: add before its last match (or BOF)"),
    "mode": mode_arg(),
    "owner": Arg(str),
    "group": Arg(str),
    "backup": Arg(bool, default=False, doc="keep the replaced file under the state dir"),
}


class _TextEdit(Module):
    """Shared plan/apply: read the file, let `edit` compute the new text, write it back."""

    @classmethod
    def normalize(cls, raw: dict) -> dict:
        return path_aliases(raw, ("dest", "destfile", "name"))

    def edit(self, lines: list[str]) -> list[str]:
        raise NotImplementedError

    def checks(self) -> list[str]:
        return [read_command(self.params["path"])]

    def plan(self, ctx: TaskContext) -> Plan:
        path = self.params["path"]
        raw = ctx.read(path)
        if raw is None and not self.params["create"]:
            if self.params["state"] == "absent":
                return Plan(False, f"{path} does not exist")
            raise ModuleError(f"{path} does not exist (create: true makes it)")
        try:
            before = (raw or b"").decode()
        except UnicodeDecodeError:
            raise ModuleError(f"{path} is not a text file") from None
        after = "".join(self.edit(before.splitlines(keepends=True)))
        if after == before and raw is not None:
            return Plan(False, f"{path} already has the wanted {self.what}")
        diff = _diff(path, before, after) if ctx.diff else None
        verb = "create" if raw is None else "update"
        return Plan(True, f"would {verb} {path} ({self.what})", diff, {"content": after.encode()})

    @property
    def what(self) -> str:
        return "line" if self.name == "lineinfile" else "block"

    def apply(self, ctx: TaskContext, plan: Plan) -> TaskResult:
        ctx.write_file(
            self.params["path"],
            plan.data["content"],
            mode=self.params["mode"],
            owner=self.params["owner"],
            group=self.params["group"],
            backup=self.params["backup"],
        )
        return TaskResult(Status.CHANGED, plan.reason.removeprefix("would "), plan.diff)


def _insert(lines: list[str], new: list[str], after: str | None, before: str | None) -> list[str]:
    """Insert `new` after the last line matching `after` (EOF when none), or before the last
    matching `before` (BOF)."""
    if before is not None:
        if before == "BOF":
            return new + lines
        hits = [i for i, line in enumerate(lines) if re.search(before, line)]
        return lines[: hits[-1]] + new + lines[hits[-1] :] if hits else lines + new
    if after not in (None, "EOF"):
        hits = [i for i, line in enumerate(lines) if re.search(after, line)]
        if hits:
            return lines[: hits[-1] + 1] + new + lines[hits[-1] + 1 :]
    if lines and not lines[-1].endswith("\n"):
        lines = [*lines[:-1], lines[-1] + "\n"]
    return lines + new


@register
class LineInFile(_TextEdit):
    """Make sure `line` is in the file (replacing the last line `regexp` matches), or that no
    line matches `regexp` (or equals `line`) with `state: absent`."""

    name = "lineinfile"
    args = {
        "line": Arg(str, doc="the whole line (without its newline)"),
        "regexp": Arg(str, doc="a regex for the line to replace or remove"),
        **EDIT_ARGS,
    }

    def edit(self, lines: list[str]) -> list[str]:
        line, regexp = self.params["line"], self.params["regexp"]
        matches = (
            (lambda text: re.search(regexp, text) is not None)
            if regexp
            else (lambda text: text.rstrip("\n") == line)
        )
        if self.params["state"] == "absent":
            if line is None and regexp is None:
                raise ModuleError("lineinfile: state absent needs line or regexp")
            return [text for text in lines if not matches(text)]
        if line is None:
            raise ModuleError("lineinfile: state present needs line")
        hits = [i for i, text in enumerate(lines) if matches(text)]
        if hits:
            edited = list(lines)
            edited[hits[-1]] = line + "\n"
            return edited
        if any(text.rstrip("\n") == line for text in lines):
            return lines
        return _insert(
            lines, [line + "\n"], self.params["insertafter"], self.params["insertbefore"]
        )


@register
class BlockInFile(_TextEdit):
    """Keep `block` between two marker lines in the file (replaced when it differs), or remove
    the markers and block with `state: absent`."""

    name = "blockinfile"
    args = {
        "block": Arg(str, default="", doc="the text between the markers"),
        "marker": Arg(
            str, default="# {mark} GLMOPS MANAGED BLOCK", doc="marker line; {mark} is BEGIN/END"
        ),
        **EDIT_ARGS,
    }

    def edit(self, lines: list[str]) -> list[str]:
        marker = self.params["marker"]
        begin, end = marker.replace("{mark}", "BEGIN"), marker.replace("{mark}", "END")
        stripped = [text.rstrip("\n") for text in lines]
        start = stripped.index(begin) if begin in stripped else None
        stop = stripped.index(end, start) if start is not None and end in stripped[start:] else None
        block = self.params["block"]
        body = [f"{text}\n" for text in block.splitlines()] if block else []
        wanted = [] if self.params["state"] == "absent" else [f"{begin}\n", *body, f"{end}\n"]
        if start is not None and stop is not None:
            return lines[:start] + wanted + lines[stop + 1 :]
        if not wanted:
            return lines
        return _insert(lines, wanted, self.params["insertafter"], self.params["insertbefore"])


def _diff(path: str, before: str, after: str) -> str:
    lines = difflib.unified_diff(
        before.splitlines(keepends=True),
        after.splitlines(keepends=True),
        f"{path} (on host)",
        f"{path} (wanted)",
    )
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)
