"""Ansible roles: a folder under `roles/` beside the playbook (or on the roles path:
$ANSIBLE_ROLES_PATH, or ansible.cfg's `roles_path`) with
tasks/, handlers/, defaults/, vars/, meta/, templates/ and files/.

A role becomes a block of its tasks under a scope holding its vars (vars/main.yml, then the
parameters it was given) and its folder (searched first for `src:` and include files); its
defaults join the play's defaults (the lowest precedence); its handlers join the play's; its
meta dependencies come first. A role listed again with the same parameters runs once, unless
its meta says `allow_duplicates: true`.
"""

from __future__ import annotations

import configparser
import json
import os
from pathlib import Path
from typing import Any

from glmops.engine import playparse as pp
from glmops.engine.inventory import load_vars_file
from glmops.engine.loading import (
    IMPORT_KEYS,
    ROLE_ARGS,
    STRUCTURE_KEYS,
    PlayBuild,
    inherited,
    nested,
    unsupported,
)
from glmops.engine.nodes import Block, Node, RoleRef, Scope
from glmops.engine.yamlsrc import SourceList, SourceMap, load_yaml, where
from glmops.errors import InputError

#: Keys of a `roles:` entry that are not parameters of the role.
ENTRY_KEYS = frozenset({"role", "name", "vars", "when", "tags", "become", "become_user"})


def roles_path(playbook_dir: Path) -> list[Path]:
    """Where roles are looked for besides roles/: $ANSIBLE_ROLES_PATH, else `roles_path` of
    the ansible.cfg beside the playbook ($ANSIBLE_CONFIG first); relative entries are the
    config file's."""
    if os.environ.get("ANSIBLE_ROLES_PATH"):
        return [Path(p).expanduser() for p in os.environ["ANSIBLE_ROLES_PATH"].split(":") if p]
    config = Path(os.environ.get("ANSIBLE_CONFIG") or playbook_dir / "ansible.cfg")
    if not config.is_file():
        return []
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read(config)
    except configparser.Error as error:
        raise InputError(f"cannot read {config}: {error}") from None
    entries = parser.get("defaults", "roles_path", fallback="")
    return [config.parent / Path(p).expanduser() for p in entries.split(":") if p.strip()]


def role_dir(name: str, scope: Scope) -> Path | None:
    """Where role `name` lives: roles/ beside the playbook, the roles path, the playbook's
    folder."""
    bases = [scope.playbook_dir / "roles", *roles_path(scope.playbook_dir)]
    bases.append(scope.playbook_dir)
    for base in bases:
        if (base / name).is_dir():
            return base / name
    return None


def _main_file(folder: Path, name: str = "main") -> Path | None:
    for candidate in (f"{name}.yml", f"{name}.yaml", name):
        if (folder / candidate).is_file():
            return folder / candidate
    return None


def roles_section(raw: SourceMap, scope: Scope, build: PlayBuild) -> list[Node]:
    """The play's `roles:`: names, or mappings with `role:` and vars/when/tags/parameters."""
    entries = raw.get("roles") or []
    if not isinstance(entries, list):
        raise InputError("'roles' must be a list", **where(raw, "roles"))
    nodes: list[Node] = []
    for index, entry in enumerate(entries):
        nodes += _entry(entry, entries, index, scope, build)
    return nodes


def _entry(entry: Any, parent: Any, index: int, scope: Scope, build: PlayBuild) -> list[Node]:
    """One dependency or `roles:` entry."""
    if isinstance(entry, str):
        return role_nodes(entry, {}, scope, build, parent, once=True)
    name = entry.get("role", entry.get("name")) if isinstance(entry, SourceMap) else None
    if not isinstance(name, str):
        raise InputError(
            "a role entry must be a name or a mapping with 'role:'", **where(parent, index)
        )
    for key in entry:
        if key in pp.TASK_KEYS and key not in ENTRY_KEYS:
            raise unsupported(f"'{key}' on a role entry", entry, key)
    params = {k: v for k, v in entry.items() if k not in ENTRY_KEYS}
    params.update(pp._mapping(entry, "vars"))
    given = {
        k: v for k, v in inherited(entry).items() if k in ("when", "tags", "become", "become_user")
    }
    return role_nodes(name, params, scope.child(**given), build, entry, once=True)


def role_args(raw: SourceMap, key: str) -> tuple[str, str]:
    """The role name and `tasks_from` of an import_role/include_role."""
    value = raw[key]
    if isinstance(value, str):
        value = {"name": value}
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        raise InputError(f"'{key}' needs 'name:', the role", **where(raw, key))
    for arg in value:
        if arg not in ROLE_ARGS:
            raise unsupported(f"'{arg}' of {key}", raw, key)
    if "{{" in value["name"]:
        raise unsupported(f"a templated role name in {key}", raw, key)
    return value["name"], str(value.get("tasks_from") or "main")


def import_role(raw: SourceMap, scope: Scope, build: PlayBuild) -> Block:
    """`import_role:` a role's tasks here, its `when`/`vars`/`tags` given to each task."""
    for key in raw:
        if key not in IMPORT_KEYS | {"import_role"}:
            raise unsupported(f"'{key}' on import_role", raw, key)
    name, tasks_from = role_args(raw, "import_role")
    inner = scope.child(**inherited(raw))
    block = Block(name=f"import_role {name}", source=raw.source, line=raw.line)
    block.block = role_nodes(name, {}, inner, build, raw, tasks_from, once=False)
    return block


def role_nodes(
    name: str,
    params: dict[str, Any],
    scope: Scope,
    build: PlayBuild,
    raw: Any,
    tasks_from: str = "main",
    *,
    once: bool,
) -> list[Node]:
    """The role's dependencies' nodes, then a block of its own tasks; its handlers and
    defaults added to the play (when the playbook loads)."""
    folder = role_dir(name, scope)
    if folder is None:
        bases = [scope.playbook_dir / "roles", *roles_path(scope.playbook_dir)]
        searched = ", ".join(str(b) for b in [*bases, scope.playbook_dir])
        raise InputError(f"role '{name}' not found (searched: {searched})", **where(raw))
    meta = _meta(folder)
    key = json.dumps([str(folder), tasks_from, params], sort_keys=True, default=str)
    if once and not meta.get("allow_duplicates") and key in build.roles_seen:
        return []
    build.roles_seen.add(key)
    nodes: list[Node] = []
    with nested(build, raw):
        deps = meta.get("dependencies") or []
        for index, dep in enumerate(deps if isinstance(deps, list) else []):
            nodes += _entry(dep, deps, index, scope, build)
        role_vars = _vars(folder / "vars")
        magic = {"role_name": name, "role_path": str(folder)}  # Ansible's names for them
        # Role vars sit under the vars of the blocks, imports and includes around the role,
        # and under its parameters (Ansible's precedence).
        layered = {**magic, **role_vars, **scope.vars, **params}
        inner = scope.child(vars=layered, role=RoleRef(name, folder))
        if build.register:
            _register(folder, name, inner, build)
        tasks = _main_file(folder / "tasks", tasks_from)
        if tasks is None and tasks_from != "main":
            raise InputError(f"role '{name}' has no tasks/{tasks_from}.yml", **where(raw))
        block = Block(name=f"role {name}", source=str(folder), line=1)
        block.block = build.load_tasks(tasks, inner, build, raw) if tasks else []
    return [*nodes, block]


def _meta(folder: Path) -> dict[str, Any]:
    path = _main_file(folder / "meta")
    data = load_yaml(path) if path else None
    if data is not None and not isinstance(data, dict):
        raise InputError("a role's meta/main.yml must be a mapping", source=str(path))
    return dict(data or {})


def _vars(folder: Path) -> dict[str, Any]:
    path = _main_file(folder)
    return load_vars_file(path, f"role variables {path}") if path else {}


def _register(folder: Path, name: str, scope: Scope, build: PlayBuild) -> None:
    """The role's defaults under the play's (earlier roles' first), its handlers before the
    play's own (as Ansible orders them: roles' first, in load order), each also answering to
    its own name without the role's prefix."""
    for key, value in _vars(folder / "defaults").items():
        build.play.defaults.setdefault(key, value)
    path = _main_file(folder / "handlers")
    data = load_yaml(path) if path else None
    if data is None:
        return
    if not isinstance(data, SourceList):
        raise InputError("a role's handlers file must be a list", source=str(path))
    known = {h.name for h in build.play.handlers}
    for index, item in enumerate(data):
        if not isinstance(item, SourceMap):
            raise InputError("each handler must be a mapping", **where(data, index))
        for key in STRUCTURE_KEYS & set(item):
            raise unsupported(f"'{key}' in handlers", item, key)
        handler = pp._task(item, "handlers", {"handlers": data}, index, [])
        plain = handler.name
        handler = scope.apply(handler)
        if handler.name in known:
            continue
        handler.listen = [*handler.listen, plain]
        build.play.handlers.insert(build.role_handlers, handler)
        build.role_handlers += 1
