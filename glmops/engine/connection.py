"""Connections to hosts: Fabric (paramiko) over SSH, or a local shell.

Lifecycle: `open_connection(spec, settings)` (glmops/engine/connect.py) connects (with retries
for transient network errors) and returns a `Connection`; `run` executes one shell command with
a timeout and optional stdin; `put` uploads bytes; `close` ends it. One connection per host per
run, closed by the executor.

Host keys are checked against glmops' own known_hosts file: unknown keys are recorded on first
contact (`accept-new`, the default) or refused (`strict`); a changed key is always refused.
"""

from __future__ import annotations

import base64
import binascii
import functools
import importlib
import os
import random
import re
import select
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from glmops.engine.inventory import ConnectionSpec
from glmops.engine.knownhosts import KnownHostsIndex, default_known_hosts, read_known_hosts
from glmops.engine.runlog import route_library_logs
from glmops.engine.secretenv import child_environment
from glmops.errors import CommandInterrupted, CommandTimeout, HostKeyChanged, HostUnreachable

if TYPE_CHECKING:
    import fabric
    import paramiko
else:

    class _OnFirstUse:
        """A library loaded when first used: SSH's (paramiko, fabric) take a tenth of a
        second to load, which verbs that never connect (--version, --syntax-check) skip."""

        def __init__(self, name: str):
            self._name = name

        def __getattr__(self, attr: str) -> Any:
            return getattr(importlib.import_module(self._name), attr)

    fabric, paramiko = _OnFirstUse("fabric"), _OnFirstUse("paramiko")

KEEPALIVE_SECONDS = 15
CONNECT_ATTEMPTS = 3
#: Seconds between SIGTERM and SIGKILL when a command's process group is ended.
KILL_GRACE_SECONDS = 2
#: How a remote command announces its process group, on a stderr line of its own: sshd starts
#: every command in a session of its own, so the shell's pid is the group its children
#: inherit; a command under sudo (which may start a session of its own) announces again from
#: inside (`announce_group`). Every group announced is ended on a timeout or interrupt.
PGID_MARKER = "glmops-pgid:"
MARKER_WAIT_SECONDS = 3
_PGID_LINE = re.compile(rb"(?m)^glmops-pgid:(\d+)\n")


def announce_group(command: str) -> str:
    """`command`, first telling the connection its process group (read from /proc)."""
    return (
        "read -r _ _ _ _ glmops_pgid _ < /proc/$$/stat && "
        f'echo "{PGID_MARKER}$glmops_pgid" >&2; unset glmops_pgid; {command}'
    )


#: Makes the command that signals a process group, e.g. through sudo for a become task;
#: returns (command, stdin).
KillWrap = Callable[[str], tuple[str, "str | None"]]
#: Ends a held command (closes its stdin); see `Connection.hold`.
Release = Callable[[], None]
HOLD_START_SECONDS = 30

route_library_logs()  # paramiko's tracebacks go to the run log; glmops says what failed


@dataclass(frozen=True)
class ConnectionSettings:
    """Run-wide connection settings (the per-host ones live in ConnectionSpec)."""

    known_hosts: Path = field(default_factory=default_known_hosts)
    strict_host_keys: bool = False


@dataclass(frozen=True)
class CommandResult:
    command: str
    rc: int
    stdout: str
    stderr: str
    duration: float

    @property
    def ok(self) -> bool:
        return self.rc == 0


class Connection(Protocol):
    host: str

    def run(
        self,
        command: str,
        *,
        stdin: str | None = None,
        timeout: float | None = None,
        kill_wrap: KillWrap | None = None,
        essential: bool = False,
    ) -> CommandResult: ...

    def hold(
        self,
        command: str,
        *,
        stdin: str | None = None,
        until: str | None = None,
        wait: float = HOLD_START_SECONDS,
    ) -> tuple[str, Release | None]:
        """Start a command that keeps running until released (a lock holder); returns its
        first line of output (with `until`: all it printed before a line `until`, which lets
        the holder answer more in the same round trip) and the release, or all its output and
        None when it ended first."""

    def cancel(self, grace: float = KILL_GRACE_SECONDS) -> None:
        """End every command running on this connection (its whole process group: SIGTERM,
        SIGKILL after `grace` seconds); they raise CommandInterrupted, as does every later
        `run`."""

    def put(self, data: bytes, remote_path: str, mode: int = 0o600) -> None: ...

    def close(self) -> None: ...


_KNOWN_HOSTS_WRITE = threading.Lock()
_KNOWN_HOSTS_READ = threading.Lock()


@functools.cache
def _known_hosts_policy() -> type[paramiko.MissingHostKeyPolicy]:
    """The policy class, made when the first SSH connection is (it subclasses paramiko's)."""

    class KnownHostsPolicy(paramiko.MissingHostKeyPolicy):
        """accept-new: record an unknown key in glmops' known_hosts; strict: refuse it."""

        def __init__(self, path: Path, strict: bool):
            self.path = path
            self.strict = strict

        def missing_host_key(
            self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
        ) -> None:
            if self.strict:
                raise HostUnreachable(
                    f"host key for {hostname} is not in {self.path} and host key checking is "
                    "strict; run once with host_key_checking: accept-new, or add the key to "
                    "that file"
                )
            client.get_host_keys().add(hostname, key.get_name(), key)
            with _KNOWN_HOSTS_WRITE:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with self.path.open("a") as known:
                    known.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")

    return KnownHostsPolicy


def known_keys(path: Path, name: str) -> dict[str, paramiko.PKey]:
    """The keys glmops' known_hosts holds for `name` (host, or [host]:port), by type (the first
    of each type, as paramiko's lookup): the file is indexed once per version of it, and only
    this host's keys are parsed (a few ms of CPU per key)."""
    try:
        found = path.stat()
    except FileNotFoundError:
        return {}
    with _KNOWN_HOSTS_READ:  # the run's hosts connect at once: one of them reads it
        index = _parsed_known_hosts(str(path), found.st_mtime_ns, found.st_size)
    keys: dict[str, paramiko.PKey] = {}
    for keytype, text in index.keys_for(name):
        if keytype in keys:
            continue
        try:
            keys[keytype] = paramiko.PKey.from_type_string(keytype, base64.b64decode(text))
        except (binascii.Error, ValueError, paramiko.SSHException, paramiko.pkey.UnknownKeyType):
            continue  # a line paramiko would skip too (unknown type, bad base64)
    return keys


@functools.lru_cache(maxsize=4)
def _parsed_known_hosts(path: str, mtime_ns: int, size: int) -> KnownHostsIndex:
    return read_known_hosts(Path(path))


class SSHConnection:
    """A Fabric connection with glmops' host-key policy, timeouts and keepalive."""

    def __init__(self, host: str, spec: ConnectionSpec, settings: ConnectionSettings):
        self.host = host
        self.spec = spec
        self._settings = settings
        self._fabric = self._make(spec.address, spec.user, spec.port, spec.jump)
        self._cancelled = threading.Event()
        self._lock = threading.Lock()
        #: Process groups of the commands running now, with how to signal each.
        self._groups: dict[int, KillWrap | None] = {}
        #: The one SFTP session (Fabric keeps one per connection) takes one request at a time:
        #: two tasks uploading at once (both delegated to this host) would read each other's
        #: replies and wait forever.
        self._sftp_lock = threading.Lock()

    def _make(
        self, address: str, user: str | None, port: int | None, jump: str | None
    ) -> fabric.Connection:
        connect_kwargs: dict[str, float | str] = {
            "banner_timeout": self.spec.connect_timeout,
            "auth_timeout": self.spec.connect_timeout,
        }
        if self.spec.key_file:
            connect_kwargs["key_filename"] = os.path.expanduser(self.spec.key_file)
        gateway = None
        if jump:
            jump_user, _, jump_host = jump.rpartition("@")
            jump_host, _, jump_port = jump_host.partition(":")
            gateway = self._make(jump_host, jump_user or user, int(jump_port or 22), None)
        conn = fabric.Connection(
            address,
            user=user,
            port=port,
            gateway=gateway,
            connect_timeout=self.spec.connect_timeout,
            connect_kwargs=connect_kwargs,
        )
        strict = self._settings.strict_host_keys or self.spec.host_key_checking == "strict"
        conn.client.set_missing_host_key_policy(
            _known_hosts_policy()(self._settings.known_hosts, strict)
        )
        name = address if port in (None, 22) else f"[{address}]:{port}"
        for keytype, key in known_keys(self._settings.known_hosts, name).items():
            conn.client.get_host_keys().add(name, keytype, key)
        return conn

    def open(self) -> None:
        """Connect, retrying transient network errors with jittered backoff."""
        for attempt in range(1, CONNECT_ATTEMPTS + 1):
            try:
                self._fabric.open()
                self._fabric.transport.set_keepalive(KEEPALIVE_SECONDS)
                return
            except paramiko.BadHostKeyException as error:
                raise HostKeyChanged(
                    self.host,
                    self.spec.address,
                    str(self._settings.known_hosts),
                    error.key.fingerprint,
                ) from None
            except paramiko.AuthenticationException as error:
                raise HostUnreachable(
                    f"authentication failed for {self._target()}: {error}"
                ) from None
            except HostUnreachable:
                raise
            except (OSError, paramiko.SSHException, EOFError) as error:
                if attempt == CONNECT_ATTEMPTS:
                    raise HostUnreachable(f"cannot connect to {self._target()}: {error}") from None
                time.sleep(0.5 * attempt + random.random() * 0.5)

    def _target(self) -> str:
        user = f"{self.spec.user}@" if self.spec.user else ""
        return f"{user}{self.spec.address}:{self.spec.port or 22}"

    def run(
        self,
        command: str,
        *,
        stdin: str | None = None,
        timeout: float | None = None,
        kill_wrap: KillWrap | None = None,
        essential: bool = False,
    ) -> CommandResult:
        """Execute on a fresh channel; stdin is sent whole, then closed.

        The channel is driven directly (not through Invoke's runner, which feeds stdin a byte
        at a time and cannot bound a command without a pty) so a deadline always holds. A
        command past its deadline, or cancelled, is ended with its whole process group (its
        children too) over a second channel, not only abandoned. `essential` commands (short
        bookkeeping, such as recording notifications) still run after a cancel.
        """
        cancelled = threading.Event() if essential else self._cancelled
        if cancelled.is_set():
            raise CommandInterrupted("the run was interrupted")
        started = time.monotonic()
        pgid: list[int] = []
        try:
            channel = self._fabric.transport.open_session(timeout=self.spec.connect_timeout)
            channel.exec_command(f"echo {PGID_MARKER}$$ >&2; exec /bin/sh -c {quote(command)}")
            feeder = threading.Thread(target=_feed, args=(channel, stdin), daemon=True)
            feeder.start()

            def on_group(group: int) -> None:
                pgid.append(group)
                with self._lock:
                    self._groups[group] = kill_wrap

            stdout, stderr = _drain(
                channel,
                None if timeout is None else started + timeout,
                cancelled,
                on_group,
            )
            rc = channel.recv_exit_status()
            if rc == -1 and not self._fabric.transport.is_active():
                raise OSError("the connection closed while the command ran (host rebooted?)")
        except CommandTimeout:
            if not self._end_groups(pgid, kill_wrap):
                raise HostUnreachable(
                    f"{self._target()} stopped answering: the command passed its {timeout:g} s "
                    "timeout and the host cannot be reached to end it"
                ) from None
            raise CommandTimeout(f"command timed out after {timeout:g} s") from None
        except CommandInterrupted:
            self._end_groups(pgid, kill_wrap)
            raise
        except (OSError, paramiko.SSHException, EOFError) as error:
            raise HostUnreachable(f"connection to {self._target()} lost: {error}") from None
        finally:
            with self._lock:
                for group in pgid:
                    self._groups.pop(group, None)
            if "channel" in locals():
                channel.close()
        return CommandResult(command, rc, stdout, stderr, time.monotonic() - started)

    def hold(
        self,
        command: str,
        *,
        stdin: str | None = None,
        until: str | None = None,
        wait: float = HOLD_START_SECONDS,
    ) -> tuple[str, Release | None]:
        end = _hold_end(until)
        try:
            channel = self._fabric.transport.open_session(timeout=self.spec.connect_timeout)
            channel.exec_command(command)
            if stdin:
                channel.sendall(stdin.encode())
            out = bytearray()
            deadline = time.monotonic() + wait
            while end not in out and time.monotonic() < deadline:
                if channel.recv_ready():
                    out += channel.recv(65536)
                elif channel.exit_status_ready():
                    while channel.recv_ready():
                        out += channel.recv(65536)
                    break
                else:
                    select.select([channel], [], [], 0.2)
        except (OSError, paramiko.SSHException, EOFError) as error:
            raise HostUnreachable(f"connection to {self._target()} lost: {error}") from None
        if end in out:
            return _held_answer(out, end, until), channel.close
        channel.close()
        return out.decode(errors="replace"), None

    def cancel(self, grace: float = KILL_GRACE_SECONDS) -> None:
        self._cancelled.set()
        with self._lock:
            groups = dict(self._groups)
        for group, wrap in groups.items():
            self._end_groups([group], wrap, grace)

    def _end_groups(
        self, pgids: list[int], kill_wrap: KillWrap | None, grace: float = KILL_GRACE_SECONDS
    ) -> bool:
        """SIGTERM the command's process groups, then SIGKILL what is left after a grace;
        False when the host could not be reached to do it."""
        if not pgids:
            return True
        groups = " ".join(f"-{group}" for group in pgids)
        command = (
            f"kill -TERM {groups} 2>/dev/null; "
            f"for i in $(seq {int(grace * 10)}); do alive=; "
            f"for g in {groups}; do kill -0 $g 2>/dev/null && alive=1; done; "
            '[ -n "$alive" ] || exit 0; sleep 0.1; done; '
            f"kill -KILL {groups} 2>/dev/null; exit 0"
        )
        command, stdin = kill_wrap(command) if kill_wrap else (command, None)
        try:
            channel = self._fabric.transport.open_session(timeout=self.spec.connect_timeout)
            channel.exec_command(command)
            _feed(channel, stdin)
            channel.recv_exit_status()
            channel.close()
        except (OSError, paramiko.SSHException, EOFError, AttributeError):
            return False  # the host is gone, or its network: nothing can be ended from here
        return True

    def put(self, data: bytes, remote_path: str, mode: int = 0o600) -> None:
        with self._sftp_lock:
            sftp = self._fabric.sftp()
            with sftp.file(remote_path, "wb") as remote:
                remote.chmod(mode)
                _write_pipelined(remote, data)

    def close(self) -> None:
        self._fabric.close()


def _write_pipelined(remote: paramiko.SFTPFile, data: bytes) -> None:
    """Write without a round trip per 32 KiB (unpipelined, each write waits for the host's
    reply: 2048 of them for a 64 MiB chunk), yet fail on any write the host refused: paramiko
    drops the replies of pipelined writes at close, so the last byte goes unpipelined, which
    reads every reply before it and raises on a failed one."""
    remote.set_pipelined(True)
    remote.write(data[:-1])
    remote.set_pipelined(False)
    remote.write(data[-1:])
    remote.flush()


class LocalConnection:
    """`connection: local`: run on the controller itself, through the same interface."""

    def __init__(self, host: str):
        self.host = host
        self._cancelled = threading.Event()
        self._lock = threading.Lock()
        self._running: set[subprocess.Popen[str]] = set()

    def open(self) -> None:
        return None

    def run(
        self,
        command: str,
        *,
        stdin: str | None = None,
        timeout: float | None = None,
        kill_wrap: KillWrap | None = None,
        essential: bool = False,
    ) -> CommandResult:
        """Run in a session of its own, so a timeout or a cancel ends its children too."""
        if self._cancelled.is_set() and not essential:
            raise CommandInterrupted("the run was interrupted")
        started = time.monotonic()
        proc = subprocess.Popen(
            ["/bin/sh", "-c", command],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            env=child_environment(),
        )
        if not essential:
            with self._lock:
                self._running.add(proc)
        try:
            stdout, stderr = proc.communicate(stdin if stdin is not None else "", timeout=timeout)
        except subprocess.TimeoutExpired:
            _end_local_group(proc)
            proc.communicate()
            raise CommandTimeout(f"command timed out after {timeout:g} s") from None
        finally:
            with self._lock:
                self._running.discard(proc)
        if self._cancelled.is_set() and proc.returncode < 0 and not essential:
            raise CommandInterrupted("the run was interrupted")
        stderr = without_group_lines(stderr)
        return CommandResult(command, proc.returncode, stdout, stderr, time.monotonic() - started)

    def hold(
        self,
        command: str,
        *,
        stdin: str | None = None,
        until: str | None = None,
        wait: float = HOLD_START_SECONDS,
    ) -> tuple[str, Release | None]:
        return hold_process(["/bin/sh", "-c", command], stdin, until)

    def cancel(self, grace: float = KILL_GRACE_SECONDS) -> None:
        self._cancelled.set()
        with self._lock:
            running = list(self._running)
        for proc in running:
            _end_local_group(proc, grace)

    def put(self, data: bytes, remote_path: str, mode: int = 0o600) -> None:
        fd = os.open(remote_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(fd, "wb") as local:
            local.write(data)

    def close(self) -> None:
        return None


def hold_process(
    argv: list[str], stdin: str | None, until: str | None
) -> tuple[str, Release | None]:
    """`Connection.hold` for a command run by a local process (a shell, or ssh)."""
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env=child_environment(),
    )
    assert proc.stdin is not None and proc.stdout is not None
    if stdin:
        proc.stdin.write(stdin)
        proc.stdin.flush()
    line = proc.stdout.readline()
    if until is not None:
        end = _hold_end(until).decode()
        while line and not line.endswith(end) and (more := proc.stdout.readline()):
            line += more
        line = line.removesuffix(end[1:]) if line.endswith(end) else line.rstrip("\n")
    if line.endswith("\n"):

        def release() -> None:
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait(timeout=HOLD_START_SECONDS)

        return (line if until is not None else line.rstrip("\n")), release
    proc.stdin.close()
    rest = proc.stdout.read()
    proc.wait()
    return line + rest, None


def _end_local_group(proc: subprocess.Popen[str], grace: float = KILL_GRACE_SECONDS) -> None:
    """SIGTERM the process group, then SIGKILL it if anything is left after the grace."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            break
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and _group_alive(proc):
            time.sleep(0.05)
        if not _group_alive(proc):
            break


def _group_alive(proc: subprocess.Popen[str]) -> bool:
    proc.poll()  # reap the shell itself, so a zombie does not count as alive
    try:
        os.killpg(proc.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def without_group_lines(stderr: str) -> str:
    """A command's stderr without the lines that announce its process groups."""
    return _PGID_LINE.sub(b"", stderr.encode()).decode(errors="replace")


def _hold_end(until: str | None) -> bytes:
    """The bytes that end a held command's answer: a newline, or the line `until`."""
    return b"\n" if until is None else f"\n{until}\n".encode()


def _held_answer(out: bytearray, end: bytes, until: str | None) -> str:
    """A held command's answer: its first line, or (`until`) all before the end line."""
    text = out.decode(errors="replace")
    if until is None:
        return text.split("\n", 1)[0]
    return text.split(end.decode(), 1)[0] + "\n"


def _feed(channel: paramiko.Channel, stdin: str | None) -> None:
    try:
        if stdin:
            channel.sendall(stdin.encode())
        channel.shutdown_write()
    except (OSError, EOFError):
        pass  # the command exited without reading all of its input


def _drain(
    channel: paramiko.Channel,
    deadline: float | None,
    cancelled: threading.Event,
    on_group: Callable[[int], None],
) -> tuple[str, str]:
    """Read stdout and stderr until the command exits; CommandTimeout past the deadline,
    CommandInterrupted once cancelled. Lines announcing process groups are taken out of stderr
    and passed to `on_group`."""
    out, err = bytearray(), bytearray()
    announced = False
    cancel_seen: float | None = None
    while True:
        busy = False
        while channel.recv_ready():
            out += channel.recv(65536)
            busy = True
        while channel.recv_stderr_ready():
            err += channel.recv_stderr(65536)
            busy = True
        while match := _PGID_LINE.search(err):
            group = int(match.group(1))  # before the buffer changes under the match
            del err[match.start() : match.end()]
            on_group(group)
            announced = True
        if (
            channel.exit_status_ready()
            and not channel.recv_ready()
            and not channel.recv_stderr_ready()
        ) and (channel.closed or channel.eof_received):
            break
        if cancelled.is_set():
            # A command cancelled as it starts is ended too: wait (briefly) for its group.
            cancel_seen = cancel_seen or time.monotonic()
            if announced or time.monotonic() - cancel_seen > MARKER_WAIT_SECONDS:
                raise CommandInterrupted("the run was interrupted")
        if deadline is not None and time.monotonic() > deadline:
            raise CommandTimeout("deadline passed")
        if not busy:
            select.select([channel], [], [], 0.2)
    return out.decode(errors="replace"), err.decode(errors="replace")


def quote(value: object) -> str:
    """Quote one value for a POSIX shell; every inventory or playbook value goes through this."""
    return shlex.quote(str(value))
