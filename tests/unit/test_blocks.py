"""block/rescue/always through the real engine on a local host, with Ansible's semantics
(each checked against ansible-core 2.19 runs of the same playbooks): a rescued failure does
not fail the host and counts as rescued; always runs on failed hosts, which stay failed; a
block's when/vars/tags reach each task under it; handlers and --force-handlers around
failures; --start-at-task."""

from __future__ import annotations

from pathlib import Path

import pytest

from glmops.cli.main import check_start_at_task
from glmops.engine.playbook import load_playbook
from glmops.errors import InputError
from tests.support.engine import Runner
from tests.support.local_hosts import local_hosts


def write(path: str, text: str = "x") -> str:
    """A copy task's arguments (flow style) writing `text` to `path` under the root."""
    return f'{{content: "{text}\\n", dest: "{{{{ root }}}}/{path}"}}'


def test_rescue_takes_over_a_failure_and_always_runs(
    run_playbook: Runner, local_inventory: Path, tmp_path: Path
) -> None:
    failure = "{{ ansible_failed_task.name }} {{ ansible_failed_result.rc }}"
    outcome = run_playbook(
        f"""
        - hosts: all
          gather_facts: false
          tasks:
            - name: guarded
              block:
                - name: fails
                  command: /bin/false
                - name: skipped by the failure
                  copy: {write("never")}
              rescue:
                - name: rescue
                  copy: {write("rescued", failure)}
              always:
                - name: always
                  copy: {write("always")}
            - name: after
              copy: {write("after")}
        """,
        local_inventory,
    )
    root = tmp_path / "root"
    assert outcome.exit_code == 0, outcome.stderr
    assert (root / "rescued").read_text() == "fails 1\n"
    assert (root / "always").exists() and (root / "after").exists()
    assert not (root / "never").exists()
    assert outcome.status("fails") == "failed"
    tally = outcome.recap()["here"]
    assert (tally["failed"], tally["rescued"], tally["changed"]) == (0, 1, 3)


def test_without_rescue_always_runs_and_the_host_stays_failed(
    run_playbook: Runner, local_inventory: Path, tmp_path: Path
) -> None:
    outcome = run_playbook(
        f"""
        - hosts: all
          gather_facts: false
          tasks:
            - block:
                - name: fails
                  fail: {{msg: boom}}
              always:
                - name: cleanup
                  copy: {write("cleanup")}
            - name: after
              copy: {write("after")}
        """,
        local_inventory,
    )
    assert outcome.exit_code == 2
    assert (tmp_path / "root" / "cleanup").exists()
    assert not (tmp_path / "root" / "after").exists()
    assert outcome.recap()["here"]["failed"] == 1
    assert outcome.recap()["here"]["rescued"] == 0


def test_nested_blocks_rescue_outward(
    run_playbook: Runner, local_inventory: Path, tmp_path: Path
) -> None:
    outcome = run_playbook(
        f"""
        - hosts: all
          gather_facts: false
          tasks:
            - block:
                - block:
                    - name: inner fails
                      command: /bin/false
                  always:
                    - name: inner always
                      copy: {write("inner_always")}
              rescue:
                - name: rescue in rescue
                  block:
                    - name: rescue fails
                      fail: {{msg: again}}
                  rescue:
                    - name: last rescue
                      copy: {write("last", "{{ ansible_failed_result.msg }}")}
        """,
        local_inventory,
    )
    assert outcome.exit_code == 0, outcome.stderr
    assert (tmp_path / "root" / "inner_always").exists()
    assert (tmp_path / "root" / "last").read_text() == "again\n"
    assert outcome.recap()["here"]["rescued"] == 2


def test_a_blocks_when_vars_and_tags_reach_each_task(
    run_playbook: Runner, local_inventory: Path, tmp_path: Path
) -> None:
    playbook = f"""
        - hosts: all
          gather_facts: false
          vars: {{flag: true}}
          tasks:
            - when: flag
              vars: {{word: block}}
              tags: [web]
              block:
                - name: block var
                  copy: {write("word", "{{ word }}")}
                - name: own var wins
                  vars: {{word: task}}
                  copy: {write("own", "{{ word }}")}
                - name: flag off
                  set_fact: {{flag: false}}
                - name: when evaluated again
                  copy: {write("late")}
            - name: untagged
              copy: {write("untagged")}
        """
    outcome = run_playbook(playbook, local_inventory, tags={"web"})
    root = tmp_path / "root"
    assert outcome.exit_code == 0, outcome.stderr
    assert (root / "word").read_text() == "block\n"
    assert (root / "own").read_text() == "task\n"
    assert outcome.status("when evaluated again") == "skipped"
    assert not (root / "untagged").exists()


def test_handlers_after_a_rescue_and_forced_after_a_failure(
    run_playbook: Runner, local_inventory: Path, tmp_path: Path
) -> None:
    playbook = f"""
        - hosts: all
          gather_facts: false
          tasks:
            - block:
                - name: notify
                  copy: {write("a")}
                  notify: handle
                - name: fails
                  fail: {{msg: boom}}
              rescue:
                - debug: {{msg: rescued}}
            - name: notify again
              copy: {write("b")}
              notify: forced
            - name: unrescued
              fail: {{msg: stop}}
          handlers:
            - name: handle
              copy: {write("handled")}
            - name: forced
              copy: {write("forced")}
        """
    outcome = run_playbook(playbook, local_inventory)
    assert outcome.exit_code == 2
    assert not (tmp_path / "root" / "handled").exists()  # the host failed before the end
    (tmp_path / "root" / "a").unlink()
    (tmp_path / "root" / "b").unlink()
    forced = run_playbook(playbook, local_inventory, force_handlers=True)
    assert forced.status("handle") == "changed" and forced.status("forced") == "changed"


def test_start_at_task_skips_what_comes_before(
    run_playbook: Runner, local_inventory: Path, tmp_path: Path
) -> None:
    playbook = f"""
        - hosts: all
          gather_facts: false
          tasks:
            - name: one
              copy: {write("one")}
            - block:
                - name: two
                  copy: {write("two")}
                - name: three
                  copy: {write("three")}
        """
    outcome = run_playbook(playbook, local_inventory, start_at_task="two")
    assert outcome.exit_code == 0, outcome.stderr
    assert [e["task"] for e in outcome.results()] == ["two", "three"]
    assert not (tmp_path / "root" / "one").exists()
    with pytest.raises(InputError, match="--start-at-task: no task named 'twoo'"):
        check_start_at_task(load_playbook(tmp_path / "playbook.yml"), "twoo")


@pytest.mark.parametrize(
    ("task", "refused"),
    [
        ("{block: [{debug: {msg: x}}], loop: [1, 2]}", "'loop' on a block"),
        ("{rescue: [{debug: {msg: x}}]}", "'rescue' here"),
        ("{include_tasks: {file: x.yml, apply: {tags: [a]}}}", "'apply' of include_tasks"),
    ],
)
def test_what_blocks_cannot_carry_is_refused_at_load(
    tmp_path: Path, task: str, refused: str
) -> None:
    playbook = tmp_path / "play.yml"
    playbook.write_text(f"- hosts: all\n  tasks:\n    - {task}\n")
    with pytest.raises(InputError, match=f"not supported by glmops: {refused}"):
        load_playbook(playbook)


def test_a_block_in_handlers_is_refused_at_load(tmp_path: Path) -> None:
    playbook = tmp_path / "play.yml"
    playbook.write_text("- hosts: all\n  handlers:\n    - block: [{debug: {msg: x}}]\n")
    with pytest.raises(InputError, match="not supported by glmops: 'block' in handlers"):
        load_playbook(playbook)


def test_hosts_go_their_own_ways_through_a_block_and_an_include(
    run_playbook: Runner, tmp_path: Path
) -> None:
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / f"{name}.yml").write_text(
            f'- name: only {name}\n  shell: echo include-{name} >> "{{{{ out }}}}/log"\n'
        )
    inventory = local_hosts(
        tmp_path, {"all": ["a", "b"]}, host_vars=lambda name: {"out": f"{tmp_path}/{name}"}
    )
    outcome = run_playbook(
        """
        - hosts: all
          gather_facts: false
          tasks:
            - block:
                - name: fails on a
                  fail: {msg: a fails}
                  when: inventory_hostname == "a"
                - shell: echo block >> "{{ out }}/log"
              rescue:
                - shell: echo rescue >> "{{ out }}/log"
              always:
                - shell: echo always >> "{{ out }}/log"
            - include_tasks: "{{ inventory_hostname }}.yml"
        """,
        inventory,
    )
    assert outcome.exit_code == 0, outcome.stderr
    assert (tmp_path / "a" / "log").read_text().split() == ["rescue", "always", "include-a"]
    assert (tmp_path / "b" / "log").read_text().split() == ["block", "always", "include-b"]
    assert outcome.recap()["a"]["rescued"] == 1 and outcome.recap()["b"]["rescued"] == 0


def test_any_errors_fatal_waits_for_the_rescue(
    run_playbook: Runner, local_inventory: Path, tmp_path: Path
) -> None:
    outcome = run_playbook(
        f"""
        - hosts: all
          gather_facts: false
          any_errors_fatal: true
          tasks:
            - block:
                - fail: {{msg: boom}}
              rescue:
                - debug: {{msg: rescued}}
            - name: after
              copy: {write("after")}
            - block:
                - fail: {{msg: again}}
              rescue:
                - name: rescue fails
                  fail: {{msg: fatal now}}
            - name: never
              copy: {write("never")}
        """,
        local_inventory,
    )
    assert outcome.exit_code == 2
    assert (tmp_path / "root" / "after").exists()
    assert not (tmp_path / "root" / "never").exists()
    assert outcome.recap()["here"]["rescued"] == 2
