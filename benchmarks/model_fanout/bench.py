#!/usr/bin/env python3
"""Benchmark the model fan-out onto testbed hosts: tree vs one source vs plain rsync by hand.

Not a test: run by hand as root (`python3 -m benchmarks.model_fanout.bench [--gb 2] [--hosts 4]
[--repeat 2]`). Boots testbed hosts tb171.. (real sshd, real rsync), puts a synthetic model of
random (incompressible) files into a controller cache with its manifest, then, for each method,
empties the hosts' model_dir and copies it again:
- tree: `run_model_phase` (each finished host seeds others, 2 copies per source);
- one source: `run_model_phase` with tree=False (the controller pushes to every host);
- by hand: `rsync -a -e ssh` from the controller to each host in turn (no verification).
Records wall time (median) and the bytes each source sent (rsync --stats) in
benchmarks/results/model_fanout.{json,md}. All hosts share this machine's CPUs and disk, so
this measures the schedule and its overhead, not a real network's uplink limits.
"""

from __future__ import annotations

import argparse
import datetime
import io
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from glmops.engine.connection import ConnectionSettings
from glmops.engine.inventory import load_inventory
from glmops.engine.output import Reporter
from glmops.engine.runlog import Masker, RunLog
from glmops.model.fetch import ModelCache
from glmops.model.manifest import FileEntry, Manifest, sha256_file, write_atomic
from glmops.model.phase import ModelOptions, run_model_phase
from glmops.model.source import parse_source
from glmops.testbed import Testbed

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
FIRST_INDEX = 171
MODEL_DIR = "/srv/bench/model"
SOURCE = {"repo": "bench/synthetic-GGUF", "revision": "0" * 40, "include": ["*"]}


def make_cache(root: Path, total_gb: float, files: int) -> tuple[ModelCache, Manifest]:
    """A controller cache as `glmops model` leaves it: files, manifest, verified stamps."""
    cache = ModelCache(root, parse_source(SOURCE, "bench"))
    size = int(total_gb * 1e9) // files
    entries = []
    for i in range(1, files + 1):
        path = cache.files / f"weights/bench-{i:05d}-of-{files:05d}.gguf"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as out:
            left = size
            while left:
                n = min(left, 64 << 20)
                out.write(os.urandom(n))
                left -= n
        entries.append(
            FileEntry(str(path.relative_to(cache.files)), size, sha256_file(path), "lfs")
        )
    commit = {"part": "weights", "repo": SOURCE["repo"], "revision": SOURCE["revision"]}
    manifest = Manifest(
        ({**commit, "commit": SOURCE["revision"], "include": ["*"]},), tuple(entries)
    )
    write_atomic(cache.manifest_path, manifest.to_json())
    for entry in entries:
        cache.stamp(entry)
    return cache, manifest


def wipe(bed: Testbed, hosts: list[str]) -> None:
    for host in hosts:
        bed.exec(host, ["rm", "-rf", MODEL_DIR])
    subprocess.run(["sync"], check=True)


def phase(bed: Testbed, hosts: list[str], cache_root: Path, home: Path, tree: bool) -> dict:
    inventory = load_inventory(
        bed.inventory_path,
        {"model_source": SOURCE, "model_dir": MODEL_DIR, "gguf_needs_single_file": False},
    )
    masker = Masker()
    err = io.StringIO()
    reporter = Reporter(masker, json_events=True, stdout=io.StringIO(), stderr=err)
    options = ModelOptions(
        tree=tree,
        cache_root=cache_root,
        connection=ConnectionSettings(known_hosts=home / "known_hosts"),
    )
    started = time.monotonic()
    results = run_model_phase(
        inventory.select("all"), reporter, RunLog(home / "runs", masker), masker, options
    )
    seconds = time.monotonic() - started
    bad = {h: r.msg for h, r in results.items() if r.status.value != "changed"}
    if bad:
        raise SystemExit(f"fan-out failed: {bad}\n{err.getvalue()[-3000:]}")
    sent = re.search(r"bytes each source sent: (.*)", err.getvalue())
    per_source: dict[str, int] = {}
    for result in results.values():
        src = result.data["source"]
        per_source[src] = per_source.get(src, 0) + int(result.data["bytes"])
    return {"seconds": seconds, "sent_by_source": per_source, "note": sent.group(1) if sent else ""}


def by_hand(bed: Testbed, hosts: list[str], cache: ModelCache, home: Path) -> dict:
    key = bed.key_path
    ssh = f"ssh -i {key} -o UserKnownHostsFile={home / 'known_hosts'} -o StrictHostKeyChecking=yes"
    inventory = load_inventory(bed.inventory_path)
    started = time.monotonic()
    sent = 0
    for host in hosts:
        address = inventory.hosts[host].connection.address
        bed.exec(host, ["mkdir", "-p", MODEL_DIR])
        proc = subprocess.run(
            [
                "rsync",
                "-a",
                "--stats",
                "-e",
                ssh,
                f"{cache.files}/",
                f"root@{address}:{MODEL_DIR}/",
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        sent += int(re.search(r"Total bytes sent: ([\d,]+)", proc.stdout).group(1).replace(",", ""))
    return {"seconds": time.monotonic() - started, "sent_by_source": {"controller": sent}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=2.0, help="model size in GB")
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="glmops-fanout-bench-"))
    bed = Testbed(work / "bed", first_index=FIRST_INDEX)
    hosts = [f"tb{FIRST_INDEX + i}" for i in range(args.hosts)]
    runs: dict[str, list[dict]] = {"tree": [], "one_source": [], "rsync_by_hand": []}
    try:
        bed.up(args.hosts, None, internet=True)
        cache, manifest = make_cache(work / "cache", args.gb, args.files)
        home = work / "home"
        home.mkdir()
        # record the hosts' keys in the known_hosts every method uses (first contact)
        wipe(bed, hosts)
        phase(bed, hosts, work / "cache", home, tree=False)
        for _ in range(args.repeat):
            for method in runs:
                wipe(bed, hosts)
                if method == "rsync_by_hand":
                    runs[method].append(by_hand(bed, hosts, cache, home))
                else:
                    runs[method].append(phase(bed, hosts, work / "cache", home, method == "tree"))
                print(method, json.dumps(runs[method][-1]), flush=True)
    finally:
        bed.down()
        subprocess.run(["rm", "-rf", str(work)], check=False)
    report(args, manifest.total_bytes, runs)
    return 0


def report(args: argparse.Namespace, total: int, runs: dict[str, list[dict]]) -> None:
    medians = {m: statistics.median(r["seconds"] for r in rs) for m, rs in runs.items()}
    doc = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cores",
        "rsync": subprocess.run(
            ["rsync", "--version"], capture_output=True, text=True
        ).stdout.splitlines()[0],
        "model_bytes": total,
        "files": args.files,
        "hosts": args.hosts,
        "repeat": args.repeat,
        "median_seconds": medians,
        "ratio_vs_rsync_by_hand": {m: medians[m] / medians["rsync_by_hand"] for m in medians},
        "runs": runs,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "model_fanout.json").write_text(json.dumps(doc, indent=1) + "\n")
    lines = [
        "# Model fan-out: tree vs one source vs rsync by hand",
        "",
        f"{doc['date']}, {doc['machine']}, {doc['rsync']}. {total / 1e9:.1f} GB in {args.files} "
        f"files onto {args.hosts} testbed hosts (systemd-nspawn, real sshd; all on this machine, "
        f"so the hosts share its CPUs and disk). Median of {args.repeat} runs. "
        "`python3 -m benchmarks.model_fanout.bench`.",
        "",
        "| method | median s | vs rsync by hand | bytes sent by each source (last run) |",
        "|---|---|---|---|",
    ]
    for method, rs in runs.items():
        sent = ", ".join(
            f"{s}: {b / 1e9:.2f} GB" for s, b in sorted(rs[-1]["sent_by_source"].items())
        )
        ratio = doc["ratio_vs_rsync_by_hand"][method]
        lines.append(f"| {method} | {medians[method]:.1f} | {ratio:.2f}x | {sent} |")
    lines += [
        "",
        "tree and one source include glmops' work around the copy: connecting, the disk",
        "preflight, the ephemeral key, and hashing every file on arrival; rsync by hand copies",
        "without any check, one host after another.",
        "",
        "Reading it: here every host is a namespace on the same 2 shared cores, so no link is the",
        "bottleneck and the CPU (ssh encryption, sha256) is; the tree's extra round (its copies",
        "wait for their source's copy and verification) costs time that a real network's uplink",
        "would repay. What the tree changes is the bytes the controller sends: with `per_source`",
        "k it sends k copies instead of one per host (this run: "
        f"{_controller(runs['tree']) / 1e9:.1f} GB instead of "
        f"{_controller(runs['one_source']) / 1e9:.1f} GB), and the rest comes from hosts that",
        "finished. On a fleet whose controller or Hub uplink is the limit, that, not this wall",
        "time, is the gain.",
    ]
    (RESULTS / "model_fanout.md").write_text("\n".join(lines) + "\n")


def _controller(runs: list[dict]) -> int:
    return runs[-1]["sent_by_source"].get("controller", 0)


if __name__ == "__main__":
    sys.exit(main())
