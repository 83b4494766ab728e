#!/usr/bin/env python3
"""sha256 of files on the host (stdlib only): `{"paths": [...]}` -> `{"digests": {path: hex|null}}`.

Used by `glmops status` and `glmops verify` to compare the patch manifest with the files on
disk. Observes only; prints one JSON object.
"""

from __future__ import annotations

from _envelope import Reply, file_sha256, main


class DigestsReply(Reply):
    digests: dict  # each asked path -> its sha256 hex, or None where it cannot be read


def digest(path: str) -> str | None:
    """The file's sha256, or None where it cannot be read (missing, a directory, no access)."""
    try:
        return file_sha256(path)
    except OSError:
        return None


def digests(args: dict) -> DigestsReply:
    paths = args.get("paths") or []
    return {
        "failed": False,
        "changed": False,
        "msg": f"{len(paths)} file(s) hashed",
        "digests": {p: digest(p) for p in paths},
    }


if __name__ == "__main__":
    main(digests)
