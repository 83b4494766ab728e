"""What a converged host costs: the commands a no-op run sends each host of a 10-task play,
counted on the real (local) connection. After connecting, at most two: the play's start (run
lock, pending notifications, facts) and one probe with every task's check; one when the play
gathers no facts (the checks ride with the start)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from glmops.engine import connection
from tests.support.engine import Runner
from tests.support.local_hosts import local_hosts

PLAY = """
- hosts: all
  gather_facts: true
  tasks:
    - file: {path: "{{ out }}/etc", state: directory, mode: "0755"}
    - file: {path: "{{ out }}/lib", state: directory}
    - copy: {dest: "{{ out }}/etc/a.conf", content: "a={{ inventory_hostname }}\\n"}
    - copy: {dest: "{{ out }}/etc/b.conf", content: "b\\n", mode: "0640"}
    - template: {src: "{{ tpl }}", dest: "{{ out }}/etc/unit.service"}
      notify: reload
    - template: {src: "{{ tpl }}", dest: "{{ out }}/lib/unit.copy"}
    - lineinfile: {path: "{{ out }}/etc/d.conf", line: "b=2", create: true}
    - lineinfile: {path: "{{ out }}/lib/e.conf", line: "c=3", create: true}
    - file: {path: "{{ out }}/lib/link", state: link, src: "{{ out }}/etc/a.conf"}
    - copy: {dest: "{{ out }}/lib/c.conf", content: "{{ facts.os.id | default('x') }}\\n"}
  handlers:
    - name: reload
      shell: echo reloaded >> {{ out }}/reloads
"""


@pytest.fixture
def hosts(tmp_path: Path) -> Path:
    (tmp_path / "unit.j2").write_text("[Service]\nExecStart=/bin/true {{ inventory_hostname }}\n")
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    return local_hosts(
        tmp_path,
        {"all": ["a", "b"]},
        host_vars=lambda name: {"out": f"{tmp_path}/{name}", "tpl": f"{tmp_path}/unit.j2"},
    )


@pytest.mark.parametrize(("gather", "most"), [(True, 2), (False, 1)])
def test_a_converged_host_costs_two_round_trips_after_connecting(
    run_playbook: Runner, hosts: Path, monkeypatch: pytest.MonkeyPatch, gather: bool, most: int
) -> None:
    play = PLAY if gather else PLAY.replace("gather_facts: true", "gather_facts: false")
    play = play if gather else play.replace("facts.os.id | default('x')", "inventory_hostname")
    first = run_playbook(play, hosts)
    assert first.exit_code == 0, first.stderr
    assert first.changed() > 0

    sent: Counter[str] = Counter()
    run, hold = connection.LocalConnection.run, connection.LocalConnection.hold

    def counted_run(self, command, **kwargs):  # type: ignore[no-untyped-def]
        sent[self.host] += 1
        return run(self, command, **kwargs)

    def counted_hold(self, command, **kwargs):  # type: ignore[no-untyped-def]
        sent[self.host] += 1
        return hold(self, command, **kwargs)

    monkeypatch.setattr(connection.LocalConnection, "run", counted_run)
    monkeypatch.setattr(connection.LocalConnection, "hold", counted_hold)
    again = run_playbook(play, hosts)
    assert again.exit_code == 0, again.stderr
    assert again.changed() == 0, again.results()
    assert all(e["status"] == "ok" for e in again.results()), again.results()
    connect = 1  # who and where we are on the host (uid, home)
    after_connecting = {host: count - connect for host, count in sent.items()}
    assert set(after_connecting) == {"a", "b"}
    assert all(count <= most for count in after_connecting.values()), after_connecting


def test_a_change_drops_the_checks_run_ahead_so_later_tasks_see_it(
    run_playbook: Runner, hosts: Path, tmp_path: Path
) -> None:
    """The second task's check was run ahead, before the first wrote the file: it must look
    again, or it would edit a file it thinks missing."""
    outcome = run_playbook(
        """
        - hosts: a
          gather_facts: false
          tasks:
            - copy: {dest: "{{ out }}/f", content: "first\\n"}
            - lineinfile: {path: "{{ out }}/f", line: "second", create: true}
            - copy: {dest: "{{ out }}/f", content: "first\\nsecond\\n"}
        """,
        hosts,
    )
    assert outcome.exit_code == 0, outcome.stderr
    assert (tmp_path / "a" / "f").read_text() == "first\nsecond\n"
    assert [e["status"] for e in outcome.results("a")] == ["changed", "changed", "ok"]
