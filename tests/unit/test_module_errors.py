"""Expected module failures (ModuleError) read as one clean line; any other exception is a bug
and says so, with its traceback in the run log and on stderr under -vv."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from glmops.errors import ModuleError
from glmops.modules.base import REGISTRY, Arg, Module, Plan
from tests.support.engine import Runner


class _Broken(Module):
    """Fails the way its `kind` says: expected (ModuleError) or a bug (a bad unpack)."""

    name = "broken_for_test"
    args = {"kind": Arg(str, required=True)}

    def plan(self, ctx) -> Plan:
        if self.params["kind"] == "expected":
            raise ModuleError("the model folder is missing")
        first, second = ["only-one"]  # a real bug: ValueError from a wrong unpack
        return Plan(False, first + second)


@pytest.fixture
def broken(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(REGISTRY, _Broken.name, _Broken)


PLAY = """
- hosts: all
  gather_facts: false
  tasks:
    - name: fails
      broken_for_test: {kind: KIND}
"""


def test_an_expected_failure_is_one_clean_line(
    broken: None, run_playbook: Runner, local_inventory: Path
) -> None:
    outcome = run_playbook(PLAY.replace("KIND", "expected"), local_inventory)
    assert outcome.exit_code == 2
    assert outcome.results()[0]["msg"] == "the model folder is missing"


def test_a_bug_is_reported_as_one_with_its_traceback(
    broken: None, run_playbook: Runner, local_inventory: Path
) -> None:
    outcome = run_playbook(PLAY.replace("KIND", "bug"), local_inventory)
    assert outcome.exit_code == 2
    msg = outcome.results()[0]["msg"]
    assert msg.startswith("internal error in module 'broken_for_test': ValueError"), msg
    log = "".join(p.read_text() for p in outcome.run_dir.glob("*.log"))
    assert "Traceback" in log and "first, second = " in log


def test_minus_vv_shows_the_traceback(broken: None) -> None:
    from glmops.engine.output import Reporter
    from glmops.engine.results import Status, TaskResult
    from glmops.engine.runlog import Masker

    err = io.StringIO()
    reporter = Reporter(Masker(), verbosity=2, stdout=io.StringIO(), stderr=err)
    trace = "Traceback (most recent call last):\n  boom\nValueError: x"
    reporter.task("h", "t", TaskResult(Status.FAILED, "internal error", data={"traceback": trace}))
    assert "Traceback (most recent call last)" in err.getvalue()
