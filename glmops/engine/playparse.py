"""A play's and a task's own keys, read and validated (the play's body, its blocks, imports
and roles, is glmops/engine/structure.py's; the whole playbook, glmops/engine/playbook.py's).

Tasks are validated when the playbook loads (module known, arguments known, keys known), so a
typo fails before any host is touched, with the file and line.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

from glmops.engine import batches
from glmops.engine.ansible_args import WITH_LOOPS, module_name, parse_kv
from glmops.engine.ansible_support import refuse_play_key, refuse_task_keys
from glmops.engine.batches import SerialEntry
from glmops.engine.nodes import Play, Task
from glmops.engine.templating import syntax_problem, template_file_problem
from glmops.engine.yamlsrc import SourceList, SourceMap, where
from glmops.errors import InputError
from glmops.modules import REGISTRY, validate_params
from glmops.modules.base import check_types
from glmops.pins import PLAY_DEFAULTS

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
        "args",
        "loop_control",
        *(f"with_{kind}" for kind in WITH_LOOPS),
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


def _play(raw: Any, parent: SourceList, index: int) -> Play:
    if not isinstance(raw, SourceMap):
        raise InputError("each play must be a mapping", **where(parent, index))
    for key in raw:
        if key not in PLAY_KEYS:
            refuse_play_key(raw, key)
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
        defaults={**PLAY_DEFAULTS, **_mapping(raw, "defaults")},
        become=_become(raw),
        become_user=_optional_str(raw, "become_user"),
        environment=_mapping(raw, "environment"),
        gather_facts=bool(raw.get("gather_facts", True)),
        tags=play_tags,
        serial=_serial(raw),
        max_fail_percentage=_max_fail(raw),
        any_errors_fatal=bool(_optional_bool(raw, "any_errors_fatal")),
    )
    return play


def _task(raw: Any, section: str, play: Any, index: int, play_tags: list[str]) -> Task:
    if not isinstance(raw, SourceMap):
        raise InputError(
            f"each item of '{section}' must be a mapping", **where(play[section], index)
        )
    refuse_task_keys(raw, TASK_KEYS | {k for k in raw if module_name(str(k)) in REGISTRY})
    modules = [key for key in raw if key not in TASK_KEYS]
    unknown = [key for key in modules if module_name(key) not in REGISTRY]
    if unknown:
        close = difflib.get_close_matches(str(unknown[0]), [*TASK_KEYS, *REGISTRY], n=1, cutoff=0.8)
        hint = f"did you mean '{close[0]}'? " if close else ""
        raise InputError(
            f"unknown module or task key '{unknown[0]}' ({hint}`glmops doc` lists the modules, "
            "`glmops doc --ansible` what of Ansible glmops runs)",
            **where(raw, unknown[0]),
        )
    if len(modules) != 1:
        found = ", ".join(modules) or "none"
        raise InputError(f"a task needs exactly one module (found: {found})", **where(raw))
    module = module_name(modules[0])
    raw_args = _module_arguments(raw, modules[0], module)
    try:
        params, problems = validate_params(REGISTRY[module], raw_args)
    except ValueError as error:  # a module's normalize() refusing the raw arguments
        raise InputError(str(error), **where(raw, module)) from None
    if problems:
        raise InputError(problems[0], **where(raw, module))
    literal = {k: v for k, v in params.items() if not any("{" in t for t in _strings(v))}
    if problems := check_types(REGISTRY[module], literal):  # templated ones: once rendered
        raise InputError(problems[0], **where(raw, module))
    name = str(raw.get("name") or f"{module}")
    _check_templates(raw, modules[0])
    if module == "template":
        _check_template_file(raw, modules[0], params.get("src"))
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
        timeout=_optional_number(raw, "timeout"),
        become=_become(raw),
        ignore_errors=bool(raw.get("ignore_errors", False)),
        vars=_mapping(raw, "vars"),
        listen=_string_list(raw, "listen"),
        changed_when=raw.get("changed_when"),
        failed_when=raw.get("failed_when"),
        check_mode=_optional_bool(raw, "check_mode"),
        loop=_loop(raw),
        loop_with=next((k[5:] for k in raw if k.startswith("with_")), None),
        loop_var=_loop_control(raw).get("loop_var") or _optional_str(raw, "loop_var") or "item",
        index_var=_loop_control(raw).get("index_var"),
        loop_label=_loop_control(raw).get("label"),
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


def _check_template_file(raw: SourceMap, key: str, src: Any) -> None:
    """A template file's syntax and filter/test names, checked at load like the playbook's
    expressions (a file found later, or a templated `src`, is checked when it renders)."""
    if not isinstance(src, str) or "{" in src:
        return
    base = Path(raw.source).parent
    for path in (base / "templates" / src, base / src, base.parent / "templates" / src):
        if path.is_file():
            try:
                text = path.read_text()
            except (OSError, UnicodeDecodeError):
                return
            if problem := template_file_problem(text):
                raise InputError(f"template {path}:{problem}", **where(raw, key))
            return


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [text for item in value.values() for text in _strings(item)]
    if isinstance(value, list):
        return [text for item in value for text in _strings(item)]
    return []


def _module_arguments(raw: SourceMap, key: str, module: str) -> Any:
    """The module's arguments: a `k=v` string parsed as Ansible parses it, merged with the
    task's `args:` mapping (which the inline ones override)."""
    value = raw[key]
    if isinstance(value, str):
        try:
            value = parse_kv(value, module, REGISTRY[module].free_form)
        except ValueError as error:
            raise InputError(str(error), **where(raw, key)) from None
    extra = _mapping(raw, "args")
    if not extra:
        return value
    if isinstance(value, str):
        value = {REGISTRY[module].free_form: value} if REGISTRY[module].free_form else {}
    return {**extra, **(value or {})}


LOOP_CONTROL_KEYS = ("loop_var", "index_var", "label")


def _loop_control(raw: SourceMap) -> dict[str, str]:
    control = _mapping(raw, "loop_control")
    for key, value in control.items():
        if key not in LOOP_CONTROL_KEYS:
            raise InputError(
                f"loop_control: '{key}' is not supported by glmops (supported: "
                f"{', '.join(LOOP_CONTROL_KEYS)}; see `glmops doc --ansible`)",
                **where(raw, "loop_control"),
            )
        if not isinstance(value, str):
            raise InputError(
                f"loop_control: '{key}' must be a string", **where(raw, "loop_control")
            )
    return control


def _loop(raw: SourceMap) -> Any:
    withs = [key for key in raw if str(key).startswith("with_")]
    if (withs and "loop" in raw) or len(withs) > 1:
        raise InputError("a task takes one of 'loop' and 'with_*'", **where(raw, withs[0]))
    key = withs[0] if withs else "loop"
    value = raw.get(key)
    if withs and isinstance(value, str) and "{{" not in value:
        value = [value]  # `with_items: name` is a one-item list, as in Ansible
    if value is None or isinstance(value, list) or (withs and isinstance(value, dict)):
        return dict(value) if isinstance(value, dict) else value
    if isinstance(value, str) and "{{" in value:
        if problem := syntax_problem(value, expression=False):
            raise InputError(f"'{key}': {problem}", **where(raw, key))
        return value
    raise InputError(f"'{key}' must be a list or a template that renders to one", **where(raw, key))


def _vars_files(raw: SourceMap) -> dict[str, Any]:
    """`vars_files:` read when the playbook loads, relative to the playbook; later files win."""
    from glmops.engine.inventory import load_vars_file

    merged: dict[str, Any] = {}
    for name in _string_list(raw, "vars_files"):
        path = Path(raw.source).parent / name
        merged.update(load_vars_file(path, f"vars_files of play at {raw.source}:{raw.line}"))
    return merged


def _become(raw: SourceMap) -> bool | str | None:
    """true/false, or a template rendered per host when the task runs (`"{{ use_sudo }}"`)."""
    value = raw.get("become")
    if isinstance(value, str) and "{{" in value:
        if problem := syntax_problem(value, expression=False):
            raise InputError(f"'become': {problem}", **where(raw, "become"))
        return value
    return _optional_bool(raw, "become")


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


def _number(raw: SourceMap, key: str, default: float) -> float:
    """raw[key], else `default`: a null is refused (a retry would sleep on it)."""
    value = _optional_number(raw, key, default)
    if value is None:
        raise InputError(f"'{key}' must be a non-negative number", **where(raw, key))
    return value


def _optional_number(raw: SourceMap, key: str, default: float | None = None) -> float | None:
    value = raw.get(key, default)
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, int | float) or value < 0
    ):
        raise InputError(f"'{key}' must be a non-negative number", **where(raw, key))
    return value
