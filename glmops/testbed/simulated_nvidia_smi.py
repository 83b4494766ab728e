#!/usr/bin/python3
"""SIMULATED nvidia-smi -- glmops TESTBED ONLY. There is no GPU on this host.

This stand-in is copied into local systemd-nspawn test hosts by `glmops testbed up --gpu-profile`
and is never installed on a real host. It answers the queries glmops makes (--query-gpu CSV, -L,
the plain summary) from the declared profile in /etc/glmops-testbed/gpu-profile.json.
Standalone on purpose: it runs on the test host with nothing but python3.
"""

import json
import os
import sys
import time

PROFILE = os.environ.get("GLMOPS_TESTBED_GPU_PROFILE", "/etc/glmops-testbed/gpu-profile.json")


def _fields(p, g):
    """Field name -> (value, unit); unit is dropped by `nounits`, kept in the csv header."""
    mem = p["memory_total_mib"]
    used = 0
    plimit = f"{p['power_limit_w']:.2f}"
    vals = {
        "index": (str(g["index"]), None),
        "count": (str(p["count"]), None),
        "name": (p["gpu_name"], None),
        "uuid": (g["uuid"], None),
        "serial": ("[N/A]", None),
        "compute_cap": (p["compute_cap"], None),
        "driver_version": (p["driver_version"], None),
        "vbios_version": ("98.00.00.00.00", None),
        "pci.bus_id": (g["pci_bus_id"], None),
        "persistence_mode": ("Enabled", None),
        "display_mode": ("Disabled", None),
        "mig.mode.current": ("Disabled", None),
        "mig.mode.pending": ("Disabled", None),
        "pstate": ("P8", None),
        "fan.speed": ("[N/A]", "%"),
        "temperature.gpu": ("31", None),
        "utilization.gpu": ("0", "%"),
        "utilization.memory": ("0", "%"),
        "memory.total": (str(mem), "MiB"),
        "memory.used": (str(used), "MiB"),
        "memory.free": (str(mem - used), "MiB"),
        "memory.reserved": ("0", "MiB"),
        "power.draw": ("35.00", "W"),
        "power.limit": (plimit, "W"),
        "power.max_limit": (plimit, "W"),
        "clocks.max.sm": ("2430", "MHz"),
        "timestamp": (time.strftime("%Y/%m/%d %H:%M:%S.000"), None),
    }
    for alias, real in (
        ("gpu_name", "name"),
        ("gpu_uuid", "uuid"),
        ("gpu_bus_id", "pci.bus_id"),
        ("memory.total", "memory.total"),
    ):
        vals[alias] = vals[real]
    return vals


def _opt(argv, *names):
    """Value of `--name=v`, `--name v` or `-n v`, or None."""
    for i, a in enumerate(argv):
        for n in names:
            if a.startswith(n + "="):
                return a.split("=", 1)[1]
            if a == n and i + 1 < len(argv):
                return argv[i + 1]
    return None


def _selected(p, argv):
    ids = _opt(argv, "--id", "-i")
    gpus = p["gpus"]
    if ids is None:
        return gpus
    wanted = ids.split(",")
    return [
        g
        for g in gpus
        if str(g["index"]) in wanted or g["uuid"] in wanted or g["pci_bus_id"] in wanted
    ]


def query(p, argv, out):
    fields = [f.strip() for f in (_opt(argv, "--query-gpu") or "").split(",") if f.strip()]
    fmt = _opt(argv, "--format")
    if fmt is None or fmt.split(",")[0] != "csv":
        out.write("'--format' option is required and must be csv\n")
        return 2
    opts = set(fmt.split(",")[1:])
    gpus = _selected(p, argv)
    rows = []
    for g in gpus:
        vals = _fields(p, g)
        for f in fields:
            if f not in vals:
                out.write(f'Field "{f}" is not a valid field to query.\n\n')
                return 2
        rows.append(
            [
                vals[f][0]
                + (
                    ""
                    if "nounits" in opts or not vals[f][1] or vals[f][0].startswith("[")
                    else f" {vals[f][1]}"
                )
                for f in fields
            ]
        )
    if "noheader" not in opts:
        sample = _fields(p, p["gpus"][0]) if p["gpus"] else {}
        out.write(
            ", ".join(
                f + (f" [{sample[f][1]}]" if sample.get(f, ("", None))[1] else "") for f in fields
            )
            + "\n"
        )
    for r in rows:
        out.write(", ".join(r) + "\n")
    return 0


def summary(p, out):
    drv, cuda = p["driver_version"], p["cuda_version"]
    bar = "+" + "-" * 87 + "+"
    out.write(time.strftime("%a %b %d %H:%M:%S %Y") + "\n" + bar + "\n")
    head = f"NVIDIA-SMI {drv}    Driver Version: {drv}    CUDA Version: {cuda}"
    out.write(f"| {head:<85} |\n")
    out.write(f"| {'SIMULATED by the glmops testbed: no real GPU on this host':<85} |\n{bar}\n")
    for g in p["gpus"]:
        line = (
            f"{g['index']:>3}  {p['gpu_name'][:44]:<44} On | {g['pci_bus_id']} Off |"
            f" 0MiB / {p['memory_total_mib']}MiB"
        )
        out.write(f"| {line:<85} |\n")
    out.write(bar + "\n")
    out.write("| Processes:" + " " * 76 + "|\n| No running processes found" + " " * 60 + "|\n")
    out.write(bar + "\n")
    return 0


def main(argv, out=sys.stdout):
    try:
        with open(PROFILE) as f:
            p = json.load(f)
    except OSError as e:
        out.write(f"simulated nvidia-smi: cannot read GPU profile {PROFILE}: {e}\n")
        return 9
    if any(a.startswith("--query-gpu") for a in argv):
        return query(p, argv, out)
    if "-L" in argv or "--list-gpus" in argv:
        for g in _selected(p, argv):
            out.write(f"GPU {g['index']}: {p['gpu_name']} (UUID: {g['uuid']})\n")
        return 0
    if "--version" in argv:
        out.write(
            f"NVIDIA-SMI version  : {p['driver_version']}\n"
            f"DRIVER version      : {p['driver_version']}\n"
            f"CUDA Version        : {p['cuda_version']}\n"
        )
        return 0
    if not argv:
        return summary(p, out)
    out.write(f"simulated nvidia-smi (glmops testbed): unsupported arguments: {' '.join(argv)}\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
