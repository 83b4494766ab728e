"""Jinja filters and messages on values loaded from YAML (mappings and lists that remember their
file and line), as an Ansible user writes them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from glmops.engine.playbook import load_playbook
from glmops.engine.templating import render_value
from glmops.engine.yamlsrc import load_yaml
from glmops.errors import InputError, TemplateError
from tests.support.engine import Runner


@pytest.fixture
def loaded(tmp_path: Path) -> dict:
    path = tmp_path / "vars.yml"
    path.write_text("cfg: {a: 1, seq: [x, {b: 2}]}\n")
    return load_yaml(path)


def test_to_yaml_and_to_json_take_values_loaded_from_yaml(loaded: dict) -> None:
    text = render_value("{{ cfg | to_yaml }}", loaded, where="t")
    assert yaml.safe_load(text) == {"a": 1, "seq": ["x", {"b": 2}]}
    # ansible-core's to_yaml: the innermost collections in flow style
    assert render_value("{{ cfg.seq | to_yaml }}", loaded, where="t") == "- x\n- {b: 2}\n"
    assert render_value("{{ cfg | to_json }}", loaded, where="t") == (
        '{"a": 1, "seq": ["x", {"b": 2}]}'
    )


def test_a_missing_attribute_names_the_type_as_ansible_does(loaded: dict) -> None:
    with pytest.raises(TemplateError) as error:
        render_value("{{ cfg.missing }}", loaded, where="t")
    assert "'dict object' has no attribute 'missing'" in str(error.value)
    with pytest.raises(TemplateError) as error:
        render_value("x{{ cfg.seq[5] }}", loaded, where="t")
    assert "list object has no element 5" in str(error.value)
    assert "glmops" not in str(error.value)


def test_debug_shows_an_inventory_mapping_as_yaml(run_playbook: Runner, tmp_path: Path) -> None:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  hosts:\n    lh: {connection: local, cfg: {a: 1}}\n")
    outcome = run_playbook(
        """
        - hosts: all
          gather_facts: false
          tasks:
            - name: show
              debug: {msg: "{{ cfg | to_yaml }}"}
        """,
        inventory,
    )
    assert outcome.exit_code == 0, outcome.stderr
    shown = next(e for e in outcome.results() if e["task"] == "show")
    assert shown["msg"].strip() == "{a: 1}", shown  # ansible-core to_yaml: flow style


def test_an_undefined_variable_in_a_template_names_its_line(
    run_playbook: Runner, local_inventory: Path, tmp_path: Path
) -> None:
    root = tmp_path / "root"
    (tmp_path / "page.j2").write_text("one\n{{ 2 }}\n{% include 'part.j2' %}\n")
    (tmp_path / "part.j2").write_text("fine\n\nthree {{ not_defined_anywhere }}\n")
    (tmp_path / "broken.j2").write_text("one\n{% if %}\n")
    outcome = run_playbook(
        f"""
        - hosts: all
          gather_facts: false
          tasks:
            - name: page
              template: {{src: page.j2, dest: "{root}/page"}}
              ignore_errors: true
        """,
        local_inventory,
    )
    (page,) = outcome.results()
    assert f"{tmp_path}/part.j2:3: undefined variable: 'not_defined_anywhere'" in page["msg"]
    assert page["msg"].startswith(f"{tmp_path}/playbook.yml:5 task 'page' on host 'here': ")
    # A template file's syntax is checked when the playbook loads, before any host is touched.
    broken = tmp_path / "broken.yml"
    broken.write_text("- hosts: all\n  tasks:\n    - template: {src: broken.j2, dest: /x}\n")
    with pytest.raises(InputError) as error:
        load_playbook(broken)
    assert f"{tmp_path}/broken.j2:2: template syntax error" in str(error.value)
