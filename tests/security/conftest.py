"""The hostile-input suite's tally: every case records what it tried and whether it got through.

A case calls `hostile.tried(name)` for each payload it sends and `hostile.got_through(name, why)`
when a defence failed (the test then fails too); the session ends with one line,
`hostile inputs: N tried, M got through`, which CI's log keeps.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest


@dataclass
class HostileTally:
    names: list[str] = field(default_factory=list)
    breaches: list[str] = field(default_factory=list)

    def tried(self, name: str) -> None:
        self.names.append(name)

    def got_through(self, name: str, why: str) -> None:
        self.breaches.append(f"{name}: {why}")

    def check(self, name: str, ok: bool, why: str) -> None:
        """Record one payload: `ok` says the defence held; a breach fails the calling test."""
        self.tried(name)
        if not ok:
            self.got_through(name, why)
        assert ok, f"hostile input got through: {name}: {why}"


_TALLY = HostileTally()


@pytest.fixture
def hostile() -> Iterator[HostileTally]:
    yield _TALLY


@pytest.fixture(autouse=True)
def glmops_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """glmops' home (known hosts, the router's admin keys) of each case's own."""
    monkeypatch.setenv("GLMOPS_HOME", str(tmp_path / "glmops-home"))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _TALLY.names:
        terminalreporter.write_line(
            f"hostile inputs: {len(_TALLY.names)} tried, {len(_TALLY.breaches)} got through"
        )
        for breach in _TALLY.breaches:
            terminalreporter.write_line(f"  got through: {breach}")
