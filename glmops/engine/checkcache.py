"""One host's answers to its checks run ahead (glmops/engine/prefetch.py fills them, the task
context takes them): kept apart from the prefetch so the context needs only this store, not
the run machinery that fills it."""

from __future__ import annotations

import threading

from glmops.engine.connection import CommandResult


class CheckCache:
    """One host's answers to checks run ahead, by the command as the connection runs it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._answers: dict[str, list[CommandResult]] = {}

    def fill(self, answers: dict[str, list[CommandResult]]) -> None:
        with self._lock:
            self._answers = answers

    def take(self, command: str) -> CommandResult | None:
        """The answer to `command` run ahead, once; None when there is none (left)."""
        with self._lock:
            found = self._answers.get(command)
            return found.pop() if found else None

    def forget(self) -> None:
        """The host may have changed: no answer from before stands."""
        with self._lock:
            self._answers = {}

    def __len__(self) -> int:
        with self._lock:
            return sum(len(found) for found in self._answers.values())
