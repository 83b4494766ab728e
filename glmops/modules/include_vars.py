"""include_vars: variables from a YAML/JSON file (or every such file of a folder) on the
controller, set for the rest of the run on the host, as Ansible's include_vars does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from glmops.engine.context import TaskContext
from glmops.errors import InputError, ModuleError
from glmops.modules.base import Arg, Module, Plan, register

EXTENSIONS = (".yml", ".yaml", ".json")


@register
class IncludeVars(Module):
    """Load `file` (looked up in a role's vars/, beside the playbook, ...) or every
    .yml/.yaml/.json file under `dir` (name order, sub-folders after their parent's files);
    `name` puts them under one variable instead of at the top."""

    name = "include_vars"
    free_form = "file"
    args = {
        "file": Arg(str, doc="a variables file (relative: searched like template's src)"),
        "dir": Arg(str, doc="a folder whose .yml/.yaml/.json files are all loaded"),
        "name": Arg(str, doc="the variable that holds them all"),
    }

    def plan(self, ctx: TaskContext) -> Plan:
        from glmops.engine.inventory import load_vars_file

        if bool(self.params["file"]) == bool(self.params["dir"]):
            raise ModuleError("include_vars: give either 'file' or 'dir'")
        files = (
            [ctx.find_file(self.params["file"], "vars")]
            if self.params["file"]
            else _folder_files(self.params["dir"], ctx.search_paths)
        )
        values: dict[str, Any] = {}
        for path in files:
            try:
                values.update(load_vars_file(path, "include_vars"))
            except InputError as error:
                raise ModuleError(str(error)) from None
        if self.params["name"]:
            values = {self.params["name"]: values}
        shown = ", ".join(str(p) for p in files) or "no files"
        return Plan(
            False,
            f"loaded {shown}",
            data={"set_vars": values, "ansible_included_var_files": [str(p) for p in files]},
        )


def _folder_files(name: str, search_paths: list[Path]) -> list[Path]:
    """Every variables file under the folder `name` (absolute, or under a search path's vars/
    or the search path itself), in name order."""
    candidates = [Path(name)] if Path(name).is_absolute() else []
    for base in search_paths:
        candidates += [base / "vars" / name, base / name]
    folder = next((c for c in candidates if c.is_dir()), None)
    if folder is None:
        raise ModuleError(f"include_vars: folder '{name}' not found")
    found = []
    for path in sorted(folder.rglob("*"), key=lambda p: (len(p.relative_to(folder).parts), p)):
        if path.is_file() and path.suffix in EXTENSIONS:
            found.append(path)
    return found
