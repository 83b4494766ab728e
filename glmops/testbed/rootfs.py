"""Cached Debian base root filesystem shared (read-only, via overlay) by every testbed host.

Built once with debootstrap and reused until the package list or the customisation changes:
the cache key is a hash of both, so a stale base is never booted by mistake.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import time
from pathlib import Path

from glmops.testbed.errors import TestbedError

SUITE = "bookworm"
VARIANT = "minbase"
PACKAGES: tuple[str, ...] = (
    "apt-utils",
    "ca-certificates",
    "curl",
    "dbus",
    "iproute2",
    "openssh-server",
    "procps",
    "python3",
    "python3-venv",
    "rsync",  # the model fan-out's transfers (with rrsync, its restricted server side)
    "sudo",
    "systemd",
    "systemd-sysv",
)
DEPLOY_USER = "deploy"
DEPLOY_PASSWORD = "testbed-sudo"  # noqa: S105 - throwaway password of a local test host
# Bump when _customise() changes, so cached bases built by older code are not reused.
CUSTOMISE_VERSION = "3"


def cache_root() -> Path:
    """Where bases live: outside any state dir, so `down` never throws away a 60 s build."""
    override = os.environ.get("GLMOPS_TESTBED_CACHE")
    if override:
        return Path(override)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "glmops" / "testbed"


def base_key() -> str:
    """Cache key: changes whenever what goes into the base changes."""
    text = "\n".join([SUITE, VARIANT, CUSTOMISE_VERSION, *sorted(PACKAGES)])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def base_path() -> Path:
    return cache_root() / f"base-{base_key()}"


def ensure_base(log=print) -> Path:
    """Return the cached base, building it (atomically: temp dir, then rename) if absent."""
    final = base_path()
    if (final / ".glmops-testbed-base").exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with open(final.parent / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be building the same base
        if (final / ".glmops-testbed-base").exists():
            return final
        tmp = final.parent / f"{final.name}.tmp-{os.getpid()}"
        _remove_tree(tmp)
        logfile = final.parent / f"{final.name}.build.log"
        log(f"testbed: building base rootfs {final} (debootstrap {SUITE}, ~1-2 min)")
        started = time.monotonic()
        try:
            _debootstrap(tmp, logfile)
            _customise(tmp, logfile)
        except BaseException:
            _remove_tree(tmp)
            raise
        (tmp / ".glmops-testbed-base").write_text(base_key() + "\n")
        os.rename(tmp, final)
        log(f"testbed: base rootfs built in {time.monotonic() - started:.0f}s")
    return final


def _run_logged(argv: list[str], logfile: Path, what: str, **kw) -> None:
    with open(logfile, "ab") as out:
        out.write(f"\n$ {' '.join(argv)}\n".encode())
        out.flush()
        rc = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, check=False, **kw)
    if rc.returncode != 0:
        raise TestbedError(f"{what} failed (exit {rc.returncode}); see {logfile}")


def _debootstrap(target: Path, logfile: Path) -> None:
    logfile.write_text("")
    argv = [
        "debootstrap",
        f"--variant={VARIANT}",
        f"--include={','.join(PACKAGES)}",
        SUITE,
        str(target),
    ]
    _run_logged(argv, logfile, "debootstrap of the testbed base")


def _customise(root: Path, logfile: Path) -> None:
    """Make the base fit for many hosts: no shared identity, a sudo user with a password."""
    user_script = (
        f"useradd --create-home --shell /bin/bash --groups sudo {DEPLOY_USER}\n"
        f"echo '{DEPLOY_USER}:{DEPLOY_PASSWORD}' | chpasswd\n"
        "apt-get clean\n"
    )
    _run_logged(
        ["chroot", str(root), "/bin/sh", "-ec", user_script],
        logfile,
        "customising the testbed base",
    )
    # Every host gets its own host keys and machine id in its upper layer before first boot.
    for key in (root / "etc/ssh").glob("ssh_host_*"):
        key.unlink()
    (root / "etc/machine-id").write_text("")
    (root / "var/lib/dbus/machine-id").unlink(missing_ok=True)
    # No point waiting on a console getty in a headless container.
    getty = root / "etc/systemd/system/getty.target.wants/getty@tty1.service"
    getty.unlink(missing_ok=True)


def _remove_tree(path: Path) -> None:
    """Remove a half-built tree, first unmounting anything debootstrap left mounted inside."""
    if not path.exists():
        return
    prefix = str(path) + "/"
    with open("/proc/mounts") as f:
        mounts = [line.split()[1] for line in f]
    for mnt in sorted((m for m in mounts if m.startswith(prefix)), reverse=True):
        subprocess.run(["umount", "-l", mnt], check=False)
    shutil.rmtree(path, ignore_errors=True)
