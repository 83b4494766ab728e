#!/usr/bin/env python3
"""sha256 of files on the host (stdlib only): `{"paths": [...]}` -> `{"digests": {path: hex|null}}`.

Used by `glmops status` and `glmops verify` to compare the patch manifest with the files on
disk. Observes only; prints one JSON object.
"""

import hashlib
import json
import sys


def digest(path: str):
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except OSError:
        return None
    return h.hexdigest()


def main(argv: list) -> int:
    args = json.loads(argv[1]) if len(argv) > 1 else {}
    paths = args.get("paths") or []
    out = {"failed": False, "changed": False, "digests": {p: digest(p) for p in paths}}
    out["msg"] = f"{len(paths)} file(s) hashed"
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
