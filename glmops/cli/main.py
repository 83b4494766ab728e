"""The `glmops` command line: run playbooks, and the verbs built on them."""

from __future__ import annotations

import sys
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
    connection_defaults,
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
    run_request,
    sudo_password,
    tag_set,
)
from glmops.cli.phases import PHASES
from glmops.cli.verb import run_playbook
from glmops.errors import ExitCode, InputError
from glmops.gpu import gpus


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
            return super().main(*args, standalone_mode=False, **kwargs)  # type: ignore[call-overload]
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)  # type: ignore[call-overload]
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
def run(playbook: Path, limit: str | None, **opts: Any) -> int:
    """Run PLAYBOOK against the inventory."""
    return run_playbook(playbook, limit=limit, **opts)


def _playbook_verb(name: str, playbook: str, summary: str, *, needs_hosts: bool = False) -> None:
    @main.command(name=name, help=summary)
    @click.argument("hosts", nargs=-1, required=needs_hosts)
    @run_options
    @reports_errors
    def verb(hosts: tuple[str, ...], limit: str | None, **opts: Any) -> int:
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
) -> int:
    """Model files, the vllm serve unit, readiness and the backend check; with a router_host in
    the inventory, the router in front of the replicas too."""
    from glmops.engine.inventory import parse_extra_vars
    from glmops.fleet.topology import fleet_from_inventory
    from glmops.run import load_inventory

    pattern = resolve_limit(hosts_limit(hosts, limit))
    playbook = paths.playbooks() / "deploy.yml"
    if opts.get("syntax_check") or opts.get("list_tasks"):  # the playbook alone, no inventory
        return run_playbook(playbook, limit=pattern, **opts)
    extra_vars = parse_extra_vars(list(opts.get("extra_vars") or ()))
    inventory = load_inventory(
        opts.get("inventory") or default_inventory(), extra_vars, connection_defaults(opts)
    )
    if opts.get("list_hosts") or (
        not rolling and fleet_from_inventory(inventory, []).router is None
    ):
        return run_playbook(playbook, limit=pattern, **opts)
    return _fleet_runner(inventory, pattern or "all", rolling, serial, max_fail_percentage, opts)


def _fleet_runner(
    inventory: Any, pattern: str, rolling: bool, serial: str, max_fail: float, opts: Any
) -> int:
    """The fleet deploy, each of its playbooks run through the run facade."""
    from glmops.fleet.roll import FleetDeploy, parse_serial
    from glmops.run import fleet_runner

    entries = parse_serial(serial)
    runner = fleet_runner(run_request(paths.playbooks() / "deploy.yml", pattern, opts))
    fleet = FleetDeploy(inventory, pattern, runner, json_events=bool(opts.get("json_events")))
    if rolling:
        return fleet.rolling(entries, max_fail)
    return fleet.at_once()


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
    from glmops.cli.up_phases import run_up

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
    from glmops.engine.connection import ConnectionSettings
    from glmops.engine.inventory import parse_extra_vars
    from glmops.model.phase import ModelOptions
    from glmops.run import ModelRequest, run_model

    options = ModelOptions(
        check=opts["check"],
        per_source=opts["per_source"],
        tree=not opts["no_tree"],
        full_verify=opts["verify_all"],
        refresh=opts["refresh"],
        seed=opts["seed"],
        sudo_password=sudo_password(opts),
        connection=ConnectionSettings(strict_host_keys=opts["strict_host_keys"]),
    )
    request = ModelRequest(
        inventory or default_inventory(),
        host_pattern(hosts, limit),
        options,
        extra_vars=parse_extra_vars(list(opts["extra_vars"])),
        verbosity=opts["verbose"],
        json_events=opts["json_events"],
    )
    return ExitCode(run_model(request).code)


@main.command()
@click.argument("hosts", nargs=-1)
@host_options
@click.option("--capability", default="", help="compute capability X.Y (default: the host's GPU)")
@click.option("--dtype", default="", help="float16 or bfloat16 (default: what GGUF needs there)")
@reports_errors
def preflight(
    hosts: tuple[str, ...], limit: str | None, capability: str, dtype: str, **opts: Any
) -> int:
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
def facts(hosts: tuple[str, ...], inventory: Path | None, limit: str | None, **opts: Any) -> int:
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
def status(hosts: tuple[str, ...], inventory: Path | None, limit: str | None, **opts: Any) -> int:
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
@click.option(
    "--ansible", "ansible", is_flag=True, help="what of Ansible's language glmops runs, and how"
)
@reports_errors
def doc(module: str | None, ansible: bool) -> ExitCode:
    """Print MODULE's arguments (from its own argument table), or list every module."""
    from glmops.cli.moddoc import describe, module_list
    from glmops.modules import REGISTRY

    if ansible:
        from glmops.engine.ansible_support import support_table

        click.echo(support_table(), nl=False)
    elif module is None:
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
