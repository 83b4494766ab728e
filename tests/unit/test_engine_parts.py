"""The engine's parts made on their own, as the Executor makes them (glmops/engine/executor.py): a
SessionPool and a TaskRunner over local-connection hosts, with no play loop around them. Each
part gets only what its constructor names; these tests hold them to that."""

from __future__ import annotations

import io
import signal
from pathlib import Path

import pytest

from glmops.engine.delegation import Delegates
from glmops.engine.inventory import load_inventory
from glmops.engine.output import Reporter
from glmops.engine.playbook import load_playbook
from glmops.engine.run_state import RunOptions, RunState
from glmops.engine.runlock import HostLocked
from glmops.engine.runlog import Masker, RunLog
from glmops.engine.sessions import SessionPool
from glmops.engine.task_run import TaskRunner
from tests.support.local_hosts import local_hosts

PLAYBOOK = """
- hosts: a
  gather_facts: false
  tasks:
    - name: here
      command: echo {{ inventory_hostname }}
      register: out
    - name: on b
      command: echo {{ inventory_hostname }}
      delegate_to: b
    - name: each
      shell: echo {{ item }} >> {{ root }}/items
      loop: [1, 2, 3]
"""


def new_state(tmp_path: Path) -> RunState:
    masker = Masker()
    stream = io.StringIO()
    reporter = Reporter(masker, json_events=True, stdout=stream, stderr=stream)
    return RunState(RunOptions(), reporter, masker, RunLog(tmp_path / "runs", masker))


@pytest.fixture
def parts(tmp_path: Path):
    """The inventory (hosts a, b), the play and a pool and runner sharing one state."""
    inventory = load_inventory(
        local_hosts(tmp_path, {"all": ["a", "b"]}, group_vars={"root": str(tmp_path)})
    )
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAYBOOK)
    play = load_playbook(playbook)[0]
    state = new_state(tmp_path)
    pool = SessionPool(state)
    runner = TaskRunner(state, pool, Delegates(inventory, pool), inventory)
    yield inventory, playbook, play, state, pool, runner
    pool.close()


def test_runner_runs_a_task_over_the_pools_session(parts, tmp_path: Path) -> None:
    inventory, playbook, play, state, pool, runner = parts
    session = pool.session(inventory.host("a"))
    assert pool.session(inventory.host("a")) is session, "one session per host"
    pool.connect(play, session)
    result = runner.run(play, playbook, session, play.tasks[0])
    assert result.changed and session.registered["out"]["stdout"].strip() == "a"
    assert session.tally.changed == 1 and state.running == {}


def test_delegated_task_joins_the_pool_but_is_no_target(parts) -> None:
    inventory, playbook, play, state, pool, runner = parts
    session = pool.session(inventory.host("a"))
    pool.connect(play, session)
    result = runner.run(play, playbook, session, play.tasks[1])
    assert result.delegate == "b" and result.data["stdout"].strip() == "a"
    assert set(pool.sessions) == {"a", "b"} and pool.sessions["b"].conn is not None
    assert pool.targets() == {}, "only the play loop makes a session a target"


def test_an_interrupt_in_the_state_stops_a_loop_between_items(parts, tmp_path: Path) -> None:
    inventory, playbook, play, state, pool, runner = parts
    session = pool.session(inventory.host("a"))
    pool.connect(play, session)
    state.interrupted = signal.SIGINT
    result = runner.run(play, playbook, session, play.tasks[2])
    assert result.data["results"] == [] and not (tmp_path / "items").exists()


def test_the_pool_holds_each_run_lock_until_closed(parts, tmp_path: Path) -> None:
    inventory, playbook, play, state, pool, runner = parts
    pool.connect(play, pool.session(inventory.host("a")))
    other = SessionPool(new_state(tmp_path))  # a second run on the same host
    with pytest.raises(HostLocked):
        other.connect(play, other.session(inventory.host("a")))
    pool.close()
    other.connect(play, other.session(inventory.host("a")))
    other.close()
