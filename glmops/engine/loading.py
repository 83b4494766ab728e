"""What loading a play's body shares between the structure parser (glmops/engine/structure.py)
and the role loader (glmops/engine/roles.py): the keys, the nesting guard, what a block or
import gives its tasks, and the state of one play's load (`PlayBuild`). Roles load their tasks
files through `PlayBuild.load_tasks`, so neither loader imports the other's caller.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from glmops.engine import playparse as pp
from glmops.engine.nodes import Node, Play, Scope
from glmops.engine.templating import syntax_problem
from glmops.engine.yamlsrc import SourceMap, where
from glmops.errors import InputError

#: A task holding one of these keys is structure, not a module call.
STRUCTURE_KEYS = frozenset(
    {"block", "rescue", "always", "include", "import_tasks", "include_tasks"}
    | {"import_role", "include_role"}
)
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

    play: Play
    play_tags: list[str]
    #: Reads a tasks file's nodes (structure.load_task_file): roles load their tasks through
    #: it, so the role loader needs no import of the structure parser that calls it.
    load_tasks: Callable[[Path, Scope, PlayBuild, Any], list[Node]]
    roles_seen: set[str] = field(default_factory=set)
    depth: int = 0
    #: How many role handlers lead the play's handler list (roles' come first).
    role_handlers: int = 0
    #: Run-time expansion: handlers and defaults were registered when the playbook loaded.
    register: bool = True


def inherited(raw: SourceMap) -> dict[str, Any]:
    """What a block or an import gives the tasks below it."""
    when = raw.get("when")
    for item in when if isinstance(when, list) else [when]:
        if isinstance(item, str) and (problem := syntax_problem(item, expression=True)):
            raise InputError(f"'when': {problem}", **where(raw, "when"))
    return {
        "when": () if when is None else tuple(when if isinstance(when, list) else [when]),
        "vars": pp._mapping(raw, "vars"),
        "tags": tuple(pp._string_list(raw, "tags")),
        "become": pp._optional_bool(raw, "become"),
        "become_user": pp._optional_str(raw, "become_user"),
        "environment": pp._mapping(raw, "environment"),
        "ignore_errors": bool(pp._optional_bool(raw, "ignore_errors")),
        "no_log": bool(pp._optional_bool(raw, "no_log")),
        "check_mode": pp._optional_bool(raw, "check_mode"),
        "delegate_to": pp._optional_str(raw, "delegate_to"),
        "any_errors_fatal": pp._optional_bool(raw, "any_errors_fatal"),
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
