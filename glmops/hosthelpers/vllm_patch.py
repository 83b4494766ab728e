#!/usr/bin/env python3
"""Host side of the vLLM patch set (stdlib only): read / apply / restore / manifest.

Arguments (on stdin, see _envelope), by mode:
    {"mode": "read", "files": [...], "site_packages": PATH?}
    {"mode": "apply", "payload_file": PATH, "check": false}
    {"mode": "restore", "site_packages": PATH?, "check": false}
    {"mode": "manifest", "site_packages": PATH?}

Prints one JSON object {"failed", "changed", "msg", ...} and exits 0; non-zero means a crash.
Originals are backed up once under <site-packages>/../.glmops-patch/backup/ and a manifest
(Manifest, below: profile, sha256 before/after, template version) sits beside them, so restore
is byte-exact.
Every check happens before the first write: a refused apply changes nothing. Only files of the
PACKAGE_ROOTS (vllm/, and vllm_gguf_plugin/ where GGUF loading lives from vLLM 0.24) are read
or written.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
import time
from pathlib import Path

from _envelope import Reply, TypedDict, failure, main, write_atomic


class ManifestEntry(TypedDict, total=False):
    """One file the patch set wrote, keyed in Manifest.files by its path under site-packages."""

    created: bool  # the patch set created it (restore deletes it)
    sha256_before: str | None  # the original's digest (None: created)
    backup: str | None  # the original's copy, relative to the state folder
    item: str | None  # the patch item that wrote it
    mode: int  # the original's permission bits
    sha256_after: str  # what the patch set left there: status and verify compare this


class Manifest(TypedDict, total=False):
    """The record of an applied patch set, read by restore, status and verify."""

    files: dict  # {path relative to site-packages: ManifestEntry}
    profile: str  # the patch set's layout name (glmops.gpu.patchset.profiles)
    template_version: str
    site_packages: str
    timestamp: str


STATE_DIR = ".glmops-patch"
# The packages the patch set reads and writes: vLLM, and the GGUF loader that left its tree.
PACKAGE_ROOTS = ("vllm", "vllm_gguf_plugin")


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _site_packages(args: dict) -> Path:
    """Explicit path, else where this interpreter finds vllm (without importing it)."""
    if args.get("site_packages"):
        return Path(args["site_packages"]).resolve()
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("vllm is not importable by this python; pass site_packages")
    return Path(list(spec.submodule_search_locations)[0]).resolve().parent


def _state(sp: Path, args: dict) -> Path:
    return Path(args["state_dir"]).resolve() if args.get("state_dir") else sp.parent / STATE_DIR


def _target(sp: Path, rel: str) -> Path:
    """A file inside one of PACKAGE_ROOTS, named and resolved there (no `..` or link out)."""
    path = (sp / rel).resolve()
    root = rel.split("/", 1)[0]
    inside = sp in path.parents and (sp / root).resolve() in path.parents
    if root not in PACKAGE_ROOTS or not inside:
        roots = ", ".join(f"site-packages/{r}/" for r in PACKAGE_ROOTS)
        raise ValueError(f"refusing a path outside {roots}: {rel}")
    return path


def _load_manifest(state: Path) -> Manifest | None:
    path = state / "manifest.json"
    return json.loads(path.read_text()) if path.is_file() else None


def files_left(manifest: Manifest) -> dict:
    """{path relative to site-packages: the sha256 the patch set left there}: what status and
    verify compare with the files on disk."""
    return {rel: entry.get("sha256_after") for rel, entry in manifest.get("files", {}).items()}


def mode_read(args: dict) -> dict:
    sp = _site_packages(args)
    files: dict[str, str | None] = {}
    for rel in args.get("files", []):
        path = _target(sp, rel)
        files[rel] = path.read_bytes().decode("utf-8") if path.is_file() else None
    present = sum(v is not None for v in files.values())
    return {
        "failed": False,
        "changed": False,
        "msg": f"read {present}/{len(files)} files",
        "site_packages": str(sp),
        "files": files,
        "manifest": _load_manifest(_state(sp, args)),
    }


def mode_apply(args: dict) -> dict:
    payload = json.loads(Path(args["payload_file"]).read_text())
    sp = _site_packages({**args, "site_packages": payload.get("site_packages")})
    state = _state(sp, args)
    manifest = _load_manifest(state) or {"files": {}}
    entries: dict = manifest["files"]
    # 1. verify every file first: refuse the whole set on any mismatch.
    plan = []
    for ch in payload["changes"]:
        path = _target(sp, ch["path"])
        current = path.read_bytes() if path.is_file() else None
        cur_sha = None if current is None else _sha(current)
        if cur_sha != ch["before_sha256"]:
            return {
                "failed": True,
                "changed": False,
                "msg": f"{ch['path']} changed since it was read (sha256 {cur_sha}); re-plan",
            }
        plan.append((ch, path, current))
    if args.get("check"):
        return {
            "failed": False,
            "changed": bool(plan),
            "msg": f"would change {len(plan)} files",
            "paths": [ch["path"] for ch, _, _ in plan],
        }
    # 2. back up originals once; a file reinstalled since (sha != recorded after) is a new
    # original and gets a fresh backup.
    backup = state / "backup"
    for ch, path, current in plan:
        old = entries.get(ch["path"])
        if old is not None and _sha(current or b"") == old["sha256_after"] and current is not None:
            continue
        if old is not None and current is None and old["created"]:
            continue
        entry = {
            "created": current is None,
            "sha256_before": None,
            "backup": None,
            "item": ch.get("item"),
        }
        if current is not None:
            dest = backup / ch["path"]
            dest.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(dest, current, 0o600)
            entry.update(
                sha256_before=_sha(current),
                backup=str(dest.relative_to(state)),
                mode=path.stat().st_mode & 0o7777,
            )
        entries[ch["path"]] = entry
    # 3. write the new files, then the manifest.
    for ch, path, current in plan:
        data = ch["after"].encode("utf-8")
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, data, 0o600 if current is None else path.stat().st_mode & 0o7777)
        entries[ch["path"]]["sha256_after"] = _sha(data)
    if plan:
        manifest.update(
            {
                "profile": payload["profile"],
                "template_version": payload["template_version"],
                "site_packages": str(sp),
                "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            }
        )
        state.mkdir(parents=True, exist_ok=True)
        write_atomic(state / "manifest.json", json.dumps(manifest, indent=1).encode(), 0o600)
    return {
        "failed": False,
        "changed": bool(plan),
        "msg": f"changed {len(plan)} files",
        "paths": [ch["path"] for ch, _, _ in plan],
        "manifest": manifest if plan else None,
    }


def _remove_bytecode(source: Path) -> None:
    """Python's cached bytecode of a file glmops created (written when vLLM imported it), so an
    unpatched tree holds nothing of the patch set."""
    for cached in source.parent.glob(f"__pycache__/{source.stem}.*.pyc"):
        cached.unlink()


def mode_restore(args: dict) -> dict:
    sp = _site_packages(args)
    state = _state(sp, args)
    manifest = _load_manifest(state)
    if manifest is None:
        return {"failed": False, "changed": False, "msg": "nothing to restore (no manifest)"}
    actions, skipped = [], []
    for rel, entry in manifest["files"].items():
        path = _target(sp, rel)
        current = path.read_bytes() if path.is_file() else None
        if current is None and not entry["created"]:
            # The package was uninstalled since (e.g. vllm-gguf-plugin): nothing to restore.
            skipped.append(rel)
            continue
        if current is not None and _sha(current) != entry.get("sha256_after"):
            # vLLM was reinstalled or the file edited since: leave the newer file alone.
            skipped.append(rel)
            continue
        if not entry["created"]:
            original = (state / entry["backup"]).read_bytes()
            if _sha(original) != entry["sha256_before"]:
                return {"failed": True, "changed": False, "msg": f"backup of {rel} is corrupt"}
        actions.append((rel, path, entry, current))
    if args.get("check"):
        return {
            "failed": False,
            "changed": bool(actions),
            "skipped": skipped,
            "msg": f"would restore {len(actions)} files",
            "paths": [a[0] for a in actions],
        }
    for _rel, path, entry, current in actions:
        if entry["created"]:
            if current is not None:
                path.unlink()
            _remove_bytecode(path)
        else:
            write_atomic(path, (state / entry["backup"]).read_bytes(), entry.get("mode"))
    shutil.rmtree(state)
    return {
        "failed": False,
        "changed": bool(actions),
        "skipped": skipped,
        "msg": f"restored {len(actions)} files"
        + (f", left {len(skipped)} newer" if skipped else ""),
        "paths": [a[0] for a in actions],
    }


def mode_manifest(args: dict) -> dict:
    sp = _site_packages(args)
    manifest = _load_manifest(_state(sp, args))
    return {
        "failed": False,
        "changed": False,
        "manifest": manifest,
        "msg": "patched" if manifest else "not patched",
    }


MODES = {"read": mode_read, "apply": mode_apply, "restore": mode_restore, "manifest": mode_manifest}


def run(args: dict) -> Reply | dict:
    name = args.get("mode")
    mode = MODES.get(name) if isinstance(name, str) else None  # a list would not hash
    return failure(f"unknown mode {name!r}") if mode is None else mode(args)


if __name__ == "__main__":
    main(run, expected=(OSError, ValueError, KeyError, UnicodeDecodeError))
