"""How each phase of `glmops up` runs on a list of hosts: a playbook through the engine, the
model phase (glmops.model), or the host checks (glmops.cli.verify); each
answers an Outcome per host."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from glmops import paths
from glmops.cli.up import MODEL_PATHS, PHASES, PLAYBOOKS, Outcome, Progress
from glmops.engine.connection import ConnectionSettings
from glmops.engine.inventory import Host
from glmops.engine.secretenv import become_password
from glmops.errors import ExitCode, GlmopsError


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
        from glmops.cli.main import fleet_run

        self.fleet_run: Callable[..., Any] = functools.partial(
            fleet_run, opts={**opts, "inventory": inventory}
        )

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
        deploy = FleetDeploy(
            inventory, pattern, self.fleet_run, json_events=bool(self.opts.get("json_events"))
        )
        return int(deploy.route(failed))

    def playbook(
        self, path: Path, hosts: list[Host], values: dict[str, Any] | None = None
    ) -> dict[str, Outcome]:
        """Run a phase's playbook on `hosts`; `values` (what an earlier phase found, such as
        the model files' paths from the Hub) go in as typed data, never as templates."""
        from glmops.cli.main import run_playbook

        failures: dict[str, str] = {}
        seen: dict[str, Any] = {}

        def watch(executor: Any) -> None:
            seen["executor"] = executor
            report = executor.reporter.task

            def task(host: str, name: str, result: Any, **kwargs: Any) -> None:
                if result.failed and not result.ignored and host not in failures:
                    failures[host] = f"task '{name}': {executor.reporter.masker.mask(result.msg)}"
                report(host, name, result, **kwargs)

            executor.reporter.task = task

        names = ",".join(h.name for h in hosts)
        opts = {**self.opts, "inventory": self.inventory}
        run_playbook(path, limit=names, data_vars=values, prepare=watch, **opts)
        sessions = seen["executor"].sessions if "executor" in seen else {}
        outcomes = {}
        for host in hosts:
            tally = sessions[host.name].tally if host.name in sessions else None
            if tally is None:
                outcomes[host.name] = Outcome("failed", "the playbook did not reach this host")
            elif tally.unreachable:
                outcomes[host.name] = Outcome("unreachable", failures.get(host.name, ""))
            elif tally.failed:
                outcomes[host.name] = Outcome("failed", failures.get(host.name, ""))
            elif tally.changed:
                outcomes[host.name] = Outcome("changed", "", tally.changed)
            else:
                outcomes[host.name] = Outcome("ok")
        return outcomes

    def model(self, hosts: list[Host]) -> dict[str, Outcome]:
        """The model files from the Hub, fetched once and fanned out (glmops.model)."""
        from glmops.engine.connection import ConnectionSettings
        from glmops.engine.executor import default_run_root
        from glmops.engine.output import Reporter
        from glmops.engine.runlog import Masker, RunLog
        from glmops.model.phase import ModelOptions, run_model_phase

        password = self.sudo_password
        masker = Masker({password} if password else set())
        options = ModelOptions(
            check=bool(self.opts.get("check")),
            sudo_password=password,
            connection=ConnectionSettings(strict_host_keys=bool(self.opts.get("strict_host_keys"))),
        )
        reporter = Reporter(
            masker,
            verbosity=self.opts.get("verbose", 0),
            json_events=self.opts.get("json_events", False),
            check=options.check,
        )
        reporter.play("model files", [h.name for h in hosts])
        results = run_model_phase(
            hosts, reporter, RunLog(default_run_root(), masker), masker, options
        )
        outcomes = {}
        for host in hosts:
            result = results.get(host.name)
            if result is None:
                outcomes[host.name] = Outcome("failed", "the model phase gave no result")
                continue
            status = result.status.value
            values = {k: result.data[k] for k in MODEL_PATHS if result.data.get(k)}
            outcomes[host.name] = Outcome(
                status, result.msg, int(status == "changed"), values if not result.failed else {}
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
    from glmops.engine.executor import default_run_root
    from glmops.engine.runlog import Masker, RunLog
    from glmops.model import held
    from glmops.model.hostops import connect, parallel
    from glmops.model.manifest import Manifest

    reasons: dict[str, str] = {}
    manifests: dict[str, Manifest] = {}
    for host in hosts:
        if host.vars.get("model_source"):
            found = held.cached_manifest(host.name, host.vars, options.cache_root)
            if isinstance(found, str):
                reasons[host.name] = found
            else:
                manifests[host.name] = found
    masker = Masker({options.sudo_password} if options.sudo_password else set())
    unreachable: dict[str, Any] = {}
    targets = [h for h in hosts if h.name in manifests]
    if not targets:
        return reasons
    ctxs = connect(targets, RunLog(default_run_root(), masker), masker, options, unreachable)
    reasons.update({n: f"cannot look: {r.msg}" for n, r in unreachable.items()})

    def look(ctx: Any) -> dict[str, Any]:
        try:
            request = held.stat_request(manifests[ctx.host.name], ctx.host.vars)
            return ctx.run_helper("model_files", request, timeout=600)
        except GlmopsError as error:  # that host's trouble: its model phase runs and says so
            return {"failed": True, "msg": f"cannot look: {error}"}

    try:
        replies = parallel(ctxs, look)
    finally:
        for ctx in ctxs.values():
            ctx.conn.close()
    for name, reply in replies.items():
        found = held.findings(reply)
        if found:
            reasons[name] = found
    return reasons
