"""`glmops up` run: `run_up` converges the selected hosts phase by phase (glmops.cli.up keeps
the phases, the progress file and the rules), and `PhaseRunners` runs each phase on a list of
hosts: a playbook or the model phase through the run facade (glmops.run), or the host checks
(glmops.cli.verify); each answers an Outcome per host."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from glmops import paths
from glmops.cli.options import run_request
from glmops.cli.up import (
    LISTINGS,
    MODEL_PATHS,
    NOT_PLAYBOOKS,
    PHASES,
    PLAYBOOKS,
    Outcome,
    Progress,
    converge,
    exit_code,
    print_summary,
    progress_path,
)
from glmops.engine.connection import ConnectionSettings
from glmops.engine.inventory import Host, parse_extra_vars
from glmops.engine.secretenv import become_password
from glmops.errors import ExitCode, GlmopsError, InputError
from glmops.fleet.topology import fleet_from_inventory, serving_hosts
from glmops.hosthelpers.model_files import StatReply
from glmops.run import ModelRequest, RunRequest, fleet_runner, load_inventory, run, run_model


class PhaseRunners:
    """How each phase runs on a list of hosts: a playbook, the model phase, the host checks."""

    def __init__(
        self,
        inventory: Path,
        opts: dict[str, Any],
        progress: Progress,
        hosts: list[Host] | None = None,
    ):
        self.inventory = inventory
        self.opts = opts
        self.progress = progress
        self.hosts = {h.name: h for h in hosts or ()}  # the run's hosts (gang peers among them)

    def request(
        self, playbook: Path, limit: str, values: dict[str, Any] | None = None
    ) -> RunRequest:
        """The run facade's request for one playbook of a phase, with `up`'s run options;
        `values` (what an earlier phase found) go in as typed data, never as templates."""
        opts = {**self.opts, "inventory": self.inventory}
        return run_request(playbook, limit, opts, data_vars=values)

    @property
    def sudo_password(self) -> str | None:
        """The sudo password `glmops up` asked once (-K) for every phase, else
        $GLMOPS_BECOME_PASSWORD: every phase runs with the same one."""
        given = self.opts.get("become_password")
        return given if given is not None else become_password()

    def __call__(self, phase: str, hosts: list[Host]) -> dict[str, Outcome]:
        names = ", ".join(h.name for h in hosts)
        click.secho(f"== glmops up: {phase} on {names}", bold=True, err=True)
        if phase == "deploy":
            return self.deploy(hosts)
        if phase in PLAYBOOKS:
            return self.playbook(paths.playbooks() / PLAYBOOKS[phase], hosts)
        if phase == "model":
            return self.model(hosts)
        return self.verify(hosts)

    def deploy(self, hosts: list[Host]) -> dict[str, Outcome]:
        """deploy.yml, told where the model phase put the files on hosts whose inventory does
        not say (one run per distinct set of paths). A gang deploys as one: a member that needs
        the phase brings its peers of this run along."""
        groups: dict[str, tuple[dict[str, Any], list[Host]]] = {}
        for host in self.with_gang_peers(hosts):
            found = self.progress.values.get(host.name, {})
            values = {
                name: found[name]
                for name in MODEL_PATHS
                if found.get(name) and name not in host.vars
            }
            key = json.dumps(values, sort_keys=True)
            groups.setdefault(key, (values, []))[1].append(host)
        outcomes: dict[str, Outcome] = {}
        for values, members in groups.values():
            path = paths.playbooks() / PLAYBOOKS["deploy"]
            outcomes.update(self.playbook(path, members, values))
        return outcomes

    def with_gang_peers(self, hosts: list[Host]) -> list[Host]:
        """`hosts` and, for each gang member among them, its peers in this run (rank order)."""
        chosen = {h.name: h for h in hosts}
        for host in hosts:
            for member in (host.vars.get("fleet_replica") or {}).get("members", []):
                peer = self.hosts.get(member["host"])
                if peer is not None:
                    chosen.setdefault(peer.name, peer)
        return list(chosen.values())

    def route(self, inventory: Any, pattern: str, summary: dict[str, dict[str, Outcome]]) -> int:
        """The router play after the phases: a replica whose host failed a phase up to deploy
        stays out. The verify phase's host checks report; they do not take a serving replica
        out of rotation (the deploy's own gate decided it serves)."""
        from glmops.fleet.roll import FleetDeploy

        serving_phases = PHASES[: PHASES.index("deploy") + 1]
        failed = {
            host: f"{phase} {outcome.status}: {outcome.msg}"
            for phase, row in summary.items()
            if phase in serving_phases
            for host, outcome in row.items()
            if outcome.stops
        }
        runner = fleet_runner(self.request(paths.playbooks() / "router.yml", pattern))
        deploy = FleetDeploy(
            inventory, pattern, runner, json_events=bool(self.opts.get("json_events"))
        )
        return int(deploy.route(failed))

    def playbook(
        self, path: Path, hosts: list[Host], values: dict[str, Any] | None = None
    ) -> dict[str, Outcome]:
        """Run a phase's playbook on `hosts`; `values` (what an earlier phase found, such as
        the model files' paths from the Hub) go in as typed data, never as templates."""
        result = run(self.request(path, ",".join(h.name for h in hosts), values))
        outcomes = {}
        for host in hosts:
            found = result.hosts.get(host.name)
            if found is None:
                outcomes[host.name] = Outcome("failed", "the playbook did not reach this host")
            elif found.stops:
                why = f"task '{found.failed_task}': {found.why}" if found.failed_task else ""
                outcomes[host.name] = Outcome(found.status, why)
            else:
                outcomes[host.name] = Outcome(found.status, "", found.changed)
        return outcomes

    def model(self, hosts: list[Host]) -> dict[str, Outcome]:
        """The model files from the Hub, fetched once and fanned out (glmops.model)."""
        from glmops.model.phase import ModelOptions

        options = ModelOptions(
            check=bool(self.opts.get("check")),
            sudo_password=self.sudo_password,
            connection=ConnectionSettings(strict_host_keys=bool(self.opts.get("strict_host_keys"))),
        )
        request = ModelRequest(
            self.inventory,
            ",".join(h.name for h in hosts),
            options,
            extra_vars=parse_extra_vars(list(self.opts.get("extra_vars") or ())),
            verbosity=self.opts.get("verbose", 0),
            json_events=bool(self.opts.get("json_events")),
            recap=False,
        )
        results = run_model(request).hosts
        outcomes = {}
        for host in hosts:
            result = results.get(host.name)
            if result is None:
                outcomes[host.name] = Outcome("failed", "the model phase gave no result")
                continue
            values = {k: result.data[k] for k in MODEL_PATHS if result.data.get(k)}
            outcomes[host.name] = Outcome(
                result.status, result.why, result.changed, values if not result.stops else {}
            )
        return outcomes

    def recheck(self, phase: str, hosts: list[Host]) -> dict[str, str]:
        """Hosts on which a phase `up` finished no longer holds, and why. Only the model phase
        is looked at again: stat only, against the cached manifest (each file's size, and the
        size and mtime its last verification recorded) and each merged file's sidecar; the
        full sha256 check stays with `glmops model --verify-all`."""
        if phase != "model" or not hosts:
            return {}
        from glmops.model.phase import ModelOptions

        options = ModelOptions(
            check=True,  # looks only: takes no run lock
            sudo_password=self.sudo_password,
            connection=ConnectionSettings(strict_host_keys=bool(self.opts.get("strict_host_keys"))),
        )
        reasons = model_files_changed(hosts, options)
        for name, why in reasons.items():
            click.secho(f"{name}: model files need the model phase again: {why}", err=True)
        return reasons

    def verify(self, hosts: list[Host]) -> dict[str, Outcome]:
        """`glmops verify`'s host checks, one host at a time (each gets its own verdict)."""
        outcomes = {}
        for host in hosts:
            checks: list[dict[str, Any]] = []
            try:
                from glmops.cli.verify import run_verify

                code = run_verify(
                    self.inventory, host.name, False, None, checks, self.sudo_password
                )
            except (GlmopsError, ImportError) as error:
                outcomes[host.name] = Outcome("failed", f"cannot run the host checks: {error}")
                continue
            failed = [c["check"] for c in checks if c["outcome"] not in ("passed", "skipped")]
            if code == ExitCode.OK:
                outcomes[host.name] = Outcome("ok", f"{len(checks)} host checks passed")
            else:
                outcomes[host.name] = Outcome(
                    "failed",
                    f"host checks failed: {', '.join(failed) or 'pytest could not run them'} "
                    f"(`glmops verify {host.name}` says why)",
                )
        return outcomes


def model_files_changed(hosts: list[Host], options: Any) -> dict[str, str]:
    """Per host whose model files are not as the model phase left them: why (model_files'
    stat-only look against the manifest kept in the controller's cache)."""
    from glmops.engine.hostvars import rendered_host
    from glmops.model import held
    from glmops.model.hostops import connect, parallel
    from glmops.model.manifest import Manifest
    from glmops.run import open_output

    reasons: dict[str, str] = {}
    manifests: dict[str, Manifest] = {}
    hosts = [rendered_host(h) for h in hosts]
    for host in hosts:
        if host.vars.get("model_source"):
            found = held.cached_manifest(host.name, host.vars, options.cache_root)
            if isinstance(found, str):
                reasons[host.name] = found
            else:
                manifests[host.name] = found
    targets = [h for h in hosts if h.name in manifests]
    if not targets:
        return reasons
    output = open_output(sudo_password=options.sudo_password, check=True)
    unreachable: dict[str, Any] = {}
    pool, ctxs = connect(
        targets, output.reporter, output.runlog, output.masker, options, unreachable
    )
    reasons.update({n: f"cannot look: {r.msg}" for n, r in unreachable.items()})

    def look(ctx: Any) -> StatReply:
        try:
            return held.stat(ctx, manifests[ctx.host.name], ctx.host.vars, timeout=600)
        except GlmopsError as error:  # that host's trouble: its model phase runs and says so
            return {
                "failed": True,
                "changed": False,
                "msg": f"cannot look: {error}",
                "problems": [],
                "verified_digest": None,
            }

    try:
        replies = parallel(ctxs, look)
    finally:
        pool.close()
    for name, reply in replies.items():
        problem = held.findings(reply)
        if problem:
            reasons[name] = problem
    return reasons


def run_up(
    inventory_path: Path,
    pattern: str,
    *,
    skip: tuple[str, ...] = (),
    restart: bool = False,
    opts: dict[str, Any],
) -> int:
    """`glmops up`: every phase not skipped, on the hosts `pattern` selects."""
    unknown = [p for p in skip if p not in PHASES]
    if unknown:
        raise InputError(f"--skip {','.join(unknown)}: phases are {', '.join(PHASES)}")

    extra_vars = parse_extra_vars(list(opts.get("extra_vars") or ()))
    inventory = load_inventory(inventory_path, extra_vars)
    router = fleet_from_inventory(inventory, []).router
    hosts = serving_hosts(inventory, pattern)  # the router host serves no model: no phase
    if router is not None and not hosts:  # select() refuses a pattern that matches nothing
        raise InputError(
            f"'{pattern}' selects only the router host ({router.host}), "
            "which runs no phase of `glmops up`: name the replicas' hosts (the router "
            "follows their deploy phase)",
            source=str(inventory_path),
        )
    phases = tuple(p for p in PHASES if p not in skip)
    if any(opts.get(flag) for flag in LISTINGS):
        return list_phases(inventory_path, hosts, phases, opts)
    partial = bool(opts.get("tags") or opts.get("skip_tags"))
    if partial:
        left_out = [p for p in phases if p not in PLAYBOOKS]
        phases = tuple(p for p in phases if p in PLAYBOOKS)
        click.secho(
            "glmops up: --tags/--skip-tags select playbook tasks: "
            + (f"the {', '.join(left_out)} phases and " if left_out else "")
            + "the router are left out, and no phase is recorded as finished",
            err=True,
        )
    progress = Progress(progress_path(inventory_path))
    if not restart:
        progress = Progress.load(progress.path)
    runners = PhaseRunners(inventory_path, opts, progress, hosts)
    summary = converge(
        hosts,
        phases,
        runners,
        progress,
        record=not opts.get("check"),
        recheck=runners.recheck,
        partial=partial,
    )
    print_summary(summary, hosts, as_json=bool(opts.get("json_events")))
    code = exit_code(summary, check=bool(opts.get("check")))
    if router is not None and "deploy" in phases and not partial:
        routed = runners.route(inventory, pattern, summary)
        code = routed if routed >= 128 else max(code, routed)  # 128+signal: interrupted
    return code


def list_phases(
    inventory_path: Path, hosts: list[Host], phases: tuple[str, ...], opts: dict[str, Any]
) -> int:
    """`up` with --syntax-check, --list-hosts or --list-tasks: each playbook phase answers for
    the hosts `up` selected, as its verb would; the other phases say what they are. Nothing
    runs, and the progress file is left as it was."""
    from glmops.cli.verb import run_playbook

    code: int = ExitCode.OK
    for phase in phases:
        click.echo(f"== glmops up: {phase} (hosts: {', '.join(h.name for h in hosts)})")
        if phase in PLAYBOOKS:
            path = paths.playbooks() / PLAYBOOKS[phase]
            limit = ",".join(h.name for h in hosts)
            opts_here = {**opts, "inventory": inventory_path}
            code = max(code, run_playbook(path, limit=limit, **opts_here))
        else:
            click.echo(f"  {NOT_PLAYBOOKS[phase]}: not a playbook, nothing to list")
    return code
