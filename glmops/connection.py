"""Connections to hosts: Fabric (paramiko) over SSH, or a local shell.

Lifecycle: `open_connection(spec, settings)` connects (with retries for transient network errors)
and returns a `Connection`; `run` executes one shell command with a timeout and optional stdin;
`put` uploads bytes; `close` ends it. One connection per host per run, closed by the executor.

Host keys are checked against glmops' own known_hosts file: unknown keys are recorded on first
contact (`accept-new`, the default) or refused (`strict`); a changed key is always refused.
"""

from __future__ import annotations

import os
import random
import select
import shlex
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import fabric
import paramiko

from glmops.errors import CommandTimeout, HostKeyChanged, HostUnreachable
from glmops.inventory import ConnectionSpec
from glmops.knownhosts import default_known_hosts

KEEPALIVE_SECONDS = 15
CONNECT_ATTEMPTS = 3


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
        self, command: str, *, stdin: str | None = None, timeout: float | None = None
    ) -> CommandResult: ...

    def put(self, data: bytes, remote_path: str, mode: int = 0o600) -> None: ...

    def close(self) -> None: ...


class _KnownHostsPolicy(paramiko.MissingHostKeyPolicy):
    """accept-new: record an unknown key in glmops' known_hosts; strict: refuse it."""

    _lock = threading.Lock()

    def __init__(self, path: Path, strict: bool):
        self.path = path
        self.strict = strict

    def missing_host_key(
        self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
    ) -> None:
        if self.strict:
            raise HostUnreachable(
                f"host key for {hostname} is not in {self.path} and host key checking is strict; "
                "run once with host_key_checking: accept-new, or add the key to that file"
            )
        client.get_host_keys().add(hostname, key.get_name(), key)
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a") as known:
                known.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")


class SSHConnection:
    """A Fabric connection with glmops' host-key policy, timeouts and keepalive."""

    def __init__(self, host: str, spec: ConnectionSpec, settings: ConnectionSettings):
        self.host = host
        self.spec = spec
        self._settings = settings
        self._fabric = self._make(spec.address, spec.user, spec.port, spec.jump)

    def _make(
        self, address: str, user: str | None, port: int | None, jump: str | None
    ) -> fabric.Connection:
        connect_kwargs = {
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
            _KnownHostsPolicy(self._settings.known_hosts, strict)
        )
        if self._settings.known_hosts.exists():
            conn.client.get_host_keys().load(str(self._settings.known_hosts))
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
        self, command: str, *, stdin: str | None = None, timeout: float | None = None
    ) -> CommandResult:
        """Execute on a fresh channel; stdin is sent whole, then closed.

        The channel is driven directly (not through Invoke's runner, which feeds stdin a byte
        at a time and cannot bound a command without a pty) so a deadline always holds.
        """
        started = time.monotonic()
        try:
            channel = self._fabric.transport.open_session(timeout=self.spec.connect_timeout)
            channel.exec_command(command)
            feeder = threading.Thread(target=_feed, args=(channel, stdin), daemon=True)
            feeder.start()
            stdout, stderr = _drain(channel, None if timeout is None else started + timeout)
            rc = channel.recv_exit_status()
        except CommandTimeout:
            raise CommandTimeout(f"command timed out after {timeout:g} s") from None
        except (OSError, paramiko.SSHException, EOFError) as error:
            raise HostUnreachable(f"connection to {self._target()} lost: {error}") from None
        finally:
            if "channel" in locals():
                channel.close()
        return CommandResult(command, rc, stdout, stderr, time.monotonic() - started)

    def put(self, data: bytes, remote_path: str, mode: int = 0o600) -> None:
        sftp = self._fabric.sftp()
        with sftp.file(remote_path, "wb") as remote:
            remote.chmod(mode)
            remote.write(data)

    def close(self) -> None:
        self._fabric.close()


class LocalConnection:
    """`connection: local`: run on the controller itself, through the same interface."""

    def __init__(self, host: str):
        self.host = host

    def open(self) -> None:
        return None

    def run(
        self, command: str, *, stdin: str | None = None, timeout: float | None = None
    ) -> CommandResult:
        started = time.monotonic()
        try:
            proc = subprocess.run(
                ["/bin/sh", "-c", command],
                input=stdin if stdin is not None else "",
                capture_output=True,
                text=True,
                timeout=timeout,
                start_new_session=True,
            )
        except subprocess.TimeoutExpired:
            raise CommandTimeout(f"command timed out after {timeout:g} s") from None
        return CommandResult(
            command, proc.returncode, proc.stdout, proc.stderr, time.monotonic() - started
        )

    def put(self, data: bytes, remote_path: str, mode: int = 0o600) -> None:
        fd = os.open(remote_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(fd, "wb") as local:
            local.write(data)

    def close(self) -> None:
        return None


def _feed(channel: paramiko.Channel, stdin: str | None) -> None:
    try:
        if stdin:
            channel.sendall(stdin.encode())
        channel.shutdown_write()
    except (OSError, EOFError):
        pass  # the command exited without reading all of its input


def _drain(channel: paramiko.Channel, deadline: float | None) -> tuple[str, str]:
    """Read stdout and stderr until the command exits; CommandTimeout past the deadline."""
    out, err = bytearray(), bytearray()
    while True:
        busy = False
        while channel.recv_ready():
            out += channel.recv(65536)
            busy = True
        while channel.recv_stderr_ready():
            err += channel.recv_stderr(65536)
            busy = True
        if (
            channel.exit_status_ready()
            and not channel.recv_ready()
            and not channel.recv_stderr_ready()
        ) and (channel.closed or channel.eof_received):
            break
        if deadline is not None and time.monotonic() > deadline:
            raise CommandTimeout("deadline passed")
        if not busy:
            select.select([channel], [], [], 0.2)
    return out.decode(errors="replace"), err.decode(errors="replace")


def open_connection(host: str, spec: ConnectionSpec, settings: ConnectionSettings) -> Connection:
    conn: SSHConnection | LocalConnection
    conn = (
        LocalConnection(host) if spec.connection == "local" else SSHConnection(host, spec, settings)
    )
    conn.open()
    return conn


def quote(value: object) -> str:
    """Quote one value for a POSIX shell; every inventory or playbook value goes through this."""
    return shlex.quote(str(value))
