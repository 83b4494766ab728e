"""The run facade: a request in, a typed result out, for every verb that runs something.

The CLI (`glmops run` and the playbook verbs), `glmops up`'s phases, the fleet's rolling deploy
and `glmops model` all run through here, so a run is wired (masker, reporter, run log) in one
place (`open_output`), ends with one exit-code rule (engine.results.exit_code), and tells its
caller what happened on each host (`RunResult`) without anyone watching the reporter.

Layering: above the engine, the model phase and the fleet; below the CLI. It never prints a
report of its own beyond what the engine's reporter prints.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from glmops.engine.connection import ConnectionSettings
from glmops.engine.executor import Executor, RunOptions
from glmops.engine.inventory import Inventory
from glmops.engine.inventory import load_inventory as read_inventory
from glmops.engine.output import Reporter
from glmops.engine.playbook import Play, load_playbook
from glmops.engine.results import HostTally, PlayRecap, TaskResult, exit_code
from glmops.engine.run_state import default_run_root
from glmops.engine.runlog import Masker, RunLog
from glmops.engine.unsafe import mark_unsafe
from glmops.fleet.topology import add_replica_vars, serving_hosts

if TYPE_CHECKING:
    from glmops.fleet.roll import Runner, RunOutcome
    from glmops.model.phase import ModelOptions


def load_inventory(
    path: Path,
    extra_vars: dict[str, Any] | None = None,
    connection_defaults: Mapping[str, Any] | None = None,
) -> Inventory:
    """The inventory as a run sees it: the file (engine.inventory, with -u/-c/-b where a host
    sets none) and what the fleet derives from it (every host's `fleet_replica`)."""
    inventory = read_inventory(path, extra_vars, dict(connection_defaults or {}))
    add_replica_vars(inventory)
    return inventory


@dataclass
class RunOutput:
    """Where one run's output goes: secrets masked, events reported, commands logged."""

    masker: Masker
    reporter: Reporter
    runlog: RunLog


def open_output(
    *,
    sudo_password: str | None = None,
    verbosity: int = 0,
    json_events: bool = False,
    check: bool = False,
    explain: bool = False,
    run_root: Path | None = None,
    stdout: TextIO | None = None,
) -> RunOutput:
    """The one wiring of a run's output: the sudo password is a secret from the start."""
    masker = Masker({sudo_password} if sudo_password else set())
    reporter = Reporter(
        masker,
        verbosity=verbosity,
        json_events=json_events,
        check=check,
        explain=explain,
        stdout=stdout,
    )
    return RunOutput(masker, reporter, RunLog(run_root or default_run_root(), masker))


@dataclass(frozen=True)
class RunRequest:
    """One playbook run: what to run, where, and how (the run options of every verb)."""

    playbook: Path
    inventory: Path
    limit: str | None = None
    extra_vars: Mapping[str, Any] = field(default_factory=dict)
    check: bool = False
    diff: bool = False
    forks: int | None = None
    tags: frozenset[str] = frozenset()
    skip_tags: frozenset[str] = frozenset()
    sudo_password: str | None = None
    strict_host_keys: bool = False
    verbosity: int = 0
    json_events: bool = False
    explain: bool = False
    #: Set on every play, as if its file said so (the fleet's `serial`, max_fail_percentage).
    play_settings: Mapping[str, Any] = field(default_factory=dict)
    #: Extra variables that are data (what an earlier phase found, such as the model files'
    #: paths from the Hub): marked untrusted, never rendered.
    data_vars: Mapping[str, Any] = field(default_factory=dict)
    #: Where a host's inventory sets none: -u (user), -c (connection), -b (become).
    connection_defaults: Mapping[str, Any] = field(default_factory=dict)
    start_at_task: str | None = None
    force_handlers: bool = False

    def variables(self) -> dict[str, Any]:
        """The run's extra variables: -e's (templates) and the data ones (never rendered)."""
        return {**self.extra_vars, **mark_unsafe(dict(self.data_vars))}

    def options(self) -> RunOptions:
        return RunOptions(
            check=self.check,
            diff=self.diff,
            forks=self.forks,
            limit=self.limit,
            tags=set(self.tags),
            skip_tags=set(self.skip_tags),
            extra_vars=self.variables(),
            sudo_password=self.sudo_password,
            connection=ConnectionSettings(strict_host_keys=self.strict_host_keys),
            start_at_task=self.start_at_task,
            force_handlers=self.force_handlers,
        )


@dataclass
class HostOutcome:
    """What a run did on one host."""

    status: str  # ok | changed | failed | unreachable | skipped
    changed: int = 0
    #: The first task that failed there (not ignored), and why (masked).
    failed_task: str = ""
    why: str = ""
    #: What the run hands on (the model phase: where the files landed).
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def stops(self) -> bool:
        return self.status in ("failed", "unreachable")


@dataclass
class RunResult:
    """A finished run: its exit code, each host's outcome, and how its plays went."""

    code: int
    hosts: dict[str, HostOutcome] = field(default_factory=dict)
    plays: list[PlayRecap] = field(default_factory=list)

    @property
    def failed(self) -> dict[str, HostOutcome]:
        """The hosts that failed or were unreachable."""
        return {name: o for name, o in self.hosts.items() if o.stops}

    @property
    def stopped(self) -> str | None:
        """Why the engine stopped a play early, if it did."""
        return next((p.stopped for p in self.plays if p.stopped), None)


def _outcome(tally: HostTally, failure: tuple[str, str] | None) -> HostOutcome:
    task, why = failure or ("", "")
    if tally.unreachable:
        return HostOutcome("unreachable", failed_task=task, why=why)
    if tally.failed:
        return HostOutcome("failed", failed_task=task, why=why)
    if tally.changed:
        return HostOutcome("changed", tally.changed)
    return HostOutcome("ok")


def run(request: RunRequest, plays: list[Play] | None = None) -> RunResult:
    """Run the request's playbook (or `plays` already loaded from it); the hosts that failed
    are written to `last-failed` beside the run directories, for `--limit @last-failed`."""
    plays = load_playbook(request.playbook) if plays is None else plays
    for play in plays:
        for key, value in request.play_settings.items():
            setattr(play, key, value)
    inventory = load_inventory(request.inventory, request.variables(), request.connection_defaults)
    options = request.options()
    output = open_output(
        sudo_password=request.sudo_password,
        verbosity=request.verbosity,
        json_events=request.json_events,
        check=request.check,
        explain=request.explain,
        run_root=options.run_root,
    )
    executor = Executor(inventory, options, output.reporter, output.masker, output.runlog)
    code = executor.run(plays, request.playbook)
    failures = output.reporter.failures
    hosts = {n: _outcome(s.tally, failures.get(n)) for n, s in executor.sessions.items()}
    result = RunResult(code, hosts, list(executor.plays))
    retry_file = options.run_root.parent / "last-failed"
    retry_file.write_text("".join(f"{name}\n" for name in result.failed))
    if result.failed:
        print(f"retry the failed hosts with: --limit @{retry_file}", file=sys.stderr)
    return result


def run_read_only(
    inventory_path: Path,
    plays: list[Play],
    options: RunOptions | None = None,
    *,
    check: bool = False,
    verbosity: int = 0,
) -> tuple[int, Executor]:
    """Run plays that change nothing, for a report (`glmops facts`, `glmops status`): task
    lines go to stderr, so stdout stays free for the report; no run lock is taken. Returns
    the executor to read sessions from."""
    options = replace(options or RunOptions(), check=check, lock=False)
    output = open_output(
        sudo_password=options.sudo_password,
        verbosity=verbosity,
        run_root=options.run_root,
        stdout=sys.stderr,
    )
    inventory = load_inventory(inventory_path, options.extra_vars)
    executor = Executor(inventory, options, output.reporter, output.masker, output.runlog)
    return executor.run(plays, inventory_path), executor


def fleet_runner(base: RunRequest) -> Runner:
    """The fleet's runner (fleet.roll.Runner): each of its playbooks run as `base` says, with
    the fleet's extra variables and play settings on top."""
    from glmops.fleet.roll import RunOutcome  # only a fleet's deploy loads the fleet's code

    def run_for_fleet(
        playbook: Path, limit: str, extra: dict[str, Any], settings: dict[str, Any]
    ) -> RunOutcome:
        request = replace(
            base,
            playbook=playbook,
            limit=limit,
            extra_vars={**base.extra_vars, **extra},
            play_settings=settings,
        )
        result = run(request)
        outcome = RunOutcome(result.code, stopped=result.stopped)
        outcome.failed = {n: f"{o.failed_task}: {o.why}" for n, o in result.failed.items()}
        if result.plays:  # the replicas' play; later plays (gangs) batch the same hosts
            outcome.batches = list(result.plays[0].batches)
        return outcome

    return run_for_fleet


@dataclass(frozen=True)
class ModelRequest:
    """One model phase (`glmops model`, `glmops up`'s model phase): which hosts, and how."""

    inventory: Path
    pattern: str
    options: ModelOptions
    extra_vars: Mapping[str, Any] = field(default_factory=dict)
    verbosity: int = 0
    json_events: bool = False
    #: Print the recap (`glmops model` does; `glmops up` prints its own summary).
    recap: bool = True


def run_model(request: ModelRequest) -> RunResult:
    """The model files on the hosts the pattern selects (a fleet's router host holds none)."""
    from glmops.model.phase import run_model_phase

    inventory = load_inventory(request.inventory, dict(request.extra_vars))
    hosts = serving_hosts(inventory, request.pattern)
    options = request.options
    output = open_output(
        sudo_password=options.sudo_password,
        verbosity=request.verbosity,
        json_events=request.json_events,
        check=options.check,
    )
    output.reporter.play("model files", [h.name for h in hosts])
    results = run_model_phase(hosts, output.reporter, output.runlog, output.masker, options)
    tallies = {name: _tally(result) for name, result in results.items()}
    code = exit_code(tallies.values(), check=options.check)
    if request.recap:
        output.reporter.recap(tallies, str(output.runlog.path), int(code))
    outcomes = {
        name: HostOutcome(
            result.status.value,
            int(result.changed),
            why=output.masker.mask(result.msg),
            data=dict(result.data),
        )
        for name, result in results.items()
    }
    return RunResult(code, outcomes)


def _tally(result: TaskResult) -> HostTally:
    tally = HostTally()
    tally.count(result)
    return tally
