"""Playbook loading and templating: unknown keys, modules and variables fail with file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from glmops.engine.playbook import load_playbook
from glmops.engine.templating import evaluate_condition, render_value
from glmops.errors import InputError, TemplateError


def playbook(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "play.yml"
    path.write_text(text)
    return path


def test_loads_tasks_and_handlers(tmp_path: Path) -> None:
    plays = load_playbook(
        playbook(
            tmp_path,
            """\
- hosts: gpu
  vars: {a: 1}
  tasks:
    - name: say
      command: echo hi
      notify: bye
      tags: [t1]
      retries: 2
      until: "result.rc == 0"
      timeout: 5
  handlers:
    - name: bye
      shell: echo bye
""",
        )
    )
    task = plays[0].tasks[0]
    assert (task.module, task.args["cmd"], task.notify, task.tags) == (
        "command",
        "echo hi",
        ["bye"],
        ["t1"],
    )
    assert (task.retries, task.timeout, task.line) == (2, 5, 4)
    assert plays[0].handlers[0].name == "bye"


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        (
            "- hosts: a\n  tasks:\n    - name: x\n      comand: ls\n",
            4,
            "unknown module or task key 'comand'",
        ),
        ("- hosts: a\n  tasks:\n    - command: ls\n      shell: ls\n", 3, "exactly one module"),
        (
            "- hosts: a\n  tasks:\n    - copy: {dest: /x, colour: red}\n",
            3,
            "unknown argument 'colour'",
        ),
        ("- hosts: a\n  tasks:\n    - file: {mode: '0644'}\n", 3, "needs argument 'path'"),
        ("- hosts: a\n  tasks:\n    - command: ls\n      notify: nobody\n", 3, "notifies 'nobody'"),
        ("- hosts: a\n  taks: []\n", 2, "unknown play key 'taks'"),
        ("- tasks: []\n", 1, "needs 'hosts:'"),
        ("- hosts: a\n  tasks:\n    - command: ls\n      retries: -1\n", 4, "non-negative integer"),
        (  # a null delay would reach time.sleep() on the first retry
            "- hosts: a\n  tasks:\n    - command: ls\n      retries: 2\n      delay:\n",
            5,
            "'delay' must be a non-negative number",
        ),
        ("- hosts: a\n  name: p\n  serial: abc\n  tasks: []\n", 3, "'serial' entry 'abc'"),
        ("- hosts: a\n  serial: [1, 150%]\n  tasks: []\n", 2, "'serial' entry '150%'"),
        (
            "- hosts: a\n  tasks: []\n  max_fail_percentage: 150\n",
            3,
            "'max_fail_percentage' must be a number from 0 to 100",
        ),
        ("- hosts: a\n  any_errors_fatal: yes please\n", 2, "must be true or false"),
        ("- hosts: a\n  tasks:\n    - command: ls\n      delegate_to: ''\n", 4, "must name"),
        (
            "- hosts: a\n  tasks:\n    - command: ls\n      delegate_to: '{{ x'\n",
            4,
            "'delegate_to'",
        ),
        (
            "- hosts: a\n  handlers:\n    - command: ls\n      run_once: true\n",
            4,
            "'run_once' is for tasks",
        ),
    ],
)
def test_errors_name_file_and_line(tmp_path: Path, text: str, line: int, message: str) -> None:
    path = playbook(tmp_path, text)
    with pytest.raises(InputError) as raised:
        load_playbook(path)
    assert message in str(raised.value)
    assert raised.value.line == line and raised.value.source == str(path)


def test_render_keeps_native_types_and_is_strict() -> None:
    variables = {"port": 8000, "name": "glm", "gpus": [1, 2]}
    assert render_value(
        {"p": "{{ port }}", "s": "{{ name }}-x", "n": ["{{ gpus | length }}"]}, variables, where="w"
    ) == {"p": 8000, "s": "glm-x", "n": [2]}
    with pytest.raises(TemplateError, match=r"play\.yml:3 task 'x' on host 'h1'.*undefined.*nope"):
        render_value("{{ nope }}", variables, where="play.yml:3 task 'x' on host 'h1'")


def test_conditions() -> None:
    variables = {"facts": {"gpus": []}, "x": 3}
    assert evaluate_condition("x > 2", variables, where="w")
    assert not evaluate_condition(["x > 2", "facts.gpus"], variables, where="w")
    with pytest.raises(TemplateError, match="undefined"):
        evaluate_condition("missing == 1", variables, where="w")


def test_variables_refer_to_variables_and_broken_ones_fail_only_when_used() -> None:
    from glmops.engine.templating import resolve_variables

    scope = resolve_variables(
        {
            "root": "/srv",
            "models": "{{ root }}/models",
            "gguf": "{{ models }}/glm5.gguf",
            "broken": "{{ nope }}",
            "n": "{{ 2 * 4 }}",
        },
        where="w",
    )
    assert scope["gguf"] == "/srv/models/glm5.gguf" and scope["n"] == 8
    assert render_value("{{ gguf }}", scope, where="w") == "/srv/models/glm5.gguf"
    with pytest.raises(TemplateError, match="'broken' could not be rendered.*nope"):
        render_value("{{ broken }}", scope, where="w")


def test_a_misspelt_task_key_gets_a_suggestion(tmp_path) -> None:
    import pytest

    from glmops.engine.playbook import load_playbook
    from glmops.errors import InputError

    path = tmp_path / "p.yml"
    path.write_text("- hosts: all\n  tasks:\n    - command: 'true'\n      notfy: x\n")
    with pytest.raises(InputError, match="p.yml:4: unknown module or task key 'notfy' "
                       r"\(did you mean 'notify'\?"):  # fmt: skip
        load_playbook(path)


def test_a_literal_argument_of_the_wrong_type_fails_at_load(tmp_path) -> None:
    import pytest

    from glmops.engine.playbook import load_playbook
    from glmops.errors import InputError

    path = tmp_path / "p.yml"
    path.write_text("- hosts: all\n  tasks:\n    - file: {path: [/tmp/a, /tmp/b]}\n")
    with pytest.raises(InputError, match=r"p.yml:3: argument 'path' of 'file' must be str"):
        load_playbook(path)
