"""The model phase: fetch once on the controller, check every host's disk, fan out, verify.

`run_model_phase` is what `glmops model` and `glmops up` call. It reads, per host:
`model_source` (glmops.model.source), `model_dir` (default /var/lib/glmops/models/GLM-5),
`hf_token` (a secret; else $HF_TOKEN), `hf_endpoint` (else $HF_ENDPOINT), `model_disk_margin_bytes`,
and what decides the merged file (`gguf_needs_single_file`, `vllm_profile`, the facts). Files
land in `<model_dir>/weights/<repo path>` and `<model_dir>/config/`; each host's result says
so (`gguf_shards`, `glm5_hf_config_dir`), for deploy.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from glmops.engine.connection import ConnectionSettings
from glmops.engine.context import TaskContext
from glmops.engine.hostvars import rendered_host
from glmops.engine.inventory import Host
from glmops.engine.output import Reporter
from glmops.engine.results import Status, TaskResult
from glmops.engine.runlog import Masker, RunLog
from glmops.errors import GlmopsError, InputError
from glmops.model.access import RunKey
from glmops.model.fanout import FanOut, Plan, Target
from glmops.model.fetch import HubAccess, ModelCache, default_cache_root, download, resolve
from glmops.model.hostops import (
    MARGIN_MIN,
    TASK,
    arrived,
    connect,
    grant,
    parallel,
    preflight,
    revoke,
    seed_fetch,
    verify,
)
from glmops.model.manifest import Manifest
from glmops.model.progress import Meter, human_bytes
from glmops.model.source import model_dir, parse_source


@dataclass
class ModelOptions:
    check: bool = False
    per_source: int = 2  # transfers one source serves at once
    tree: bool = True  # False: the controller pushes to every host (the baseline)
    full_verify: bool = False  # hash every file on every host, trusting no state file
    refresh: bool = False  # resolve the source again instead of keeping the manifest
    seed: str | None = None  # a host that fetches from the Hub instead of the controller
    cache_root: Path | None = None
    on_event: Callable[..., None] | None = None  # transfer events (progress, tests)
    sudo_password: str | None = None
    connection: ConnectionSettings = field(default_factory=ConnectionSettings)


def run_model_phase(
    hosts: list[Host],
    reporter: Reporter,
    runlog: RunLog,
    masker: Masker,
    options: ModelOptions,
) -> dict[str, TaskResult]:
    """Bring every host's model files to the manifest; a TaskResult per host (also reported).
    Each host's variables are read rendered, as the engine's tasks read them."""
    hosts = [rendered_host(h) for h in hosts]
    results: dict[str, TaskResult] = {}
    groups: dict[str, list[Host]] = {}
    for host in hosts:
        if not host.vars.get("model_source"):
            results[host.name] = TaskResult(Status.SKIPPED, "no model_source in the inventory")
            continue
        source = parse_source(host.vars["model_source"], f"host '{host.name}'")
        groups.setdefault(source.key, []).append(host)
    for members in groups.values():
        results.update(_one_source(members, reporter, runlog, masker, options))
    ordered = {h.name: results[h.name] for h in hosts if h.name in results}
    for name, result in ordered.items():
        reporter.task(name, TASK, result)
    return ordered


def _one_source(
    hosts: list[Host], reporter: Reporter, runlog: RunLog, masker: Masker, options: ModelOptions
) -> dict[str, TaskResult]:
    first = hosts[0].vars
    for host in hosts:
        masker.add_secret_vars(host.vars)
    hub = HubAccess.from_env(first.get("hf_token"), first.get("hf_endpoint"))
    masker.add(hub.token)
    source = parse_source(first["model_source"], f"host '{hosts[0].name}'")
    cache = ModelCache(options.cache_root or default_cache_root(), source)
    manifest = resolve(cache, hub, reporter.note, refresh=options.refresh, write=not options.check)
    reporter.note(
        f"manifest {manifest.digest[:12]}: {len(manifest.files)} files, "
        f"{human_bytes(manifest.total_bytes)} ({cache.manifest_path})"
    )
    results: dict[str, TaskResult] = {}
    pool, ctxs = connect(hosts, reporter, runlog, masker, options, results)
    try:
        results.update(_converge(ctxs, cache, manifest, hub, reporter, options))
    finally:
        pool.close()
    return results


def _converge(
    ctxs: dict[str, TaskContext],
    cache: ModelCache,
    manifest: Manifest,
    hub: HubAccess,
    reporter: Reporter,
    options: ModelOptions,
) -> dict[str, TaskResult]:
    """Verify what each host has, refuse hosts without room, fetch once, then fan out."""
    results: dict[str, TaskResult] = {}
    if not options.check:  # a key a killed run left behind goes first
        parallel(ctxs, revoke)
    states = parallel(ctxs, lambda c: verify(c, manifest, options.full_verify))
    need = {n: c for n, c in ctxs.items() if not states[n].get("complete")}
    for name in need:
        reporter.note(states[name]["msg"], name)
    for name in ctxs.keys() - need.keys():
        results[name] = TaskResult(
            Status.OK,
            f"complete: manifest {manifest.digest[:12]} ({states[name]['msg']})",
            data=_paths(ctxs[name], manifest),
        )
    merged = {n: frozenset(s.get("merged") or ()) for n, s in states.items()}
    refusals = parallel(need, lambda c: preflight(c, manifest, merged[c.host.name]))
    for name, refusal in refusals.items():
        if refusal:
            results[name] = TaskResult(Status.FAILED, refusal)
            need.pop(name)
    if not need:
        return results
    if options.check:
        if not options.seed:
            _would_fetch(cache, manifest, reporter)
        for name, ctx in need.items():
            missing = states[name].get("missing", []) + states[name].get("bad", [])
            results[name] = TaskResult(
                Status.CHANGED, f"would copy {len(missing)} file(s)", data=_paths(ctx, manifest)
            )
        return results
    if options.seed:
        refused = _seed_ready(ctxs, need, states, manifest, hub, reporter, options.seed)
        if isinstance(refused, TaskResult):
            return {**results, **dict.fromkeys(need, refused)}
        results.update(refused)
    else:
        _controller_room(cache, manifest)
        download(cache, manifest, hub, reporter.note)
    # a host whose shards were removed after their merge cannot serve them to others
    seeds = [ctx for name, ctx in ctxs.items() if name not in need and not merged.get(name)]
    if need:
        results.update(_distribute(cache, manifest, need, seeds, merged, reporter, options))
    return results


def _seed_ready(
    ctxs: dict[str, TaskContext],
    need: dict[str, TaskContext],
    states: dict[str, dict[str, Any]],
    manifest: Manifest,
    hub: HubAccess,
    reporter: Reporter,
    seed_name: str,
) -> TaskResult | dict[str, TaskResult]:
    """The seed host complete (fetching from the Hub if needed): its result, or why not."""
    if seed_name not in ctxs:
        raise InputError(f"seed host {seed_name} is not among the reachable hosts")
    seed = ctxs[seed_name]
    if seed_name not in need:
        if states[seed_name].get("complete"):
            return {}
        return TaskResult(Status.FAILED, f"seed {seed_name} was refused: no source")
    missing = states[seed_name]["missing"] + states[seed_name]["bad"]
    failed = seed_fetch(seed, manifest, missing, hub, reporter)
    if failed:
        return failed
    need.pop(seed_name)
    return {
        seed_name: TaskResult(
            Status.CHANGED,
            f"fetched from the Hub (seed), verified against manifest {manifest.digest[:12]}",
            data={**_paths(seed, manifest), "source": "hub"},
        )
    }


def _would_fetch(cache: ModelCache, manifest: Manifest, reporter: Reporter) -> None:
    """Check mode: what a run would download into the controller's cache (nothing is)."""
    missing = [f for f in manifest.files if not cache.verified(f)]
    if missing:
        names = ", ".join(f.path for f in missing[:5]) + (", ..." if len(missing) > 5 else "")
        size = human_bytes(sum(f.size for f in missing))
        reporter.note(f"would fetch {len(missing)} file(s), {size}, into {cache.dir}: {names}")


def _controller_room(cache: ModelCache, manifest: Manifest) -> None:
    missing = sum(f.size for f in manifest.files if not cache.verified(f))
    path = cache.dir
    while not path.exists():
        path = path.parent
    free = shutil.disk_usage(path).free
    if missing and free < missing + MARGIN_MIN:
        raise InputError(
            f"not enough disk on the controller for the model cache: {path} needs "
            f"{missing + MARGIN_MIN} bytes, {free} free (set GLMOPS_MODEL_CACHE elsewhere)"
        )


def _try_grant(
    ctx: TaskContext, key: RunKey, fleet: list[TaskContext], plan: Plan, skip: frozenset[str]
) -> str | None:
    """None when the host holds the run's key; else why not (that host only is left out)."""
    try:
        grant(ctx, key, fleet, plan, skip)
    except GlmopsError as error:
        return str(error)[:300]
    return None


def _paths(ctx: TaskContext, manifest: Manifest) -> dict[str, Any]:
    root = model_dir(ctx.host.vars)
    first = manifest.gguf_first_shard()
    return {
        "model_dir": root,
        "gguf_shards": f"{root}/{first}" if first else None,
        "glm5_hf_config_dir": f"{root}/config"
        if any(s["part"] == "config" for s in manifest.sources)
        else None,
        "manifest_digest": manifest.digest,
    }


def _distribute(
    cache: ModelCache,
    manifest: Manifest,
    need: dict[str, TaskContext],
    seeds: list[TaskContext],
    merged: dict[str, frozenset[str]],
    reporter: Reporter,
    options: ModelOptions,
) -> dict[str, TaskResult]:
    key = RunKey.generate()
    fleet = [*need.values(), *seeds]
    plan = Plan(
        manifest,
        cache.files,
        key,
        options.connection.known_hosts,
        per_source=options.per_source,
        tree=options.tree,
        controller=options.seed is None,
        verify=lambda t: dict(verify(t.ctx, manifest)),
    )
    lock = threading.Lock()

    def event(kind: str, **info: Any) -> None:
        if kind in ("transfer", "retry", "failed"):
            text = {
                "transfer": "{host}: copying from {source}",
                "retry": "{host}: {msg}; trying another source",
            }
            with lock:
                reporter.note(text.get(kind, "{host}: {msg}").format(**info), info["host"])
        if options.on_event:
            options.on_event(kind, **info)

    leftovers: list[str] = []
    try:
        granted = parallel(
            {c.host.name: c for c in fleet},
            lambda c: _try_grant(c, key, fleet, plan, merged.get(c.host.name, frozenset())),
        )
        refused = {
            n: TaskResult(Status.FAILED, f"cannot grant the run's key: {e}")
            for n, e in granted.items()
            if e
        }
        targets = [
            Target(n, c, model_dir(c.host.vars), skip=merged.get(n, frozenset()))
            for n, c in need.items()
            if n not in refused
        ]
        seed_targets = [
            Target(c.host.name, c, model_dir(c.host.vars), done=True)
            for c in seeds
            if c.host.name not in refused
        ]
        fan = FanOut(plan, targets, seed_targets, event)
        total = manifest.total_bytes * len(targets)
        with Meter("fan-out", total, lambda: arrived(targets, manifest), reporter.note, 30):
            done = fan.run()
    finally:
        for name, error in parallel({c.host.name: c for c in fleet}, revoke).items():
            if error:
                leftovers.append(f"{name} ({error})")
    sent = ", ".join(f"{s}: {human_bytes(b)}" for s, b in sorted(fan.sent.items()) if b)
    reporter.note(f"fan-out: bytes each source sent: {sent or 'none'}")
    if leftovers:
        reporter.note(
            "could not remove this run's key from: "
            + "; ".join(leftovers)
            + " (the next glmops model run removes it)"
        )
    results = {n: r for n, r in refused.items() if n in need}
    for name, target in done.items():
        data = {**_paths(target.ctx, manifest), "source": target.source, "bytes": target.received}
        if target.done:
            rate = target.received / target.seconds if target.seconds else 0
            results[name] = TaskResult(
                Status.CHANGED,
                f"copied from {target.source}: {human_bytes(target.received)} in "
                f"{target.seconds:.1f} s ({human_bytes(rate)}/s), verified against manifest "
                f"{manifest.digest[:12]}",
                data=data,
            )
        else:
            results[name] = TaskResult(Status.FAILED, target.error or "not copied", data=data)
    return results
