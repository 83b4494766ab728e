"""What the model phase does on each host: connect, verify, check the disk, fetch as the seed,
and grant or revoke the run's key. Every call is one command or one host helper.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any, cast

from glmops.engine import runlock
from glmops.engine.connection import quote
from glmops.engine.context import TaskContext
from glmops.engine.facts_gather import gather
from glmops.engine.inventory import Host
from glmops.engine.output import Reporter
from glmops.engine.results import Status, TaskResult
from glmops.engine.run_state import RunOptions, RunState
from glmops.engine.runlog import Masker, RunLog
from glmops.engine.sessions import SessionPool
from glmops.errors import GlmopsError, HostUnreachable
from glmops.gpu.facts import parse_facts
from glmops.gpu.serving import needs_single_file
from glmops.hosthelpers.model_fetch import FetchReply
from glmops.hosthelpers.model_files import RoomReply, VerifyReply
from glmops.model.access import RUN_DIR, RunKey, authorize_script, known_host_lines, revoke_script
from glmops.model.fanout import Plan, Target, file_list
from glmops.model.fetch import HubAccess
from glmops.model.manifest import Manifest
from glmops.model.progress import Meter
from glmops.model.source import model_dir

TASK = "model files"
#: Room left free beyond the files (and merged file): 2% of their size, at least 1 GiB.
MARGIN_FRACTION = 0.02
MARGIN_MIN = 1 << 30


def connect(
    hosts: list[Host],
    reporter: Reporter,
    runlog: RunLog,
    masker: Masker,
    options: Any,
    results: dict[str, TaskResult],
) -> tuple[SessionPool, dict[str, TaskContext]]:
    """A TaskContext per reachable host through the engine's sessions (options: check,
    sudo_password, connection). A host another run is changing is refused (its run lock is
    tried), but the phase does not hold the lock: holding it would keep a host whose link was
    cut locked until its sshd drops the dead session. The unreachable ones get their result
    in `results`; the caller closes the pool."""
    run_options = RunOptions(
        check=options.check,
        sudo_password=options.sudo_password,
        connection=options.connection,
        lock=False,
    )
    pool = SessionPool(RunState(run_options, reporter, masker, runlog))
    holder = runlock.holder_info(str(runlog.path))

    def one(host: Host) -> TaskContext | TaskResult:
        try:
            ctx = pool.open(host, TASK)
            if not options.check:
                runlock.acquire(ctx, holder)()  # refused when another run holds it
            return ctx
        except (HostUnreachable, ValueError) as error:
            return TaskResult(Status.UNREACHABLE, str(error) or "cannot run commands")
        except runlock.HostLocked as error:
            return TaskResult(Status.FAILED, f"run lock: {error}")

    ctxs = {}
    with ThreadPoolExecutor(max_workers=min(len(hosts), 32) or 1) as threads:
        for host, ctx in zip(hosts, threads.map(one, hosts), strict=True):
            if isinstance(ctx, TaskResult):
                results[host.name] = ctx
            else:
                ctxs[host.name] = ctx
    return pool, ctxs


def parallel(ctxs: dict[str, TaskContext], work: Callable[[TaskContext], Any]) -> dict[str, Any]:
    if not ctxs:
        return {}
    with ThreadPoolExecutor(max_workers=min(len(ctxs), 32)) as pool:
        return dict(zip(ctxs, pool.map(work, ctxs.values()), strict=True))


def verify(ctx: TaskContext, manifest: Manifest, full: bool = False) -> VerifyReply:
    """The host helper's verdict on model_dir (complete, missing, bad); in check mode it
    writes and deletes nothing."""
    args = {
        "mode": "verify",
        "model_dir": model_dir(ctx.vars or ctx.host.vars),
        "manifest": json.loads(manifest.to_json()),
        "digest": manifest.digest,
        "full": full,
        "check": ctx.check,
    }
    return cast(VerifyReply, ctx.run_helper("model_files", args, timeout=6 * 3600))


def preflight(
    ctx: TaskContext, manifest: Manifest, merged: frozenset[str] = frozenset()
) -> str | None:
    """None when the disk has room; else the refusal, naming host, path, needed and free.
    Shards a verified merge holds (`merged`) need no room, nor does that merge again."""
    variables = ctx.host.vars
    shards = sum(f.size for f in manifest.files if f.path.endswith(".gguf"))
    single, why = needs_single_file(parse_facts(_facts(ctx)), variables)
    extra = shards if single and not merged else 0
    margin = variables.get("model_disk_margin_bytes")
    margin = (
        int(margin)
        if margin is not None
        else max(MARGIN_MIN, int(manifest.total_bytes * MARGIN_FRACTION))
    )
    request = {
        "mode": "preflight",
        "model_dir": model_dir(variables),
        "files": [[f.path, f.size] for f in manifest.files if f.path not in merged],
        "extra_bytes": extra,
        "margin_bytes": margin,
    }
    reply = cast(RoomReply, ctx.run_helper("model_files", request))
    if reply["ok"]:
        return None
    merge_note = f" + {extra} for the merged file ({why})" if extra else ""
    return (
        f"not enough disk on {ctx.host.name} for {model_dir(variables)}: {reply['path']} needs "
        f"{reply['needed']} bytes (the missing files{merge_note} + a margin of {margin}), "
        f"{reply['free']} free; nothing was copied"
    )


def _facts(ctx: TaskContext) -> dict[str, Any]:
    try:
        return gather(ctx, ctx.host.vars)
    except GlmopsError:
        return {}


def seed_fetch(
    seed: TaskContext, manifest: Manifest, missing: list[str], hub: HubAccess, reporter: Reporter
) -> TaskResult | None:
    """The seed host downloads from the Hub itself; None when it then verifies complete."""
    from huggingface_hub import hf_hub_url
    from huggingface_hub.utils import build_hf_headers

    commits = {s["part"]: (s["repo"], s["commit"]) for s in manifest.sources}
    files = []
    for entry in manifest.files:
        if entry.path in missing:
            part, _, repo_path = entry.path.partition("/")
            repo, commit = commits[part]
            url = hf_hub_url(repo, repo_path, revision=commit, endpoint=hub.endpoint)
            files.append(
                {"path": entry.path, "url": url, "size": entry.size, "sha256": entry.sha256}
            )
    headers = {
        k: v
        for k, v in build_hf_headers(token=hub.token).items()
        if k.lower() in ("authorization", "user-agent")
    }
    root = model_dir(seed.host.vars)
    target = Target(seed.host.name, seed, root)
    reporter.note(
        f"{seed.host.name}: fetching {len(files)} file(s) from the Hub (seed)", seed.host.name
    )
    with Meter(
        "seed fetch", manifest.total_bytes, lambda: arrived([target], manifest), reporter.note, 30
    ):
        reply = cast(
            FetchReply,
            seed.run_helper(
                "model_fetch",
                {"model_dir": root, "files": files, "headers": headers},
                timeout=24 * 3600,
            ),
        )
    if reply.get("failed"):
        return TaskResult(Status.FAILED, f"seed {seed.host.name} could not fetch: {reply['msg']}")
    verified = verify(seed, manifest)
    if not verified.get("complete"):
        return TaskResult(
            Status.FAILED, f"seed {seed.host.name}: {verified['msg']} after its fetch"
        )
    return None


def arrived(targets: list[Target], manifest: Manifest) -> int:
    """Bytes on the targets so far (for the progress line): one `du` per host still copying."""
    total = 0
    for target in targets:
        if target.done:
            total += manifest.total_bytes
            continue
        parts = " ".join(quote(f"{target.model_dir}/{s['part']}") for s in manifest.sources)
        result = target.ctx.run(f"du -s -B1 --apparent-size {parts} 2>/dev/null", timeout=60)
        total += sum(int(line.split()[0]) for line in result.stdout.splitlines() if line.strip())
    return total


def grant(
    ctx: TaskContext,
    key: RunKey,
    fleet: list[TaskContext],
    plan: Plan,
    skip: frozenset[str] = frozenset(),
) -> None:
    """This run's key on one host: its private half (root-only, under /run) and its public
    half authorized for a read-only rsync of model_dir, from the fleet's addresses only; the
    files it pulls are the manifest's less `skip`."""
    root = model_dir(ctx.host.vars)
    addresses = [c.host.connection.address for c in fleet]
    as_user = replace(ctx, become=False)
    as_user.run(
        authorize_script(key.authorized_line(root, addresses)), check=True, what="authorize"
    )
    run = f"{RUN_DIR}/{key.run_id}"
    known = known_host_lines(plan.known_hosts, [c.host for c in fleet])
    files = file_list(plan.manifest, skip)
    for name, text in (("key", key.private_pem), ("known_hosts", known), ("files", files)):
        ctx.run(
            f"umask 077 && mkdir -p {quote(run)} && cat > {quote(run + '/' + name)}",
            stdin=text,
            check=True,
            what=f"write {run}/{name}",
        )


def revoke(ctx: TaskContext) -> str | None:
    try:
        replace(ctx, become=False).run(revoke_script(), check=True, what="revoke")
        ctx.run(f"rm -rf {quote(RUN_DIR)}", check=True, what=f"remove {RUN_DIR}")
    except (GlmopsError, OSError) as error:
        return str(error)[:200]
    return None
