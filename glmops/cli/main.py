"""The `glmops` command line: run playbooks, and the verbs built on them."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from glmops import __version__, paths
from glmops.cli.options import (
    ASK_BECOME_PASS,
    EXTRA_VARS,
    INVENTORY,
    JSON_EVENTS,
    LIMIT,
    STRICT_HOST_KEYS,
    VERBOSE,
    default_inventory,
    fail,
    host_options,
    host_pattern,
    hosts_limit,
    option_set,
    report_options,
    reports_errors,
    resolve_limit,
    run_options,
    sudo_password,
    tag_set,
)
from glmops.cli.up import PHASES
from glmops.errors import ExitCode, InputError
from glmops.gpu import gpus


def run_playbook(
    playbook: Path,
    *,
    limit: str | None = None,
    extra: tuple[str, ...] = (),
    data_vars: dict[str, Any] | None = None,
    prepare: Callable[[Any], None] | None = None,
    play_settings: dict[str, Any] | None = None,
    **opts: Any,
) -> int:
    """Run a playbook with the verbs' options; `prepare(executor)` may watch the run;
    `play_settings` (e.g. `serial`) are set on every play, as if its file said so;
    `data_vars` are extra variables that are data (another phase's findings), never rendered."""
    from glmops.engine.connection import ConnectionSettings
    from glmops.engine.executor import Executor, RunOptions
    from glmops.engine.inventory import load_inventory, parse_extra_vars
    from glmops.engine.output import Reporter
    from glmops.engine.playbook import load_playbook
    from glmops.engine.runlog import Masker, RunLog
    from glmops.engine.unsafe import mark_unsafe

    extra_vars = parse_extra_vars(list(opts.get("extra_vars") or ()) + list(extra))
    extra_vars.update(mark_unsafe(data_vars or {}))
    plays = load_playbook(playbook)
    check_start_at_task(plays, opts.get("start_at_task"))
    for play in plays:
        for key, value in (play_settings or {}).items():
            setattr(play, key, value)
    if opts.get("syntax_check") or opts.get("list_tasks"):
        from glmops.cli.listing import list_tasks, syntax_ok

        click.echo(
            list_tasks(playbook, plays, tag_set(opts.get("tags")), tag_set(opts.get("skip_tags")))
            if opts.get("list_tasks")
            else syntax_ok(playbook, plays)
        )
        return ExitCode.OK
    inventory = load_inventory(opts.get("inventory") or default_inventory(), extra_vars)
    if opts.get("list_hosts"):
        from glmops.cli.listing import list_hosts

        click.echo(list_hosts(inventory, plays, resolve_limit(limit)))
        return ExitCode.OK
    password = sudo_password(opts)
    masker = Masker({password} if password else set())
    options = RunOptions(
        check=opts.get("check", False),
        diff=opts.get("diff", False),
        forks=opts.get("forks"),
        limit=resolve_limit(limit),
        tags=tag_set(opts.get("tags")),
        skip_tags=tag_set(opts.get("skip_tags")),
        extra_vars=extra_vars,
        sudo_password=password,
        connection=ConnectionSettings(strict_host_keys=opts.get("strict_host_keys", False)),
        start_at_task=opts.get("start_at_task") or None,
        force_handlers=bool(opts.get("force_handlers")),
    )
    reporter = Reporter(
        masker,
        verbosity=opts.get("verbose", 0),
        json_events=opts.get("json_events", False),
        check=options.check,
        explain=opts.get("explain", False),
    )
    runlog = RunLog(options.run_root, masker)
    executor = Executor(inventory, options, reporter, masker, runlog)
    if prepare is not None:
        prepare(executor)
    code = executor.run(plays, playbook)
    failed = [n for n, s in executor.sessions.items() if s.tally.failed or s.tally.unreachable]
    retry_file = options.run_root.parent / "last-failed"
    retry_file.write_text("".join(f"{name}\n" for name in failed))
    if failed:
        click.echo(f"retry the failed hosts with: --limit @{retry_file}", err=True)
    return code


def check_start_at_task(plays: list[Any], pattern: str | None) -> None:
    """--start-at-task must name a task known when the playbook loads (a typo would
    otherwise run nothing)."""
    from glmops.engine.blocks import names_task, walk_tasks

    if pattern and not any(
        names_task(pattern, task)
        for play in plays
        for task in walk_tasks(play.tasks)
        if not task.implicit
    ):
        raise InputError(
            f"--start-at-task: no task named '{pattern}' (it can start only at tasks known "
            "when the playbook loads: not inside include_tasks or include_role)"
        )


def _asks_for_json(error: click.ClickException, argv: list[str]) -> bool:
    """Whether the command that failed to parse takes --json and the command line gave it
    (before any `--`)."""
    ctx = getattr(error, "ctx", None)
    params = ctx.command.params if ctx is not None else []
    takes_json = any("--json" in getattr(p, "opts", ()) for p in params)
    return takes_json and "--json" in (argv[: argv.index("--")] if "--" in argv else argv)


class _Group(click.Group):
    """Usage errors the CLI library catches (unknown option, missing file) exit 5 like ours,
    with the same `error` event on stdout when the command line asked for --json."""

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)
        except click.ClickException as error:
            argv = kwargs.get("args") if "args" in kwargs else (args[0] if args else None)
            if _asks_for_json(error, sys.argv[1:] if argv is None else list(argv)):
                fail(RuntimeError(error.format_message()), ExitCode.USAGE, as_json=True)
            error.show()
            sys.exit(int(ExitCode.USAGE))
        except click.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(130)
        sys.exit(code if isinstance(code, int) else 0)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="glmops")
def main() -> None:
    """Provision GPU hosts and serve GLM-5 with vLLM, over SSH, Ansible-style.

    Exit codes: 0 ok, 2 a host failed, 3 --check found changes, 4 a host unreachable,
    5 usage or input error, 130/143 interrupted (SIGINT/SIGTERM).
    """


@main.command()
@click.argument("playbook", type=click.Path(path_type=Path, exists=True, dir_okay=False))
@run_options
@reports_errors
def run(playbook: Path, limit: str | None, **opts: Any) -> ExitCode:
    """Run PLAYBOOK against the inventory."""
    return run_playbook(playbook, limit=limit, **opts)


def _playbook_verb(name: str, playbook: str, summary: str, *, needs_hosts: bool = False) -> None:
    @main.command(name=name, help=summary)
    @click.argument("hosts", nargs=-1, required=needs_hosts)
    @run_options
    @reports_errors
    def verb(hosts: tuple[str, ...], limit: str | None, **opts: Any) -> ExitCode:
        return run_playbook(paths.playbooks() / playbook, limit=hosts_limit(hosts, limit), **opts)


_playbook_verb(
    "provision",
    "provision.yml",
    "Take fresh GPU hosts to ready-to-serve: driver, Python, vLLM.",
    needs_hosts=True,
)


@main.command()
@click.argument("hosts", nargs=-1)
@click.option("--rolling", is_flag=True, help="one batch of replicas at a time, behind the router")
@click.option("--serial", default="1", help="batch size: N, N% or a ramp 1,25%,100% (--rolling)")
@click.option(
    "--max-fail-percentage",
    type=click.FloatRange(0, 100),
    default=0.0,
    help="stop the roll when more of a batch fails (default 0: any failure)",
)
@run_options
@reports_errors
def deploy(
    hosts: tuple[str, ...],
    limit: str | None,
    rolling: bool,
    serial: str,
    max_fail_percentage: float,
    **opts: Any,
) -> ExitCode:
    """Model files, the vllm serve unit, readiness and the backend check; with a router_host in
    the inventory, the router in front of the replicas too."""
    from glmops.engine.inventory import load_inventory, parse_extra_vars
    from glmops.fleet.topology import fleet_from_inventory

    pattern = resolve_limit(hosts_limit(hosts, limit))
    playbook = paths.playbooks() / "deploy.yml"
    if opts.get("syntax_check") or opts.get("list_tasks"):  # the playbook alone, no inventory
        return run_playbook(playbook, limit=pattern, **opts)
    extra_vars = parse_extra_vars(list(opts.get("extra_vars") or ()))
    inventory = load_inventory(opts.get("inventory") or default_inventory(), extra_vars)
    if opts.get("list_hosts") or (
        not rolling and fleet_from_inventory(inventory, []).router is None
    ):
        return run_playbook(playbook, limit=pattern, **opts)
    return _fleet_runner(inventory, pattern or "all", rolling, serial, max_fail_percentage, opts)


def _fleet_runner(
    inventory: Any, pattern: str, rolling: bool, serial: str, max_fail: float, opts: Any
) -> int:
    """The fleet deploy, each of its playbooks run by fleet_run."""
    from glmops.fleet.roll import FleetDeploy, parse_serial

    entries = parse_serial(serial)
    run = functools.partial(fleet_run, opts=opts)
    fleet = FleetDeploy(inventory, pattern, run, json_events=bool(opts.get("json_events")))
    if rolling:
        return fleet.rolling(entries, max_fail)
    return fleet.at_once()


def fleet_run(
    playbook: Path, limit: str, extra: dict[str, Any], settings: dict[str, Any], *, opts: Any
) -> Any:
    """One playbook through run_playbook, as the fleet needs it: `settings` (serial,
    max_fail_percentage) set on its plays; returns a fleet.roll.RunOutcome (what failed on
    which host, the engine's batches, why it stopped the play)."""
    import json

    from glmops.engine.results import Status
    from glmops.fleet.roll import RunOutcome

    outcome = RunOutcome(ExitCode.OK)
    seen: list[Any] = []

    def prepare(executor: Any) -> None:
        report = executor.reporter.task
        seen.append(executor)

        def task(host: str, name: str, result: Any, **kw: Any) -> None:
            if result.status in (Status.FAILED, Status.UNREACHABLE) and not result.ignored:
                outcome.failed.setdefault(host, f"{name}: {result.msg}")
            report(host, name, result, **kw)

        executor.reporter.task = task

    extra_arg = (json.dumps(extra),) if extra else ()
    outcome.code = run_playbook(
        playbook, limit=limit, extra=extra_arg, prepare=prepare, play_settings=settings, **opts
    )
    plays = seen[0].plays if seen else []
    if plays:  # the replicas' play; later plays of the playbook (gangs) batch the same hosts
        outcome.batches = list(plays[0].batches)
    for play in plays:
        outcome.stopped = outcome.stopped or play.stopped
    return outcome


_playbook_verb(
    "patch",
    "patch.yml",
    "Apply the vLLM patch set (sparse MLA backend, GGUF fixes) to HOSTS' vllm_venv.",
    needs_hosts=True,
)


@main.command()
@click.argument("hosts", nargs=-1)
@click.option("--skip", default="", help="phases to leave out (a,b): " + ",".join(PHASES))
@click.option("--restart", is_flag=True, help="forget what earlier runs finished; run every phase")
@run_options
@reports_errors
def up(hosts: tuple[str, ...], limit: str | None, skip: str, restart: bool, **opts: Any) -> int:
    """Provision, patch, model files, deploy and verify HOSTS (default: all), in phases.

    A re-run continues where the last one stopped on each host.
    """
    from glmops.cli.up import run_up

    pattern = hosts_limit(hosts, limit) or "all"
    inventory = opts.pop("inventory") or default_inventory()
    opts["become_password"] = sudo_password(opts)  # asked once (-K), handed to every phase
    return run_up(inventory, pattern, skip=tuple(tag_set(skip)), restart=restart, opts=opts)


@main.command()
@click.argument("hosts", nargs=-1)
@option_set(
    INVENTORY,
    LIMIT,
    EXTRA_VARS,
    JSON_EVENTS,
    VERBOSE,
    ASK_BECOME_PASS,
    STRICT_HOST_KEYS,
    click.option(
        "-C", "--check", is_flag=True, help="change nothing; report which hosts lack files"
    ),
)
@click.option("--per-source", type=click.IntRange(1), default=2, help="copies one source serves")
@click.option("--no-tree", is_flag=True, help="only the controller sends (no host seeds others)")
@click.option(
    "--seed", default=None, help="a host that fetches from the Hub instead of the controller"
)
@click.option("--verify-all", is_flag=True, help="hash every file on every host")
@click.option("--refresh", is_flag=True, help="resolve branches again (a new manifest)")
@reports_errors
def model(
    hosts: tuple[str, ...], inventory: Path | None, limit: str | None, **opts: Any
) -> ExitCode:
    """Fetch the model from the Hub once and copy it to HOSTS as a tree, verified."""
    from glmops.model.command import model_command, options_from_cli

    options = options_from_cli(
        opts["check"],
        opts["per_source"],
        not opts["no_tree"],
        opts["verify_all"],
        opts["refresh"],
        opts["strict_host_keys"],
        opts["seed"],
        sudo_password=sudo_password(opts),
    )
    return model_command(
        inventory or default_inventory(),
        host_pattern(hosts, limit),
        options,
        extra_vars=opts["extra_vars"],
        json_events=opts["json_events"],
        verbose=opts["verbose"],
    )


@main.command()
@click.argument("hosts", nargs=-1)
@host_options
@click.option("--capability", default="", help="compute capability X.Y (default: the host's GPU)")
@click.option("--dtype", default="", help="float16 or bfloat16 (default: what GGUF needs there)")
@reports_errors
def preflight(
    hosts: tuple[str, ...], limit: str | None, capability: str, dtype: str, **opts: Any
) -> ExitCode:
    """Which attention backend HOSTS' vLLM would pick for GLM-5, and why not the others."""
    if not hosts and not limit:
        raise click.UsageError("give HOSTS or --limit")
    extra = (f"preflight_capability={capability}", f"preflight_dtype={dtype}")
    return run_playbook(
        paths.playbooks() / "preflight.yml",
        limit=host_pattern(hosts, limit),
        extra=extra,
        explain=True,
        **opts,
    )


_playbook_verb(
    "unpatch",
    "unpatch.yml",
    "Restore HOSTS' vLLM files to the originals, byte for byte.",
    needs_hosts=True,
)


@main.command()
@click.argument("hosts", nargs=-1)
@host_options
@reports_errors
def facts(
    hosts: tuple[str, ...], inventory: Path | None, limit: str | None, **opts: Any
) -> ExitCode:
    """Gather and print HOSTS' facts (one round trip per host)."""
    from glmops.cli.facts_cmd import print_facts

    return print_facts(
        inventory or default_inventory(),
        host_pattern(hosts, limit),
        opts["json_events"],
        report_options(opts),
        opts["verbose"],
    )


@main.command()
@click.argument("hosts", nargs=-1)
@host_options
@reports_errors
def status(
    hosts: tuple[str, ...], inventory: Path | None, limit: str | None, **opts: Any
) -> ExitCode:
    """A row per host: GPUs, driver, vLLM, patches, model, unit, health, backend."""
    from glmops.cli.status import print_status

    return print_status(
        inventory or default_inventory(),
        host_pattern(hosts, limit),
        opts["json_events"],
        report_options(opts),
        opts["verbose"],
    )


@main.command()
@click.argument("hosts", nargs=-1)
@INVENTORY
@LIMIT
@click.option("--json", "as_json", is_flag=True, help="one JSON result per check on stdout")
@click.option("-k", "keyword", default=None, help="only checks matching this pytest -k expression")
@reports_errors
def verify(
    hosts: tuple[str, ...],
    inventory: Path | None,
    limit: str | None,
    as_json: bool,
    keyword: str | None,
) -> ExitCode:
    """Run the testinfra host checks (tests/host) against HOSTS (needs glmops[verify])."""
    try:
        from glmops.cli.verify import run_verify
    except ImportError as error:
        raise InputError(
            f"glmops verify needs the 'verify' extra ({error.name} is missing): "
            "pip install 'glmops[verify]'"
        ) from None

    pattern = host_pattern(hosts, limit)
    return run_verify(inventory or default_inventory(), pattern, as_json, keyword)


@main.command()
@click.argument("module", required=False)
@reports_errors
def doc(module: str | None) -> ExitCode:
    """Print MODULE's arguments (from its own argument table), or list every module."""
    from glmops.cli.moddoc import describe, module_list
    from glmops.modules import REGISTRY

    if module is None:
        click.echo(module_list())
    elif module not in REGISTRY:
        raise InputError(f"no module '{module}' (modules: {', '.join(sorted(REGISTRY))})")
    else:
        click.echo(describe(module))
    return ExitCode.OK


@main.group()
def testbed() -> None:
    """Local test hosts: Debian + systemd + sshd in systemd-nspawn (needs root)."""


@testbed.command("up")
@click.option("-n", "count", type=click.IntRange(1, 200), default=2, help="number of hosts")
@click.option(
    "--gpu-profile",
    default=None,
    help="simulate GPUs (testbed only): " + ", ".join(gpus.simulated()),
)
@click.option("--internet", is_flag=True, help="let the hosts reach package registries (NAT)")
@reports_errors
def testbed_up(count: int, gpu_profile: str | None, internet: bool) -> ExitCode:
    """Start N test hosts and write an inventory for them; prints its path."""
    from glmops.testbed import Testbed

    path = Testbed().up(count, gpu_profile, internet=internet)
    click.echo(str(path))
    return ExitCode.OK


@testbed.command("down")
@reports_errors
def testbed_down() -> ExitCode:
    """Stop and remove every test host (the cached base filesystem stays)."""
    from glmops.testbed import Testbed

    Testbed().down()
    return ExitCode.OK


@testbed.command("status")
@reports_errors
def testbed_status() -> ExitCode:
    """Show each test host: address, running, SSH answering, simulated GPU profile."""
    from glmops.testbed import Testbed

    for host in Testbed().status():
        state = "running" if host.running else "stopped"
        ssh = "ssh ok" if host.ssh_ok else "ssh down"
        click.echo(f"{host.name}\t{host.address}\t{state}\t{ssh}\t{host.gpu_profile or '-'}")
    return ExitCode.OK


if __name__ == "__main__":
    main()
