"""The GPU a benchmark runs on, in one home for every GPU benchmark: its name for titles and result
file names, its datasheet memory bandwidth, and a device-to-device copy probe run in the same
process, so that floors come from the card the numbers were taken on (an H100's 3.35 TB/s is not
an H200's 4.8; the probe reads what this card moves, bytes read plus bytes written).

    info = device_info()          # name, slug, SMs, L2, versions, date, copy and datasheet GB/s
    floor_us = nbytes / info["copy_bw"] * 1e6
    out = result_path("sparse_mla", info, ".json")   # -> sparse_mla_h100.json on an H100

Only the probe and device_info need torch and a GPU; the rest is pure (tests/unit test it).
"""

from __future__ import annotations

import datetime as dt
import re
import statistics
import subprocess
from typing import Any

# Datasheet memory bandwidth (bytes/s) by a name fragment, most specific first: leads, beside
# the probe, never the floor.
DATASHEET_BW: tuple[tuple[str, float], ...] = (
    ("H200", 4.8e12),
    ("H100 NVL", 3.9e12),
    ("H100 PCIe", 2.0e12),
    ("H100", 3.35e12),  # SXM 80 GB HBM3
    ("H800", 3.35e12),
    ("A100-SXM4-80GB", 2.039e12),
    ("A100", 1.555e12),
    ("RTX PRO 6000", 1.792e12),  # Blackwell (SM120), GDDR7
    ("RTX 5090", 1.792e12),
    ("L40S", 0.864e12),
)
COPY_BYTES = 2 * 2**30  # the probe's buffer: well past any L2


def short_name(gpu: str) -> str:
    """The datasheet fragment a GPU name matches ("NVIDIA H100 80GB HBM3" -> "H100"), else the
    name without its vendor prefix."""
    for fragment, _ in DATASHEET_BW:
        if fragment.lower() in gpu.lower():
            return fragment
    return re.sub(r"^nvidia\s+", "", gpu.strip(), flags=re.I) or "gpu"


def slug(gpu: str) -> str:
    """A file-name part for a GPU name: "NVIDIA H200" -> "h200", "NVIDIA RTX PRO 6000 Blackwell
    Server Edition" -> "rtx_pro_6000"."""
    return re.sub(r"[^a-z0-9]+", "_", short_name(gpu).lower()).strip("_") or "gpu"


def datasheet_bw(gpu: str) -> float | None:
    for fragment, bandwidth in DATASHEET_BW:
        if fragment.lower() in gpu.lower():
            return bandwidth
    return None


def result_path(stem: str, info: dict[str, Any], suffix: str) -> str:
    """``stem``_``slug````suffix``: the result file's name for the GPU ``info`` describes."""
    return f"{stem}_{info['slug']}{suffix}"


def copy_bandwidth(nbytes: int = COPY_BYTES, reps: int = 20) -> float:
    """Bytes read plus bytes written per second by a device-to-device copy (median of ``reps``
    timed copies after a warm-up): the ceiling a memory-bound kernel on this card can reach."""
    import torch

    src = torch.randint(0, 255, (nbytes,), dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    torch.cuda.synchronize()
    samples = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e-3)
    del src, dst
    torch.cuda.empty_cache()
    return 2 * nbytes / statistics.median(samples)


def device_info(probe: bool = True) -> dict[str, Any]:
    """The card and software a result was taken with, and (``probe``) its measured copy rate."""
    import torch
    import triton

    props = torch.cuda.get_device_properties(0)
    gpu = torch.cuda.get_device_name()
    info: dict[str, Any] = {
        "gpu": gpu,
        "short_name": short_name(gpu),
        "slug": slug(gpu),
        "sms": props.multi_processor_count,
        "l2_bytes": getattr(props, "L2_cache_size", 50 * 2**20),
        "capability": f"{props.major}.{props.minor}",
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "datasheet_bw": datasheet_bw(gpu),
        "copy_bw": copy_bandwidth() if probe else None,
    }
    try:
        query = "name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,power.limit"
        res = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
        info["nvidia_smi"] = res.stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        info["nvidia_smi"] = f"unavailable: {exc}"
    return info


def bandwidth_line(info: dict[str, Any]) -> str:
    """The floors' bandwidth as a results file states it: the probe's, the datasheet's beside."""
    sheet = info.get("datasheet_bw")
    sheet_text = f"{sheet / 1e12:.2f} TB/s" if sheet else "not in the table"
    copy = info.get("copy_bw")
    copy_text = f"{copy / 1e12:.2f} TB/s" if copy else "not measured"
    return (
        f"memory floors at the copy probe's {copy_text} (device-to-device copy of "
        f"{COPY_BYTES // 2**30} GiB in this run, bytes read + written); datasheet {sheet_text}"
    )
