"""The Ansible conformance suite's tally: each playbook run by ansible-core and by glmops.

A case calls `conformance.record(name, identical, differences)`; the session ends with
`ansible conformance: N playbooks, M identical`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest


@dataclass
class ConformanceTally:
    results: dict[str, list[str]] = field(default_factory=dict)

    def record(self, name: str, differences: list[str]) -> None:
        self.results[name] = differences


_TALLY = ConformanceTally()


@pytest.fixture
def conformance() -> ConformanceTally:
    return _TALLY


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _TALLY.results:
        same = sum(1 for diffs in _TALLY.results.values() if not diffs)
        terminalreporter.write_line(
            f"ansible conformance: {len(_TALLY.results)} playbooks, {same} identical"
        )
