#!/usr/bin/env python3
"""Validate, merge and verify split GGUF files (stdlib only, python3 >= 3.8).

Arguments (on stdin, see _envelope): {"mode": "validate|merge|verify", "path": ..., ...};
"remove_shards" deletes the shards once the merged file's sha256 equals the merge recomputed
from them (recorded in the sidecar first), and "merged_only" accepts such a merged file in place
of its removed shards while it still matches that record.

Why not llama-gguf-split or gguf-py: the host has neither, gguf-py parses a 160k-token vocab in
~20 s with ~800 MB RSS, and both buffer a whole tensor (GBs for GLM-5 experts). This reads only
headers and copies tensor data in the kernel (copy_file_range), so memory is bounded by the
header size whatever the model size. Output equals llama-gguf-split --merge except that the
split.* keys are dropped (`keep_split_keys` keeps them as llama.cpp does: split.count = 0); with
them dropped the file is byte-identical to the same tensors written as one file by GGUFWriter.
Prints one JSON result on stdout; merge progress goes to stderr as JSON lines.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
import sys
import tempfile
import time
from collections.abc import Callable

from _envelope import Reply, TypedDict, failure, file_sha256, main, write_atomic

MAGIC = b"GGUF"
ALIGN_DEFAULT = 32
SPLIT_KEYS = ("split.no", "split.count", "split.tensors.count")
SHARD_RE = re.compile(r"^(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")
SIDECAR_SUFFIX = ".glmops.json"
FINGERPRINT_VERSION = 1
CHUNK = 1 << 30  # bytes per copy_file_range call
# GGUF value type -> struct format of scalars (8 = string, 9 = array are variable-length).
SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
# ggml type id -> (block size in elements, bytes per block). Copied from gguf-py 0.19.0
# gguf/constants.py GGML_QUANT_SIZES (ids from GGMLQuantizationType); unknown ids are an error.
QUANT = {
    0: (1, 4),
    1: (1, 2),
    2: (32, 18),
    3: (32, 20),
    6: (32, 22),
    7: (32, 24),
    8: (32, 34),
    9: (32, 40),
    10: (256, 84),
    11: (256, 110),
    12: (256, 144),
    13: (256, 176),
    14: (256, 210),
    15: (256, 292),
    16: (256, 66),
    17: (256, 74),
    18: (256, 98),
    19: (256, 50),
    20: (32, 18),
    21: (256, 110),
    22: (256, 82),
    23: (256, 136),
    24: (1, 1),
    25: (1, 2),
    26: (1, 4),
    27: (1, 8),
    28: (1, 8),
    29: (256, 56),
    30: (1, 2),
    34: (256, 54),
    35: (256, 66),
    39: (32, 17),
    40: (64, 36),
    41: (128, 18),
}


class ShardInfo(TypedDict):
    name: str  # the file's base name
    size: int
    tensors: int


class ValidateReply(Reply, total=False):
    """Mode `validate`: `errors` always; the rest when the set is valid."""

    errors: list  # what is wrong with the set, one line each
    first_shard: str  # the -00001-of-N file's path
    shards: list[ShardInfo]
    tensor_count: int
    kv_count: int  # metadata keys in the first shard
    architecture: str | None  # general.architecture
    alignment: int
    merged_size: int  # bytes of the merged file (split.* keys dropped)


class MergeReply(Reply, total=False):
    """Mode `merge`: output, size, tensor_count and shards unless the set is invalid."""

    output: str  # the merged file's absolute path
    size: int  # the merged file's bytes
    tensor_count: int
    shards: int  # how many shards the set has
    skipped: bool  # the merged file already matches its inputs (sidecar fingerprint)
    errors: list  # an invalid set, or a merged file that failed its check
    free_bytes: int  # under check, or when there is no room
    replaces_bytes: int  # under check: the bytes of an older merged file replaced
    copy_mode: str | None  # how the data was copied: copy_file_range, sendfile or read
    elapsed_s: float


class VerifyReply(Reply, total=False):
    """Mode `verify`: all but `content_sha256` always; it only when asked and valid."""

    errors: list
    files: list  # the base names of the files read
    tensor_count: int
    data_bytes: int
    content_sha256: str  # sha256 over the tensor data, as merged_sha256 orders it


class MergedOnlyReply(Reply, total=False):
    """Mode `merged_only`: the keys below unless failed."""

    output: str
    size: int
    tensor_count: int
    shards: list  # the base names of the shards removed after the verified merge
    hashed_bytes: int  # 0 when size and mtime matched the record


class RemoveReply(Reply, total=False):
    """Mode `remove_shards`: `freed_bytes` once shards were removed."""

    errors: list  # an invalid split set
    freed_bytes: int


class CopyState(TypedDict, total=False):
    """What a merge's data copy carries from call to call: progress, and the copy method."""

    copied: int  # bytes of tensor data written so far
    total: int
    t0: float  # time.monotonic() at the start
    last: float  # when progress was last reported
    interval: float  # seconds between progress reports
    mode: str  # copy_file_range, sendfile or read: the method that last worked
    buf: bytearray  # the bounce buffer of the read mode


class GGUFError(Exception):
    """A problem with one file; the message names it."""


def pad(n: int, align: int) -> int:
    return (n + align - 1) // align * align


class Header:
    """Parsed header of one GGUF file: KV spans (raw bytes kept for shard 1), tensor infos."""

    def __init__(self, path: str, keep_raw: bool = False) -> None:
        self.path = path
        self.name = os.path.basename(path)
        self.size = os.path.getsize(path)
        self.buf = bytearray()
        self.pos = 0
        with open(path, "rb") as self.f:
            self._parse()
        del self.f  # parsing is over: nothing reads the (closed) file again
        self.header_len = self.pos
        self.digest = hashlib.sha256(self.buf[: self.pos]).hexdigest()
        if not keep_raw:
            self.buf = bytearray()

    def _err(self, msg: str) -> GGUFError:
        return GGUFError(f"{self.name}: {msg}")

    def _need(self, n: int) -> None:
        while len(self.buf) - self.pos < n:
            chunk = self.f.read(max(4 << 20, n))
            if not chunk:
                raise self._err(f"truncated header at byte {self.pos}")
            self.buf += chunk

    def _u(self, fmt: str) -> int:
        size = struct.calcsize(fmt)
        self._need(size)
        (v,) = struct.unpack_from("<" + fmt, self.buf, self.pos)
        self.pos += size
        return v

    def _str(self) -> str:
        n = self._u("Q")
        self._need(n)
        s = bytes(self.buf[self.pos : self.pos + n]).decode("utf-8", "replace")
        self.pos += n
        return s

    def _value(self, vtype: int):
        if vtype in SCALAR:
            return self._u(SCALAR[vtype])
        if vtype == 8:
            return self._str()
        if vtype != 9:
            raise self._err(f"unknown KV type {vtype} at byte {self.pos}")
        etype, count = self._u("I"), self._u("Q")
        if etype in SCALAR:  # skip numeric arrays wholesale
            n = count * struct.calcsize(SCALAR[etype])
            self._need(n)
            self.pos += n
        elif etype == 8:
            self._skip_strings(count)
        else:
            for _ in range(count):
                self._value(etype)
        return ("array", etype, count)

    def _skip_strings(self, count: int) -> None:
        """Hot path (a 160k-token vocab): walk the length prefixes with locals only."""
        unpack, buf, pos = struct.unpack_from, self.buf, self.pos
        for _ in range(count):
            if len(buf) - pos < 8:
                self.pos = pos
                self._need(8)
                buf = self.buf
            n = unpack("<Q", buf, pos)[0] + 8
            if len(buf) - pos < n:
                self.pos = pos
                self._need(n)
                buf = self.buf
            pos += n
        self.pos = pos

    def _parse(self) -> None:
        self._need(24)
        magic = bytes(self.buf[:4])
        if magic != MAGIC:
            hint = " (a Git LFS pointer? fetch with git lfs)" if magic == b"vers" else ""
            raise self._err(f"not a GGUF file: magic {magic!r}{hint}")
        self.pos = 4
        self.version = self._u("I")
        if self.version != 3:
            raise self._err(f"GGUF version {self.version} unsupported (need 3, little-endian)")
        self.n_tensors, n_kv = self._u("Q"), self._u("Q")
        self.kv: dict = {}  # key -> (value, vtype, start, end)
        for _ in range(n_kv):
            start = self.pos
            key = self._str()
            vtype = self._u("I")
            self.kv[key] = (self._value(vtype), vtype, start, self.pos)
        align = self.get("general.alignment", ALIGN_DEFAULT)
        if not isinstance(align, int) or align <= 0 or align & (align - 1):
            raise self._err(f"general.alignment {align!r} is not a power of two")
        self.alignment = align
        self.tensors = []  # (name, dims, type, offset, nbytes)
        for _ in range(self.n_tensors):
            name = self._str()
            ndims = self._u("I")
            if ndims > 8:
                raise self._err(f"tensor {name!r}: {ndims} dims")
            dims = [self._u("Q") for _ in range(ndims)]
            ttype, offset = self._u("I"), self._u("Q")
            self.tensors.append((name, dims, ttype, offset, self._nbytes(name, dims, ttype)))
        self.data_offset = pad(self.pos, self.alignment)

    def _nbytes(self, name: str, dims: list, ttype: int) -> int:
        if ttype not in QUANT:
            raise self._err(f"tensor {name!r}: unknown ggml type {ttype}")
        block, size = QUANT[ttype]
        n = 1
        for d in dims:
            n *= d
        if dims and dims[0] % block:
            raise self._err(f"tensor {name!r}: row of {dims[0]} not a multiple of block {block}")
        return n // block * size

    def get(self, key: str, default=None):
        return self.kv[key][0] if key in self.kv else default

    def layout_errors(self) -> list:
        """ggml's rule: offsets are the running sum of padded sizes, all data inside the file."""
        errs, expect = [], 0
        for name, _dims, _t, off, nbytes in self.tensors:
            if off != expect:
                errs.append(f"{self.name}: tensor {name!r} has offset {off}, expected {expect}")
                break
            expect = pad(off + nbytes, self.alignment)
        if self.tensors:
            _n, _d, _t, off, nbytes = self.tensors[-1]
            end = self.data_offset + off + nbytes
            if end > self.size:
                errs.append(f"{self.name}: truncated: data ends at {end}, file has {self.size}")
        return errs


def shard_paths(path: str) -> tuple:
    """First shard or directory -> (prefix, [shard paths]) from the -0000k-of-0000n names."""
    if os.path.isdir(path):
        firsts = sorted(
            n for n in os.listdir(path) if (m := SHARD_RE.match(n)) and int(m["no"]) == 1
        )
        if not firsts:
            raise GGUFError(f"{path}: no '*-00001-of-000NN.gguf' shard in the directory")
        if len(firsts) > 1:
            raise GGUFError(f"{path}: several split sets {firsts}; name the first shard")
        path = os.path.join(path, firsts[0])
    m = SHARD_RE.match(os.path.basename(path))
    if not m:
        raise GGUFError(f"{os.path.basename(path)}: name is not '<prefix>-0000k-of-0000n.gguf'")
    if int(m["no"]) != 1:
        raise GGUFError(f"{os.path.basename(path)}: not the first shard (-00001-of-...)")
    count = int(m["count"])
    if count < 1:
        raise GGUFError(f"{os.path.basename(path)}: shard count 0 in the name")
    prefix = os.path.join(os.path.dirname(path), m["prefix"])
    return prefix, [f"{prefix}-{i:05d}-of-{count:05d}.gguf" for i in range(1, count + 1)]


def load_set(path: str) -> tuple:
    """Validate a split set -> (headers, errors); headers[0] keeps its raw header bytes."""
    _prefix, paths = shard_paths(path)
    missing = [os.path.basename(p) for p in paths if not os.path.isfile(p)]
    if missing:
        return [], [f"missing {len(missing)} of {len(paths)} shards: {', '.join(missing)}"]
    headers, errs = [], []
    for i, p in enumerate(paths):
        try:
            headers.append(Header(p, keep_raw=i == 0))
        except (GGUFError, OSError) as e:
            errs.append(str(e))
    if errs:
        return headers, errs
    n, first = len(paths), headers[0]
    total = first.get("split.tensors.count")
    for i, h in enumerate(headers):
        errs += h.layout_errors()
        want = {"split.no": i, "split.count": n, "split.tensors.count": total}
        for key, val in want.items():
            if n > 1 and h.get(key) != val:
                errs.append(f"{h.name}: {key} = {h.get(key)}, expected {val}")
        if h.alignment != first.alignment:
            errs.append(f"{h.name}: alignment {h.alignment} ≠ {first.alignment} of {first.name}")
    real = sum(h.n_tensors for h in headers)
    if n > 1 and total is not None and real != total:
        errs.append(f"tensor counts add up to {real}, split.tensors.count says {total}")
    seen: dict = {}
    for h in headers:
        for t in h.tensors:
            if t[0] in seen:
                errs.append(f"{h.name}: tensor {t[0]!r} also in {seen[t[0]]}")
            seen.setdefault(t[0], h.name)
    return headers, errs


def merged_header(headers: list, keep_split_keys: bool) -> bytes:
    """Shard 1's KV (raw bytes, original order) + every tensor info with recomputed offsets."""
    first = headers[0]
    kv = bytearray()
    n_kv = 0
    for key, (_v, vtype, start, end) in first.kv.items():
        if key in SPLIT_KEYS and not keep_split_keys:
            continue
        if key == "split.count":  # llama.cpp writes 0: "not split"
            kb = key.encode()
            kv += struct.pack("<Q", len(kb)) + kb + struct.pack("<I", vtype)
            kv += struct.pack("<" + SCALAR[vtype], 0)
        else:
            kv += first.buf[start:end]
        n_kv += 1
    ti = bytearray()
    off, n_t = 0, 0
    for h in headers:
        for name, dims, ttype, _o, nbytes in h.tensors:
            nb = name.encode()
            ti += struct.pack("<Q", len(nb)) + nb + struct.pack("<I", len(dims))
            ti += struct.pack(f"<{len(dims)}Q", *dims) + struct.pack("<IQ", ttype, off)
            off = pad(off + nbytes, first.alignment)
            n_t += 1
    head = MAGIC + struct.pack("<IQQ", 3, n_t, n_kv) + bytes(kv) + bytes(ti)
    return head + b"\0" * (pad(len(head), first.alignment) - len(head))


def data_size(headers: list) -> int:
    return sum(pad(t[4], headers[0].alignment) for h in headers for t in h.tensors)


def fingerprint(headers: list, keep_split_keys: bool) -> dict:
    """What identifies the inputs: names, sizes, mtimes and each header's digest."""
    inputs = []
    for h in headers:
        st = os.stat(h.path)
        inputs.append(
            {
                "name": h.name,
                "size": st.st_size,
                "mtime_ns": st.st_mtime_ns,
                "header_sha256": h.digest,
            }
        )
    return {"version": FINGERPRINT_VERSION, "keep_split_keys": keep_split_keys, "inputs": inputs}


def copy_range(src: int, dst: int, offset: int, n: int, state: CopyState) -> None:
    """Kernel-side copy (copy_file_range, else sendfile), else a bounded read/write loop."""
    while n > 0:
        step = min(n, CHUNK)
        done = 0
        if state.get("mode") in (None, "copy_file_range") and hasattr(os, "copy_file_range"):
            try:
                done = os.copy_file_range(src, dst, step, offset)
                state["mode"] = "copy_file_range"
            except OSError:
                state["mode"] = "sendfile"
        if not done and state.get("mode") == "sendfile":
            try:
                done = os.sendfile(dst, src, offset, step)
            except OSError:
                state["mode"] = "read"
        if not done:
            state["mode"] = "read"
            buf = state.setdefault("buf", bytearray(8 << 20))
            mv = memoryview(buf)[: min(step, len(buf))]
            os.lseek(src, offset, os.SEEK_SET)
            done = os.readv(src, [mv])
            if done <= 0:
                raise GGUFError(f"unexpected end of input at {offset}")
            os.write(dst, mv[:done])
        offset += done
        n -= done
        state["copied"] += done
        _progress(state)


def _progress(state: CopyState, force: bool = False) -> None:
    now = time.monotonic()
    if force or now - state["last"] >= state["interval"]:
        state["last"] = now
        el = now - state["t0"]
        rate = state["copied"] / el / 1e6 if el > 0 else 0.0
        rec = {
            "event": "progress",
            "bytes": state["copied"],
            "total": state["total"],
            "pct": round(100.0 * state["copied"] / max(state["total"], 1), 1),
            "elapsed_s": round(el, 2),
            "mb_s": round(rate, 1),
        }
        sys.stderr.write(json.dumps(rec) + "\n")
        sys.stderr.flush()


def quick_check(path: str, n_tensors: int, size: int) -> list:
    """Structural check of a merged file: tensor count, layout, size (header only, fast)."""
    h = Header(path)
    errs = h.layout_errors()
    if h.n_tensors != n_tensors:
        errs.append(f"{h.name}: {h.n_tensors} tensors, expected {n_tensors}")
    if h.size != size:
        errs.append(f"{h.name}: {h.size} bytes, expected {size}")
    return errs


def up_to_date(out: str, fp: dict, n_tensors: int, size: int) -> str | None:
    """Why the existing merged file can be kept, or None: sidecar fingerprint + quick check."""
    side = out + SIDECAR_SUFFIX
    try:
        with open(side, encoding="utf-8") as f:
            rec = json.load(f)
        st = os.stat(out)
    except (OSError, ValueError):
        return None
    if rec.get("inputs_fingerprint") != fp:
        return None
    if rec.get("output", {}).get("size") != st.st_size or (
        rec.get("output", {}).get("mtime_ns") != st.st_mtime_ns
    ):
        return None
    try:
        if quick_check(out, n_tensors, size):
            return None
    except (GGUFError, OSError):
        return None
    return f"{os.path.basename(out)} matches its inputs ({os.path.basename(side)})"


def merge(args: dict) -> MergeReply:
    """Merge a split set into one file: check the headers, write the data, record a sidecar."""
    out = os.path.abspath(args["output"])
    keep = bool(args.get("keep_split_keys", False))
    headers, errs = load_set(args["path"])
    if errs:
        return {"failed": True, "changed": False, "msg": "invalid split set", "errors": errs}
    head = merged_header(headers, keep)
    n_tensors = sum(h.n_tensors for h in headers)
    size = len(head) + data_size(headers)
    fp = fingerprint(headers, keep)
    res: MergeReply = {  # what every reply below shares; each sets its own outcome
        "failed": False,
        "changed": False,
        "msg": "",
        "output": out,
        "size": size,
        "tensor_count": n_tensors,
        "shards": len(headers),
    }
    why = None if args.get("force") else up_to_date(out, fp, n_tensors, size)
    if why:
        return {**res, "failed": False, "changed": False, "skipped": True, "msg": why}
    refused = _room_for(out, size, args, res, len(headers))
    if refused:
        return refused
    state: CopyState = {
        "copied": 0,
        "total": size - len(head),
        "t0": time.monotonic(),
        "last": 0.0,
        "interval": float(args.get("progress_interval", 1.0)),
    }
    sys.stderr.write(json.dumps({"event": "start", "output": out, "total": size}) + "\n")
    _write_data(out, head, headers, size, state)
    errs = quick_check(out, n_tensors, size)
    if errs:
        return {
            **res,
            "failed": True,
            "changed": True,
            "msg": "merged file failed its check",
            "errors": errs,
        }
    _write_sidecar(out, fp, n_tensors, head)
    el = time.monotonic() - state["t0"]
    return {
        **res,
        "failed": False,
        "changed": True,
        "copy_mode": state.get("mode"),
        "elapsed_s": round(el, 2),
        "msg": f"merged {len(headers)} shards into {out}",
    }


def _room_for(out: str, size: int, args: dict, res: MergeReply, shards: int) -> MergeReply | None:
    """The reply when the merge cannot or (check mode) will not go ahead, else None."""
    outdir = os.path.dirname(out)
    if not os.path.isdir(outdir):
        msg = f"output directory {outdir} missing"
        return {**res, "failed": True, "changed": False, "msg": msg}
    st = os.statvfs(outdir)
    free = st.f_bavail * st.f_frsize
    margin = int(args.get("free_margin_bytes", 1 << 30))
    old = os.path.getsize(out) if os.path.isfile(out) else 0  # replaced, but only after rename
    if free < size + margin:
        return {
            **res,
            "failed": True,
            "changed": False,
            "free_bytes": free,
            "msg": (
                f"not enough free space in {outdir}: need {size + margin} (merged {size} + margin "
                f"{margin}), have {free}"
            ),
        }
    if args.get("check"):
        return {
            **res,
            "failed": False,
            "changed": True,
            "free_bytes": free,
            "replaces_bytes": old,
            "msg": f"would merge {shards} shards into {out} ({size} bytes)",
        }
    return None


def _write_data(out: str, head: bytes, headers: list, size: int, state: CopyState) -> None:
    """Header then every shard's tensors into a temporary file, renamed over `out` when whole."""
    outdir = os.path.dirname(out)
    fd, tmp = tempfile.mkstemp(dir=outdir, prefix="." + os.path.basename(out) + ".", suffix=".part")
    try:
        os.write(fd, head)
        for h in headers:
            src = os.open(h.path, os.O_RDONLY)
            try:
                for _name, _d, _t, off, nbytes in h.tensors:
                    copy_range(src, fd, h.data_offset + off, nbytes, state)
                    zeros = pad(nbytes, headers[0].alignment) - nbytes
                    if zeros:
                        os.write(fd, b"\0" * zeros)
            finally:
                os.close(src)
        _progress(state, force=True)
        if os.lseek(fd, 0, os.SEEK_CUR) != size:
            raise GGUFError(f"wrote {os.lseek(fd, 0, os.SEEK_CUR)} bytes, expected {size}")
        os.fchmod(fd, 0o644)
        os.fsync(fd)
        os.close(fd)
        fd = -1
        # Invalidate the old sidecar before the rename so a crash never pairs it with new data.
        side = out + SIDECAR_SUFFIX
        if os.path.exists(side):
            os.unlink(side)
        os.replace(tmp, out)
    finally:
        if fd >= 0:
            os.close(fd)
        if os.path.exists(tmp):
            os.unlink(tmp)


def _write_sidecar(out: str, fp: dict, n_tensors: int, head: bytes) -> None:
    """The record that lets a re-run keep the merged file (see up_to_date), made durable."""
    st = os.stat(out)
    rec = {
        "tool": "glmops gguf_split",
        "inputs_fingerprint": fp,
        "output": {
            "name": os.path.basename(out),
            "size": st.st_size,
            "mtime_ns": st.st_mtime_ns,
            "tensor_count": n_tensors,
            "header_sha256": hashlib.sha256(head).hexdigest(),
        },
    }
    write_atomic(out + SIDECAR_SUFFIX, json.dumps(rec, indent=1) + "\n")
    dfd = os.open(os.path.dirname(out), os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def content_sha256(headers: list) -> str:
    """sha256 over all tensor data in order: the same for a split set and its merge."""
    return _tensor_sha256(hashlib.sha256(), headers, pad_to=None)


def merged_sha256(headers: list, keep_split_keys: bool) -> str:
    """sha256 of the file merge() writes from these shards, computed from the shards alone."""
    head = hashlib.sha256(merged_header(headers, keep_split_keys))
    return _tensor_sha256(head, headers, pad_to=headers[0].alignment)


def _tensor_sha256(h, headers: list, pad_to) -> str:
    """Feed every tensor's data (zero-padded to pad_to, as merge writes it) into h."""
    buf = bytearray(8 << 20)
    for hd in headers:
        with open(hd.path, "rb", buffering=0) as f:
            for _n, _d, _t, off, nbytes in hd.tensors:
                f.seek(hd.data_offset + off)
                left = nbytes
                while left:
                    mv = memoryview(buf)[: min(left, len(buf))]
                    got = f.readinto(mv)
                    if not got:
                        raise GGUFError(f"{hd.name}: short read")
                    h.update(mv[:got])
                    left -= got
                if pad_to:
                    h.update(b"\0" * (pad(nbytes, pad_to) - nbytes))
    return h.hexdigest()


def verify(args: dict) -> VerifyReply:
    """A merged (single) file, or a split set: structure; content sha256 on request."""
    path = args["path"]
    if SHARD_RE.match(os.path.basename(path)) or os.path.isdir(path):
        headers, errs = load_set(path)
    else:
        headers = [Header(path)]
        errs = headers[0].layout_errors()
        if (headers[0].get("split.count") or 0) > 1:  # loaders would look for sibling shards
            errs.append(f"{headers[0].name}: split.count > 1 in a single file")
    res: VerifyReply = {
        "failed": bool(errs),
        "changed": False,
        "msg": "",
        "errors": errs,
        "files": [h.name for h in headers],
        "tensor_count": sum(h.n_tensors for h in headers),
        "data_bytes": sum(t[4] for h in headers for t in h.tensors),
    }
    if args.get("expect_tensor_count") is not None and (
        res["tensor_count"] != args["expect_tensor_count"]
    ):
        errs.append(f"{res['tensor_count']} tensors, expected {args['expect_tensor_count']}")
        res["failed"] = True
    if not errs and args.get("sha256"):
        res["content_sha256"] = content_sha256(headers)
    res["msg"] = "; ".join(errs) if errs else f"ok: {res['tensor_count']} tensors"
    return res


def validate(args: dict) -> ValidateReply:
    headers, errs = load_set(args["path"])
    if errs:
        return {"failed": True, "changed": False, "msg": errs[0], "errors": errs}
    first = headers[0]
    return {
        "failed": False,
        "changed": False,
        "errors": [],
        "msg": f"{len(headers)} shards, {sum(h.n_tensors for h in headers)} tensors",
        "first_shard": first.path,
        "shards": [{"name": h.name, "size": h.size, "tensors": h.n_tensors} for h in headers],
        "tensor_count": sum(h.n_tensors for h in headers),
        "kv_count": len(first.kv),
        "architecture": first.get("general.architecture"),
        "alignment": first.alignment,
        "merged_size": len(merged_header(headers, False)) + data_size(headers),
    }


def read_sidecar(out: str) -> dict:
    try:
        with open(out + SIDECAR_SUFFIX, encoding="utf-8") as f:
            rec = json.load(f)
    except (OSError, ValueError):
        return {}
    return rec if isinstance(rec, dict) else {}


def _removed_output(args: dict) -> str:
    """The merged file that stands for the split set at args["path"] (first shard or folder)."""
    path = args["path"]
    if args.get("output"):
        return os.path.abspath(args["output"])
    if os.path.isdir(path):
        found = [
            os.path.join(path, n[: -len(SIDECAR_SUFFIX)])
            for n in sorted(os.listdir(path))
            if n.endswith(".gguf" + SIDECAR_SUFFIX)
        ]
        found = [o for o in found if read_sidecar(o).get("shards_removed")]
        if len(found) != 1:
            raise GGUFError(f"{path}: no shards and {len(found)} merged files with removed shards")
        return found[0]
    return os.path.abspath(shard_paths(path)[0] + ".gguf")


def merged_only(args: dict) -> MergedOnlyReply | Reply:
    """The shards are gone: is there a merged file that a verified merge left in their place,
    unchanged since (size and mtime as recorded, else its sha256 again; always with sha256)?"""
    out = _removed_output(args)
    rec = read_sidecar(out)
    recorded = rec.get("output", {})
    if not rec.get("shards_removed") or not recorded.get("sha256"):
        return failure(f"no merged file verified and recorded in {out}{SIDECAR_SUFFIX}")
    try:
        st = os.stat(out)
    except OSError:
        return failure(f"{out}: missing, and its shards were removed")
    hashed = 0
    if args.get("sha256") or [st.st_size, st.st_mtime_ns] != [
        recorded.get("size"),
        recorded.get("mtime_ns"),
    ]:
        hashed = st.st_size
        if file_sha256(out) != recorded["sha256"]:
            return failure(
                f"{out} changed since its verified merge (sha256 differs) and its shards were "
                "removed: `glmops model` fetches the shards again, then deploy merges anew"
            )
    errs = quick_check(out, recorded["tensor_count"], recorded["size"])
    if errs:
        return failure("; ".join(errs))
    return {
        "failed": False,
        "changed": False,
        "output": out,
        "size": st.st_size,
        "tensor_count": recorded["tensor_count"],
        "shards": rec["shards_removed"],
        "hashed_bytes": hashed,
        "msg": f"{os.path.basename(out)} stands for its {len(rec['shards_removed'])} removed "
        "shards (verified merge)",
    }


def remove_shards(args: dict) -> RemoveReply | Reply:
    """Delete the shards of a merged set once the merged file is proven to hold them: its
    sha256 equals that of the merge recomputed from the shards. The sidecar records the
    sha256 and the removal before any shard goes, so an interrupted removal is finished."""
    out = os.path.abspath(args["output"])
    keep = bool(args.get("keep_split_keys", False))
    paths = shard_paths(args["path"])[1]
    present = [p for p in paths if os.path.exists(p)]
    rec = read_sidecar(out)
    inputs = {i["name"]: [i["size"], i["mtime_ns"]] for i in _inputs(rec)}
    if (
        rec.get("shards_removed")
        and rec.get("output", {}).get("sha256")
        and all(inputs.get(os.path.basename(p)) == _stat(p) for p in present)
    ):
        if not present:
            return {"failed": False, "changed": False, "msg": "shards already removed"}
        return _unlink(present, args, "the rest of the shards of a verified merge")
    headers, errs = load_set(args["path"])
    if errs:
        return {"failed": True, "changed": False, "msg": "invalid split set", "errors": errs}
    size = len(merged_header(headers, keep)) + data_size(headers)
    if not up_to_date(out, fingerprint(headers, keep), sum(h.n_tensors for h in headers), size):
        return failure(f"{out} is not the current merge of {paths[0]}: shards kept")
    if args.get("check"):
        return {"failed": False, "changed": True, "msg": f"would verify {out}, remove shards"}
    want, got = merged_sha256(headers, keep), file_sha256(out)
    if want != got:
        return failure(f"{out}: sha256 {got} is not that of its shards' merge ({want}): kept")
    rec["output"]["sha256"] = got
    rec["shards_removed"] = [os.path.basename(p) for p in paths]
    write_atomic(out + SIDECAR_SUFFIX, json.dumps(rec, indent=1) + "\n")
    return _unlink(present, args, f"shards after verifying {os.path.basename(out)} ({got[:12]})")


def _inputs(rec: dict) -> list:
    return rec.get("inputs_fingerprint", {}).get("inputs", [])


def _stat(path: str) -> list:
    st = os.stat(path)
    return [st.st_size, st.st_mtime_ns]


def _unlink(paths: list, args: dict, what: str) -> RemoveReply:
    if args.get("check"):
        return {"failed": False, "changed": True, "msg": f"would remove {len(paths)} {what}"}
    freed = 0
    for p in paths:
        freed += os.path.getsize(p)
        os.unlink(p)
    dfd = os.open(os.path.dirname(paths[0]), os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    msg = f"removed {len(paths)} {what}; {freed} bytes freed"
    return {"failed": False, "changed": True, "freed_bytes": freed, "msg": msg}


def run(args: dict) -> Reply:
    mode = args.get("mode")
    handlers: dict[str, Callable[[dict], Reply]] = {
        "validate": validate,
        "merge": merge,
        "verify": verify,
        "merged_only": merged_only,
        "remove_shards": remove_shards,
    }
    fn = handlers.get(mode) if isinstance(mode, str) else None  # a list would not hash
    return failure(f"unknown mode {mode!r}") if fn is None else fn(args)


if __name__ == "__main__":
    main(run, expected=(GGUFError, OSError, ValueError, KeyError))
