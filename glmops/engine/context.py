"""What a module sees of one host while its task runs: commands, files and helpers.

All remote work goes through here, so sudo, timeouts, quoting, logging and masking are done
once, the same way, for every module.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from glmops.engine.checkcache import CheckCache
from glmops.engine.connection import CommandResult, Connection, announce_group, quote
from glmops.engine.inventory import Host
from glmops.engine.runlog import Masker, RunLog
from glmops.errors import CommandTimeout, GlmopsError, ModuleError
from glmops.gpu.facts import HostFacts, parse_facts


class RemoteCommandError(GlmopsError):
    """A command a module needed failed; carries its result for the task's message."""

    def __init__(self, what: str, result: CommandResult):
        self.result = result
        tail = (result.stderr.strip() or result.stdout.strip())[-800:]
        super().__init__(f"{what} failed (rc={result.rc}): {tail}")


@dataclass
class RemoteInfo:
    """Learned once per host on connect: who we are there and where glmops keeps its state."""

    uid: int
    home: str
    python: str | None
    staging_ready: bool = False

    @property
    def staging(self) -> str:
        """A folder only the SSH user can write, for uploads on their way to their target."""
        return f"{self.home}/.cache/glmops"


@dataclass
class FileState:
    kind: str  # "file", "directory", "link", "other"
    mode: str  # octal, e.g. "644"
    owner: str
    group: str
    sha256: str | None


@dataclass
class TaskContext:
    host: Host
    conn: Connection
    remote: RemoteInfo
    log: RunLog
    masker: Masker
    check: bool = False
    diff: bool = False
    become: bool = False
    sudo_password: str | None = None
    timeout: float | None = None
    task_name: str = ""
    #: Run as this user instead of root when becoming (`become_user`).
    become_user: str | None = None
    #: Environment variables every command of the task gets (`environment:`).
    environment: dict[str, str] = field(default_factory=dict)
    #: Keep commands and their output out of the run log (`no_log: true`).
    no_log: bool = False
    vars: dict[str, Any] = field(default_factory=dict)
    search_paths: list[Path] = field(default_factory=list)
    #: Show a progress line to the operator (and the JSON stream); set by the executor.
    notify_progress: Callable[[str], None] | None = field(default=None, repr=False)
    #: Drop the connection and open a new one (after a reboot); set by the executor.
    reconnect: Callable[[], Connection] | None = field(default=None, repr=False)
    #: This host's checks run ahead of its tasks (glmops/engine/prefetch.py), each answered
    #: once from there instead of from the host.
    prefetched: CheckCache | None = field(default=None, repr=False)
    _deadline: float | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.timeout:
            self._deadline = time.monotonic() + self.timeout

    def progress(self, text: str) -> None:
        """Tell the operator how a long task is getting on; also kept in the run log."""
        self.log.write(self.host.name, f"progress: {text}")
        if self.notify_progress is not None:
            self.notify_progress(text)

    def reopen(self) -> None:
        """Reconnect to the host (e.g. after it rebooted); later commands use the new link."""
        if self.reconnect is None:
            raise GlmopsError("this context cannot reconnect")
        self.conn = self.reconnect()

    @property
    def facts(self) -> HostFacts:
        """The host's gathered facts, typed: what modules read about the host."""
        return parse_facts(self.vars.get("facts") or {})

    @property
    def state_dir(self) -> str:
        """Where glmops keeps state on the host (pending handlers, backups)."""
        if self.host.connection.state_dir:
            return self.host.connection.state_dir
        privileged = self.become or self.remote.uid == 0
        return "/var/lib/glmops" if privileged else f"{self.remote.home}/.local/state/glmops"

    # -- commands --------------------------------------------------------------------------
    def run(
        self,
        command: str,
        *,
        check: bool = False,
        timeout: float | None = None,
        what: str | None = None,
        stdin: str | None = None,
        log_output: bool = True,
        essential: bool = False,
    ) -> CommandResult:
        """Run a shell command (through sudo when the task becomes root).

        log_output=False keeps stdout out of the run log (file contents, which may hold
        secrets the masker cannot recognise, e.g. in base64). essential=True runs it even
        after the run was interrupted (glmops' own bookkeeping on the host).
        """
        wrapped, prefix = self._wrap(command)
        if prefix is not None or stdin is not None:
            stdin = (prefix or "") + (stdin or "")
        limit, by_task = self._limit(timeout)
        started = time.monotonic()
        logged = "(a no_log task's command)" if self.no_log else command
        ahead = self.prefetched.take(wrapped) if self.prefetched and stdin is None else None
        try:
            result = ahead or self.conn.run(
                wrapped, stdin=stdin, timeout=limit, kill_wrap=self._sudo, essential=essential
            )
        except CommandTimeout:
            self.log.command(self.host.name, logged, "timeout", time.monotonic() - started, "", "")
            if by_task:  # the command had what was left of the task's time: name the task's
                raise CommandTimeout(f"task timed out after {self.timeout:g} s") from None
            raise
        result = CommandResult(command, result.rc, result.stdout, result.stderr, result.duration)
        shown = result.stdout if log_output else f"({len(result.stdout)} bytes, not logged)\n"
        stderr = result.stderr
        if self.no_log:
            shown, stderr = "(not logged: no_log)\n", ""
        self.log.command(self.host.name, logged, result.rc, result.duration, shown, stderr)
        if check and not result.ok:
            raise RemoteCommandError(what or f"command {command!r}", result)
        return result

    def elevated(self, command: str) -> tuple[str, str | None]:
        """The command as this task runs it (through sudo when it becomes root, with the task's
        environment) and the stdin that must precede the command's own (the sudo password, the
        environment's values), for commands run directly."""
        return self._wrap(command)

    def _wrap(self, command: str) -> tuple[str, str | None]:
        values = None
        if self.environment:
            command, values = environment_from_stdin(self.environment, command)
        wrapped, password = self._sudo(command)
        if password is None and values is None:
            return wrapped, None
        return wrapped, (password or "") + (values or "")

    def _sudo(self, command: str) -> tuple[str, str | None]:
        """Through sudo when the task becomes root (or `become_user`), else as it is."""
        user = self.become_user if self.become_user not in (None, "root") else None
        if not self.become or (self.remote.uid == 0 and user is None):
            return command, None
        command = announce_group(command)  # sudo may start a process group of its own
        if self.remote.uid == 0:  # root needs no sudo (which a host may lack) to be someone
            return f"runuser -u {quote(user)} -- /bin/sh -c {quote(command)}", None
        return sudo_wrap(command, self.sudo_password, user)

    def _limit(self, timeout: float | None) -> tuple[float, bool]:
        """A command's time limit, and whether it is what is left of the task's `timeout`."""
        limit = timeout or self.host.connection.command_timeout
        if self._deadline is not None:
            remaining = self._deadline - time.monotonic()
            if remaining <= 0:
                raise CommandTimeout(f"task timed out after {self.timeout:g} s")
            if remaining < limit:
                return remaining, True
        return limit, False

    def find_file(self, name: str, kind: str) -> Path:
        """A controller-side file named by a task (`src:`): absolute, or under a search path,
        directly or in its `kind` folder (templates/, files/)."""
        candidate = Path(name)
        if candidate.is_absolute():
            if candidate.is_file():
                return candidate
        else:
            for base in self.search_paths:
                for path in (base / kind / name, base / name):
                    if path.is_file():
                        return path
        searched = ", ".join(str(p) for p in self.search_paths)
        raise ModuleError(f"{kind[:-1]} file '{name}' not found (searched: {searched})")

    # -- files -----------------------------------------------------------------------------
    def stat(self, path: str, *, checksum: bool = True) -> FileState | None:
        """The state of a path on the host, or None when it does not exist."""
        result = self.run(stat_command(path, checksum), check=True, what=f"stat {path}")
        lines = result.stdout.splitlines()
        if not lines or lines[0] == "absent":
            return None
        kind, mode, owner, group = lines[0].split("|")
        kind = {
            "regular file": "file",
            "regular empty file": "file",
            "directory": "directory",
            "symbolic link": "link",
        }.get(kind, "other")
        sha = lines[1].split()[0] if len(lines) > 1 else None
        return FileState(kind, mode, owner, group, sha)

    def read(self, path: str) -> bytes | None:
        result = self.run(read_command(path), log_output=False)
        if result.rc == 3:
            return None
        if not result.ok:
            raise RemoteCommandError(f"read {path}", result)
        return base64.b64decode(result.stdout)

    def upload_temp(self, data: bytes) -> str:
        """Upload bytes to a private temporary file the SSH user owns; returns its path."""
        if not self.remote.staging_ready:
            self.conn.run(f"mkdir -p -m 700 {quote(self.remote.staging)}", timeout=30)
            self.remote.staging_ready = True
        path = (
            f"{self.remote.staging}/upload-{hashlib.sha256(data).hexdigest()[:16]}-{time.time_ns()}"
        )
        self.conn.put(data, path, 0o600)
        return path

    def write_file(
        self,
        path: str,
        data: bytes,
        *,
        mode: str | None,
        owner: str | None,
        group: str | None,
        backup: bool,
    ) -> str | None:
        """Write atomically: upload to a temp file, copy beside the target, then rename.

        A replaced file keeps its mode and owner unless given; a new one gets the umask's
        default mode (0644 under umask 022), as `cp` or Ansible would create it. The temporary
        name is unique per write, so two runs never share it. Returns the backup path when an
        existing file was backed up first (`backup`, bounded to BACKUPS_KEPT per file).
        """
        staged = self.upload_temp(data)
        folder, _, base = path.rpartition("/")
        target_tmp = f"{folder}/.{base}.glmops-{uuid.uuid4().hex[:12]}"
        q_path, q_tmp = quote(path), quote(target_tmp)
        privileged = self.become or self.remote.uid == 0
        keep = [f"chmod --reference={q_path} {q_tmp}"]
        if privileged:
            keep.append(f"chown --reference={q_path} {q_tmp}")
        # Created private (the content may be a secret), then given its final mode: the
        # replaced file's, else the umask's default, as `cp` or Ansible would create it.
        umask_default = "$(printf %o $((0666 & ~$(umask))))"
        steps = [
            f"(umask 077 && : > {q_tmp})",
            f"cat {quote(staged)} > {q_tmp}",
            f"if [ -e {q_path} ]; then {' && '.join(keep)}; else chmod {umask_default} {q_tmp}; fi",
        ]
        if mode:
            steps.append(f"chmod {quote(mode)} {q_tmp}")
        if owner or group:
            steps.append(f"chown {quote((owner or '') + (':' + group if group else ''))} {q_tmp}")
        backup_path = None
        if backup:
            backup_dir = f"{self.state_dir}/backups{folder}"
            now = time.time_ns()
            stamp = time.strftime("%Y%m%dT%H%M%S", time.localtime(now // 10**9))
            backup_path = f"{backup_dir}/{base}.{stamp}.{now % 10**9:09d}"
            steps.insert(0, _backup_command(path, backup_dir, backup_path))
        steps.append(f"mv -f {q_tmp} {q_path}")
        command = " && ".join(steps)
        try:
            self.run(
                # an interrupt or timeout (SIGTERM) also takes the temporary file away
                f"trap {quote(f'rm -f {q_tmp}; exit 143')} TERM INT HUP; "
                f"({command}) || {{ rc=$?; rm -f {q_tmp}; exit $rc; }}",
                check=True,
                what=f"write {path}",
            )
        finally:
            self.conn.run(f"rm -f {quote(staged)}", timeout=30, essential=True)
        return backup_path

    # -- host-side python helpers ------------------------------------------------------------
    def run_helper(
        self,
        name: str,
        args: dict[str, Any],
        *,
        python: str | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Run `glmops/hosthelpers/<name>.py` with the host's python3 and return its JSON reply.

        The arguments, the envelope and the script travel on stdin (see helper_command): running
        a helper leaves nothing on the host (check mode stays free of writes) and puts no
        argument in argv, where any user on the host could read it.
        """
        result = self.run(
            helper_command(name, python), stdin=helper_stdin(name, args), timeout=timeout
        )
        return helper_reply(name, result)


def stat_command(path: str, checksum: bool = True) -> str:
    """What `TaskContext.stat` runs (a module names it as a check to run ahead)."""
    digest = f"; if [ -f {quote(path)} ]; then sha256sum {quote(path)}; fi" if checksum else ""
    return (
        f"if [ -e {quote(path)} ] || [ -L {quote(path)} ]; then "
        f"stat -c '%F|%a|%U|%G' {quote(path)}{digest}; else echo absent; fi"
    )


def read_command(path: str) -> str:
    """What `TaskContext.read` runs: the file in base64, or exit status 3 when it is none."""
    return f"if [ -f {quote(path)} ]; then base64 {quote(path)}; else echo -n; exit 3; fi"


BACKUPS_KEPT = 5
STAMP_GLOB = "[0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9]T"


def _backup_command(path: str, backup_dir: str, backup_path: str) -> str:
    """Copy `path` (when it exists) to `backup_path`, then drop all but the newest backups
    (names carry the time, so name order is age order; mtimes are the original's)."""
    base = path.rpartition("/")[2]
    return (
        f"if [ -f {quote(path)} ]; then mkdir -p {quote(backup_dir)} && "
        f"cp -p {quote(path)} {quote(backup_path)} && "
        f"ls -1r {quote(backup_dir)}/{quote(base + '.')}{STAMP_GLOB}* | "
        f"tail -n +{BACKUPS_KEPT + 1} | "
        f'while IFS= read -r old; do rm -f "$old"; done; fi'
    )


def environment_from_stdin(environment: dict[str, str], command: str) -> tuple[str, str]:
    """`command` preceded by a reader that takes the variables' values from stdin, and the
    stdin text it reads: the values never appear in a command line, which any user of the host
    can read in /proc. The text ends at a line no value can hold (a fresh random marker); the
    shell's `read` takes its input byte by byte, so the command's own stdin is left intact."""
    end = f"__glmops_env_end_{secrets.token_hex(12)}"
    exports = "".join(
        f"{name}={quote(value)}; export {name}\n" for name, value in environment.items()
    )
    reader = (
        '__glmops_env=; while IFS= read -r __glmops_line && [ "$__glmops_line" != '
        f'{end} ]; do __glmops_env="$__glmops_env$__glmops_line\n"; done; '
        'eval "$__glmops_env"; unset __glmops_env __glmops_line; '
    )
    return reader + command, f"{exports}{end}\n"


def sudo_wrap(
    command: str, password: str | None, user: str | None = None
) -> tuple[str, str | None]:
    """`command` run as root (or `user`) through sudo, and the stdin prefix that goes with it:
    `-n` when no password is known (fails rather than prompts), else `-S` reading it from
    stdin's first line."""
    who = f"-u {quote(user)} " if user else ""
    if password is None:
        return f"sudo -n -H {who}-- /bin/sh -c {quote(command)}", None
    return f"sudo -S -p '' -H {who}-- /bin/sh -c {quote(command)}", password + "\n"


# The one helper launcher. stdin holds the arguments (one JSON line), the envelope's source (one
# JSON string), then the helper's source. The bootstrap installs the envelope as the module
# `_envelope`, gives the helper its arguments as its stdin and runs it as __main__.
HELPER_BOOTSTRAP = (
    "import io, json, sys, types; a = sys.stdin.readline(); "
    "e = types.ModuleType('_envelope'); "
    "exec(compile(json.loads(sys.stdin.readline()), '_envelope.py', 'exec'), e.__dict__); "
    "sys.modules['_envelope'] = e; s = sys.stdin.read(); sys.stdin = io.StringIO(a); "
    "sys.argv = [{file!r}]; exec(compile(s, {file!r}, 'exec'), {{'__name__': '__main__'}})"
)


def helper_command(name: str, python: str | None = None) -> str:
    """The shell command that runs helper `name` from stdin (fed by helper_stdin)."""
    return f"{quote(python or 'python3')} -c {quote(HELPER_BOOTSTRAP.format(file=name + '.py'))}"


def helper_stdin(name: str, args: dict[str, Any]) -> str:
    """What helper_command reads: the arguments, the envelope, the helper."""
    envelope = json.dumps(helper_source("_envelope"))
    return f"{json.dumps(args)}\n{envelope}\n{helper_source(name)}"


def helper_reply(name: str, result: CommandResult) -> dict[str, Any]:
    """The helper's JSON reply (its last stdout line); a crash or a non-JSON answer raises."""
    lines = result.stdout.strip().splitlines()
    try:
        reply = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        reply = None
    if result.rc != 0 or not isinstance(reply, dict):
        raise RemoteCommandError(f"host helper {name}", result)
    return reply


def run_helper_here(
    name: str, args: dict[str, Any], *, env: dict[str, str] | None = None, timeout: float = 120
) -> dict[str, Any]:
    """A host helper run on this machine exactly as a host runs it (the launcher, the envelope,
    arguments on stdin): for the testbed's facts fixtures and the helpers' tests."""
    started = time.monotonic()
    command = helper_command(name, sys.executable)
    done = subprocess.run(
        ["sh", "-c", command],
        input=helper_stdin(name, args),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    result = CommandResult(
        command, done.returncode, done.stdout, done.stderr, time.monotonic() - started
    )
    return helper_reply(name, result)


def helper_source(name: str) -> str:
    """The text of a host helper script shipped in glmops/hosthelpers/."""
    return resources.files("glmops.hosthelpers").joinpath(f"{name}.py").read_text()
