"""The router's admin key: made once on the controller, kept 0600 in glmops' home.

A router that listens where other machines reach it sits behind glmops' gate
(hosthelpers/router_gate.py), which lets its worker admin API through only with this key. The
controller is the only other holder: the deploy writes it into the gate's 0600 environment file
on the router host, and RouterClient sends it. One key per router URL, so two fleets never
share one; it never goes into argv, logs or diffs (its variable's name marks it a secret).
"""

from __future__ import annotations

import os
import re
import secrets
from pathlib import Path

from glmops.hosthelpers.router_gate import KEY_HEADER_NAME

__all__ = ["KEY_HEADER_NAME", "ensure_key", "key_path", "read_key"]


def key_folder() -> Path:
    base = Path(os.environ.get("GLMOPS_HOME", Path.home() / ".config" / "glmops"))
    return base / "router-keys"


def key_path(router_url: str) -> Path:
    """The key file of the router at `router_url` (scheme and slashes dropped, the rest kept
    to letters, digits, `.` and `-`, so the name is one file in the folder)."""
    where = router_url.split("://", 1)[-1].rstrip("/")
    return key_folder() / (re.sub(r"[^A-Za-z0-9.-]", "_", where) + ".key")


def read_key(router_url: str) -> str | None:
    """The router's key, or None when glmops never made one (a router without a gate)."""
    try:
        return key_path(router_url).read_text().strip() or None
    except FileNotFoundError:
        return None


def ensure_key(router_url: str) -> str:
    """The router's key, made on first use: 256 random bits, written 0600 in a 0700 folder
    through an exclusive create, so a file planted or raced in its place is refused."""
    found = read_key(router_url)
    if found:
        return found
    folder = key_folder()
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    key = secrets.token_urlsafe(32)
    path = key_path(router_url)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return ensure_existing(path)
    with os.fdopen(fd, "w") as out:
        out.write(key + "\n")
    return key


def ensure_existing(path: Path) -> str:
    """A key another glmops wrote at the same moment; an empty file is an error, not a key."""
    key = path.read_text().strip()
    if not key:
        raise OSError(f"{path} is empty: delete it and deploy again to make a new router key")
    return key
