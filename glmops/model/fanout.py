"""Distribute the verified files from the controller to the hosts as a tree, over rsync+SSH.

The controller seeds the first hosts; every host that finishes (and verifies) becomes a source
for the rest, each source serving at most `per_source` transfers at once, so the copies double
each round and no uplink carries N copies. A host pulls from a peer with this run's ephemeral
key (glmops.model.access); rsync keeps partial data aside (--partial-dir), so an interrupted
file resumes and is never seen under its name. A source that fails mid-transfer is dropped and
its targets continue from another source. A failure is laid at the source only when the source
is to blame: the target's own errors (its disk full, read-only or refusing the files) fail that
target alone, and when a pull breaks off but the source still answers the controller, the
target tries another source and this one keeps seeding.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from glmops.engine.connection import quote
from glmops.engine.context import TaskContext
from glmops.errors import GlmopsError
from glmops.model.access import RUN_DIR, RunKey, ssh_command, ssh_target
from glmops.model.manifest import Manifest

CONTROLLER = "controller"
PARTIAL_DIR = ".glmops-rsync-partial"
#: rsync exit codes that mean the other end (the source of a pull) went away or stalled.
SOURCE_TROUBLE = {5, 10, 12, 30, 35, 255}
#: What rsync prints when the receiving side (the target of a pull) cannot take the files.
TARGET_TROUBLE = re.compile(
    r"No space left on device|Disk quota exceeded|Read-only file system|Too many open files"
    r"|mkdir .* failed|mkstemp .* failed|write failed",
    re.IGNORECASE,
)
MAX_ATTEMPTS = 3
PROBE_TIMEOUT = 30
RSYNC_TIMEOUT = 6 * 3600
Event = Callable[..., None]


@dataclass
class Target:
    name: str
    ctx: TaskContext
    model_dir: str
    attempts: int = 0
    tried: set[str] = field(default_factory=set)
    done: bool = False
    error: str | None = None
    source: str | None = None
    received: int = 0
    seconds: float = 0.0
    #: files the host holds in another form (shards removed after a verified merge): not sent
    skip: frozenset[str] = frozenset()


@dataclass
class Plan:
    """What fan_out needs: the manifest, the controller's copy and how hosts reach each other."""

    manifest: Manifest
    files_root: Path  # the controller's copy (ModelCache.files)
    key: RunKey
    known_hosts: Path  # glmops' known_hosts on the controller
    per_source: int = 2
    tree: bool = True  # False: only the controller serves (the baseline)
    controller: bool = True  # False: a seed host fetched from the Hub; the controller sends nothing
    verify: Callable[[Target], dict[str, Any]] | None = None


class FanOut:
    def __init__(self, plan: Plan, targets: list[Target], seeds: list[Target], on_event: Event):
        self.plan = plan
        self.targets = {t.name: t for t in targets}
        self.hosts = {t.name: t for t in [*targets, *seeds]}
        # source -> transfers running now
        self.sources: dict[str, int] = {CONTROLLER: 0} if plan.controller else {}
        if plan.tree or not plan.controller:
            self.sources.update({s.name: 0 for s in seeds})
        self.sent: dict[str, int] = {}  # bytes each source sent
        self.dead: set[str] = set()
        self.on_event = on_event
        self._cv = threading.Condition()
        self._probes: dict[str, threading.Lock] = {}
        self._list = file_list(plan.manifest)

    def run(self) -> dict[str, Target]:
        pending = list(self.targets.values())
        running: list[threading.Thread] = []
        with self._cv:
            while pending or any(t.is_alive() for t in running):
                for target in list(pending):
                    source = self._pick(target)
                    if source is None:
                        continue
                    pending.remove(target)
                    self.sources[source] += 1
                    thread = threading.Thread(
                        target=self._transfer, args=(source, target, pending), daemon=True
                    )
                    running.append(thread)
                    thread.start()
                if pending and not any(t.is_alive() for t in running) and not self._any_source():
                    for target in pending:
                        target.error = "no source left to copy from: " + ", ".join(self.dead)
                    break
                self._cv.wait(timeout=1.0)
        return self.targets

    def _any_source(self) -> bool:
        return any(s not in self.dead for s in self.sources)

    def _pick(self, target: Target) -> str | None:
        free = [
            (load, s != CONTROLLER, s)  # peers first at equal load: spare the controller
            for s, load in self.sources.items()
            if s not in self.dead and s not in target.tried and load < self._limit(s)
        ]
        if not free:
            untried = [s for s in self.sources if s not in self.dead and s not in target.tried]
            if not untried and self._any_source():
                target.tried.clear()  # every live source failed once: allow another round
            return None
        return min(free, key=lambda x: (x[0], not x[1]))[2]

    def _limit(self, source: str) -> int:
        if not self.plan.tree:  # the one source sends to every host at once
            return len(self.targets)
        return self.plan.per_source

    def _transfer(self, source: str, target: Target, pending: list[Target]) -> None:
        target.attempts += 1
        self.on_event("transfer", host=target.name, source=source)
        started = time.monotonic()
        outcome, sent, message = self._copy(source, target)
        elapsed = time.monotonic() - started
        if outcome == "ok":
            try:
                verified = self.plan.verify(target) if self.plan.verify else {"complete": True}
            except GlmopsError as error:
                verified = {"complete": False, "lost": str(error)}
            if verified.get("lost"):
                outcome, message = "target", f"{target.name}: {verified['lost']}"
            elif not verified.get("complete"):
                outcome = "retry"
                message = f"copy from {source} failed verification: {verified.get('msg')}"
        with self._cv:
            self.sources[source] -= 1
            self.sent[source] = self.sent.get(source, 0) + sent
            if outcome == "ok":
                target.done, target.source, target.received = True, source, sent
                target.seconds = elapsed
                if self.plan.tree:
                    self.sources.setdefault(target.name, 0)
            elif outcome == "source":
                self.dead.add(source)
                target.tried.add(source)
                self._requeue(target, pending, message)
            elif outcome == "retry":
                target.tried.add(source)
                self._requeue(target, pending, message)
            else:
                target.error = message
            self._cv.notify_all()
        self.on_event(
            "done" if target.done else "failed" if target.error else "retry",
            host=target.name,
            source=source,
            msg=message,
            bytes=sent,
            seconds=elapsed,
        )

    def _requeue(self, target: Target, pending: list[Target], message: str) -> None:
        if target.attempts >= MAX_ATTEMPTS:
            target.error = f"gave up after {target.attempts} attempts: {message}"
        else:
            pending.append(target)

    def _copy(self, source: str, target: Target) -> tuple[str, int, str]:
        """('ok' | 'source' | 'target' | 'retry', bytes the source sent, message)."""
        try:
            if source == CONTROLLER:
                return self._push(target)
            return self._pull(self.hosts[source], target)
        except (GlmopsError, OSError, subprocess.SubprocessError) as error:
            return "target", 0, f"{target.name}: {error}"

    def _push(self, target: Target) -> tuple[str, int, str]:
        host = target.ctx.host
        address, port = ssh_target(host)
        key = host.connection.key_file
        known = str(self.plan.known_hosts)
        key_path = str(Path(key).expanduser()) if key else None
        ssh = ssh_command(key_path, known, port, host.connection.jump)
        target.ctx.run(f"mkdir -p {quote(target.model_dir)}", check=True, what="mkdir model_dir")
        with tempfile.NamedTemporaryFile("w", suffix=".files") as listing:
            listing.write(file_list(self.plan.manifest, target.skip))
            listing.flush()
            argv = [
                "rsync",
                *RSYNC_FLAGS,
                f"--files-from={listing.name}",
                "-e",
                ssh,
                f"{self.plan.files_root}/",
                f"{address}:{target.model_dir}/",
            ]
            if host.connection.user not in (None, "root") and target.ctx.become:
                argv.insert(1, "--rsync-path=sudo -n rsync")
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=RSYNC_TIMEOUT)
        target.ctx.log.command(
            target.name, " ".join(argv), proc.returncode, 0.0, proc.stdout, proc.stderr
        )
        if proc.returncode != 0:
            return "target", 0, f"rsync from the controller failed: {_tail(proc)}"
        return "ok", _stat(proc.stdout, "sent"), "copied from the controller"

    def _pull(self, source: Target, target: Target) -> tuple[str, int, str]:
        address, port = ssh_target(source.ctx.host)
        run = f"{RUN_DIR}/{self.plan.key.run_id}"
        ssh = ssh_command(f"{run}/key", f"{run}/known_hosts", port)
        command = (
            f"mkdir -p {quote(target.model_dir)} && rsync {' '.join(RSYNC_FLAGS)} "
            f"--files-from={run}/files -e {quote(ssh)} {quote(address + ':')} "
            f"{quote(target.model_dir + '/')}"
        )
        result = target.ctx.run(command, timeout=RSYNC_TIMEOUT)
        if result.rc == 0:
            return "ok", _stat(result.stdout, "received"), f"copied from {source.name}"
        why = f"rsync from {source.name} failed (rc={result.rc}): {_tail(result)}"
        if TARGET_TROUBLE.search(result.stderr):
            return "target", 0, f"{target.name} cannot take the files: {why}"
        if result.rc not in SOURCE_TROUBLE:
            return "target", 0, why
        if self._answers(source):  # the link or the target is at fault: try another source
            return "retry", 0, f"{why} (source {source.name} still answers; kept as a source)"
        return "source", 0, f"source {source.name} failed: {why}"

    def _answers(self, source: Target) -> bool:
        """Whether the source still runs commands for the controller (one probe at a time)."""
        with self._probes.setdefault(source.name, threading.Lock()):
            try:
                return source.ctx.run("true", timeout=PROBE_TIMEOUT).rc == 0
            except (GlmopsError, OSError):
                return False

    @property
    def file_list(self) -> str:
        return self._list


def file_list(manifest: Manifest, skip: frozenset[str] = frozenset()) -> str:
    """rsync's --files-from: the manifest's files a host still takes."""
    return "".join(f"{f.path}\n" for f in manifest.files if f.path not in skip)


RSYNC_FLAGS = (
    "-a",
    f"--partial-dir={PARTIAL_DIR}",
    "--timeout=120",
    "--stats",
)


def _stat(stdout: str, which: str) -> int:
    match = re.search(rf"Total bytes {which}: ([\d,]+)", stdout)
    return int(match.group(1).replace(",", "")) if match else 0


def _tail(result: Any) -> str:
    return (result.stderr.strip() or result.stdout.strip())[-400:]
