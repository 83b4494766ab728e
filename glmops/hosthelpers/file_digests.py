#!/usr/bin/env python3
"""sha256 of files on the host (stdlib only): `{"paths": [...]}` -> `{"digests": {path: hex|null}}`.

Used by `glmops status` and `glmops verify` to compare the patch manifest with the files on
disk. Observes only; prints one JSON object.
"""

import hashlib

from _envelope import main


def digest(path: str):
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except OSError:
        return None
    return h.hexdigest()


def digests(args: dict) -> dict:
    paths = args.get("paths") or []
    out = {"failed": False, "changed": False, "digests": {p: digest(p) for p in paths}}
    out["msg"] = f"{len(paths)} file(s) hashed"
    return out


if __name__ == "__main__":
    main(digests)
