"""Run playbooks through the real engine and read back what happened (the `run_playbook`
fixture's runner)."""

from __future__ import annotations

import io
import json
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class RunOutcome:
    exit_code: int
    events: list[dict[str, Any]]
    stderr: str
    run_dir: Path

    def results(self, host: str | None = None) -> list[dict[str, Any]]:
        return [
            e
            for e in self.events
            if e["event"] in ("task", "handler") and (host is None or e["host"] == host)
        ]

    def status(self, task: str, host: str | None = None) -> str:
        matches = [e["status"] for e in self.results(host) if e["task"] == task]
        assert matches, f"task {task!r} did not report (events: {self.results(host)})"
        return matches[-1]

    def recap(self) -> dict[str, dict[str, int]]:
        return next(e for e in self.events if e["event"] == "recap")["hosts"]

    def changed(self) -> int:
        return sum(h["changed"] for h in self.recap().values())


Runner = Callable[..., RunOutcome]


def playbook_runner(tmp_path: Path) -> Runner:
    """Run playbook text against an inventory file; returns exit code, events and stderr."""
    # Imported here so that test tiers without glmops' dependencies (the GPU machine has no
    # fabric) can still collect with this conftest.
    from glmops.engine.connection import ConnectionSettings
    from glmops.engine.executor import Executor, RunOptions
    from glmops.engine.inventory import load_inventory, parse_extra_vars
    from glmops.engine.output import Reporter
    from glmops.engine.playbook import load_playbook
    from glmops.engine.runlog import Masker, RunLog

    def run(
        playbook_text: str,
        inventory: Path,
        *,
        check: bool = False,
        diff: bool = False,
        limit: str | None = None,
        extra: list[str] | None = None,
        tags: set[str] | None = None,
        skip_tags: set[str] | None = None,
        sudo_password: str | None = None,
        strict: bool = False,
        forks: int | None = None,
        name: str = "playbook.yml",
        start_at_task: str | None = None,
        force_handlers: bool = False,
    ) -> RunOutcome:
        playbook = tmp_path / name
        playbook.write_text(textwrap.dedent(playbook_text))
        extra_vars = parse_extra_vars(extra or [])
        masker = Masker({sudo_password} if sudo_password else set())
        stdout, stderr = io.StringIO(), io.StringIO()
        reporter = Reporter(masker, json_events=True, check=check, stdout=stdout, stderr=stderr)
        options = RunOptions(
            check=check,
            diff=diff,
            limit=limit,
            extra_vars=extra_vars,
            tags=tags or set(),
            skip_tags=skip_tags or set(),
            sudo_password=sudo_password,
            forks=forks,
            start_at_task=start_at_task,
            force_handlers=force_handlers,
            connection=ConnectionSettings(
                known_hosts=tmp_path / "known_hosts", strict_host_keys=strict
            ),
        )
        runlog = RunLog(tmp_path / "runs", masker)
        executor = Executor(
            load_inventory(inventory, extra_vars), options, reporter, masker, runlog
        )
        code = executor.run(load_playbook(playbook), playbook)
        events = [json.loads(line) for line in stdout.getvalue().splitlines()]
        return RunOutcome(int(code), events, stderr.getvalue(), runlog.path)

    return run
