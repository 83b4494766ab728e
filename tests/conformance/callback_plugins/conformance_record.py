"""An ansible-core callback that writes what the conformance runner compares: each task's
status per host (in order) and the recap, as JSON to $CONFORMANCE_RECORD.

ansible-core 2.19 ships no JSON stdout callback, so the runner enables this one beside the
default output (ANSIBLE_CALLBACK_PLUGINS + ANSIBLE_CALLBACKS_ENABLED).
"""

from __future__ import annotations

import json
import os

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: conformance_record
type: aggregate
short_description: task statuses and recap as JSON, for tests/conformance
description: Writes each task's status and the recap to the file named by CONFORMANCE_RECORD.
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "conformance_record"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        self.tasks: list[dict] = []

    def _add(self, result, status: str, ignored: bool = False) -> None:
        items = result._result.get("results") if isinstance(result._result, dict) else None
        self.tasks.append(
            {
                "host": result._host.get_name(),
                "task": result._task.get_name(),
                "status": status,
                "ignored": ignored,
                "items": len(items) if isinstance(items, list) else None,
            }
        )

    def v2_runner_on_ok(self, result) -> None:
        self._add(result, "changed" if result._result.get("changed") else "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False) -> None:
        self._add(result, "failed", ignored=bool(ignore_errors))

    def v2_runner_on_skipped(self, result) -> None:
        self._add(result, "skipped")

    def v2_runner_on_unreachable(self, result) -> None:
        self._add(result, "unreachable")

    def v2_playbook_on_stats(self, stats) -> None:
        recap = {host: stats.summarize(host) for host in sorted(stats.processed)}
        with open(os.environ["CONFORMANCE_RECORD"], "w") as out:
            json.dump({"tasks": self.tasks, "recap": recap}, out)
