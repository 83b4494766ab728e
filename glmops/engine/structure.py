"""A play's body as Ansible structures it: `pre_tasks`, `roles`, `tasks`, `post_tasks` (with
the handler flushes between them), `block`/`rescue`/`always`, `import_tasks` (expanded when the
playbook loads, its `when`/`vars`/`tags` given to each task), `include_tasks` and `include_role`
(kept as `Include` nodes, expanded per host at run time: `expand_include`), and
`import_playbook`. Relative file names are looked up as Ansible does: the including file's
folder first (a role's tasks/ folder for a role's tasks), then the playbook's.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from glmops.engine import playbook as pb
from glmops.engine.blocks import BLOCK_KEYS, Block, Include, Node, Scope, walk_tasks
from glmops.engine.templating import syntax_problem
from glmops.engine.yamlsrc import SourceList, SourceMap, load_yaml, where
from glmops.errors import InputError

#: A task holding one of these keys is structure, not a module call.
STRUCTURE_KEYS = frozenset(
    {"block", "rescue", "always", "include", "import_tasks", "include_tasks"}
    | {"import_role", "include_role"}
)
#: What an include_tasks/include_role may carry besides its own key.
INCLUDE_KEYS = frozenset({"name", "when", "vars", "tags", "loop", "loop_var", "loop_control"})
IMPORT_KEYS = frozenset({"name", "when", "vars", "tags", "become", "become_user"})
ROLE_ARGS = frozenset({"name", "tasks_from"})
#: Nesting deeper than this is an include cycle.
MAX_DEPTH = 40


def unsupported(what: str, raw: Any, key: Any = None) -> InputError:
    """The one wording for Ansible features glmops refuses."""
    return InputError(f"not supported by glmops: {what}", **where(raw, key))


@dataclass
class PlayBuild:
    """What loading one play's body gathers besides nodes: its handlers (roles add theirs),
    its role defaults, the roles already run (each runs once unless allow_duplicates)."""

    play: pb.Play
    play_tags: list[str]
    roles_seen: set[str] = field(default_factory=set)
    depth: int = 0
    #: How many role handlers lead the play's handler list (roles' come first).
    role_handlers: int = 0
    #: Run-time expansion: handlers and defaults were registered when the playbook loaded.
    register: bool = True


def play_body(raw: SourceMap, play: pb.Play) -> list[Node]:
    """pre_tasks, their handlers flushed, roles, tasks, handlers flushed, post_tasks (the play
    loop runs the handlers at the end)."""
    from glmops.engine.roles import roles_section

    build = PlayBuild(play, play.tags)
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


def _flush(raw: SourceMap, after: str) -> pb.Task:
    return pb.Task(
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


def _node(
    raw: Any, parent: SourceList, index: int, section: str, scope: Scope, build: PlayBuild
) -> Node:
    if not isinstance(raw, SourceMap):
        raise InputError(f"each item of '{section}' must be a mapping", **where(parent, index))
    if "block" in raw:
        return _block(raw, scope, build)
    if "import_tasks" in raw:
        return _import_tasks(raw, scope, build)
    if "include_tasks" in raw or "include_role" in raw:
        return _include(raw, scope, build)
    if "import_role" in raw:
        from glmops.engine.roles import import_role

        return import_role(raw, scope, build)
    for key in ("include", "rescue", "always"):
        if key in raw:
            raise unsupported(f"'{key}' here (use block/include_tasks/import_tasks)", raw, key)
    if "apply" in raw:
        raise unsupported("'apply'", raw, "apply")
    task = pb._task(raw, section, {section: parent}, index, build.play_tags)
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


def inherited(raw: SourceMap) -> dict[str, Any]:
    """What a block or an import gives the tasks below it."""
    when = raw.get("when")
    for item in when if isinstance(when, list) else [when]:
        if isinstance(item, str) and (problem := syntax_problem(item, expression=True)):
            raise InputError(f"'when': {problem}", **where(raw, "when"))
    return {
        "when": () if when is None else tuple(when if isinstance(when, list) else [when]),
        "vars": pb._mapping(raw, "vars"),
        "tags": tuple(pb._string_list(raw, "tags")),
        "become": pb._optional_bool(raw, "become"),
        "become_user": pb._optional_str(raw, "become_user"),
        "environment": pb._mapping(raw, "environment"),
        "ignore_errors": bool(pb._optional_bool(raw, "ignore_errors")),
        "no_log": bool(pb._optional_bool(raw, "no_log")),
        "check_mode": pb._optional_bool(raw, "check_mode"),
        "delegate_to": pb._optional_str(raw, "delegate_to"),
        "any_errors_fatal": pb._optional_bool(raw, "any_errors_fatal"),
    }


@contextmanager
def nested(build: PlayBuild, raw: Any) -> Iterator[None]:
    """Count nesting while loading; too deep is an include cycle."""
    build.depth += 1
    try:
        if build.depth > MAX_DEPTH:
            raise InputError(
                f"blocks, imports and roles nested over {MAX_DEPTH} deep (an include cycle?)",
                **where(raw),
            )
        yield
    finally:
        build.depth -= 1


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
    loop_var = pb._optional_str(raw, "loop_var") or "item"
    if "loop_control" in raw:
        control = raw["loop_control"]
        if not isinstance(control, dict) or set(control) - {"loop_var"}:
            raise unsupported("loop_control other than loop_var on an include", raw, "loop_control")
        loop_var = str(control.get("loop_var") or "item")
    if kind == "include_tasks":
        target, tasks_from = _file_arg(raw, kind), "main"
    else:
        from glmops.engine.roles import role_args

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
        loop=pb._loop(raw),
        loop_var=loop_var,
        vars=pb._mapping(raw, "vars"),
        tags=pb._string_list(raw, "tags") + list(build.play_tags),
    )
    if kind == "include_role":  # its handlers and defaults belong to the play from the start
        from glmops.engine.roles import role_nodes

        role_nodes(include.target, {}, scope, build, raw, tasks_from=tasks_from, once=False)
    return include


def expand_include(
    include: Include, play: pb.Play, target: str, item_vars: dict[str, Any]
) -> list[Node]:
    """An include's nodes for one host and item: the file read now (include_tasks), or the
    role's tasks (include_role); notifications checked against the play's handlers."""
    build = PlayBuild(play, list(play.tags), register=False)
    scope = include.scope.child(vars={**include.vars, **item_vars})
    if include.kind == "include_tasks":
        path = find_file(target, include.scope, include, "include_tasks")
        nodes = load_task_file(path, scope, build, include)
    else:
        from glmops.engine.roles import role_nodes

        nodes = role_nodes(target, {}, scope, build, None, include.tasks_from, once=False)
    check_notify(play, nodes)
    return nodes


def check_notify(play: pb.Play, nodes: list[Node]) -> None:
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


def load_plays(path: Path, seen: tuple[Path, ...] = ()) -> list[pb.Play]:
    """A playbook's plays, `import_playbook` items replaced by the plays of that file (found
    beside the importing file)."""
    if path.resolve() in seen or len(seen) > MAX_DEPTH:
        raise InputError("import_playbook imports itself (a cycle)", source=str(path))
    data = load_yaml(path)
    if not isinstance(data, SourceList) or not data:
        raise InputError("a playbook must be a non-empty list of plays", source=str(path))
    plays: list[pb.Play] = []
    for index, item in enumerate(data):
        if isinstance(item, SourceMap) and "import_playbook" in item:
            for key in item:
                if key not in ("import_playbook", "name"):
                    raise unsupported(f"'{key}' on import_playbook", item, key)
            name = item["import_playbook"]
            if not isinstance(name, str) or "{{" in name:
                raise unsupported("import_playbook of anything but a file name", item)
            target = path.parent / name
            if not target.is_file():
                raise InputError(
                    f"import_playbook: file '{name}' not found beside {path}",
                    **where(item, "import_playbook"),
                )
            plays += load_plays(target, (*seen, path.resolve()))
        else:
            plays.append(pb._play(item, data, index))
    return plays
