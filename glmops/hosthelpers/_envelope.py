"""The envelope every host helper shares (stdlib only, python3 >= 3.8).

A helper is a function `handler(args) -> reply`. The envelope reads the arguments (one JSON
object on stdin, never argv, where any user on the host could read them), keeps stdout for the
reply alone (whatever the handler or a library prints goes to stderr), and prints the reply as
one JSON line. An exception the helper names as expected becomes a failed reply; any other one
is a crash (traceback on stderr, exit status 1), which the controller reports as such.

On a host the launcher (glmops.engine.context.helper_command) sends this file ahead of the
helper, as the module `_envelope`; run from a checkout, `python3 helper.py < args.json` finds
it beside the helper.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from typing import cast

try:
    from typing import TypedDict
except ImportError:  # pragma: no cover - python 3.7 hosts: the schema is documentation only
    TypedDict = dict  # type: ignore[assignment,misc]

#: Each helper declares its reply as a TypedDict subclass of `Reply` (import TypedDict from
#: here: one python 3.7 fallback); the controller reads the reply through the same class.
__all__ = [
    "Reply",
    "TypedDict",
    "UnsafePath",
    "confined",
    "failure",
    "file_sha256",
    "http_base",
    "main",
    "read_args",
    "relative_path",
    "write_atomic",
]


class Reply(TypedDict):
    """What every reply carries; each helper's own schema adds its keys. A failure the
    envelope makes (bad arguments, an expected exception) carries these alone."""

    failed: bool
    changed: bool
    msg: str


def read_args() -> dict:
    """The helper's arguments: one JSON object on stdin (empty input: no arguments)."""
    text = sys.stdin.read().strip()
    args = json.loads(text) if text else {}
    if not isinstance(args, dict):
        raise ValueError(f"arguments must be a JSON object, got {type(args).__name__}")
    return args


def failure(msg: str, **extra: object) -> Reply:
    """A failed reply that changed nothing; `extra` adds keys of the helper's own schema."""
    return cast(Reply, {"failed": True, "changed": False, "msg": msg, **extra})


def main(handler, expected: tuple = ()) -> None:  # noqa: ANN001 - python 3.8 hosts
    """Run `handler` on the arguments and print its reply; exits the process."""
    try:
        args = read_args()
    except ValueError as error:
        print(json.dumps(failure(f"bad JSON args: {error}")))
        sys.exit(0)
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)  # anything printed while the handler runs goes to stderr
    try:
        reply = handler(args)
    except expected as error:  # type: ignore[misc]
        reply = failure(f"{type(error).__name__}: {error}")
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
    print(json.dumps(reply))
    sys.exit(0)


class UnsafePath(ValueError):
    """A path from a listing, manifest or reply that could leave its root."""


def relative_path(rel: object) -> str:
    """`rel` if it is a path that can only name something below a root: relative, without
    `..`, `.` or empty parts, backslashes or control characters. What `confined` checks
    before it looks at the disk, and what a manifest's paths pass as soon as it is loaded."""
    if not isinstance(rel, str) or not rel:
        raise UnsafePath(f"not a relative path: {rel!r}")
    if any(ord(c) < 32 or ord(c) == 127 for c in rel):
        raise UnsafePath(f"control character in path {rel!r}")
    if rel.startswith("/") or "\\" in rel:
        raise UnsafePath(f"not a relative path: {rel!r}")
    if any(part in ("", ".", "..") for part in rel.split("/")):
        raise UnsafePath(f"empty, '.' or '..' part in path {rel!r}")
    return rel


def confined(root: str, rel: str) -> str:
    """`rel` joined to `root`, refused unless it stays inside: relative, no `..` or `.` or
    empty parts, no control characters, and (symbolic links followed) still under root.

    The one check every path from a Hub listing, a manifest or a host's reply passes, on the
    controller and on hosts, before anything is written or deleted there.
    """
    relative_path(rel)
    base = os.path.realpath(root)
    path = os.path.realpath(os.path.join(base, rel))
    if os.path.commonpath([base, path]) != base or path == base:
        raise UnsafePath(f"{rel!r} resolves outside {root}")
    return os.path.join(root, rel)


def http_base(address: str, port: int) -> str:
    """`http://address:port`, an IPv6 address in brackets (RFC 3986), so that the port is not
    read as part of the address."""
    host = f"[{address}]" if ":" in address and not address.startswith("[") else address
    return f"http://{host}:{int(port)}"


def file_sha256(path: str) -> str:
    """The file's sha256, read in 8 MiB blocks (model files are many GB)."""
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        for block in iter(lambda: f.read(8 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_atomic(path, data, mode=None) -> None:  # noqa: ANN001 - str or Path, str or bytes
    """Write beside the target, fsync, rename, fsync the folder: a reader sees the old file or
    the new one, never half of one, and a failed write leaves no temp file. The temp file has a
    fresh name opened exclusively (mkstemp), so nothing planted in the folder is written
    through. The file gets `mode`, else 0644 (records and model files: readable, no secret)."""
    path = os.fspath(path)
    folder = os.path.dirname(path) or "."
    payload = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644 if mode is None else mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    folder_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(folder_fd)
    finally:
        os.close(folder_fd)
