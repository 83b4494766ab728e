"""Ansible's dialect in glmops: k=v arguments, with_* loops, tags, inventories, refusals, the
support table. (Whole playbooks against ansible-core itself: tests/conformance.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from glmops.cli.moddoc import ansible_doc_with_table
from glmops.engine.ansible_args import expand_with, parse_kv, split_args
from glmops.engine.inventory import load_inventory
from glmops.engine.playbook import load_playbook
from glmops.engine.templating import render_value
from glmops.errors import InputError
from tests.support.engine import Runner

DOCS = Path(__file__).resolve().parents[2] / "docs" / "ansible.md"


def _tasks(tmp_path: Path, tasks: str) -> list:
    path = tmp_path / "play.yml"
    path.write_text("- hosts: all\n  gather_facts: false\n  tasks:\n" + tasks)
    return load_playbook(path)[0].tasks


def test_kv_words_keep_quotes_and_templates_whole() -> None:
    assert split_args('content="a b" dest={{ x ~ "/y z" }}') == [
        'content="a b"',
        'dest={{ x ~ "/y z" }}',
    ]
    assert parse_kv("path=/x state=directory mode=0755", "file", None) == {
        "path": "/x",
        "state": "directory",
        "mode": "0755",
    }
    assert parse_kv("touch a=b creates=/made chdir=/tmp", "command", "cmd") == {
        "creates": "/made",
        "chdir": "/tmp",
        "cmd": "touch a=b",
    }
    assert parse_kv("hello world", "debug", "msg") == "hello world"
    with pytest.raises(ValueError, match="key=value"):
        parse_kv("path=/x directory", "file", None)


def test_loader_reads_kv_and_args_and_fqcn(tmp_path: Path) -> None:
    debug, command, file = _tasks(
        tmp_path,
        "    - debug: var=greeting\n"
        "    - ansible.builtin.command: ls creates=/x\n      args: {chdir: /tmp}\n"
        "    - file: path=/y state=touch\n",
    )
    assert debug.args["var"] == "greeting" and debug.args["msg"] is None
    assert (command.module, command.args["argv"], command.args["creates"]) == (
        "command",
        ["ls"],
        "/x",
    )
    assert command.args["chdir"] == "/tmp"
    assert (file.args["path"], file.args["state"]) == ("/y", "touch")


def test_with_loops_become_items_as_ansible_builds_them(tmp_path: Path) -> None:
    assert expand_with("items", [[1, 2], 3], {}) == [1, 2, 3]
    assert expand_with("dict", {"a": 1}, {}) == [{"key": "a", "value": 1}]
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "b.conf").write_text("")
    (tmp_path / "files" / "a.conf").write_text("")
    found = expand_with("fileglob", ["*.conf"], {"playbook_dir": str(tmp_path)})
    assert [Path(p).name for p in found] == ["a.conf", "b.conf"]
    (task,) = _tasks(
        tmp_path,
        "    - debug: msg={{ n }}\n      with_items: [1]\n"
        "      loop_control: {loop_var: n, index_var: i, label: '{{ n }}'}\n",
    )
    assert (task.loop_with, task.loop_var, task.index_var, task.loop_label) == (
        "items",
        "n",
        "i",
        "{{ n }}",
    )


def test_never_runs_only_when_its_tag_is_asked(tmp_path: Path) -> None:
    plain, never = _tasks(
        tmp_path, "    - debug: msg=a\n    - debug: msg=b\n      tags: [never, debug]\n"
    )
    assert plain.selected(set(), set()) and not never.selected(set(), set())
    assert not never.selected({"all"}, set())
    assert never.selected({"debug"}, set())


@pytest.mark.parametrize(
    ("task", "message"),
    [
        ("    - user: {name: x}\n", "not supported by glmops: the module 'user'"),
        ("    - command: ls\n      async: 10\n", "not supported by glmops: the task keyword"),
        ("    - community.general.ufw: {}\n", "not supported by glmops: the collection module"),
        ("    - debug: msg=x\n      with_nested: [[1]]\n", "not supported by glmops: the task"),
        ("    - debug: msg=x\n      loop: [1]\n      loop_control: {pause: 1}\n", "'pause'"),
    ],
)
def test_unsupported_ansible_features_are_refused_by_name(
    tmp_path: Path, task: str, message: str
) -> None:
    with pytest.raises(InputError) as error:
        _tasks(tmp_path, task)
    assert message in str(error.value)
    assert "did you mean" not in str(error.value)


def test_unsupported_play_keyword_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "play.yml"
    path.write_text("- hosts: all\n  strategy: free\n  tasks: []\n")
    with pytest.raises(InputError, match="not supported by glmops: the play keyword 'strategy'"):
        load_playbook(path)


def test_a_template_file_with_an_unknown_filter_fails_at_load(tmp_path: Path) -> None:
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "t.j2").write_text("ok\n{{ x | to_nice_yamll }}\n")
    with pytest.raises(InputError, match=r"t.j2:2: unknown filter 'to_nice_yamll'"):
        _tasks(tmp_path, "    - template: {src: t.j2, dest: /x}\n")


def test_ini_inventory_with_groups_children_vars_and_aliases(tmp_path: Path) -> None:
    path = tmp_path / "hosts"
    path.write_text(
        "[web]\nweb1 ansible_host=10.0.0.1 ansible_port=2222 weight=3\n"
        "[db]\ndb1 ansible_connection=local\n"
        "[servers:children]\nweb\ndb\n[servers:vars]\nntp=pool\n"
    )
    inventory = load_inventory(path, connection_defaults={"user": "admin"})
    web1 = inventory.host("web1")
    assert web1 is not None
    assert (web1.connection.address, web1.connection.port, web1.connection.user) == (
        "10.0.0.1",
        2222,
        "admin",
    )
    assert (web1.vars["weight"], web1.vars["ntp"]) == (3, "pool")
    assert sorted(web1.groups) == ["servers", "web"]
    assert inventory.host("db1").connection.connection == "local"  # type: ignore[union-attr]
    assert [h.name for h in inventory.select("servers")] == ["web1", "db1"]


def test_comma_list_inventory_and_refused_ansible_variable(tmp_path: Path) -> None:
    inventory = load_inventory(Path("h1,h2,"), connection_defaults={"connection": "local"})
    assert [h.name for h in inventory.select("all")] == ["h1", "h2"]
    assert inventory.host("h1").connection.connection == "local"  # type: ignore[union-attr]
    path = tmp_path / "hosts.yml"
    path.write_text("all:\n  hosts:\n    h: {ansible_python_interpreter: /usr/bin/python3}\n")
    with pytest.raises(InputError, match="not supported by glmops: the inventory variable"):
        load_inventory(path)


def test_filters_render_as_ansible_core_does() -> None:
    scope = {"d": {"b": 1, "a": [1, 2]}}
    assert render_value("{{ d | to_nice_json }}", scope, where="t") == (
        '{\n    "a": [\n        1,\n        2\n    ],\n    "b": 1\n}'
    )
    assert render_value("{{ d | to_json }}", scope, where="t") == '{"b": 1, "a": [1, 2]}'
    assert render_value("{{ d | to_nice_yaml }}", scope, where="t") == "a:\n- 1\n- 2\nb: 1\n"
    assert render_value("{{ 60 | random(seed='x') }}", {}, where="t") in range(60)
    assert render_value("{{ r is failed }}", {"r": {"failed": True}}, where="t") is True
    assert render_value("{{ '2.10' is version('2.9', '>') }}", {}, where="t") is True
    assert render_value("{{ [1, [2, [3]]] | flatten(levels=1) }}", {}, where="t") == [1, 2, [3]]


def test_docs_table_is_generated_from_the_support_table() -> None:
    text = DOCS.read_text()
    assert ansible_doc_with_table(text) == text, (
        "docs/ansible.md is stale: run python3 -m glmops.cli.moddoc --ansible"
    )


def test_templated_become_user_is_rendered_and_items_shown_by_label(
    run_playbook: Runner, local_inventory: Path, tmp_path: Path
) -> None:
    outcome = run_playbook(
        f"""
        - hosts: all
          gather_facts: false
          vars: {{runner: nobody, use_become: "{{{{ 1 == 1 }}}}"}}
          tasks:
            - name: who
              command: id -un
              become: "{{{{ use_become }}}}"
              become_user: "{{{{ runner }}}}"
              register: who
            - name: record
              copy: {{content: "{{{{ who.stdout }}}}", dest: "{tmp_path}/who"}}
            - name: items
              debug: msg={{{{ item }}}}
              loop: [a, b]
              loop_control: {{label: "L-{{{{ item }}}}"}}
        """,
        local_inventory,
    )
    assert outcome.exit_code == 0, outcome.stderr
    assert (tmp_path / "who").read_text() == "nobody"
    shown = [(e["item"], e["status"]) for e in outcome.events if e["event"] == "item"]
    assert shown == [("L-a", "ok"), ("L-b", "ok")]


def test_doc_ansible_prints_the_support_table() -> None:
    from click.testing import CliRunner

    from glmops.cli.main import main
    from glmops.engine.ansible_support import support_table

    result = CliRunner().invoke(main, ["doc", "--ansible"], standalone_mode=False)
    assert result.output == support_table()
    assert "### Not supported (refused when the playbook loads)" in result.output


def test_password_hash_is_sha512_crypt() -> None:
    hashed = render_value("{{ 'pw' | password_hash('sha512', 'saltsalt') }}", {}, where="t")
    assert hashed == (
        "$6$saltsalt$pauPrmdmG4BTE9h2HPmywiw152IFch6BJCEsaY6D.PLTfpV8sqvXwWdyfsgVgozkYH9B80bAip"
        "/08R2BPH2xk/"
    )


def test_invalid_yaml_names_line_column_and_shows_the_line(tmp_path: Path) -> None:
    path = tmp_path / "play.yml"
    path.write_text("- hosts: all\n  tasks:\n    - name: x\n      debug: {msg: 1}\n     bad: 2\n")
    with pytest.raises(InputError) as error:
        load_playbook(path)
    message = str(error.value)
    assert message.startswith(f"{path}:5: invalid YAML:")
    assert "column 6:\n         bad: 2\n         ^ here" in message


def test_ansible_fact_names_from_the_probe_here(tmp_path: Path) -> None:
    import platform
    import subprocess
    import sys

    from glmops.engine.ansible_args import ansible_facts
    from glmops.engine.context import helper_command, helper_stdin

    reply = subprocess.run(
        ["sh", "-c", helper_command("facts_probe", sys.executable)],
        input=helper_stdin("facts_probe", {"model_dir": str(tmp_path), "venv": None}),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    named = ansible_facts(json.loads(reply.stdout))
    assert named["ansible_hostname"] == platform.node().split(".")[0]
    assert named["ansible_facts"]["architecture"] == platform.machine()
    assert named["ansible_kernel"] == platform.release()
    assert named["ansible_memtotal_mb"] > 0
    assert "ansible_default_ipv4" not in named  # not gathered: undefined, never guessed
