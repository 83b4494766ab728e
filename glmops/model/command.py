"""`glmops model [HOSTS]`: the model phase on its own, with the usual output and exit codes."""

from __future__ import annotations

from pathlib import Path

from glmops.engine.connection import ConnectionSettings
from glmops.engine.inventory import load_inventory, parse_extra_vars
from glmops.engine.output import Reporter
from glmops.engine.results import HostTally
from glmops.engine.runlog import Masker, RunLog
from glmops.errors import ExitCode
from glmops.fleet.topology import serving_hosts
from glmops.model.phase import ModelOptions, run_model_phase


def model_command(
    inventory_path: Path,
    pattern: str,
    options: ModelOptions,
    *,
    extra_vars: tuple[str, ...] = (),
    json_events: bool = False,
    verbose: int = 0,
) -> ExitCode:
    from glmops.engine.executor import default_run_root

    inventory = load_inventory(inventory_path, parse_extra_vars(list(extra_vars)))
    hosts = serving_hosts(inventory, pattern)  # a fleet's router host holds no model
    masker = Masker({options.sudo_password} if options.sudo_password else set())
    reporter = Reporter(masker, verbosity=verbose, json_events=json_events, check=options.check)
    runlog = RunLog(default_run_root(), masker)
    reporter.play("model files", [h.name for h in hosts])
    results = run_model_phase(hosts, reporter, runlog, masker, options)
    tallies = {}
    for name, result in results.items():
        tallies[name] = HostTally()
        tallies[name].count(result)
    code = _exit_code(tallies, options.check)
    reporter.recap(tallies, str(runlog.path), int(code))
    return code


def _exit_code(tallies: dict[str, HostTally], check: bool) -> ExitCode:
    if any(t.unreachable for t in tallies.values()):
        return ExitCode.HOST_UNREACHABLE
    if any(t.failed for t in tallies.values()):
        return ExitCode.HOST_FAILED
    if check and any(t.changed for t in tallies.values()):
        return ExitCode.CHECK_FOUND_CHANGES
    return ExitCode.OK


def options_from_cli(
    check: bool,
    per_source: int,
    tree: bool,
    verify_all: bool,
    refresh: bool,
    strict: bool,
    seed: str | None = None,
    *,
    sudo_password: str | None = None,
) -> ModelOptions:
    return ModelOptions(
        check=check,
        per_source=per_source,
        tree=tree,
        full_verify=verify_all,
        refresh=refresh,
        seed=seed,
        sudo_password=sudo_password,
        connection=ConnectionSettings(strict_host_keys=strict),
    )
