"""SSH through the system's OpenSSH client, sharing one connection per host (ControlMaster)
that outlives the run by `persist` seconds: a run soon after another (a re-run, `glmops
status` after `glmops run`) sends its commands over the connection already made, with no
new handshake. Chosen per host by the inventory key `persist` (seconds; 0, the default,
keeps the Fabric connection, glmops/engine/connection.py, which ends with the run).

The control socket: `control_dir()` (under $XDG_RUNTIME_DIR, else ~/.cache/glmops), a folder
only the user can enter (0700), one socket per user, host, port and jump (OpenSSH's %C hash),
which ssh itself makes 0600. Whoever can use the socket can run commands as that SSH user
without a key, so it is never shared between users. `ssh -O exit` (glmops' `close_shared`)
ends one before its time. Host keys are checked against glmops' own known_hosts file, as
the Fabric connection does.

Commands run as with the Fabric connection: `/bin/sh -c` behind a line naming the process
group, so a timeout or an interrupt ends the command's whole group on the host.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import subprocess
import threading
import time
from pathlib import Path

from glmops.engine.connection import (
    HOLD_START_SECONDS,
    KILL_GRACE_SECONDS,
    PGID_MARKER,
    CommandResult,
    ConnectionSettings,
    KillWrap,
    Release,
    hold_process,
    quote,
)
from glmops.engine.inventory import ConnectionSpec
from glmops.engine.secretenv import child_environment
from glmops.errors import CommandInterrupted, CommandTimeout, HostKeyChanged, HostUnreachable

_GROUP_LINE = re.compile(rf"{PGID_MARKER}(\d+)\n".encode())
#: ssh's own exit status: the connection failed, not the command.
SSH_FAILED = 255


#: A socket path's limit (sun_path, 108 bytes) less ssh's own: the %C hash (40) and the
#: temporary suffix it adds while making the socket (17).
_PATH_ROOM = 108 - 1 - 40 - 17 - 1


def control_dir() -> Path:
    """The user's folder of control sockets (0700, theirs alone), made on first use; under
    /tmp when the usual place leaves no room for a socket's name."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = Path(runtime) / "glmops" if runtime else Path.home() / ".cache" / "glmops"
    folder = base / "ssh"
    if len(str(folder).encode()) > _PATH_ROOM:
        folder = Path(f"/tmp/glmops-ssh-{os.getuid()}")
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    found = folder.lstat()
    if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid():
        raise HostUnreachable(f"{folder} is not a folder of this user's: no shared connection")
    if found.st_mode & 0o077:
        os.chmod(folder, 0o700)
    return folder


class OpenSSHConnection:
    """A host reached with `ssh`, over a control socket shared by its runs for `persist` s."""

    def __init__(self, host: str, spec: ConnectionSpec, settings: ConnectionSettings):
        self.host = host
        self.spec = spec
        strict = settings.strict_host_keys or spec.host_key_checking == "strict"
        self._argv = ["ssh", *self._options(settings.known_hosts, strict), spec.address]
        self._cancelled = threading.Event()
        self._lock = threading.Lock()
        self._groups: dict[int, KillWrap | None] = {}

    def _options(self, known_hosts: Path, strict: bool) -> list[str]:
        spec = self.spec
        options = {
            "BatchMode": "yes",
            "ControlMaster": "auto",
            "ControlPath": f"{control_dir()}/%C",
            "ControlPersist": str(int(spec.persist)),
            "UserKnownHostsFile": str(known_hosts),
            "StrictHostKeyChecking": "yes" if strict else "accept-new",
            "ConnectTimeout": str(int(spec.connect_timeout)),
            "ServerAliveInterval": "15",
            "LogLevel": "ERROR",
        }
        argv = [part for key, value in options.items() for part in ("-o", f"{key}={value}")]
        if spec.user:
            argv += ["-l", spec.user]
        if spec.port:
            argv += ["-p", str(spec.port)]
        if spec.key_file:
            argv += ["-i", os.path.expanduser(spec.key_file)]
        if spec.jump:
            argv += ["-J", spec.jump]
        return argv

    def _remote(self, command: str) -> list[str]:
        return [*self._argv, "--", command]

    def open(self) -> None:
        """Use the shared connection when it is up, else make it (and check the host key)."""
        check = subprocess.run(
            [*self._argv[:-1], "-O", "check", self.spec.address],
            capture_output=True,
            env=child_environment(),
        )
        if check.returncode == 0:
            return
        done = subprocess.run(
            self._remote("true"),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=self.spec.connect_timeout * 3,
            env=child_environment(),
        )
        if done.returncode != 0:
            raise self._failure(done.stderr)

    def _failure(self, stderr: str) -> Exception:
        if "REMOTE HOST IDENTIFICATION HAS CHANGED" in stderr:
            return HostKeyChanged(self.host, self.spec.address, "glmops' known_hosts", "?")
        target = f"{self.spec.user + '@' if self.spec.user else ''}{self.spec.address}"
        return HostUnreachable(f"cannot connect to {target}: {stderr.strip()[-300:]}")

    def run(
        self,
        command: str,
        *,
        stdin: str | None = None,
        timeout: float | None = None,
        kill_wrap: KillWrap | None = None,
        essential: bool = False,
    ) -> CommandResult:
        """Run on the host; past the deadline or once cancelled, its process groups (named on
        stderr as it starts) are ended there, not only abandoned."""
        cancelled = threading.Event() if essential else self._cancelled
        if cancelled.is_set():
            raise CommandInterrupted("the run was interrupted")
        started = time.monotonic()
        remote = f"echo {PGID_MARKER}$$ >&2; exec /bin/sh -c {quote(command)}"
        proc = subprocess.Popen(
            self._remote(remote),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            env=child_environment(),
        )
        groups: list[int] = []
        out, err = bytearray(), bytearray()

        def read_out() -> None:
            assert proc.stdout is not None
            out.extend(proc.stdout.read())

        def read_errors() -> None:
            assert proc.stderr is not None
            for line in proc.stderr:
                if match := _GROUP_LINE.fullmatch(line):
                    groups.append(int(match.group(1)))
                    with self._lock:
                        self._groups[groups[-1]] = kill_wrap
                else:
                    err.extend(line)

        readers = [
            threading.Thread(target=_feed, args=(proc, stdin), daemon=True),
            threading.Thread(target=read_out, daemon=True),
            threading.Thread(target=read_errors, daemon=True),
        ]
        for reader in readers:
            reader.start()
        deadline = None if timeout is None else started + timeout
        try:
            while proc.poll() is None:
                if cancelled.is_set():
                    self._stop(proc, groups, kill_wrap)
                    raise CommandInterrupted("the run was interrupted")
                if deadline is not None and time.monotonic() > deadline:
                    self._stop(proc, groups, kill_wrap)
                    raise CommandTimeout(f"command timed out after {timeout:g} s")
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(0.2)
            for reader in readers:
                reader.join()
        finally:
            with self._lock:
                for group in groups:
                    self._groups.pop(group, None)
        stderr = err.decode(errors="replace")
        if proc.returncode == SSH_FAILED and not groups:
            raise self._failure(stderr)
        return CommandResult(
            command,
            proc.returncode,
            out.decode(errors="replace"),
            stderr,
            time.monotonic() - started,
        )

    def _stop(
        self, proc: subprocess.Popen[bytes], groups: list[int], kill_wrap: KillWrap | None
    ) -> None:
        """End the command's groups on the host, then its ssh here."""
        self._end_groups(list(groups), kill_wrap)
        proc.kill()
        proc.wait()

    def hold(
        self,
        command: str,
        *,
        stdin: str | None = None,
        until: str | None = None,
        wait: float = HOLD_START_SECONDS,
    ) -> tuple[str, Release | None]:
        return hold_process(self._remote(command), stdin, until)

    def cancel(self, grace: float = KILL_GRACE_SECONDS) -> None:
        """Each running command sees the cancel and ends its own groups on the host."""
        self._cancelled.set()

    def _end_groups(
        self, groups: list[int], kill_wrap: KillWrap | None, grace: float = KILL_GRACE_SECONDS
    ) -> None:
        if not groups:
            return
        targets = " ".join(f"-{group}" for group in groups)
        command = (
            f"kill -TERM {targets} 2>/dev/null; sleep {grace:g}; kill -KILL {targets} 2>/dev/null"
        )
        command, stdin = kill_wrap(command) if kill_wrap else (command, None)
        subprocess.run(
            self._remote(command),
            input=stdin or "",
            capture_output=True,
            text=True,
            timeout=self.spec.connect_timeout + grace + 10,
            env=child_environment(),
        )

    def put(self, data: bytes, remote_path: str, mode: int = 0o600) -> None:
        target = quote(remote_path)
        done = subprocess.run(
            self._remote(f"umask 077 && cat > {target} && chmod {mode:o} {target}"),
            input=data,
            capture_output=True,
            timeout=self.spec.command_timeout,
            env=child_environment(),
        )
        if done.returncode != 0:
            raise HostUnreachable(f"cannot upload to {remote_path}: {done.stderr.decode()[-300:]}")

    def close(self) -> None:
        """The shared connection stays for the next run (its `persist` seconds)."""
        return None


def close_shared(spec: ConnectionSpec, settings: ConnectionSettings) -> None:
    """End the host's shared connection now (`ssh -O exit`)."""
    conn = OpenSSHConnection(spec.address, spec, settings)
    subprocess.run(
        [*conn._argv[:-1], "-O", "exit", spec.address],
        capture_output=True,
        env=child_environment(),
    )


def _feed(proc: subprocess.Popen[bytes], stdin: str | None) -> None:
    assert proc.stdin is not None
    try:
        if stdin:
            proc.stdin.write(stdin.encode())
        proc.stdin.close()
    except OSError:
        pass  # the command exited without reading all of its input
