"""The renderer's rules for untrusted values (glmops.engine.unsafe, glmops.engine.templating):
rendered at most once, never when untrusted, taint carried into results, the sandbox."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from glmops.engine.templating import evaluate, render_value, resolve_variables
from glmops.engine.unsafe import UnsafeDict, UnsafeList, UnsafeText, is_unsafe, mark_unsafe
from glmops.engine.yamlsrc import load_yaml
from glmops.errors import TemplateError


def test_mark_unsafe_wraps_strings_keys_and_containers_and_keeps_other_values() -> None:
    marked = mark_unsafe({"a": ["x", 1, None, ("y",)], "n": 2.5})
    assert isinstance(marked, UnsafeDict) and isinstance(marked["a"], UnsafeList)
    assert all(isinstance(k, UnsafeText) for k in marked)
    assert isinstance(marked["a"][0], UnsafeText) and marked["a"][1:3] == [1, None]
    assert isinstance(marked["a"][3][0], UnsafeText) and marked["n"] == 2.5
    assert marked == {"a": ["x", 1, None, ["y"]], "n": 2.5}


def test_untrusted_values_come_back_as_they_are() -> None:
    text = mark_unsafe("{{ 1 + 1 }}")
    assert render_value(text, {}, where="t") is text
    nested = {"keep": text, "render": "{{ 1 + 1 }}"}
    assert render_value(nested, {}, where="t") == {"keep": "{{ 1 + 1 }}", "render": 2}


def test_a_rendering_that_read_untrusted_data_is_untrusted() -> None:
    scope = {"reg": mark_unsafe({"stdout": "{{ 6 * 7 }}", "lines": ["a", "b"]}), "n": 3}
    text = render_value("pre {{ reg.stdout }}", scope, where="t")
    assert text == "pre {{ 6 * 7 }}" and is_unsafe(text)
    upper = render_value("{{ reg.lines | map('upper') | list }}", scope, where="t")
    assert upper == ["A", "B"] and is_unsafe(upper) and is_unsafe(upper[0])
    trusted = render_value("x{{ n }}", scope, where="t")
    assert trusted == "x3" and not is_unsafe(trusted)
    with pytest.raises(TemplateError, match="never evaluated as an expression"):
        evaluate(text, scope, where="t")


def test_variables_render_once_in_dependency_order() -> None:
    variables = {
        "a": "{{ b }}-a",
        "b": "{{ c }}-b",
        "c": "{% raw %}{{ c }}{% endraw %}",
        "port": "{{ base + 1 }}",
        "base": 8000,
        "loop": "{{ loop }}",
    }
    resolved = resolve_variables(variables, where="t")
    assert resolved["a"] == "{{ c }}-b-a"  # the raw block's text, never rendered again
    assert resolved["port"] == 8001
    with pytest.raises(TemplateError, match="recursive variables: loop -> loop"):
        render_value("{{ loop }}", resolved, where="t")


def test_the_sandbox_refuses_python_internals_and_mutation() -> None:
    for expression in (
        "cycler.__init__.__globals__",
        "''.__class__.__mro__",
        "[1].append(2)",
        "range(10**9) | list",
    ):
        with pytest.raises(TemplateError):
            evaluate(expression, {}, where="t")


def test_unsafe_tag_and_yaml_and_json_output(tmp_path: Path) -> None:
    path = tmp_path / "vars.yml"
    path.write_text("a: !unsafe '{{ x }}'\nb: !unsafe ['{{ y }}']\nc: '{{ z }}'\n")
    data = load_yaml(path)
    assert is_unsafe(data["a"]) and is_unsafe(data["b"][0]) and not is_unsafe(data["c"])
    dumped = yaml.safe_dump(mark_unsafe({"k": ["v"]}))
    assert yaml.safe_load(dumped) == {"k": ["v"]} and "!!" not in dumped
    assert json.loads(json.dumps(mark_unsafe({"k": ["v"]}))) == {"k": ["v"]}
