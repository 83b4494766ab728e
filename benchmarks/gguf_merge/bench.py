#!/usr/bin/env python3
"""Benchmark the gguf_split merge against `cp` of the same bytes on the same disk.

Not a test: run by hand from the checkout (`python3 -m benchmarks.gguf_merge.bench [--gb 4]
[--shards 4]`).
Writes benchmarks/results/gguf_merge.{json,md}. Targets (issue 6): merge >= 0.9x cp throughput,
peak RSS <= 512 MB. Each timed run ends with its data fsync'd (merge fsyncs; cp is followed by
`sync FILES`). Page cache is dropped between runs with drop_caches when allowed, else by
posix_fadvise(DONTNEED) on every file involved (works unprivileged for clean pages).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from gguf import GGUFWriter

ROOT = Path(__file__).resolve().parents[2]
HELPER = ROOT / "glmops" / "hosthelpers" / "gguf_split.py"
RESULTS = ROOT / "benchmarks" / "results"


def make_set(d: Path, total_gb: float, shards: int) -> Path:
    """Random (incompressible) F16 tensors of ~64 MiB, odd sizes so padding is exercised."""
    per = 64 << 20
    n = max(shards, int(total_gb * (1 << 30) // per))
    block = np.frombuffer(os.urandom(per), dtype=np.float16)
    w = GGUFWriter(str(d / "bench.gguf"), "glm-dsa", split_max_tensors=-(-n // shards))
    w.add_array("tokenizer.ggml.tokens", [f"t{i}" for i in range(160_000)])  # a GLM-size vocab
    shapes = [(1, (per - 2 * (i % 7)) // 2) for i in range(n)]
    for i, s in enumerate(shapes):
        w.add_tensor_info(f"blk.{i}.ffn_up_exps.weight", s, np.dtype(np.float16), s[1] * 2)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for s in shapes:
        w.write_tensor_data(block[: s[1]].reshape(s))
    w.close()
    return sorted(d.glob("bench-00001-of-*.gguf"))[0]


def drop_cache(files: list[Path]) -> str:
    subprocess.run(["sync"], check=True)
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return "drop_caches"
    except OSError:
        for f in files:
            if f.exists():
                fd = os.open(f, os.O_RDONLY)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                os.close(fd)
        return "posix_fadvise(DONTNEED) per file (drop_caches not permitted)"


def timed(argv: list[str]) -> tuple[float, int, str]:
    """Wall seconds, peak RSS (KiB) and stdout of one child.

    Peak RSS is the child's VmHWM, polled every 20 ms: ru_maxrss from wait4 would also count the
    pages the child shared with this (numpy-sized) parent between fork and exec.
    """
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    hwm = 0
    while p.poll() is None:
        try:
            for line in Path(f"/proc/{p.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    hwm = max(hwm, int(line.split()[1]))
        except OSError:
            pass
        time.sleep(0.02)
    s = time.perf_counter() - t0
    out = p.stdout.read().decode() if p.stdout else ""
    if p.returncode:
        raise SystemExit(f"{argv[0]} failed: {p.returncode} {out}")
    return s, hwm, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gb", type=float, default=4.0)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dir", default="/var/tmp", help="scratch dir on the disk to measure")
    a = ap.parse_args()
    Path(a.dir).mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=a.dir))
    try:
        t0 = time.perf_counter()
        (work / "in").mkdir()
        first = make_set(work / "in", a.gb, a.shards)
        gen_s = time.perf_counter() - t0
        shards = sorted((work / "in").glob("bench-*-of-*.gguf"))
        nbytes = sum(f.stat().st_size for f in shards)
        out, cpdir = work / "merged.gguf", work / "cp"
        runs: dict[str, list] = {"merge": [], "cp": []}
        cache = ""
        for i in range(a.runs):
            for kind in ("merge", "cp") if i % 2 == 0 else ("cp", "merge"):  # no order bias
                shutil.rmtree(cpdir, ignore_errors=True)
                for f in (out, Path(str(out) + ".glmops.json")):
                    f.unlink(missing_ok=True)
                cpdir.mkdir()
                cache = drop_cache(shards)
                if kind == "merge":
                    args = json.dumps({"mode": "merge", "path": str(first), "output": str(out)})
                    s, rss, txt = timed([sys.executable, str(HELPER), args])
                    res = json.loads(txt)
                    assert res["changed"] and not res["failed"], res
                    mode = res.get("copy_mode")
                else:
                    t = time.perf_counter()
                    _, rss, _ = timed(["cp", "--reflink=never", *map(str, shards), str(cpdir)])
                    subprocess.run(["sync", *map(str, cpdir.iterdir())], check=True)
                    s = time.perf_counter() - t
                runs[kind].append(
                    {
                        "seconds": round(s, 3),
                        "mb_s": round(nbytes / s / 1e6, 1),
                        "peak_rss_mb": round(rss / 1024, 1),
                    }
                )
        med = {k: statistics.median(r["seconds"] for r in v) for k, v in runs.items()}
        rss = max(r["peak_rss_mb"] for r in runs["merge"])
        ratio = med["cp"] / med["merge"]
        st = os.statvfs(work)
        dev = subprocess.run(
            ["df", "--output=source,fstype", str(work)], capture_output=True, text=True
        ).stdout.split()[-2:]
        result = {
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "machine": {
                "platform": platform.platform(),
                "cpus": os.cpu_count(),
                "mem_gb": round(
                    os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1
                ),
            },
            "disk": {
                "device": dev[0],
                "fstype": dev[1],
                "path": str(Path(a.dir)),
                "free_gb_before": round(st.f_bavail * st.f_frsize / 1e9, 1),
            },
            "input": {"bytes": nbytes, "shards": len(shards), "generate_s": round(gen_s, 1)},
            "cache_drop": cache,
            "copy_mode": mode,
            "runs": runs,
            "median_s": {k: round(v, 3) for k, v in med.items()},
            "median_mb_s": {k: round(nbytes / v / 1e6, 1) for k, v in med.items()},
            "merge_vs_cp": round(ratio, 3),
            "merge_peak_rss_mb": rss,
            "targets": {"merge_vs_cp_min": 0.9, "peak_rss_mb_max": 512},
            "pass": {"throughput": ratio >= 0.9, "rss": rss <= 512},
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "gguf_merge.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / "gguf_merge.md").write_text(report(result))
    print(json.dumps(result, indent=2))


def report(r: dict) -> str:
    rows = "\n".join(
        f"| {i + 1} | {m['seconds']} s ({m['mb_s']} MB/s, {m['peak_rss_mb']} MB RSS) | "
        f"{c['seconds']} s ({c['mb_s']} MB/s) |"
        for i, (m, c) in enumerate(zip(r["runs"]["merge"], r["runs"]["cp"], strict=True))
    )
    ok = {True: "met", False: "MISSED"}
    return f"""# GGUF merge benchmark

Date: {r["date"]}. Machine: {r["machine"]["platform"]}, {r["machine"]["cpus"]} CPUs,
{r["machine"]["mem_gb"]} GiB RAM. Disk: {r["disk"]["device"]} ({r["disk"]["fstype"]}).
Input: {r["input"]["shards"]} synthetic shards, {r["input"]["bytes"] / 1e9:.2f} GB (random F16
tensors of ~64 MiB with odd sizes, a 160k-token vocab in shard 1).
Cache between runs: {r["cache_drop"]}. Run order alternates. Merge copy mode: {r["copy_mode"]}.
Both sides end with their data fsync'd (merge: fsync + rename; cp: `sync FILES`).

| run | merge (gguf_split.py) | cp --reflink=never + sync |
|---|---|---|
{rows}

Median: merge {r["median_s"]["merge"]} s ({r["median_mb_s"]["merge"]} MB/s), cp
{r["median_s"]["cp"]} s ({r["median_mb_s"]["cp"]} MB/s): merge = **{r["merge_vs_cp"]}x cp**
(target >= 0.9: {ok[r["pass"]["throughput"]]}). Peak RSS of the merge process:
**{r["merge_peak_rss_mb"]} MB** (target <= 512: {ok[r["pass"]["rss"]]}).

Reproduce: `python3 -m benchmarks.gguf_merge.bench --gb 4 --shards 4` (needs gguf and numpy; about
3x the input size of free space, removed afterwards).
"""


if __name__ == "__main__":
    main()
