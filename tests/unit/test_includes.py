"""include_tasks, import_tasks, include_vars and import_playbook through the real engine on a
local host, with Ansible's semantics (checked against ansible-core 2.19 runs): includes expand
at run time per item, report one result per host and count ok per included file; imports
expand at load with their when/vars/tags on each task; relative names resolve beside the
including file first."""

from __future__ import annotations

from pathlib import Path

import pytest

from glmops.engine.playbook import load_playbook
from glmops.errors import InputError
from tests.support.engine import Runner

WRITE_ITEM = """\
- name: write one
  copy: {content: "{{ item }} {{ suffix }}\\n", dest: "{{ root }}/{{ item }}"}
"""


def test_include_tasks_per_item_with_vars_and_a_templated_name(
    run_playbook: Runner, local_inventory: Path, tmp_path: Path
) -> None:
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "write.yml").write_text(WRITE_ITEM)
    outcome = run_playbook(
        """
        - hosts: all
          gather_facts: false
          vars: {kind: write}
          tasks:
            - name: each
              include_tasks: "tasks/{{ kind }}.yml"
              vars: {suffix: s}
              loop: [alpha, beta]
            - name: not included
              include_tasks: tasks/write.yml
              when: kind == "other"
        """,
        local_inventory,
    )
    assert outcome.exit_code == 0, outcome.stderr
    assert (tmp_path / "root" / "alpha").read_text() == "alpha s\n"
    assert (tmp_path / "root" / "beta").read_text() == "beta s\n"
    # one result for the looped include, as Ansible reports it, and a line per item
    each = [e for e in outcome.results() if e["task"] == "each"]
    assert [e["status"] for e in each] == ["ok"]
    assert each[0]["msg"] == "included: tasks/write.yml (2 of 2 items)"
    items = [(e["item"], e["msg"]) for e in outcome.events if e["event"] == "item"]
    assert items == [("alpha", "included: tasks/write.yml"), ("beta", "included: tasks/write.yml")]
    assert outcome.status("not included") == "skipped"
    # ok once per included file and for the two changed writes (ok counts changed), as in
    # Ansible's recap
    assert outcome.recap()["here"]["ok"] == 4


def test_a_looped_include_is_skipped_only_when_no_item_is_included(
    run_playbook: Runner, local_inventory: Path, tmp_path: Path
) -> None:
    (tmp_path / "write.yml").write_text(WRITE_ITEM)
    outcome = run_playbook(
        """
        - hosts: all
          gather_facts: false
          vars: {suffix: s}
          tasks:
            - name: some
              include_tasks: write.yml
              loop: [alpha, beta, gamma]
              when: item != "beta"
            - name: none
              include_tasks: write.yml
              loop: [alpha]
              when: item == "delta"
            - name: empty
              include_tasks: write.yml
              loop: []
            - name: repeated
              include_tasks: write.yml
              loop: [delta, delta]
        """,
        local_inventory,
    )
    assert outcome.exit_code == 0, outcome.stderr
    statuses = [(e["task"], e["status"]) for e in outcome.results()]
    assert statuses == [
        ("some", "ok"),
        ("write one", "changed"),
        ("write one", "changed"),
        ("none", "skipped"),
        ("empty", "skipped"),
        ("repeated", "ok"),
        ("write one", "changed"),
        ("write one", "ok"),
    ]
    # ok: 4 included files + 4 writes; skipped once per skipped include, not per item
    recap = outcome.recap()["here"]
    assert (recap["ok"], recap["changed"], recap["skipped"]) == (8, 3, 2)


def test_an_included_file_finds_its_own_includes_beside_it(
    run_playbook: Runner, local_inventory: Path, tmp_path: Path
) -> None:
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "outer.yml").write_text("- include_tasks: inner.yml\n")
    (sub / "inner.yml").write_text(
        '- name: inner\n  copy: {content: "in\\n", dest: "{{ root }}/inner"}\n'
    )
    outcome = run_playbook(
        "- hosts: all\n  gather_facts: false\n  tasks:\n    - include_tasks: sub/outer.yml\n",
        local_inventory,
    )
    assert outcome.exit_code == 0, outcome.stderr
    assert (tmp_path / "root" / "inner").read_text() == "in\n"


def test_a_missing_included_file_fails_the_host_at_run_time(
    run_playbook: Runner, local_inventory: Path
) -> None:
    outcome = run_playbook(
        """
        - hosts: all
          gather_facts: false
          tasks:
            - block:
                - name: missing
                  include_tasks: "{{ 'nope' }}.yml"
              rescue:
                - name: rescued
                  debug: {msg: "{{ ansible_failed_result.msg }}"}
        """,
        local_inventory,
    )
    assert outcome.exit_code == 0, outcome.stderr
    assert outcome.status("missing") == "failed"
    assert "file 'nope.yml' not found" in outcome.results()[-1]["msg"]


def test_import_tasks_gives_its_when_vars_and_tags_to_each_task(
    run_playbook: Runner, local_inventory: Path, tmp_path: Path
) -> None:
    (tmp_path / "steps.yml").write_text(
        '- name: one\n  copy: {content: "{{ label }}\\n", dest: "{{ root }}/one"}\n'
        "- name: stop\n  set_fact: {go: false}\n"
        '- name: two\n  copy: {content: "x\\n", dest: "{{ root }}/two"}\n'
    )
    playbook = """
        - hosts: all
          gather_facts: false
          vars: {go: true}
          tasks:
            - import_tasks: steps.yml
              when: go
              vars: {label: imported}
              tags: [steps]
            - name: untagged
              debug: {msg: x}
        """
    outcome = run_playbook(playbook, local_inventory, tags={"steps"})
    assert outcome.exit_code == 0, outcome.stderr
    assert (tmp_path / "root" / "one").read_text() == "imported\n"
    assert outcome.status("two") == "skipped"  # when evaluated again after `stop`
    assert [e["task"] for e in outcome.results()] == ["one", "stop", "two"]


def test_import_tasks_of_a_missing_file_fails_at_load(tmp_path: Path) -> None:
    playbook = tmp_path / "play.yml"
    playbook.write_text("- hosts: all\n  tasks:\n    - import_tasks: gone.yml\n")
    with pytest.raises(InputError, match="import_tasks: file 'gone.yml' not found"):
        load_playbook(playbook)


def test_include_vars_a_file_a_folder_and_under_a_name(
    run_playbook: Runner, local_inventory: Path, tmp_path: Path
) -> None:
    more = tmp_path / "vars" / "more"
    more.mkdir(parents=True)
    (tmp_path / "vars" / "settings.yml").write_text("port: 8080\ncolor: red\n")
    (more / "a.yml").write_text("color: blue\nsize: 1\n")
    (more / "b.yml").write_text("size: 2\n")
    outcome = run_playbook(
        """
        - hosts: all
          gather_facts: false
          tasks:
            - include_vars: settings.yml
            - include_vars: {dir: more}
            - include_vars: {file: settings.yml, name: kept}
            - copy:
                content: "{{ port }} {{ color }} {{ size }} {{ kept.color }}\\n"
                dest: "{{ root }}/vars"
        """,
        local_inventory,
    )
    assert outcome.exit_code == 0, outcome.stderr
    assert (tmp_path / "root" / "vars").read_text() == "8080 blue 2 red\n"


def test_import_playbook_runs_its_plays_in_place(
    run_playbook: Runner, local_inventory: Path, tmp_path: Path
) -> None:
    more = tmp_path / "more"
    more.mkdir()
    (more / "second.yml").write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n    - import_tasks: steps.yml\n"
    )
    (more / "steps.yml").write_text('- name: second\n  shell: echo second >> "{{ root }}/plays"\n')
    outcome = run_playbook(
        """
        - hosts: all
          gather_facts: false
          tasks:
            - shell: echo first >> "{{ root }}/plays"
        - import_playbook: more/second.yml
        - hosts: all
          gather_facts: false
          tasks:
            - shell: echo last >> "{{ root }}/plays"
        """,
        local_inventory,
    )
    assert outcome.exit_code == 0, outcome.stderr
    assert (tmp_path / "root" / "plays").read_text().split() == ["first", "second", "last"]


def test_a_playbook_importing_itself_is_refused(tmp_path: Path) -> None:
    playbook = tmp_path / "play.yml"
    playbook.write_text("- import_playbook: play.yml\n")
    with pytest.raises(InputError, match="imports itself"):
        load_playbook(playbook)


def test_list_tasks_shows_imported_tasks_where_written_and_includes_as_such(
    tmp_path: Path,
) -> None:
    from glmops.cli.listing import list_tasks

    (tmp_path / "steps.yml").write_text("- name: imported\n  debug: {msg: x}\n")
    playbook = tmp_path / "play.yml"
    playbook.write_text(
        "- hosts: all\n  tasks:\n    - import_tasks: steps.yml\n"
        "    - name: later\n      include_tasks: steps.yml\n"
    )
    text = list_tasks(playbook, load_playbook(playbook), set(), set())
    assert "imported  (debug, steps.yml:1)" in text
    assert "later  (include_tasks steps.yml, at run time, line 4)" in text


def test_a_templated_include_name_cannot_leave_the_playbooks_folders(
    run_playbook: Runner, local_inventory: Path, tmp_path: Path
) -> None:
    (tmp_path / "outside.yml").write_text("- debug: {msg: outside}\n")
    (tmp_path / "inner").mkdir()
    outcome = run_playbook(
        """
        - hosts: all
          gather_facts: false
          tasks:
            - shell: echo ../outside
              register: answer
            - name: from output
              include_tasks: "{{ answer.stdout }}.yml"
        """,
        local_inventory,
        name="inner/playbook.yml",
    )
    assert outcome.exit_code == 2
    assert outcome.status("from output") == "failed"
    assert "without '..'" in outcome.results()[-1]["msg"]


def test_an_include_of_itself_fails_the_host_instead_of_running_forever(
    run_playbook: Runner, local_inventory: Path, tmp_path: Path
) -> None:
    (tmp_path / "again.yml").write_text("- name: again\n  include_tasks: again.yml\n")
    outcome = run_playbook(
        "- hosts: all\n  gather_facts: false\n  tasks:\n    - include_tasks: again.yml\n",
        local_inventory,
    )
    assert outcome.exit_code == 2
    assert "an include cycle?" in outcome.results()[-1]["msg"]
