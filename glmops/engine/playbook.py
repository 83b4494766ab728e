"""Playbooks: a YAML list of plays, each with hosts, vars, tasks and handlers.

Tasks are validated when the playbook loads (module known, arguments known, keys known), so a
typo fails before any host is touched, with the file and line.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from glmops.engine import batches
from glmops.engine.batches import SerialEntry
from glmops.engine.blocks import Node, RoleRef, walk_tasks
from glmops.engine.templating import syntax_problem
from glmops.engine.yamlsrc import SourceList, SourceMap, where
from glmops.errors import InputError
from glmops.modules import REGISTRY, validate_params
from glmops.modules.base import check_types

TASK_KEYS = frozenset(
    {
        "name",
        "when",
        "notify",
        "register",
        "tags",
        "retries",
        "until",
        "delay",
        "timeout",
        "become",
        "ignore_errors",
        "vars",
        "listen",
        "changed_when",
        "failed_when",
        "check_mode",
        "loop",
        "loop_var",
        "environment",
        "no_log",
        "become_user",
        "run_once",
        "delegate_to",
        "any_errors_fatal",
    }
)
PLAY_KEYS = frozenset(
    {
        "name",
        "hosts",
        "vars",
        "vars_files",
        "defaults",
        "tasks",
        "handlers",
        "become",
        "become_user",
        "environment",
        "gather_facts",
        "tags",
        "serial",
        "max_fail_percentage",
        "any_errors_fatal",
        # structure (glmops/engine/structure.py, roles.py) and connection
        "pre_tasks",
        "post_tasks",
        "roles",
        "connection",
        "force_handlers",
    }
)


@dataclass
class Task:
    name: str
    module: str
    args: dict[str, Any]
    source: str
    line: int
    when: Any = None
    notify: list[str] = field(default_factory=list)
    register: str | None = None
    tags: list[str] = field(default_factory=list)
    retries: int = 0
    until: Any = None
    delay: float = 5
    timeout: float | None = None
    become: bool | None = None
    ignore_errors: bool = False
    vars: dict[str, Any] = field(default_factory=dict)
    listen: list[str] = field(default_factory=list)
    changed_when: Any = None
    failed_when: Any = None
    #: False: run even under --check (for read-only probes whose output later tasks use).
    check_mode: bool | None = None
    #: Run once per item (a list, or a template that renders to one), as `loop_var`.
    loop: Any = None
    loop_var: str = "item"
    environment: dict[str, Any] = field(default_factory=dict)
    #: Hide the task's output, diff and commands from the screen, events and run log.
    no_log: bool = False
    become_user: str | None = None
    #: Run on the batch's first host only; the result counts for every host of the batch.
    run_once: bool = False
    #: Run over this inventory host's connection (`localhost`: the controller), with the
    #: original host's variables and facts; a template is rendered per host.
    delegate_to: str | None = None
    #: A failure on any host stops the play for every host after this task (None: the play's).
    any_errors_fatal: bool | None = None
    #: The role this task came from (its folder is searched first for `src:` files).
    role: RoleRef | None = None
    #: Added by the play's structure (the handler flush after pre_tasks), not written.
    implicit: bool = False

    @property
    def where(self) -> str:
        return f"{self.source}:{self.line} task '{self.name}'"

    def errors_fatal(self, play_default: bool) -> bool:
        """Whether a failure of this task stops the play for every host (`any_errors_fatal`)."""
        return play_default if self.any_errors_fatal is None else self.any_errors_fatal

    def selected(self, tags: set[str], skip_tags: set[str]) -> bool:
        """Whether --tags/--skip-tags let this task run (`always` runs unless skipped)."""
        names = set(self.tags) | {"all"}
        if tags and not (names & tags) and "always" not in names:
            return False
        return not (skip_tags and names & skip_tags)


@dataclass
class Play:
    name: str
    hosts: str
    source: str
    line: int
    vars: dict[str, Any] = field(default_factory=dict)
    #: Lowest-precedence variables: the inventory and -e override them (play vars do not).
    defaults: dict[str, Any] = field(default_factory=dict)
    #: The play's body: tasks, blocks and includes (glmops/engine/blocks.py), in order.
    tasks: list[Node] = field(default_factory=list)
    handlers: list[Task] = field(default_factory=list)
    become: bool | None = None
    become_user: str | None = None
    environment: dict[str, Any] = field(default_factory=dict)
    gather_facts: bool = True
    tags: list[str] = field(default_factory=list)
    #: Batch sizes (glmops/engine/batches.py); None: every host in one batch.
    serial: list[SerialEntry] | None = None
    max_fail_percentage: float | None = None
    any_errors_fatal: bool = False
    #: `connection:` for every host of the play (local or ssh); None: the inventory's.
    connection: str | None = None
    #: Run notified handlers even on hosts that failed (`force_handlers`, --force-handlers).
    force_handlers: bool = False

    def all_tasks(self) -> list[Task]:
        """Every task written in the play and known at load (blocks' sections, imports,
        roles; not the implicit handler flushes), then the handlers."""
        return [*(t for t in walk_tasks(self.tasks) if not t.implicit), *self.handlers]

    @property
    def stops_on_failure(self) -> bool:
        """Whether a failed batch can stop the play (and the run), as in Ansible."""
        return (
            self.serial is not None or self.max_fail_percentage is not None or self.any_errors_fatal
        )

    @property
    def handler_names(self) -> set[str]:
        """Every name a task may notify: handlers' names and what they listen to."""
        return {h.name for h in self.handlers} | {n for h in self.handlers for n in h.listen}


def load_playbook(path: Path) -> list[Play]:
    """The plays of a playbook (`import_playbook` items replaced by the imported plays)."""
    from glmops.engine.structure import load_plays

    return load_plays(path)


def _play(raw: Any, parent: SourceList, index: int) -> Play:
    if not isinstance(raw, SourceMap):
        raise InputError("each play must be a mapping", **where(parent, index))
    for key in raw:
        if key not in PLAY_KEYS:
            raise InputError(
                f"unknown play key '{key}' (allowed: {', '.join(sorted(PLAY_KEYS))})",
                **where(raw, key),
            )
    if not isinstance(raw.get("hosts"), str):
        raise InputError("a play needs 'hosts:', a host pattern", **where(raw))
    play_tags = _string_list(raw, "tags")
    play = Play(
        name=str(raw.get("name") or raw["hosts"]),
        hosts=raw["hosts"],
        source=raw.source,
        line=raw.line,
        vars={**_mapping(raw, "vars"), **_vars_files(raw)},
        defaults=_mapping(raw, "defaults"),
        become=_optional_bool(raw, "become"),
        become_user=_optional_str(raw, "become_user"),
        environment=_mapping(raw, "environment"),
        gather_facts=bool(raw.get("gather_facts", True)),
        tags=play_tags,
        serial=_serial(raw),
        max_fail_percentage=_max_fail(raw),
        any_errors_fatal=bool(_optional_bool(raw, "any_errors_fatal")),
    )
    _play_structure(raw, play)
    return play


def _play_structure(raw: SourceMap, play: Play) -> None:
    """The play's handlers, body (pre_tasks, roles, tasks, post_tasks) and connection."""
    from glmops.engine.structure import STRUCTURE_KEYS, check_notify, play_body, unsupported

    for handler in _list(raw, "handlers"):
        for key in STRUCTURE_KEYS & set(handler if isinstance(handler, dict) else ()):
            raise unsupported(f"'{key}' in handlers", handler, key)
    play.handlers = [
        _task(item, "handlers", raw, i, []) for i, item in enumerate(_list(raw, "handlers"))
    ]
    play.tasks = play_body(raw, play)
    check_notify(play, [*play.tasks, *play.handlers])
    connection = _optional_str(raw, "connection")
    if connection not in (None, "local", "ssh"):
        raise InputError(
            f"not supported by glmops: connection '{connection}' (local or ssh)",
            **where(raw, "connection"),
        )
    play.connection = connection
    play.force_handlers = bool(_optional_bool(raw, "force_handlers"))


def _task(raw: Any, section: str, play: SourceMap, index: int, play_tags: list[str]) -> Task:
    if not isinstance(raw, SourceMap):
        raise InputError(
            f"each item of '{section}' must be a mapping", **where(play[section], index)
        )
    modules = [key for key in raw if key not in TASK_KEYS]
    unknown = [key for key in modules if key not in REGISTRY]
    if unknown:
        close = difflib.get_close_matches(str(unknown[0]), [*TASK_KEYS, *REGISTRY], n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
        raise InputError(
            f"unknown module or task key '{unknown[0]}' ({hint}modules: "
            f"{', '.join(sorted(REGISTRY))})",
            **where(raw, unknown[0]),
        )
    if len(modules) != 1:
        found = ", ".join(modules) or "none"
        raise InputError(f"a task needs exactly one module (found: {found})", **where(raw))
    module = modules[0]
    try:
        params, problems = validate_params(REGISTRY[module], raw[module])
    except ValueError as error:  # a module's normalize() refusing the raw arguments
        raise InputError(str(error), **where(raw, module)) from None
    if problems:
        raise InputError(problems[0], **where(raw, module))
    literal = {k: v for k, v in params.items() if not any("{" in t for t in _strings(v))}
    if problems := check_types(REGISTRY[module], literal):  # templated ones: once rendered
        raise InputError(problems[0], **where(raw, module))
    name = str(raw.get("name") or f"{module}")
    _check_templates(raw, module)
    if section == "handlers" and raw.get("run_once"):
        raise InputError("'run_once' is for tasks, not handlers", **where(raw, "run_once"))
    return Task(
        name=name,
        module=module,
        args=params,
        source=raw.source,
        line=raw.line,
        when=raw.get("when"),
        notify=_string_list(raw, "notify"),
        register=raw.get("register"),
        tags=_string_list(raw, "tags") + play_tags,
        retries=_int(raw, "retries", 0),
        until=raw.get("until"),
        delay=_number(raw, "delay", 5),
        timeout=_number(raw, "timeout", None),
        become=_optional_bool(raw, "become"),
        ignore_errors=bool(raw.get("ignore_errors", False)),
        vars=_mapping(raw, "vars"),
        listen=_string_list(raw, "listen"),
        changed_when=raw.get("changed_when"),
        failed_when=raw.get("failed_when"),
        check_mode=_optional_bool(raw, "check_mode"),
        loop=_loop(raw),
        loop_var=_optional_str(raw, "loop_var") or "item",
        environment=_mapping(raw, "environment"),
        no_log=bool(_optional_bool(raw, "no_log")),
        become_user=_optional_str(raw, "become_user"),
        run_once=bool(_optional_bool(raw, "run_once")),
        delegate_to=_delegate_to(raw),
        any_errors_fatal=_optional_bool(raw, "any_errors_fatal"),
    )


def _serial(raw: SourceMap) -> list[SerialEntry] | None:
    if raw.get("serial") is None:
        return None
    try:
        return batches.serial_entries(raw["serial"])
    except ValueError as error:
        raise InputError(str(error), **where(raw, "serial")) from None


def _max_fail(raw: SourceMap) -> float | None:
    if raw.get("max_fail_percentage") is None:
        return None
    try:
        return batches.max_fail_percentage(raw["max_fail_percentage"])
    except ValueError as error:
        raise InputError(str(error), **where(raw, "max_fail_percentage")) from None


def _delegate_to(raw: SourceMap) -> str | None:
    """A host name or a template; whether the name is in the inventory is checked before the
    run touches any host (Executor.check_targets)."""
    value = _optional_str(raw, "delegate_to")
    if value is not None and not value.strip():
        raise InputError("'delegate_to' must name a host", **where(raw, "delegate_to"))
    if value and (problem := syntax_problem(value, expression=False)):
        raise InputError(f"'delegate_to': {problem}", **where(raw, "delegate_to"))
    return value


CONDITION_KEYS = ("when", "changed_when", "failed_when", "until")


def _check_templates(raw: SourceMap, module: str) -> None:
    """Syntax, filter and test names of every expression and template in a task."""
    for key in CONDITION_KEYS:
        value = raw.get(key)
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str) and (problem := syntax_problem(item, expression=True)):
                raise InputError(f"'{key}': {problem}", **where(raw, key))
    for text in _strings(raw[module]):
        if ("{{" in text or "{%" in text) and (problem := syntax_problem(text, expression=False)):
            raise InputError(f"arguments of '{module}': {problem}", **where(raw, module))


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [text for item in value.values() for text in _strings(item)]
    if isinstance(value, list):
        return [text for item in value for text in _strings(item)]
    return []


def _loop(raw: SourceMap) -> Any:
    value = raw.get("loop")
    if value is None or isinstance(value, list):
        return value
    if isinstance(value, str) and "{{" in value:
        if problem := syntax_problem(value, expression=False):
            raise InputError(f"'loop': {problem}", **where(raw, "loop"))
        return value
    raise InputError(
        "'loop' must be a list or a template that renders to one", **where(raw, "loop")
    )


def _vars_files(raw: SourceMap) -> dict[str, Any]:
    """`vars_files:` read when the playbook loads, relative to the playbook; later files win."""
    from glmops.engine.inventory import load_vars_file

    merged: dict[str, Any] = {}
    for name in _string_list(raw, "vars_files"):
        path = Path(raw.source).parent / name
        merged.update(load_vars_file(path, f"vars_files of play at {raw.source}:{raw.line}"))
    return merged


def _optional_str(raw: SourceMap, key: str) -> str | None:
    value = raw.get(key)
    if value is not None and not isinstance(value, str):
        raise InputError(f"'{key}' must be a string", **where(raw, key))
    return value


def _list(raw: SourceMap, key: str) -> list[Any]:
    value = raw.get(key) or []
    if not isinstance(value, list):
        raise InputError(f"'{key}' must be a list", **where(raw, key))
    return value


def _mapping(raw: SourceMap, key: str) -> dict[str, Any]:
    value = raw.get(key) or {}
    if not isinstance(value, dict):
        raise InputError(f"'{key}' must be a mapping", **where(raw, key))
    return dict(value)


def _string_list(raw: SourceMap, key: str) -> list[str]:
    value = raw.get(key)
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return list(value)
    raise InputError(f"'{key}' must be a string or a list of strings", **where(raw, key))


def _optional_bool(raw: SourceMap, key: str) -> bool | None:
    value = raw.get(key)
    if value is not None and not isinstance(value, bool):
        raise InputError(f"'{key}' must be true or false", **where(raw, key))
    return value


def _int(raw: SourceMap, key: str, default: int) -> int:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputError(f"'{key}' must be a non-negative integer", **where(raw, key))
    return value


def _number(raw: SourceMap, key: str, default: float | None) -> float | None:
    value = raw.get(key, default)
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, int | float) or value < 0
    ):
        raise InputError(f"'{key}' must be a non-negative number", **where(raw, key))
    return value
