#!/usr/bin/env python3
"""Model files on the host against the manifest (stdlib only); prints one JSON object.

`{"mode": "preflight", "model_dir", "files": [[path, size], ...], "extra_bytes", "margin_bytes"}`:
room on the filesystem that will hold model_dir (its nearest existing parent) for the files
not yet there, plus extra_bytes (the merged GGUF) and a margin. Observes only.

`{"mode": "verify", "model_dir", "manifest": {...}, "digest", "full", "check"}`: each file's
size and sha256. A file whose size and mtime match the state file of an earlier verification is
trusted unless `full`; every other file is hashed. A file that fails is deleted, so it is
never served and the next transfer sends it whole. When all files pass, the manifest and the
state file (manifest digest, size and mtime of each file) are written atomically. `check`
writes and deletes nothing.

`{"mode": "stat", "model_dir", "files": [[path, size], ...], "digest"}`: stat only, nothing
hashed or written (a rolling redeploy's preflight; `glmops up` on every run of a host whose
model phase is done): each file there with the manifest's size and unchanged (size and mtime)
since the state file recorded its verification against this manifest digest, or a removed shard
its merged file's sidecar holds; and each merged file beside the GGUF files (a gguf_split
sidecar) at the size and mtime its sidecar recorded. Replies `problems`, [path, why] pairs,
empty when all holds.

A GGUF shard that gguf_split removed after a verified merge counts as present ("merged") when
the merged file's sidecar lists it with the size and mtime this state file verified, and the
merged file still matches the sha256 the sidecar recorded (size and mtime as recorded, else
hashed; always hashed with `full`). A merged file that no longer matches is deleted with its
sidecar: its shards are then missing, fetched again, and merged anew by deploy.

Every listed path is confined to model_dir (_envelope.confined) before it is looked at, and a
request naming one that is not fails whole, before anything is deleted.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor

from _envelope import (
    Reply,
    UnsafePath,
    confined,
    failure,
    file_sha256,
    main,
    relative_path,
    write_atomic,
)

STATE = ".glmops-model-state.json"
MANIFEST = ".glmops-model-manifest.json"
SIDECAR = ".glmops.json"  # gguf_split's record beside a merged file


class RoomReply(Reply):
    """Mode `preflight`."""

    ok: bool  # free >= needed
    path: str  # the filesystem's folder that was measured: model_dir's nearest existing parent
    needed: int  # bytes: the files not yet there, extra_bytes and margin_bytes
    free: int  # bytes available to an unprivileged user there


class VerifyReply(Reply):
    """Mode `verify`: files as manifest paths."""

    complete: bool  # nothing missing, nothing bad
    missing: list
    bad: list  # failed their size or sha256 check (deleted unless `check`)
    merged: list  # GGUF shards absent but held by their verified merged file
    hashed_bytes: int


class StatReply(Reply):
    """Mode `stat`: nothing hashed or written."""

    problems: list  # [path, why] pairs, empty when all holds
    verified_digest: str | None  # the manifest digest the host's state file last verified


def nearest_existing(path):
    while not os.path.exists(path):
        path = os.path.dirname(path) or "/"
    return path


def preflight(args: dict) -> RoomReply:
    root = args["model_dir"]
    needed = int(args.get("extra_bytes") or 0) + int(args.get("margin_bytes") or 0)
    for rel, size in args["files"]:
        try:
            have = os.stat(confined(root, rel)).st_size
        except OSError:
            have = 0
        needed += 0 if have == int(size) else int(size)
    mount = nearest_existing(root)
    st = os.statvfs(mount)
    free = st.f_bavail * st.f_frsize
    ok = free >= needed
    return {
        "failed": False,
        "changed": False,
        "msg": f"{mount}: {needed} bytes needed, {free} free",
        "ok": ok,
        "path": mount,
        "needed": needed,
        "free": free,
    }


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def check(root, entry, known, full, write):
    """(path, verdict, size, mtime_ns, hashed bytes): verdict ok, missing or bad."""
    path = confined(root, entry["path"])
    try:
        st = os.stat(path)
    except OSError:
        return entry["path"], "missing", 0, 0, 0
    if st.st_size != entry["size"]:
        if write:
            os.unlink(path)
        return entry["path"], "bad", 0, 0, 0
    if not full and known.get(entry["path"]) == [st.st_size, st.st_mtime_ns]:
        return entry["path"], "ok", st.st_size, st.st_mtime_ns, 0
    if file_sha256(path) != entry["sha256"]:
        if write:
            os.unlink(path)
        return entry["path"], "bad", 0, 0, st.st_size
    return entry["path"], "ok", st.st_size, st.st_mtime_ns, st.st_size


class Merges:
    """The merged files (gguf_split sidecars) that stand for removed shards, checked once each."""

    def __init__(self, root, known, full, write, hashing=True):
        self.root, self.known, self.full, self.write = root, known, full, write
        self.hashing = hashing  # False: a merged file whose size or mtime moved is not trusted
        self.untrusted = []  # merged files not hashed (hashing False) that changed since
        self.verdicts = {}  # merged file -> hashed bytes, or None when it no longer matches
        self.dropped = []

    def covers(self, rel):
        """(path, "merged", size, mtime_ns, hashed) when a verified merge holds rel, else None."""
        folder, name = os.path.split(confined(self.root, rel))
        for out, rec in self._records(folder):
            entry = {i["name"]: i for i in rec["inputs_fingerprint"]["inputs"]}.get(name)
            if name not in rec["shards_removed"] or entry is None:
                continue
            if self.known.get(rel) != [entry["size"], entry["mtime_ns"]]:
                return None
            if self._holds(out, rec) is not None:
                return rel, "merged", entry["size"], entry["mtime_ns"], 0
        return None

    def _records(self, folder):
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            return []
        found = []
        for n in names:
            if n.endswith(".gguf" + SIDECAR):
                rec = read_json(os.path.join(folder, n))
                if rec.get("shards_removed") and rec.get("output", {}).get("sha256"):
                    found.append((os.path.join(folder, n[: -len(SIDECAR)]), rec))
        return found

    def _holds(self, out, rec):
        if out not in self.verdicts:
            self.verdicts[out] = self._check(out, rec["output"])
        return self.verdicts[out]

    def _check(self, out, recorded):
        try:
            st = os.stat(out)
        except OSError:
            return None
        if not self.full and [st.st_size, st.st_mtime_ns] == [
            recorded["size"],
            recorded["mtime_ns"],
        ]:
            return 0
        if not self.hashing:
            self.untrusted.append(out)
            return None
        if st.st_size == recorded["size"] and file_sha256(out) == recorded["sha256"]:
            return st.st_size
        self.dropped.append(out)
        if self.write:  # never served again; its shards are fetched and merged anew
            os.unlink(out + SIDECAR)
            os.unlink(out)
        return None


def merged_files(root, files):
    """The merged files (a gguf_split sidecar beside them) in the folders of `files`."""
    folders = {os.path.dirname(confined(root, rel)) for rel, _ in files}
    found = []
    for folder in sorted(f for f in folders if os.path.isdir(f)):
        for name in sorted(os.listdir(folder)):
            if name.endswith(".gguf" + SIDECAR):
                found.append(os.path.join(folder, name[: -len(SIDECAR)]))
    return found


def _merged_changed(out, rec):
    """Why a merged file no longer is what its sidecar recorded (size, mtime), or None."""
    recorded = rec.get("output", {})
    try:
        st = os.stat(out)
    except OSError:
        return "missing, but its sidecar remains"
    if [st.st_size, st.st_mtime_ns] != [recorded.get("size"), recorded.get("mtime_ns")]:
        return "size or mtime differ from its sidecar's record (changed since merged)"
    return None


def verified(root, digest):
    """The host's state file, and the (size, mtime) it recorded per file when it verified
    against `digest` (empty when it verified another manifest, or none)."""
    state = read_json(os.path.join(root, STATE))
    return state, state.get("files", {}) if state.get("digest") == digest else {}


def verify(args: dict) -> VerifyReply:
    root = args["model_dir"]
    state, known = verified(root, args["digest"])
    files = args["manifest"]["files"]
    for entry in files:  # all confined before any file is deleted
        confined(root, entry["path"])
    write = not args.get("check")
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
        results = list(pool.map(lambda e: check(root, e, known, args.get("full"), write), files))
    merges = Merges(root, known, args.get("full"), write)
    results = [
        (r[1] == "missing" and r[0].endswith(".gguf") and merges.covers(r[0])) or r for r in results
    ]
    merged = [p for p, v, *_ in results if v == "merged"]
    missing = [p for p, v, *_ in results if v == "missing"]
    bad = [p for p, v, *_ in results if v == "bad"]
    hashed = sum(r[4] for r in results) + sum(v or 0 for v in merges.verdicts.values())
    complete = not missing and not bad
    changed = False
    if complete and write:
        new = {"digest": args["digest"], "files": {p: [s, m] for p, _, s, m, _ in results}}
        if new != state:
            write_atomic(os.path.join(root, STATE), json.dumps(new, sort_keys=True))
            changed = True
        text = json.dumps(args["manifest"], indent=1, sort_keys=True) + "\n"
        if read_json(os.path.join(root, MANIFEST)) != args["manifest"]:
            write_atomic(os.path.join(root, MANIFEST), text)
            changed = True
    msg = (
        f"{len(files)} files verified, {hashed} bytes hashed"
        if complete
        else f"{len(missing)} missing, {len(bad)} failed their check (deleted)"
    )
    if merged:
        msg += f" ({len(merged)} shards held by their verified merge)"
    if merges.dropped:
        msg += "; merged file no longer matches its record (deleted): " + ", ".join(merges.dropped)
    return {
        "failed": False,
        "changed": changed or (bool(bad or merges.dropped) and write),
        "msg": msg,
        "complete": complete,
        "missing": missing,
        "bad": bad,
        "merged": merged,
        "hashed_bytes": hashed,
    }


def stat_file(root, rel, size, known, merges):
    """Why `rel` does not match its verified state (missing, size, unverified), or None."""
    try:
        st = os.stat(confined(root, rel))
    except OSError:
        if rel.endswith(".gguf") and merges.covers(rel):
            return None
        changed = ", ".join(os.path.basename(m) for m in merges.untrusted)
        return f"missing (merged into {changed}, changed since)" if changed else "missing"
    if st.st_size != size:
        return f"size {st.st_size} bytes, the manifest says {size}"
    if known.get(rel) != [st.st_size, st.st_mtime_ns]:
        return "not verified against this manifest since it last changed (run glmops model)"
    return None


def stat_files(args: dict) -> StatReply:
    root = args["model_dir"]
    state, known = verified(root, args["digest"])
    merges = Merges(root, known, full=False, write=False, hashing=False)
    problems = []
    for rel, size in args["files"]:
        why = stat_file(root, rel, int(size), known, merges)
        if why:
            problems.append([rel, why])
    for out in merged_files(root, args["files"]):
        if out in merges.untrusted:  # already named by the shards it holds
            continue
        why = _merged_changed(out, read_json(out + SIDECAR))
        if why:
            problems.append([os.path.relpath(out, root), why])
    msg = f"{len(args['files'])} files as verified" if not problems else f"{len(problems)} differ"
    return {
        "failed": False,
        "changed": False,
        "msg": msg,
        "problems": problems,
        "verified_digest": state.get("digest"),
    }


def listed_paths(args: dict) -> list:
    """Every path of a request ([path, size] pairs in "files", or the manifest's entries),
    each checked before any mode looks at one: a manifest is refused whole, as it arrives."""
    files = args.get("files") or (args.get("manifest") or {}).get("files") or []
    return [relative_path(f["path"] if isinstance(f, dict) else f[0]) for f in files]


def run(args: dict) -> Reply:
    listed_paths(args)
    mode = args.get("mode")
    if mode == "preflight":
        return preflight(args)
    if mode == "stat":
        return stat_files(args)
    if mode == "verify":
        return verify(args)
    return failure(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(run, expected=(UnsafePath,))
