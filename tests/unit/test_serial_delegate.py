"""serial, max_fail_percentage, any_errors_fatal, run_once and delegate_to through the real
executor, on local-connection hosts (each with its own state folder, so each has its own run
lock); tests/testbed/test_fleet_engine.py repeats the key cases over real SSH."""

from __future__ import annotations

import fcntl
from pathlib import Path

import pytest

from glmops.errors import InputError
from tests.support.engine import Runner
from tests.support.local_hosts import local_hosts


@pytest.fixture
def fleet(tmp_path: Path) -> Path:
    """Hosts a..d and a router `lb`, all local, each with its state (and run lock) apart."""
    (tmp_path / "root").mkdir()
    return local_hosts(
        tmp_path,
        {"web": ["a", "b", "c", "d"], "router": ["lb"]},
        group_vars={"root": f"{tmp_path}/root"},
        host_vars=lambda name: {"colour": f"{name}-colour"},
    )


def lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


SERIAL = """
- hosts: {hosts}
  gather_facts: false
  serial: {serial}
  tasks:
    - name: one
      shell: echo {{{{ inventory_hostname }}}}:one >> {{{{ root }}}}/log
      notify: flush
    - name: two
      shell: echo {{{{ inventory_hostname }}}}:two >> {{{{ root }}}}/log
  handlers:
    - name: flush
      shell: echo {{{{ inventory_hostname }}}}:handler >> {{{{ root }}}}/log
"""


def test_serial_runs_batches_in_order_with_their_handlers(
    run_playbook: Runner, fleet: Path, tmp_path: Path
) -> None:
    outcome = run_playbook(SERIAL.format(hosts="web", serial="[1, 2]"), fleet)
    assert outcome.exit_code == 0, outcome.stderr
    log = lines(tmp_path / "root" / "log")
    assert log[:3] == ["a:one", "a:two", "a:handler"], log
    # batch 2 (b, c) runs task by task on both hosts: both `one`s before any `two`
    assert sorted(log[3:5]) == ["b:one", "c:one"] and sorted(log[5:7]) == ["b:two", "c:two"], log
    assert sorted(log[7:9]) == ["b:handler", "c:handler"] and log[9:] == [
        "d:one",
        "d:two",
        "d:handler",
    ]
    batches = [e for e in outcome.events if e["event"] == "batch"]
    assert [(e["index"], e["count"], e["hosts"]) for e in batches] == [
        (1, 3, ["a"]),
        (2, 3, ["b", "c"]),
        (3, 3, ["d"]),
    ]
    recap = next(e for e in outcome.events if e["event"] == "recap")
    assert recap["plays"][0]["batches"] == [["a"], ["b", "c"], ["d"]]
    assert recap["plays"][0]["stopped"] is None


def test_without_serial_every_host_finishes_a_task_before_the_next(
    run_playbook: Runner, fleet: Path, tmp_path: Path
) -> None:
    assert run_playbook(SERIAL.format(hosts="web", serial="null"), fleet).exit_code == 0
    log = lines(tmp_path / "root" / "log")
    assert {line.split(":")[1] for line in log[:4]} == {"one"}, log
    assert {line.split(":")[1] for line in log[4:8]} == {"two"}, log


FAIL_ON = """
- hosts: web
  gather_facts: false
  serial: {serial}
  max_fail_percentage: {limit}
  vars: {{me: "{{{{ inventory_hostname }}}}"}}
  tasks:
    - name: work
      shell: "echo {{{{ me }}}} >> {{{{ root }}}}/log; test {{{{ me }}}} != b"
"""


def test_max_fail_percentage_stops_the_roll(
    run_playbook: Runner, fleet: Path, tmp_path: Path
) -> None:
    outcome = run_playbook(FAIL_ON.format(serial=1, limit=30), fleet)
    assert outcome.exit_code == 2
    assert lines(tmp_path / "root" / "log") == ["a", "b"], "the roll went on past the failure"
    play = next(e for e in outcome.events if e["event"] == "recap")["plays"][0]
    assert play["stopped_by_batch"] == 2 and play["not_reached"] == ["c", "d"]
    assert "1 of 1" in play["stopped"] and "max_fail_percentage 30" in play["stopped"]


def test_max_fail_percentage_is_strictly_more(
    run_playbook: Runner, fleet: Path, tmp_path: Path
) -> None:
    # one of two hosts is 50%: not more than 50, so the roll goes on
    outcome = run_playbook(FAIL_ON.format(serial=2, limit=50), fleet)
    assert outcome.exit_code == 2
    assert sorted(lines(tmp_path / "root" / "log")) == ["a", "b", "c", "d"]
    play = next(e for e in outcome.events if e["event"] == "recap")["plays"][0]
    assert play["stopped"] is None
    assert outcome.recap()["b"]["failed"] == 1 and outcome.recap()["d"]["changed"] == 1


FATAL = """
- hosts: web
  gather_facts: false
  any_errors_fatal: {play_fatal}
  tasks:
    - name: first
      shell: echo {{{{ inventory_hostname }}}}:first >> {{{{ root }}}}/log
      notify: later
    - name: breaks
      shell: "test {{{{ inventory_hostname }}}} != b"
      any_errors_fatal: {task_fatal}
    - name: after
      shell: echo {{{{ inventory_hostname }}}}:after >> {{{{ root }}}}/log
  handlers:
    - name: later
      shell: echo {{{{ inventory_hostname }}}}:handler >> {{{{ root }}}}/log
"""


def test_any_errors_fatal_stops_every_host_after_the_task(
    run_playbook: Runner, fleet: Path, tmp_path: Path
) -> None:
    outcome = run_playbook(FATAL.format(play_fatal="false", task_fatal="true"), fleet)
    assert outcome.exit_code == 2
    log = lines(tmp_path / "root" / "log")
    assert sorted(log) == ["a:first", "b:first", "c:first", "d:first"], log
    play = next(e for e in outcome.events if e["event"] == "recap")["plays"][0]
    assert "any_errors_fatal: 'breaks' failed on b" in play["stopped"]
    # the handlers did not run, and their notifications stay for the next run
    assert "later" in (tmp_path / "state-a" / "pending-handlers.json").read_text()


def test_a_task_can_opt_out_of_the_plays_any_errors_fatal(
    run_playbook: Runner, fleet: Path, tmp_path: Path
) -> None:
    outcome = run_playbook(FATAL.format(play_fatal="true", task_fatal="false"), fleet)
    assert outcome.exit_code == 2
    log = lines(tmp_path / "root" / "log")
    assert {"a:after", "c:after", "d:after", "a:handler"} <= set(log) and "b:after" not in log


ONCE = """
- hosts: web
  gather_facts: false
  serial: {serial}
  vars: {{me: "{{{{ inventory_hostname }}}}"}}
  tasks:
    - name: once
      shell: echo {{{{ me }}}} >> {{{{ root }}}}/once; echo ran-on-{{{{ me }}}}
      run_once: true
      register: first
    - name: each
      shell: echo {{{{ inventory_hostname }}}}={{{{ first.stdout | trim }}}} >> {{{{ root }}}}/each
"""


@pytest.mark.parametrize(("serial", "ran_on"), [("null", ["a"]), ("2", ["a", "c"])])
def test_run_once_runs_once_per_batch_and_registers_for_all(
    run_playbook: Runner, fleet: Path, tmp_path: Path, serial: str, ran_on: list[str]
) -> None:
    outcome = run_playbook(ONCE.format(serial=serial), fleet)
    assert outcome.exit_code == 0, outcome.stderr
    assert lines(tmp_path / "root" / "once") == ran_on
    each = sorted(lines(tmp_path / "root" / "each"))
    first_of = {"a": "a", "b": "a", "c": ran_on[-1], "d": ran_on[-1]}
    assert each == [f"{h}=ran-on-{first_of[h]}" for h in "abcd"]
    assert all(outcome.recap()[h]["changed"] == 2 for h in "abcd")


def test_a_failed_run_once_fails_the_whole_batch(run_playbook: Runner, fleet: Path) -> None:
    outcome = run_playbook(
        """
    - hosts: web
      gather_facts: false
      tasks:
        - {name: once, command: "false", run_once: true}
        - {name: never, command: "true"}
    """,
        fleet,
    )
    assert outcome.exit_code == 2
    assert all(outcome.recap()[h]["failed"] == 1 for h in "abcd")
    assert not [e for e in outcome.results() if e["task"] == "never"]


DELEGATE = """
- hosts: a,b
  gather_facts: false
  vars: {{me: "{{{{ inventory_hostname }}}}"}}
  tasks:
    - name: tell the router
      copy: {{dest: "{{{{ root }}}}/router-{{{{ me }}}}", content: "{{{{ colour }}}}\\n"}}
      delegate_to: lb
      register: told
      run_once: {once}
    - name: what was told
      copy: {{dest: "{{{{ root }}}}/told-{{{{ me }}}}", content: "{{{{ told.failed }}}}\\n"}}
"""


def test_delegate_to_runs_on_the_delegate_with_the_hosts_variables(
    run_playbook: Runner, fleet: Path, tmp_path: Path
) -> None:
    root = tmp_path / "root"
    outcome = run_playbook(DELEGATE.format(once="false"), fleet)
    assert outcome.exit_code == 0, outcome.stderr
    assert (root / "router-a").read_text() == "a-colour\n"
    assert (root / "router-b").read_text() == "b-colour\n"
    told = [e for e in outcome.results() if e["task"] == "tell the router"]
    assert sorted((e["host"], e["delegate"]) for e in told) == [("a", "lb"), ("b", "lb")]
    assert (root / "told-a").read_text() == "False\n", "the result did not register for a"
    assert "a -> lb" in outcome.stderr
    # the run took the delegate's run lock (its state folder), and nobody counts lb as a host
    assert (tmp_path / "state-lb" / "run-lb.lock").exists()
    assert set(outcome.recap()) == {"a", "b"}
    again = run_playbook(DELEGATE.format(once="false"), fleet)
    assert again.exit_code == 0 and again.changed() == 0, again.results()


def test_delegate_to_with_run_once_acts_once(
    run_playbook: Runner, fleet: Path, tmp_path: Path
) -> None:
    outcome = run_playbook(DELEGATE.format(once="true"), fleet)
    assert outcome.exit_code == 0, outcome.stderr
    assert sorted(p.name for p in (tmp_path / "root").glob("router-*")) == ["router-a"]
    assert (tmp_path / "root" / "told-b").read_text() == "False\n"


def test_check_mode_holds_for_delegated_tasks(
    run_playbook: Runner, fleet: Path, tmp_path: Path
) -> None:
    outcome = run_playbook(DELEGATE.format(once="false"), fleet, check=True)
    assert outcome.exit_code == 3
    assert not list((tmp_path / "root").iterdir()), "check mode wrote on the delegate"
    assert not (tmp_path / "state-lb").exists(), "check mode took the delegate's lock"


def test_a_delegate_another_run_holds_fails_that_task_only(
    run_playbook: Runner, fleet: Path, tmp_path: Path
) -> None:
    state = tmp_path / "state-lb"
    state.mkdir()
    with open(state / "run-lb.lock", "w") as held:  # another run holds the router
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        outcome = run_playbook(DELEGATE.format(once="false"), fleet)
    assert outcome.exit_code == 2
    told = [e for e in outcome.results() if e["task"] == "tell the router"]
    assert {e["status"] for e in told} == {"failed"}
    assert all("another glmops run is changing this host" in e["msg"] for e in told)
    assert not (tmp_path / "root" / "router-a").exists()


def test_an_unknown_delegate_is_refused_before_any_host_is_touched(
    run_playbook: Runner, fleet: Path, tmp_path: Path
) -> None:
    text = """
    - hosts: web
      gather_facts: false
      tasks:
        - {name: first, command: "touch {{ root }}/touched"}
        - {name: tell, command: "true", delegate_to: lbb}
    """
    with pytest.raises(InputError, match=r"playbook.yml:6: task 'tell': delegate_to 'lbb'"):
        run_playbook(text, fleet)
    assert not (tmp_path / "root" / "touched").exists()


def test_a_templated_unknown_delegate_fails_its_task(run_playbook: Runner, fleet: Path) -> None:
    outcome = run_playbook(
        """
    - hosts: a
      gather_facts: false
      tasks:
        - {name: tell, command: "true", delegate_to: "{{ inventory_hostname }}x"}
    """,
        fleet,
    )
    assert outcome.exit_code == 2
    assert "delegate_to 'ax' is no host of the inventory" in outcome.results()[0]["msg"]


def test_delegate_to_localhost_is_the_controller_and_loops_say_so(
    run_playbook: Runner, fleet: Path, tmp_path: Path
) -> None:
    outcome = run_playbook(
        """
    - hosts: a
      gather_facts: false
      tasks:
        - name: ask the controller
          command: "echo {{ item }}-{{ colour }}"
          loop: [x, y]
          delegate_to: localhost
          check_mode: false
          changed_when: false
          register: asked
        - {name: show, debug: {msg: "{{ asked.results | map(attribute='stdout') | list }}"}}
    """,
        fleet,
        check=True,  # no run lock: the implicit localhost keeps no state under tmp_path
    )
    assert outcome.exit_code == 0, outcome.stderr
    asked = next(e for e in outcome.results() if e["task"] == "ask the controller")
    assert (asked["host"], asked["delegate"]) == ("a", "localhost")
    assert (
        "x-a-colour" in outcome.results()[-1]["msg"]
        and "y-a-colour" in outcome.results()[-1]["msg"]
    )


def test_list_hosts_shows_the_batches(fleet: Path, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from glmops.cli.main import main

    play = tmp_path / "roll.yml"
    play.write_text("- hosts: web\n  serial: [1, '50%']\n  tasks: [{command: 'true'}]\n")
    result = CliRunner().invoke(main, ["run", str(play), "-i", str(fleet), "--list-hosts"])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[1:] == [
        "  batch 1/3: a",
        "  batch 2/3: b, c",
        "  batch 3/3: d",
    ]
