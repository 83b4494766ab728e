"""A play's body as Ansible structures it: `pre_tasks`, `roles`, `tasks`, `post_tasks` (with
the handler flushes between them), `block`/`rescue`/`always`, `import_tasks` (expanded when the
playbook loads, its `when`/`vars`/`tags` given to each task), `include_tasks` and `include_role`
(kept as `Include` nodes, expanded per host at run time: `expand_include`); roles are
glmops/engine/roles.py's, `import_playbook` glmops/engine/playbook.py's. Relative file names are
looked up as Ansible does: the including file's folder first (a role's tasks/ folder for a
role's tasks), then the playbook's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from glmops.engine import playparse as pp
from glmops.engine.loading import (
    IMPORT_KEYS,
    STRUCTURE_KEYS,
    PlayBuild,
    inherited,
    nested,
    unsupported,
)
from glmops.engine.nodes import BLOCK_KEYS, Block, Include, Node, Play, Scope, Task, walk_tasks
from glmops.engine.roles import import_role, role_args, role_nodes, roles_section
from glmops.engine.templating import syntax_problem
from glmops.engine.yamlsrc import SourceList, SourceMap, load_yaml, where
from glmops.errors import InputError

#: What an include_tasks/include_role may carry besides its own key.
INCLUDE_KEYS = frozenset({"name", "when", "vars", "tags", "loop", "loop_var", "loop_control"})


def play_structure(raw: SourceMap, play: Play) -> None:
    """The play's handlers, body (pre_tasks, roles, tasks, post_tasks) and connection."""
    for handler in pp._list(raw, "handlers"):
        for key in STRUCTURE_KEYS & set(handler if isinstance(handler, dict) else ()):
            raise unsupported(f"'{key}' in handlers", handler, key)
    play.handlers = [
        pp._task(item, "handlers", raw, i, []) for i, item in enumerate(pp._list(raw, "handlers"))
    ]
    play.tasks = play_body(raw, play)
    check_notify(play, [*play.tasks, *play.handlers])
    connection = pp._optional_str(raw, "connection")
    if connection not in (None, "local", "ssh"):
        raise InputError(
            f"not supported by glmops: connection '{connection}' (local or ssh)",
            **where(raw, "connection"),
        )
    play.connection = connection
    play.force_handlers = bool(pp._optional_bool(raw, "force_handlers"))


def play_body(raw: SourceMap, play: Play) -> list[Node]:
    """pre_tasks, their handlers flushed, roles, tasks, handlers flushed, post_tasks (the play
    loop runs the handlers at the end)."""
    build = PlayBuild(play, play.tags, load_task_file)
    scope = Scope(base_dir=Path(raw.source).parent, playbook_dir=Path(raw.source).parent)
    pre = parse_nodes(raw, "pre_tasks", scope, build)
    main = roles_section(raw, scope, build) + parse_nodes(raw, "tasks", scope, build)
    post = parse_nodes(raw, "post_tasks", scope, build)
    body = list(pre)
    if pre:
        body.append(_flush(raw, "pre_tasks"))
    body += main
    if post:
        body.append(_flush(raw, "post_tasks"))
        body += post
    return body


def _flush(raw: SourceMap, after: str) -> Task:
    return Task(
        name=f"flush handlers after {after}",
        module="meta",
        args={"action": "flush_handlers"},
        source=raw.source,
        line=raw.line_of(after),
        implicit=True,
    )


def parse_nodes(container: Any, key: Any, scope: Scope, build: PlayBuild) -> list[Node]:
    """The nodes of `container[key]` (a list), each under `scope`."""
    items = container.get(key) if isinstance(container, dict) else container
    if items is None:
        return []
    if not isinstance(items, list):
        raise InputError(f"'{key}' must be a list", **where(container, key))
    return [_node(item, items, index, str(key), scope, build) for index, item in enumerate(items)]


def _node(raw: Any, parent: Any, index: int, section: str, scope: Scope, build: PlayBuild) -> Node:
    if not isinstance(raw, SourceMap):
        raise InputError(f"each item of '{section}' must be a mapping", **where(parent, index))
    if "block" in raw:
        return _block(raw, scope, build)
    if "import_tasks" in raw:
        return _import_tasks(raw, scope, build)
    if "include_tasks" in raw or "include_role" in raw:
        return _include(raw, scope, build)
    if "import_role" in raw:
        return import_role(raw, scope, build)
    for key in ("include", "rescue", "always"):
        if key in raw:
            raise unsupported(f"'{key}' here (use block/include_tasks/import_tasks)", raw, key)
    if "apply" in raw:
        raise unsupported("'apply'", raw, "apply")
    task = pp._task(raw, section, {section: parent}, index, build.play_tags)
    return scope.apply(task)


def _block(raw: SourceMap, scope: Scope, build: PlayBuild) -> Block:
    for key in raw:
        if key not in BLOCK_KEYS:
            raise unsupported(f"'{key}' on a block", raw, key)
    inner = scope.child(**inherited(raw))
    block = Block(name=str(raw.get("name") or "block"), source=raw.source, line=raw.line)
    with nested(build, raw):
        block.block = parse_nodes(raw, "block", inner, build)
        block.rescue = parse_nodes(raw, "rescue", inner, build)
        block.always = parse_nodes(raw, "always", inner, build)
    return block


def _file_arg(raw: SourceMap, key: str) -> str:
    value = raw[key]
    if isinstance(value, dict):
        for arg in value:
            if arg != "file":
                raise unsupported(f"'{arg}' of {key}", raw, key)
        value = value.get("file")
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"'{key}' needs a file name", **where(raw, key))
    return value


def find_file(name: str, scope: Scope, raw: Any, key: str) -> Path:
    """A tasks file named by an include/import, as Ansible looks it up."""
    for base in scope.search_dirs():
        path = base / name
        if path.is_file():
            return path
    searched = ", ".join(str(d) for d in scope.search_dirs())
    raise InputError(f"{key}: file '{name}' not found (searched: {searched})", **where(raw, key))


def load_task_file(path: Path, scope: Scope, build: PlayBuild, raw: Any) -> list[Node]:
    """The nodes of a tasks file (a list of tasks), under `scope`, its folder first for its own
    includes."""
    data = load_yaml(path)
    if data is None:
        return []
    if not isinstance(data, SourceList):
        raise InputError("a tasks file must be a list of tasks", source=str(path))
    inner = scope.child(base_dir=path.parent)
    with nested(build, raw):
        return parse_nodes(data, str(path.name), inner, build)


def _import_tasks(raw: SourceMap, scope: Scope, build: PlayBuild) -> Block:
    for key in raw:
        if key not in IMPORT_KEYS | {"import_tasks"}:
            raise unsupported(f"'{key}' on import_tasks", raw, key)
    name = _file_arg(raw, "import_tasks")
    if "{{" in name:
        raise unsupported("a templated import_tasks file name (use include_tasks)", raw)
    path = find_file(name, scope, raw, "import_tasks")
    inner = scope.child(**inherited(raw))
    block = Block(name=f"import_tasks {name}", source=raw.source, line=raw.line)
    block.block = load_task_file(path, inner, build, raw)
    return block


def _include(raw: SourceMap, scope: Scope, build: PlayBuild) -> Include:
    kind = "include_tasks" if "include_tasks" in raw else "include_role"
    allowed = INCLUDE_KEYS | {kind}
    for key in raw:
        if key not in allowed:
            raise unsupported(f"'{key}' on {kind}", raw, key)
    loop_var = pp._optional_str(raw, "loop_var") or "item"
    if "loop_control" in raw:
        control = raw["loop_control"]
        if not isinstance(control, dict) or set(control) - {"loop_var"}:
            raise unsupported("loop_control other than loop_var on an include", raw, "loop_control")
        loop_var = str(control.get("loop_var") or "item")
    if kind == "include_tasks":
        target, tasks_from = _file_arg(raw, kind), "main"
    else:
        target, tasks_from = role_args(raw, kind)
    when = raw.get("when")
    if isinstance(when, str) and (problem := syntax_problem(when, expression=True)):
        raise InputError(f"'when': {problem}", **where(raw, "when"))
    unnamed = kind if kind == "include_tasks" else f"{kind} : {target}"  # Ansible's names
    include = Include(
        name=str(raw.get("name") or unnamed),
        kind=kind,
        source=raw.source,
        line=raw.line,
        target=target,
        scope=scope,
        tasks_from=tasks_from,
        when=when,
        loop=pp._loop(raw),
        loop_var=loop_var,
        vars=pp._mapping(raw, "vars"),
        tags=pp._string_list(raw, "tags") + list(build.play_tags),
    )
    if kind == "include_role":  # its handlers and defaults belong to the play from the start
        role_nodes(include.target, {}, scope, build, raw, tasks_from=tasks_from, once=False)
    return include


def expand_include(
    include: Include, play: Play, target: str, item_vars: dict[str, Any]
) -> list[Node]:
    """An include's nodes for one host and item: the file read now (include_tasks), or the
    role's tasks (include_role); notifications checked against the play's handlers."""
    build = PlayBuild(play, list(play.tags), load_task_file, register=False)
    scope = include.scope.child(vars={**include.vars, **item_vars})
    if include.kind == "include_tasks":
        path = find_file(target, include.scope, include, "include_tasks")
        nodes = load_task_file(path, scope, build, include)
    else:
        nodes = role_nodes(target, {}, scope, build, None, include.tasks_from, once=False)
    check_notify(play, nodes)
    return nodes


def check_notify(play: Play, nodes: list[Node]) -> None:
    """Every notification must name a handler of the play (or what one listens to)."""
    names = play.handler_names
    for task in walk_tasks(nodes):
        for name in task.notify:
            if name not in names:
                raise InputError(
                    f"task '{task.name}' notifies '{name}', which is no handler of this play",
                    source=task.source,
                    line=task.line,
                )
