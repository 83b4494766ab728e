"""The executor on its own: the task loop over hosts, when/register/notify/handlers, a failed
host stopping alone, check mode. Through its public surface (`Executor.run` with a playbook and
an inventory, the JSON events and exit code), on local hosts."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.engine import Runner
from tests.support.local_hosts import local_hosts


@pytest.fixture
def two_hosts(tmp_path: Path) -> Path:
    """Two local hosts, each with a folder of its own and its own state dir (run lock)."""
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    return local_hosts(
        tmp_path, {"all": ["a", "b"]}, host_vars=lambda name: {"out": f"{tmp_path}/{name}"}
    )


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_tasks_run_in_order_on_every_host(
    run_playbook: Runner, two_hosts: Path, tmp_path: Path
) -> None:
    outcome = run_playbook(
        """
        - hosts: all
          gather_facts: false
          tasks:
            - shell: echo one >> {{ out }}/log
            - shell: echo two-{{ inventory_hostname }} >> {{ out }}/log
        """,
        two_hosts,
    )
    assert outcome.exit_code == 0, outcome.stderr
    assert lines(tmp_path / "a" / "log") == ["one", "two-a"]
    assert lines(tmp_path / "b" / "log") == ["one", "two-b"]
    assert outcome.recap() == {
        h: {
            "ok": 0,
            "changed": 2,
            "failed": 0,
            "unreachable": 0,
            "skipped": 0,
            "ignored": 0,
            "rescued": 0,
        }
        for h in ("a", "b")
    }


def test_register_feeds_when_and_a_false_when_skips(run_playbook: Runner, two_hosts: Path) -> None:
    outcome = run_playbook(
        """
        - hosts: all
          gather_facts: false
          tasks:
            - name: answer
              shell: echo {{ 42 if inventory_hostname == 'a' else 43 }}
              register: answer
            - name: only where 42
              debug: {msg: "got {{ answer.stdout_lines[0] }}"}
              when: answer.stdout_lines == ['42']
        """,
        two_hosts,
    )
    assert outcome.exit_code == 0, outcome.stderr
    assert outcome.status("only where 42", "a") == "ok", outcome.results()
    assert outcome.status("only where 42", "b") == "skipped"
    assert outcome.recap()["b"]["skipped"] == 1


HANDLERS = """
- hosts: all
  gather_facts: false
  tasks:
    - name: first
      copy: {dest: "{{ out }}/one", content: "1\\n"}
      notify: record
    - name: second
      copy: {dest: "{{ out }}/two", content: "2\\n"}
      notify: record
    - name: unchanged
      debug: {msg: nothing}
      notify: other
    - name: last task
      shell: echo task >> {{ out }}/order
      changed_when: false
  handlers:
    - name: record
      shell: echo handler >> {{ out }}/order
    - name: other
      shell: echo other >> {{ out }}/order
"""


def test_a_handler_runs_once_after_the_tasks_and_only_when_notified_by_a_change(
    run_playbook: Runner, two_hosts: Path, tmp_path: Path
) -> None:
    first = run_playbook(HANDLERS, two_hosts)
    assert first.exit_code == 0, first.stderr
    for host in ("a", "b"):  # notified twice, run once, after every task; `other` never
        assert lines(tmp_path / host / "order") == ["task", "handler"]
    again = run_playbook(HANDLERS, two_hosts)
    assert again.exit_code == 0 and again.changed() == 0, again.results()
    assert lines(tmp_path / "a" / "order") == ["task", "handler", "task"]


def test_a_failed_host_stops_alone_and_the_others_finish(
    run_playbook: Runner, two_hosts: Path, tmp_path: Path
) -> None:
    outcome = run_playbook(
        """
        - hosts: all
          gather_facts: false
          tasks:
            - name: changes
              copy: {dest: "{{ out }}/file", content: "x\\n"}
              notify: record
            - name: breaks on a
              shell: exit {{ 3 if inventory_hostname == 'a' else 0 }}
              changed_when: false
            - name: after
              shell: echo after >> {{ out }}/log
          handlers:
            - name: record
              shell: echo handler >> {{ out }}/log
        """,
        two_hosts,
    )
    assert outcome.exit_code == 2
    assert outcome.status("breaks on a", "a") == "failed"
    assert not [e for e in outcome.results("a") if e["task"] in ("after", "record")]
    assert lines(tmp_path / "a" / "log") == []
    assert lines(tmp_path / "b" / "log") == ["after", "handler"]
    assert outcome.recap()["a"]["failed"] == 1 and outcome.recap()["b"]["failed"] == 0


def test_ignore_errors_goes_on(run_playbook: Runner, two_hosts: Path, tmp_path: Path) -> None:
    outcome = run_playbook(
        """
        - hosts: all
          gather_facts: false
          tasks:
            - {name: breaks, shell: exit 1, ignore_errors: true}
            - {name: after, shell: "echo after >> {{ out }}/log"}
        """,
        two_hosts,
    )
    assert outcome.exit_code == 0, outcome.stderr
    assert lines(tmp_path / "a" / "log") == ["after"]
    assert outcome.recap()["a"]["ignored"] == 1


def test_check_mode_reports_what_would_change_and_changes_nothing(
    run_playbook: Runner, two_hosts: Path, tmp_path: Path
) -> None:
    play = """
        - hosts: all
          gather_facts: false
          tasks:
            - name: config
              copy: {dest: "{{ out }}/config", content: "port=1\\n"}
              notify: record
            - name: command
              command: touch {{ out }}/touched
          handlers:
            - name: record
              shell: echo handler >> {{ out }}/log
        """
    outcome = run_playbook(play, two_hosts, check=True)
    assert outcome.exit_code == 3  # --check found changes
    assert outcome.status("config", "a") == "changed"
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == []
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == []
    applied = run_playbook(play, two_hosts)
    assert applied.exit_code == 0 and (tmp_path / "a" / "config").read_text() == "port=1\n"
    assert lines(tmp_path / "a" / "log") == ["handler"]
