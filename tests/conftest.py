"""Shared fixtures: run playbooks through the real engine and read back what happened; and the
time each test tier took, printed at the end of a run."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from tests.support.engine import Runner, playbook_runner


@pytest.fixture
def run_playbook(tmp_path: Path) -> Runner:
    """Run playbook text against an inventory file; returns exit code, events and stderr."""
    return playbook_runner(tmp_path)


@pytest.fixture
def local_inventory(tmp_path: Path) -> Path:
    path = tmp_path / "hosts.yml"
    path.write_text(
        f"all:\n  vars: {{root: '{tmp_path}/root', state_dir: '{tmp_path}/state'}}\n"
        "  hosts:\n    here: {connection: local}\n"
    )
    (tmp_path / "root").mkdir()
    return path


#: The test tiers: each is a folder under tests/ (conftest's own folder).
TIERS = ("unit", "security", "conformance", "patchset", "testbed", "gpu", "host")
_TIER_SECONDS: dict[str, float] = defaultdict(float)
_TIER_TESTS: dict[str, int] = defaultdict(int)


def tier_of(nodeid: str) -> str:
    """tests/unit/test_x.py::test_y -> unit."""
    parts = nodeid.split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "tests" and parts[1] in TIERS else "other"


def pytest_runtest_logreport(report: Any) -> None:
    """Sum each test's setup, call and teardown time into its tier."""
    tier = tier_of(report.nodeid)
    _TIER_SECONDS[tier] += report.duration
    if report.when == "call" or (report.when == "setup" and report.skipped):
        _TIER_TESTS[tier] += 1


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """One line per tier that ran: tests and seconds (CI's budget is 50 minutes in all)."""
    if not _TIER_SECONDS:
        return
    terminalreporter.section("time per tier")
    for tier in sorted(_TIER_SECONDS, key=lambda t: -_TIER_SECONDS[t]):
        seconds = _TIER_SECONDS[tier]
        terminalreporter.write_line(
            f"{tier:<12} {_TIER_TESTS[tier]:>5} tests {seconds:>9.1f} s ({seconds / 60:.1f} min)"
        )
    total = sum(_TIER_SECONDS.values())
    terminalreporter.write_line(f"{'total':<12} {'':>11} {total:>9.1f} s ({total / 60:.1f} min)")
