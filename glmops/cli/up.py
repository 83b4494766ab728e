"""`glmops up`: provision, patch, model files, deploy and verify, as phases, per host.

Each phase is an idempotent step (a playbook, the model phase, the host checks) run on the
hosts that still need it. A host that fails or is unreachable in one phase skips the later
ones; the others go on. What each host finished is kept on the controller
(`.glmops/cli/up/<inventory>.json`, beside the run directories) with a fingerprint of the host's
variables, the phase's playbook and what it renders (`fingerprint`), so a re-run continues
where the last one stopped; a phase that changes something makes the later ones run again,
and a converged host re-runs only the read-only verify phase, after a stat-only look at its
model files (up_phases.recheck): files that are no longer as verified run the model phase and
the later ones again. In a fleet (`router_host`), the router host runs no phase; after the
deploy phase the router lists every replica that did not fail (glmops.fleet.roll).

The run options mean for `up` what they mean for a playbook verb. --syntax-check,
--list-hosts and --list-tasks answer for each playbook phase and run nothing (`list_phases`).
--tags/--skip-tags select playbook tasks: a filtered `up` runs the selected tasks of each
playbook phase on every host, leaves out the model and verify phases and the router, and
records no phase as finished (it ran only part of one); what it changes still makes the
later phases run again next time.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from glmops import __version__, paths
from glmops.cli.phases import PHASES
from glmops.engine import results
from glmops.engine.inventory import Host
from glmops.engine.output import event_line
from glmops.engine.results import HostTally
from glmops.engine.runlog import is_secret_name
from glmops.errors import InputError
from glmops.model.manifest import write_atomic

PLAYBOOKS = {"provision": "provision.yml", "patch": "patch.yml", "deploy": "deploy.yml"}
#: Phases that change nothing, so they run every time (a converged host is still checked).
ALWAYS = ("verify",)
#: What the model phase tells deploy: where the shards and the HF config landed.
MODEL_PATHS = ("gguf_shards", "glm5_hf_config_dir")
#: Run options that answer without running anything.
LISTINGS = ("syntax_check", "list_hosts", "list_tasks")
#: The phases that are no playbook, as --list-* names them.
NOT_PLAYBOOKS = {
    "model": "fetch the model from the Hub once and copy it to the hosts (`glmops model`)",
    "verify": "the read-only host checks (`glmops verify`)",
}


@dataclass
class Outcome:
    """What one phase did on one host."""

    status: str  # ok | changed | failed | unreachable | skipped | done
    msg: str = ""
    changed: int = 0
    #: Values later phases read (the model phase's gguf_shards and glm5_hf_config_dir).
    values: dict[str, Any] = field(default_factory=dict)

    @property
    def stops(self) -> bool:
        return self.status in ("failed", "unreachable")

    def cell(self) -> str:
        if self.status == "changed":
            return f"changed {self.changed}"
        return self.status


PhaseRunner = Callable[[str, list[Host]], dict[str, Outcome]]
#: (phase, hosts it is recorded done on) -> {host: why the phase must run again}.
Recheck = Callable[[str, list[Host]], dict[str, str]]


@dataclass
class Progress:
    """The phases each host finished, with the fingerprint they finished under."""

    path: Path
    hosts: dict[str, dict[str, str]] = field(default_factory=dict)
    values: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> Progress:
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            return cls(path)
        except (OSError, ValueError) as error:
            raise InputError(f"{path}: unreadable progress of `glmops up`: {error}") from None
        hosts = {str(h): dict(p) for h, p in data.get("hosts", {}).items()}
        return cls(path, hosts, {str(h): dict(v) for h, v in data.get("values", {}).items()})

    def done(self, host: str, phase: str, fingerprint: str) -> bool:
        return self.hosts.get(host, {}).get(phase) == fingerprint

    def finish(self, host: str, phase: str, fingerprint: str) -> None:
        self.hosts.setdefault(host, {})[phase] = fingerprint

    def forget(self, host: str, phases: tuple[str, ...]) -> None:
        for phase in phases:
            self.hosts.get(host, {}).pop(phase, None)

    def save(self) -> None:
        state = {"hosts": self.hosts, "values": self.values}
        write_atomic(self.path, json.dumps(state, indent=1, sort_keys=True) + "\n")


def fingerprint(host: Host, phase: str) -> str:
    """What a finished phase depends on; a change to any of it runs the phase again: glmops'
    version, the host's variables, and for a playbook phase the playbook and the shipped files
    playbooks render or inline (templates/, backend/). A secret (runlog.is_secret_name: so
    `hf_token`, never `glm5_tokenizer`) counts by its sha256: a rotated `vllm_api_key`
    deploys again, and the value itself never enters the fingerprint."""
    variables = {k: _secret_digest(v) if is_secret_name(k) else v for k, v in host.vars.items()}
    digest = hashlib.sha256(__version__.encode())
    digest.update(json.dumps(variables, sort_keys=True, default=str).encode())
    if phase in PLAYBOOKS:
        digest.update((paths.playbooks() / PLAYBOOKS[phase]).read_bytes())
        for folder in (paths.templates(), paths.backend()):
            digest.update(_tree_digest(folder).encode())
    return digest.hexdigest()[:16]


def _secret_digest(value: Any) -> str:
    return "sha256:" + hashlib.sha256(json.dumps(value, default=str).encode()).hexdigest()


def _tree_digest(folder: Path) -> str:
    """The sha256 of every file under `folder` (names and contents), read again only when a
    file's size or mtime changed."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    stats = tuple(
        (str(p.relative_to(folder)), p.stat().st_size, p.stat().st_mtime_ns) for p in files
    )
    return _files_digest(folder, stats)


@functools.lru_cache(maxsize=8)
def _files_digest(folder: Path, stats: tuple[tuple[str, int, int], ...]) -> str:
    digest = hashlib.sha256()
    for name, _, _ in stats:
        digest.update(name.encode() + b"\0" + (folder / name).read_bytes() + b"\0")
    return digest.hexdigest()


def progress_path(inventory: Path) -> Path:
    from glmops.engine.run_state import default_run_root

    key = hashlib.sha256(str(inventory.resolve()).encode()).hexdigest()[:12]
    return default_run_root().parent / "up" / f"{inventory.stem}-{key}.json"


def converge(
    hosts: list[Host],
    phases: tuple[str, ...],
    runner: PhaseRunner,
    progress: Progress,
    *,
    record: bool = True,
    recheck: Recheck | None = None,
    partial: bool = False,
) -> dict[str, dict[str, Outcome]]:
    """Run each phase on the hosts that still need it; {phase: {host: outcome}}. With
    record False (check mode) the progress file is left as it was. `recheck` looks again at
    the hosts a phase is recorded done on: those it names run that phase and the later ones.
    A change forgets every later phase of PHASES, skipped ones too. With partial (a run of
    selected tasks) every phase runs on every live host and none is recorded as finished; a
    phase that changes or fails is forgotten with the later ones."""
    summary: dict[str, dict[str, Outcome]] = {}
    alive = list(hosts)
    for phase in phases:
        later = PHASES[PHASES.index(phase) + 1 :]  # skipped ones too: they would be stale
        summary[phase] = row = {}
        done = [
            h
            for h in alive
            if not partial
            and phase not in ALWAYS
            and progress.done(h.name, phase, fingerprint(h, phase))
        ]
        undone = recheck(phase, done) if recheck and done else {}
        for name in undone:
            progress.forget(name, (phase, *later))
        todo = []
        for host in alive:
            if host in done and host.name not in undone:
                row[host.name] = Outcome("done", "finished in an earlier run; unchanged since")
            else:
                todo.append(host)
        outcomes = runner(phase, todo) if todo else {}
        for host in todo:
            outcome = outcomes.get(host.name) or Outcome("failed", "the phase gave no result")
            row[host.name] = outcome
            if outcome.stops:
                progress.forget(host.name, (phase, *later))
                alive.remove(host)
                continue
            if outcome.changed:  # a run of selected tasks may have left the rest stale
                progress.forget(host.name, (phase, *later) if partial else later)
            if outcome.values:
                progress.values.setdefault(host.name, {}).update(outcome.values)
            if phase not in ALWAYS and not partial:
                progress.finish(host.name, phase, fingerprint(host, phase))
        if record:
            progress.save()
    return summary


def print_summary(
    summary: dict[str, dict[str, Outcome]], hosts: list[Host], *, as_json: bool = False
) -> None:
    """One line per host with each phase's outcome, then what stopped a host, and why; with
    as_json one `up` event holding the same."""
    phases = list(summary)
    if as_json:
        table = {
            h.name: {
                p: {"status": o.status, "changed": o.changed, "msg": o.msg}
                for p in phases
                if (o := summary[p].get(h.name))
            }
            for h in hosts
        }
        click.echo(event_line("up", phases=phases, hosts=table))
        return
    width = max(len(h.name) for h in hosts) + 2
    click.echo("UP " + "".ljust(width - 3) + "".join(p.ljust(14) for p in phases))
    for host in hosts:
        cells = [summary[p][host.name].cell() if host.name in summary[p] else "-" for p in phases]
        click.echo(host.name.ljust(width) + "".join(c.ljust(14) for c in cells))
    for phase in phases:
        for name, outcome in summary[phase].items():
            if outcome.stops or outcome.status == "skipped":
                click.echo(f"{name}: {phase} {outcome.status}: {outcome.msg}")


def exit_code(summary: dict[str, dict[str, Outcome]], *, check: bool = False) -> int:
    """The verbs' exit-code rule (engine.results.exit_code), over every phase and host."""
    tallies = [
        HostTally(
            changed=int(o.status == "changed"),
            failed=int(o.status == "failed"),
            unreachable=int(o.status == "unreachable"),
        )
        for row in summary.values()
        for o in row.values()
    ]
    return results.exit_code(tallies, check=check)
