"""A playbook verb (`glmops run`, provision, deploy, patch, ...) from its run options: the
listings answer here, anything else runs through the run facade (glmops.run)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from glmops.cli.options import (
    connection_defaults,
    default_inventory,
    resolve_limit,
    run_request,
    tag_set,
)
from glmops.errors import ExitCode, InputError


def run_playbook(
    playbook: Path, *, limit: str | None = None, extra: tuple[str, ...] = (), **opts: Any
) -> int:
    """A playbook verb: --syntax-check, --list-tasks and --list-hosts answer here; anything
    else runs through the run facade (glmops.run)."""
    from glmops.engine.playbook import load_playbook

    plays = load_playbook(playbook)
    check_start_at_task(plays, opts.get("start_at_task"))
    if opts.get("syntax_check") or opts.get("list_tasks"):
        from glmops.cli.listing import list_tasks, syntax_ok

        click.echo(
            list_tasks(playbook, plays, tag_set(opts.get("tags")), tag_set(opts.get("skip_tags")))
            if opts.get("list_tasks")
            else syntax_ok(playbook, plays)
        )
        return ExitCode.OK
    # What runs plays (SSH, the executor, output) is loaded only when plays are to run.
    from glmops.run import load_inventory, run

    if opts.get("list_hosts"):
        from glmops.cli.listing import list_hosts
        from glmops.engine.inventory import parse_extra_vars

        extra_vars = parse_extra_vars(list(opts.get("extra_vars") or ()) + list(extra))
        inventory = load_inventory(
            opts.get("inventory") or default_inventory(), extra_vars, connection_defaults(opts)
        )
        click.echo(list_hosts(inventory, plays, resolve_limit(limit)))
        return ExitCode.OK
    return run(run_request(playbook, limit, opts, extra), plays).code


def check_start_at_task(plays: list[Any], pattern: str | None) -> None:
    """--start-at-task must name a task known when the playbook loads (a typo would
    otherwise run nothing)."""
    from glmops.engine.nodes import names_task, walk_tasks

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
