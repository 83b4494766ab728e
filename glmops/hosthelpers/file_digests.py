#!/usr/bin/env python3
"""sha256 of files on the host (stdlib only): `{"paths": [...]}` -> `{"digests": {path: hex|null}}`.

Used by `glmops status` and `glmops verify` to compare the patch manifest with the files on
disk. Observes only; prints one JSON object.
"""

from _envelope import file_sha256, main


def digest(path: str):
    """The file's sha256, or None where it cannot be read (missing, a directory, no access)."""
    try:
        return file_sha256(path)
    except OSError:
        return None


def digests(args: dict) -> dict:
    paths = args.get("paths") or []
    out = {"failed": False, "changed": False, "digests": {p: digest(p) for p in paths}}
    out["msg"] = f"{len(paths)} file(s) hashed"
    return out


if __name__ == "__main__":
    main(digests)
