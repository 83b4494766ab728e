"""What a task did on a host, and the per-host tally that becomes the recap."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Status(StrEnum):
    OK = "ok"
    CHANGED = "changed"
    FAILED = "failed"
    SKIPPED = "skipped"
    UNREACHABLE = "unreachable"


@dataclass
class TaskResult:
    """One task's outcome on one host. `msg` always says why, including for a no-op."""

    status: Status
    msg: str = ""
    diff: str | None = None
    data: dict[str, Any] = field(default_factory=dict)
    ignored: bool = False
    #: The host the task ran on for this one (`delegate_to`), when not this one.
    delegate: str | None = None

    @property
    def changed(self) -> bool:
        return self.status is Status.CHANGED

    @property
    def failed(self) -> bool:
        return self.status in (Status.FAILED, Status.UNREACHABLE)

    def registered(self) -> dict[str, Any]:
        """The value `register:` stores: data plus status flags, as Ansible users expect."""
        return {
            **self.data,
            "changed": self.changed,
            "failed": self.failed,
            "skipped": self.status is Status.SKIPPED,
            "status": self.status.value,
            "msg": self.msg,
        }


@dataclass
class HostTally:
    ok: int = 0
    changed: int = 0
    failed: int = 0
    skipped: int = 0
    unreachable: int = 0
    ignored: int = 0
    #: Failures a block's `rescue` took over (not counted as failed, as in Ansible).
    rescued: int = 0

    def count(self, result: TaskResult) -> None:
        if result.ignored:
            self.ignored += 1
            return
        setattr(self, result.status.value, getattr(self, result.status.value) + 1)


@dataclass
class PlayRecap:
    """How a play went through its hosts: its batches, and whether (and why) it stopped."""

    name: str
    batches: list[list[str]]
    #: Why the play stopped early (a batch over max_fail_percentage, any_errors_fatal).
    stopped: str | None = None
    #: Which batch stopped it (1-based).
    stopped_by_batch: int | None = None
    #: Hosts of later batches, never reached because the play stopped.
    not_reached: list[str] = field(default_factory=list)

    def event(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "batches": self.batches,
            "stopped": self.stopped,
            "stopped_by_batch": self.stopped_by_batch,
            "not_reached": self.not_reached,
        }
