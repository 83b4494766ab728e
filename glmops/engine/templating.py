"""Jinja2 rendering of task arguments, `when` expressions and template files.

StrictUndefined everywhere: an undefined variable is an error, never an empty string, and the
error names the playbook file, the task and the host.

Every value is rendered at most once. Untrusted values (glmops.engine.unsafe: what hosts,
helpers and the Hub said, `set_fact` results, `!unsafe` YAML) are never rendered, and a
rendering that read one gives an untrusted result, so host output can never become template
code. Rendering runs in Jinja's immutable sandbox, and stops when the run is interrupted.
"""

from __future__ import annotations

import base64
import contextvars
import functools
import json
import os
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jinja2
import jinja2.meta
import jinja2.nodes
import jinja2.runtime
import yaml
from jinja2.sandbox import ImmutableSandboxedEnvironment, safe_range

from glmops.engine.unsafe import UnsafeText, is_unsafe, mark_unsafe
from glmops.engine.yamlsrc import load_yaml_text
from glmops.errors import TemplateError


def _to_json(value: Any, indent: int | None = None) -> str:
    return json.dumps(value, indent=indent, sort_keys=True)


def _shell_quote(value: Any) -> str:
    import shlex

    return shlex.quote(str(value))


def _bool(value: Any) -> bool:
    """Ansible's `bool`: yes/on/true/1 (any case) are true."""
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in ("yes", "on", "true", "1", "y")


def _ternary(value: Any, true_value: Any, false_value: Any, none_value: Any = None) -> Any:
    if value is None and none_value is not None:
        return none_value
    return true_value if value else false_value


def _regex_replace(value: Any, pattern: str, replacement: str = "", ignorecase: bool = False):
    return re.sub(pattern, replacement, str(value), flags=re.I if ignorecase else 0)


def _regex_search(value: Any, pattern: str) -> str | None:
    match = re.search(pattern, str(value))
    return match.group(0) if match else None


def _combine(*dicts: dict[str, Any], recursive: bool = False) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for item in dicts:
        for key, value in item.items():
            if recursive and isinstance(value, dict) and isinstance(result.get(key), dict):
                value = _combine(result[key], value, recursive=True)
            result[key] = value
    return result


def _extract(key: Any, container: Any, morekeys: Any = None) -> Any:
    """Ansible's `extract`: `container[key]`, then each of `morekeys` in turn
    (`groups['web'] | map('extract', hostvars, 'port')`)."""
    value = container[key]
    for more in [] if morekeys is None else morekeys if isinstance(morekeys, list) else [morekeys]:
        value = value[more]
    return value


#: Filters beyond Jinja's own; the names and meanings are Ansible's.
FILTERS = {
    "to_json": _to_json,
    "from_json": json.loads,
    "to_yaml": lambda value: yaml.safe_dump(value, default_flow_style=False, sort_keys=False),
    "from_yaml": load_yaml_text,  # aliases bounded: host output may be a bomb
    "quote": _shell_quote,
    "bool": _bool,
    "ternary": _ternary,
    "regex_replace": _regex_replace,
    "regex_search": _regex_search,
    "b64encode": lambda value: base64.b64encode(str(value).encode()).decode(),
    "b64decode": lambda value: base64.b64decode(str(value)).decode(),
    "combine": _combine,
    "extract": _extract,
    "basename": lambda value: os.path.basename(str(value)),
    "dirname": lambda value: os.path.dirname(str(value)),
}


class _Undefined(jinja2.StrictUndefined):
    """StrictUndefined whose message names a YAML-loaded mapping or list by its builtin type
    (`'dict object' has no attribute 'x'`), as Ansible's does."""

    __slots__ = ()

    @property
    def _undefined_message(self) -> str:
        obj = self._undefined_obj
        builtin = next((c for c in type(obj).__mro__ if c.__module__ == "builtins"), object)
        if self._undefined_hint or obj is jinja2.utils.missing or type(obj) is builtin:
            return super()._undefined_message
        shown = f"{builtin.__name__} object"
        if not isinstance(self._undefined_name, str):
            return f"{shown} has no element {self._undefined_name!r}"
        return f"{shown!r} has no attribute {self._undefined_name!r}"


#: Set when the run is interrupted (SIGINT, SIGTERM): a rendering in progress stops at its next
#: variable lookup, call or filter, so a long loop in a template cannot hold the run.
STOP = threading.Event()

#: Whether the rendering in progress (in this thread) has read an untrusted value.
_READ_UNSAFE: contextvars.ContextVar[list[bool] | None] = contextvars.ContextVar(
    "glmops_read_unsafe", default=None
)


def _check_stop() -> None:
    if STOP.is_set():
        raise TemplateError("rendering stopped: the run was interrupted")


def _seen(value: Any) -> Any:
    """Every value a template reads passes here: an untrusted one taints the rendering."""
    _check_stop()
    if is_unsafe(value):
        flag = _READ_UNSAFE.get()
        if flag is not None:
            flag[0] = True
    return value


class _Context(jinja2.runtime.Context):
    def resolve_or_missing(self, key: str) -> Any:
        return _seen(super().resolve_or_missing(key))

    def call(__self, __obj: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        _check_stop()
        return _seen(super().call(__obj, *args, **kwargs))


class _Environment(ImmutableSandboxedEnvironment):
    """The sandbox (no `__globals__`, no mutating methods, bounded `range`) whose lookups
    note untrusted values and stop when the run is interrupted."""

    context_class = _Context

    def getattr(self, obj: Any, attribute: str) -> Any:
        return _seen(super().getattr(obj, attribute))

    def getitem(self, obj: Any, argument: Any) -> Any:
        return _seen(super().getitem(obj, argument))


def _stoppable(function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)  # keeps jinja's pass_context/pass_environment marks
    def checked(*args: Any, **kwargs: Any) -> Any:
        _check_stop()
        return function(*args, **kwargs)

    return checked


def make_environment(loader: jinja2.BaseLoader | None = None) -> jinja2.Environment:
    """The sandboxed environment every user expression and template file renders in."""
    env = _Environment(
        undefined=_Undefined,
        keep_trailing_newline=True,
        loader=loader,
        autoescape=False,
    )
    env.filters = {name: _stoppable(f) for name, f in {**env.filters, **FILTERS}.items()}
    env.globals["range"] = _stoppable(safe_range)
    return env


_ENV = make_environment()


@functools.lru_cache(maxsize=4096)
def _template(text: str) -> jinja2.Template:
    return _ENV.from_string(text)


@functools.lru_cache(maxsize=4096)
def _expression(text: str) -> Any:
    return _ENV.compile_expression(text, undefined_to_none=False)


def _rendering(render: Callable[[], Any]) -> tuple[Any, bool]:
    """`render()`'s result, and whether it read an untrusted value."""
    flag = [False]
    token = _READ_UNSAFE.set(flag)
    try:
        return render(), flag[0]
    finally:
        _READ_UNSAFE.reset(token)


def render_value(value: Any, variables: dict[str, Any], *, where: str) -> Any:
    """Render every string inside `value` (dicts and lists recursively), once; untrusted
    values are returned as they are.

    A string that is exactly one `{{ expression }}` keeps the expression's native type, so
    `port: "{{ vllm_port }}"` stays an integer.
    """
    if is_unsafe(value):
        return value
    if isinstance(value, str):
        if "{{" not in value and "{%" not in value:
            return value
        if value.startswith("{{") and value.endswith("}}") and value.count("{{") == 1:
            return evaluate(value[2:-2], variables, where=where)
        return render_string(value, variables, where=where)
    if isinstance(value, dict):
        return {key: render_value(item, variables, where=where) for key, item in value.items()}
    if isinstance(value, list):
        return [render_value(item, variables, where=where) for item in value]
    return value


def render_string(text: str, variables: dict[str, Any], *, where: str) -> str:
    """`text` rendered; untrusted if it read an untrusted value; untrusted text as it is."""
    if is_unsafe(text):
        return text
    try:
        result, tainted = _rendering(lambda: _template(text).render(variables))
    except (jinja2.TemplateError, OverflowError) as error:  # Overflow: the sandbox's range
        raise TemplateError(f"{where}: {_describe(error)}") from None
    return UnsafeText(result) if tainted else result


def evaluate(expression: str, variables: dict[str, Any], *, where: str) -> Any:
    """Evaluate one Jinja2 expression (a `when`, `until` or `{{ ... }}`) to a Python value,
    untrusted if it read an untrusted one. Untrusted text is never evaluated."""
    if is_unsafe(expression):
        raise TemplateError(
            f"{where}: {expression.strip()[:80]!r} is data from a host, helper or the Hub "
            "(or !unsafe), never evaluated as an expression"
        )
    try:
        result, tainted = _rendering(lambda: _expression(expression)(variables))
    except (jinja2.TemplateError, OverflowError) as error:
        raise TemplateError(
            f"{where}: {_describe(error)} in expression {expression.strip()!r}"
        ) from None
    if isinstance(result, jinja2.Undefined):
        try:
            str(result)
        except jinja2.UndefinedError as error:
            raise TemplateError(f"{where}: {_describe(error)}") from None
    return mark_unsafe(result) if tainted else result


def resolve_variables(variables: dict[str, Any], *, where: str) -> dict[str, Any]:
    """Variables whose values are templates (`dir: "{{ root }}/x"`), rendered in the scope of
    all the others: each once, after the variables it refers to (so one may refer to another,
    as in Ansible), and never its result again.

    A value that cannot be rendered (or refers to itself) becomes an undefined that raises,
    with the reason, only if a task actually uses it: an unused broken variable is no error,
    as in Ansible.
    """
    resolved = dict(variables)
    pending = {key for key, value in variables.items() if _is_template(value)}
    busy: list[str] = []

    def resolve(key: str) -> None:
        busy.append(key)
        try:
            for name in sorted(_names_in(variables[key])):
                if name in busy:
                    loop = " -> ".join([*busy[busy.index(name) :], name])
                    raise TemplateError(f"{where}: recursive variables: {loop}")
                if name in pending:
                    resolve(name)
            resolved[key] = render_value(variables[key], resolved, where=where)
        except TemplateError as error:
            resolved[key] = jinja2.StrictUndefined(
                hint=f"variable '{key}' could not be rendered: {error}"
            )
        finally:
            busy.pop()
            pending.discard(key)

    for key in list(variables):
        if key in pending:
            resolve(key)
    return resolved


def _names_in(value: Any) -> set[str]:
    """The variable names the templates inside a (trusted) value refer to."""
    if isinstance(value, str):
        return set(_names_in_text(value))
    if isinstance(value, dict):
        return set().union(*(_names_in(item) for item in value.values()))
    if isinstance(value, list):
        return set().union(*(_names_in(item) for item in value))
    return set()


@functools.lru_cache(maxsize=4096)
def _names_in_text(text: str) -> frozenset[str]:
    if "{{" not in text and "{%" not in text:
        return frozenset()
    try:
        return frozenset(jinja2.meta.find_undeclared_variables(_ENV.parse(text)))
    except jinja2.TemplateSyntaxError:
        return frozenset()  # rendering it says why


def _is_template(value: Any) -> bool:
    """Whether a trusted value holds a template (an untrusted one never does)."""
    if is_unsafe(value):
        return False
    if isinstance(value, str):
        return "{{" in value or "{%" in value
    if isinstance(value, dict):
        return any(_is_template(v) for v in value.values())
    if isinstance(value, list):
        return any(_is_template(v) for v in value)
    return False


def evaluate_condition(
    conditions: str | list[str] | bool, variables: dict[str, Any], *, where: str
) -> bool:
    """A `when`/`until` value: one expression, or a list that must all be true."""
    if isinstance(conditions, bool):
        return conditions
    items = conditions if isinstance(conditions, list) else [conditions]
    return all(bool(evaluate(str(item), variables, where=where)) for item in items)


def syntax_problem(text: str, *, expression: bool) -> str | None:
    """Why a `when`-style expression (or a templated string) cannot work, or None.

    Checked when the playbook loads, so a typo fails before any host is touched: the syntax,
    and every filter and test name.
    """
    source = "{{ " + text + " }}" if expression else text
    try:
        tree = _ENV.parse(source)
    except jinja2.TemplateSyntaxError as error:
        shown = text.strip() if expression else text
        return f"{_describe(error)} in {shown!r}"
    for node in tree.find_all((jinja2.nodes.Filter, jinja2.nodes.Test)):
        known = _ENV.filters if isinstance(node, jinja2.nodes.Filter) else _ENV.tests
        if node.name not in known:
            kind = "filter" if isinstance(node, jinja2.nodes.Filter) else "test"
            return f"unknown {kind} '{node.name}' in {text.strip()!r}"
    return None


def describe_template_error(error: jinja2.TemplateError, path: Path) -> str:
    """`FILE:LINE: why` for an error rendering the template file `path`: the line of the
    template (or of a template it includes) where it happened, as jinja2 records it."""
    if isinstance(error, jinja2.TemplateSyntaxError):
        where = f"{error.filename or path}:{error.lineno}"
        return f"{where}: template syntax error: {error.message}"
    where = str(path)
    trace = error.__traceback__
    while trace is not None:  # jinja2 rewrites the frames of template code to name file and line
        if "__jinja_exception__" in trace.tb_frame.f_globals:
            where = f"{trace.tb_frame.f_code.co_filename}:{trace.tb_lineno}"
        trace = trace.tb_next
    return f"{where}: {_describe(error)}"


def _describe(error: jinja2.TemplateError | OverflowError) -> str:
    if isinstance(error, jinja2.UndefinedError):
        return f"undefined variable: {error.message}"
    if isinstance(error, jinja2.TemplateSyntaxError):
        return f"template syntax error on line {error.lineno}: {error.message}"
    return f"template error: {error}"
