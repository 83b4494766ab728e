"""The options the `glmops` verbs share, and how they become the engine's settings: the
inventory and host pattern, the sudo password, tags, and the one error line (and JSON event)
every verb ends with on bad input."""

from __future__ import annotations

import functools
import getpass
import os
import subprocess
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click

from glmops.engine.secretenv import become_password
from glmops.errors import ExitCode, GlmopsError, InputError

if TYPE_CHECKING:
    from glmops.run import RunRequest


def default_inventory() -> Path:
    return Path(os.environ.get("GLMOPS_INVENTORY", "inventory/hosts.yml"))


def option_set(*options: Callable[..., Any]) -> Callable[..., Any]:
    """One decorator that adds `options` in the order given (as --help lists them)."""

    def apply(func: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(options):
            func = option(func)
        return func

    return apply


# The options shared by the verbs, declared once; each verb takes those it honours.
INVENTORY = click.option(
    "-i",
    "--inventory",
    type=click.Path(path_type=Path),
    default=None,
    help="inventory file (default: $GLMOPS_INVENTORY, else inventory/hosts.yml)",
)
LIMIT = click.option(
    "--limit",
    "-l",
    default=None,
    help="hosts, groups, globs or !excluded to run on (or @FILE: its host names)",
)
EXTRA_VARS = click.option(
    "-e",
    "--extra-vars",
    "extra_vars",
    multiple=True,
    metavar="KEY=VALUE|JSON|@FILE",
    help="variables that override the inventory's: k=v, a JSON mapping, or @vars.yml",
)
FORKS = click.option(
    "--forks",
    "-f",
    type=click.IntRange(1),
    default=None,
    help="hosts in parallel (default: min(hosts, 32))",
)
ASK_BECOME_PASS = click.option(
    "-K",
    "--ask-become-pass",
    is_flag=True,
    help="ask once for the sudo password (or set GLMOPS_BECOME_PASSWORD)",
)
STRICT_HOST_KEYS = click.option(
    "--strict-host-keys",
    is_flag=True,
    help="refuse hosts whose key is not yet in glmops' known_hosts",
)
JSON_EVENTS = click.option("--json", "json_events", is_flag=True, help="JSON events on stdout")
VERBOSE = click.option("-v", "--verbose", count=True, help="-v: more; -vv: command output")
CHECK = click.option("-C", "--check", is_flag=True, help="change nothing; report what would change")

#: Every verb that reaches hosts through the inventory: which, with what, and how to report.
host_options = option_set(
    INVENTORY, LIMIT, EXTRA_VARS, FORKS, JSON_EVENTS, VERBOSE, ASK_BECOME_PASS, STRICT_HOST_KEYS
)

#: Ansible's connection options: defaults for the hosts whose inventory entry sets none.
CONNECTION_OPTIONS = (
    click.option("-u", "--user", "remote_user", default=None, help="SSH user (Ansible's -u)"),
    click.option(
        "-c",
        "--connection",
        "connection",
        type=click.Choice(["ssh", "local", "smart", "paramiko"]),
        default=None,
        help="ssh or local (smart and paramiko: ssh)",
    ),
    click.option("-b", "--become", "become", is_flag=True, help="run tasks through sudo"),
)


def connection_defaults(opts: dict[str, Any]) -> dict[str, Any]:
    """-u, -c and -b as inventory connection keys."""
    defaults: dict[str, Any] = {}
    if opts.get("remote_user"):
        defaults["user"] = opts["remote_user"]
    if opts.get("connection"):
        defaults["connection"] = "local" if opts["connection"] == "local" else "ssh"
    if opts.get("become"):
        defaults["become"] = True
    return defaults


#: The playbook-running verbs add Ansible's run options.
run_options = option_set(
    host_options,
    *CONNECTION_OPTIONS,
    CHECK,
    click.option("-D", "--diff", is_flag=True, help="show unified diffs of files that change"),
    click.option("--tags", "-t", default="", help="run only tasks with these tags (a,b)"),
    click.option("--skip-tags", default="", help="skip tasks with these tags"),
    click.option(
        "--explain",
        is_flag=True,
        help="print, for each decision, the fact and the rule behind it",
    ),
    click.option(
        "--syntax-check",
        is_flag=True,
        help="load and check the playbook (modules, arguments, expressions); run nothing",
    ),
    click.option("--list-hosts", is_flag=True, help="print each play's hosts; run nothing"),
    click.option("--list-tasks", is_flag=True, help="print each play's tasks; run nothing"),
    click.option(
        "--start-at-task",
        default=None,
        metavar="NAME",
        help="skip the tasks before the first task of this name (a pattern; 'role : task' too)",
    ),
    click.option(
        "--force-handlers",
        is_flag=True,
        help="run notified handlers even on hosts where a later task failed",
    ),
)


def reports_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """Turn glmops errors into one clear line on stderr and the right exit code."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        as_json = bool(kwargs.get("json_events") or kwargs.get("as_json"))
        try:
            code = func(*args, **kwargs)
        except GlmopsError as error:
            fail(error, error.exit_code, as_json)
        except (OSError, subprocess.SubprocessError) as error:
            # The machine refused something (a file, a process): a message, never a traceback.
            if os.environ.get("GLMOPS_DEBUG"):
                traceback.print_exc()
            fail(error, ExitCode.USAGE, as_json)
        sys.exit(int(code or 0))

    return wrapper


def fail(error: Exception, code: int, as_json: bool) -> NoReturn:
    """The one error line on stderr (with --json also an `error` event on stdout); exit."""
    from glmops.engine.output import printable

    click.secho(f"error: {printable(str(error))}", fg="red", err=True)
    if as_json:
        from glmops.engine.output import event_line

        click.echo(event_line("error", msg=str(error), exit_code=int(code)))
    sys.exit(int(code))


def sudo_password(opts: dict[str, Any]) -> str | None:
    """The sudo password: the one `up` asked once for all its phases, else
    $GLMOPS_BECOME_PASSWORD, else asked now (-K)."""
    password = opts.get("become_password")
    if password is None:
        password = become_password()
    if password is None and opts.get("ask_become_pass"):
        password = getpass.getpass("sudo password: ")
    return password


def report_options(opts: dict[str, Any]) -> Any:
    """The engine's options for a read-only report (facts, status) from host_options."""
    from glmops.engine.connection import ConnectionSettings
    from glmops.engine.executor import RunOptions
    from glmops.engine.inventory import parse_extra_vars

    return RunOptions(
        forks=opts.get("forks"),
        extra_vars=parse_extra_vars(list(opts.get("extra_vars") or ())),
        sudo_password=sudo_password(opts),
        connection=ConnectionSettings(strict_host_keys=opts.get("strict_host_keys", False)),
    )


def run_request(
    playbook: Path,
    limit: str | None,
    opts: dict[str, Any],
    extra: tuple[str, ...] = (),
    data_vars: dict[str, Any] | None = None,
) -> RunRequest:
    """The run facade's request from a verb's run options; asks for
    the sudo password (-K) when nothing gave it. `data_vars` are typed values another phase
    found: they reach the run as data, never as templates."""
    from glmops.engine.inventory import parse_extra_vars
    from glmops.run import RunRequest

    return RunRequest(
        playbook=playbook,
        inventory=opts.get("inventory") or default_inventory(),
        limit=resolve_limit(limit),
        extra_vars=parse_extra_vars(list(opts.get("extra_vars") or ()) + list(extra)),
        check=bool(opts.get("check")),
        diff=bool(opts.get("diff")),
        forks=opts.get("forks"),
        tags=frozenset(tag_set(opts.get("tags"))),
        skip_tags=frozenset(tag_set(opts.get("skip_tags"))),
        sudo_password=sudo_password(opts),
        strict_host_keys=bool(opts.get("strict_host_keys")),
        verbosity=opts.get("verbose", 0),
        json_events=bool(opts.get("json_events")),
        explain=bool(opts.get("explain")),
        data_vars=data_vars or {},
        connection_defaults=connection_defaults(opts),
        start_at_task=opts.get("start_at_task") or None,
        force_handlers=bool(opts.get("force_handlers")),
    )


def host_pattern(hosts: tuple[str, ...], limit: str | None) -> str:
    """The hosts a verb runs on: HOSTS or --limit (with @FILE read), else all."""
    return resolve_limit(hosts_limit(hosts, limit)) or "all"


def resolve_limit(limit: str | None) -> str | None:
    """`--limit @FILE` reads host names from FILE, one per line (`@last-failed` is glmops')."""
    if not limit or not limit.startswith("@"):
        return limit
    name = limit[1:]
    from glmops.engine.executor import default_run_root

    path = default_run_root().parent / name
    path = path if name == "last-failed" else Path(name)
    try:
        hosts = [line.strip() for line in path.read_text().splitlines() if line.strip()]
    except OSError as error:
        raise InputError(f"--limit {limit}: cannot read {path}: {error.strerror}") from None
    if not hosts:
        raise InputError(f"--limit {limit}: {path} names no host (nothing failed last time)")
    return ",".join(hosts)


def tag_set(value: str | None) -> set[str]:
    return {t.strip() for t in (value or "").split(",") if t.strip()}


def hosts_limit(hosts: tuple[str, ...], limit: str | None) -> str | None:
    if hosts and limit:
        raise click.UsageError("give hosts or --limit, not both")
    return ",".join(hosts) if hosts else limit
