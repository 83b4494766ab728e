"""glmops' own known_hosts file: where it lives, and replacing a rebuilt host's keys."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


def default_known_hosts() -> Path:
    base = Path(os.environ.get("GLMOPS_HOME", Path.home() / ".config" / "glmops"))
    return base / "known_hosts"


def host_key_name(address: str, port: int = 22) -> str:
    """The name a host's keys are filed under, as OpenSSH and paramiko write it."""
    return address if port == 22 else f"[{address}]:{port}"


def replace_host_keys(path: Path, address: str, public_keys: list[str], port: int = 22) -> None:
    """Forget every key recorded for the host and record `public_keys` ("type base64 ...").

    For a host whose keys the caller itself made (the local testbed rebuilding a host): the
    equivalent of `ssh-keygen -R` plus recording the new keys, done under a lock.
    """
    name = host_key_name(address, port)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as known:
        fcntl.flock(known, fcntl.LOCK_EX)
        known.seek(0)
        kept = [line for line in known.read().splitlines() if line.split(" ", 1)[0] != name]
        fresh = [f"{name} {' '.join(key.split()[:2])}" for key in public_keys]
        known.seek(0)
        known.truncate()
        known.write("".join(f"{line}\n" for line in kept + fresh))
