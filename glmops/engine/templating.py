"""Jinja2 rendering of task arguments, `when` expressions and template files.

StrictUndefined everywhere: an undefined variable is an error, never an empty string, and the
error names the playbook file, the task and the host.
"""

from __future__ import annotations

import base64
import json
import os
import re
from pathlib import Path
from typing import Any

import jinja2
import jinja2.nodes
import yaml

from glmops.engine.unitfile import UNIT_FILTERS
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
    "from_yaml": yaml.safe_load,
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
    **UNIT_FILTERS,  # systemd's escaping, for every unit template
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


def make_environment(loader: jinja2.BaseLoader | None = None) -> jinja2.Environment:
    env = jinja2.Environment(
        undefined=_Undefined,
        keep_trailing_newline=True,
        loader=loader,
        autoescape=False,
    )
    env.filters.update(FILTERS)
    return env


_ENV = make_environment()


def render_value(value: Any, variables: dict[str, Any], *, where: str) -> Any:
    """Render every string inside `value` (dicts and lists recursively).

    A string that is exactly one `{{ expression }}` keeps the expression's native type, so
    `port: "{{ vllm_port }}"` stays an integer.
    """
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
    try:
        return _ENV.from_string(text).render(variables)
    except jinja2.TemplateError as error:
        raise TemplateError(f"{where}: {_describe(error)}") from None


def evaluate(expression: str, variables: dict[str, Any], *, where: str) -> Any:
    """Evaluate one Jinja2 expression (a `when`, `until` or `{{ ... }}`) to a Python value."""
    try:
        result = _ENV.compile_expression(expression, undefined_to_none=False)(variables)
    except jinja2.TemplateError as error:
        raise TemplateError(
            f"{where}: {_describe(error)} in expression {expression.strip()!r}"
        ) from None
    if isinstance(result, jinja2.Undefined):
        try:
            str(result)
        except jinja2.UndefinedError as error:
            raise TemplateError(f"{where}: {_describe(error)}") from None
    return result


def resolve_variables(variables: dict[str, Any], *, where: str) -> dict[str, Any]:
    """Variables whose values are templates (`dir: "{{ root }}/x"`), rendered in the scope of
    all the others, a few rounds deep so that one may refer to another.

    A value that cannot be rendered becomes an undefined that raises, with the reason, only if
    a task actually uses it: an unused broken variable is no error, as in Ansible.
    """
    resolved = dict(variables)
    for _ in range(4):
        pending = [k for k, v in resolved.items() if _is_template(v)]
        if not pending:
            break
        for key in pending:
            try:
                resolved[key] = render_value(resolved[key], resolved, where=where)
            except TemplateError as error:
                resolved[key] = jinja2.StrictUndefined(
                    hint=f"variable '{key}' could not be rendered: {error}"
                )
    return resolved


def _is_template(value: Any) -> bool:
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


def _describe(error: jinja2.TemplateError) -> str:
    if isinstance(error, jinja2.UndefinedError):
        return f"undefined variable: {error.message}"
    if isinstance(error, jinja2.TemplateSyntaxError):
        return f"template syntax error on line {error.lineno}: {error.message}"
    return f"template error: {error}"
