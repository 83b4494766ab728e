"""One testbed host: its upper layer, its supervised systemd-nspawn, and commands run inside it."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from glmops.testbed import procs
from glmops.testbed.errors import TestbedError
from glmops.testbed.rootfs import DEPLOY_USER

SIMULATOR_SRC = Path(__file__).with_name("simulated_nvidia_smi.py")
SIMULATOR_DST = "usr/local/lib/glmops-testbed/simulated-nvidia-smi"
NVIDIA_SMI_LINK = "usr/local/bin/nvidia-smi"
PROFILE_DST = "etc/glmops-testbed/gpu-profile.json"
GUEST_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/root",
    "LANG": "C.UTF-8",
    "TERM": "dumb",
}


@dataclass
class HostStatus:
    """What `testbed status` reports; pid is the supervisor's (stable across guest reboots)."""

    name: str
    address: str
    pid: int | None
    running: bool
    ssh_ok: bool
    gpu_profile: str | None
    init_pid: int | None = None
    log: Path | None = None


@dataclass
class HostDir:
    """Files of host `name` under the state dir."""

    root: Path
    name: str
    index: int

    upper = property(lambda self: self.root / "upper")
    log = property(lambda self: self.root / "nspawn.log")
    supervisor_pidfile = property(lambda self: self.root / "supervisor.pid")
    nspawn_pidfile = property(lambda self: self.root / "nspawn.pid")
    profile_file = property(lambda self: self.root / "gpu-profile")
    base_file = property(lambda self: self.root / "base")

    def supervisor_pid(self) -> int | None:
        pid = procs.read_pid(self.supervisor_pidfile)
        if procs.alive(pid) and str(self.root) in " ".join(procs.cmdline(pid)):
            return pid
        return None

    def nspawn_pid(self) -> int | None:
        pid = procs.read_pid(self.nspawn_pidfile)
        if procs.alive(pid) and f"--machine={self.name}" in procs.cmdline(pid):
            return pid
        return None

    def init_pid(self) -> int | None:
        return procs.container_init(self.nspawn_pid())

    def recorded_profile(self) -> str | None:
        try:
            return self.profile_file.read_text().strip() or None
        except OSError:
            return None


def _mkdirs_like(base: Path, upper: Path, rel: str) -> Path:
    """Create upper/rel copying mode and owner of each level from the base: in an overlay, an
    upper directory's attributes win, so a plain mkdir would make /root world-readable."""
    cur_b, cur_u = base, upper
    for part in Path(rel).parts:
        cur_b, cur_u = cur_b / part, cur_u / part
        if not cur_u.exists():
            cur_u.mkdir()
            if cur_b.is_dir():
                st = cur_b.stat()
                os.chown(cur_u, st.st_uid, st.st_gid)
                os.chmod(cur_u, st.st_mode & 0o7777)
    return cur_u


def _put(base: Path, upper: Path, rel: str, data: bytes, mode: int, owner=(0, 0)) -> None:
    target = _mkdirs_like(base, upper, str(Path(rel).parent)) / Path(rel).name
    target.write_bytes(data)
    os.chown(target, *owner)
    os.chmod(target, mode)


def prepare_upper(hd: HostDir, base: Path, pubkey: bytes) -> None:
    """Identity of a new host, written before its first boot: keys, authorized key, machine id."""
    upper = hd.upper
    upper.mkdir(parents=True, exist_ok=True)
    ssh_dir = _mkdirs_like(base, upper, "etc/ssh")
    for kind in ("rsa", "ecdsa", "ed25519"):
        key = ssh_dir / f"ssh_host_{kind}_key"
        if not key.exists():
            subprocess.run(
                ["ssh-keygen", "-q", "-t", kind, "-N", "", "-C", f"root@{hd.name}", "-f", str(key)],
                check=True,
                stdin=subprocess.DEVNULL,
            )
    _put(base, upper, "root/.ssh/authorized_keys", pubkey, 0o600)
    home = base / "home" / DEPLOY_USER
    ids = (home.stat().st_uid, home.stat().st_gid)
    _mkdirs_like(base, upper, f"home/{DEPLOY_USER}")
    ssh = upper / "home" / DEPLOY_USER / ".ssh"
    if not ssh.exists():
        ssh.mkdir(mode=0o700)
        os.chown(ssh, *ids)
    _put(base, upper, f"home/{DEPLOY_USER}/.ssh/authorized_keys", pubkey, 0o600, ids)
    # The base carries the build machine's /etc/hostname, which systemd would apply at boot.
    _put(base, upper, "etc/hostname", f"{hd.name}\n".encode(), 0o644)
    hosts_file = f"127.0.0.1\tlocalhost\n127.0.1.1\t{hd.name}\n::1\tlocalhost ip6-localhost\n"
    _put(base, upper, "etc/hosts", hosts_file.encode(), 0o644)
    if not (upper / "etc/machine-id").exists():
        _put(base, upper, "etc/machine-id", (uuid.uuid4().hex + "\n").encode(), 0o444)


def profile_files(profile_json: str) -> dict[str, tuple[bytes, int]]:
    """Files that make a host look like it has the declared GPUs (simulator, profile)."""
    return {
        SIMULATOR_DST: (SIMULATOR_SRC.read_bytes(), 0o755),
        PROFILE_DST: (profile_json.encode(), 0o644),
    }


def install_profile_offline(hd: HostDir, base: Path, profile_json: str | None) -> None:
    """Write (or remove) the simulated GPU files in a stopped host's upper layer."""
    upper = hd.upper
    link = upper / NVIDIA_SMI_LINK
    if profile_json is None:
        for rel in (SIMULATOR_DST, PROFILE_DST, NVIDIA_SMI_LINK):
            (upper / rel).unlink(missing_ok=True)
        return
    for rel, (data, mode) in profile_files(profile_json).items():
        _put(base, upper, rel, data, mode)
    _mkdirs_like(base, upper, str(Path(NVIDIA_SMI_LINK).parent))
    link.unlink(missing_ok=True)
    link.symlink_to("/" + SIMULATOR_DST)


def nspawn_argv(hd: HostDir, base: Path) -> list[str]:
    return [
        "systemd-nspawn",
        "-D",
        str(base),
        f"--overlay={base}:{hd.upper}:/",
        "--boot",
        "--register=no",
        "--keep-unit",
        f"--machine={hd.name}",
        f"--hostname={hd.name}",
        f"--network-namespace-path=/run/netns/{hd.name}",
        "--console=read-only",
    ]


def start(hd: HostDir, base: Path) -> int:
    """Launch the detached supervisor (which launches nspawn); return its pid."""
    hd.supervisor_pidfile.unlink(missing_ok=True)
    argv = [
        sys.executable,
        str(Path(__file__).with_name("supervisor.py")),
        str(hd.root),
        "--",
        *nspawn_argv(hd, base),
    ]
    with open(hd.root / "supervisor.log", "ab") as out:
        subprocess.run(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, check=True, close_fds=True
        )
    pid = procs.read_pid(hd.supervisor_pidfile)
    if pid is None:
        raise TestbedError(f"supervisor for {hd.name} did not start; see {hd.root}")
    return pid


def stop(hd: HostDir, timeout: float = 30.0) -> None:
    """Power the guest off via nspawn (SIGTERM through the supervisor); kill it if it hangs."""
    stop_all([hd], timeout)


def stop_all(hds: list[HostDir], timeout: float = 30.0) -> None:
    """Power every guest off at once and wait for all: a guest takes seconds to stop its units
    (vLLM's among them), so stopping hosts one after another adds those seconds up."""
    leftovers: list[int] = []
    first_signal: list[int] = []
    for hd in hds:
        sup, nsp = hd.supervisor_pid(), hd.nspawn_pid()
        leftovers += [p for p in (sup, nsp, procs.container_init(nsp), *stray_nspawns(hd)) if p]
        target = sup or nsp  # the supervisor passes SIGTERM on to nspawn
        if target:
            first_signal.append(target)
    if first_signal:
        procs.terminate(first_signal, timeout)
    alive = [p for p in leftovers if procs.alive(p)]
    if alive:  # killing a guest's init kills its whole PID namespace
        procs.terminate(alive, 5.0, signal.SIGKILL)


def stray_nspawns(hd: HostDir) -> list[int]:
    """nspawns for this host's upper dir that no supervisor owns (a crashed run)."""
    marker = f":{hd.upper}:/"
    return procs.find(
        lambda argv: (
            bool(argv)
            and argv[0].endswith("systemd-nspawn")
            and any(a.endswith(marker) for a in argv)
        )
    )


def foreign_nspawns(hd: HostDir) -> list[int]:
    """nspawns using this host's name for another state dir: sharing netns tbN would break both."""
    marker = f":{hd.upper}:/"
    return procs.find(
        lambda argv: (
            bool(argv)
            and argv[0].endswith("systemd-nspawn")
            and f"--machine={hd.name}" in argv
            and not any(a.endswith(marker) for a in argv)
        )
    )


def ssh_banner(address: str, timeout: float = 1.0) -> bool:
    """sshd answers: TCP connect and an `SSH-` banner (no authentication attempted)."""
    try:
        with socket.create_connection((address, 22), timeout=timeout) as sock:
            sock.settimeout(timeout)
            return sock.recv(256).startswith(b"SSH-")
    except OSError:
        return False


def run_inside(
    hd: HostDir,
    argv: list[str],
    *,
    input: str | bytes | None = None,
    timeout: float | None = None,
    text: bool = True,
) -> subprocess.CompletedProcess:
    """Run argv in the guest's namespaces (nsenter), independent of sshd and of glmops."""
    init = hd.init_pid()
    if init is None:
        raise TestbedError(f"testbed host {hd.name} is not running (log: {hd.log})")
    cmd = ["nsenter", "-t", str(init), "-a", "-r", "-w", "--", *argv]
    return subprocess.run(
        cmd,
        input=input,
        capture_output=True,
        timeout=timeout,
        text=text,
        env=GUEST_ENV,
        check=False,
    )


def wipe(hd: HostDir) -> None:
    """Remove the host's files, including overlay work dirs nspawn leaves next to upper."""
    if hd.root.exists():
        shutil.rmtree(hd.root, ignore_errors=True)


def wait_ssh(names_addrs: list[tuple[HostDir, str]], timeout: float) -> None:
    """Wait until every host's sshd answers; fail naming the host and its nspawn log."""
    pending = list(names_addrs)
    deadline = time.monotonic() + timeout
    while pending:
        for hd, addr in list(pending):
            if ssh_banner(addr, timeout=0.5):
                pending.remove((hd, addr))
            elif hd.supervisor_pid() is None:
                raise TestbedError(
                    f"testbed host {hd.name} ({addr}): systemd-nspawn exited "
                    f"before sshd answered; see {hd.log}\n{_tail(hd.log)}"
                )
        if pending and time.monotonic() > deadline:
            hd, addr = pending[0]
            raise TestbedError(
                f"testbed host {hd.name} ({addr}): sshd did not answer within "
                f"{timeout:.0f}s; see {hd.log}\n{_tail(hd.log)}"
            )
        if pending:
            time.sleep(0.2)


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
