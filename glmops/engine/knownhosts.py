"""glmops' own known_hosts file: where it lives, and replacing a rebuilt host's keys."""

from __future__ import annotations

import base64
import binascii
import fcntl
import hashlib
import hmac
import os
from dataclasses import dataclass, field
from pathlib import Path


def default_known_hosts() -> Path:
    base = Path(os.environ.get("GLMOPS_HOME", Path.home() / ".config" / "glmops"))
    return base / "known_hosts"


def host_key_name(address: str, port: int = 22) -> str:
    """The name a host's keys are filed under, as OpenSSH and paramiko write it."""
    return address if port == 22 else f"[{address}]:{port}"


@dataclass
class KnownHostsIndex:
    """A known_hosts file's keys by host name, as text (key type, base64): the caller parses
    only the keys of the hosts it connects to. paramiko's HostKeys parses every key and
    compares each entry with all before it when loading (a quarter second for 300 lines, and
    growing with the square of the fleet), then walks every entry on each lookup."""

    plain: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    #: OpenSSH's hashed names (`|1|salt|hash`): (salt, hash, key type, base64).
    hashed: list[tuple[bytes, bytes, str, str]] = field(default_factory=list)

    def keys_for(self, name: str) -> list[tuple[str, str]]:
        """Every (key type, base64) recorded for `name`, in file order."""
        found = list(self.plain.get(name, ()))
        for salt, digest, keytype, key in self.hashed:
            mine = hmac.new(salt, name.encode(), hashlib.sha1).digest()
            if hmac.compare_digest(mine, digest):
                found.append((keytype, key))
        return found


def read_known_hosts(path: Path) -> KnownHostsIndex:
    """Index a known_hosts file (`names keytype base64 [comment]` lines; markers, comments and
    malformed lines are skipped, as paramiko skips them)."""
    index = KnownHostsIndex()
    for line in path.read_text(errors="replace").splitlines():
        fields = line.split()
        if len(fields) < 3 or fields[0].startswith(("#", "@")):
            continue
        names, keytype, key = fields[:3]
        for name in names.split(","):
            if not name.startswith("|1|"):
                index.plain.setdefault(name, []).append((keytype, key))
                continue
            try:
                salt, digest = (base64.b64decode(part) for part in name[3:].split("|", 1))
            except (binascii.Error, ValueError):
                continue
            index.hashed.append((salt, digest, keytype, key))
    return index


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
