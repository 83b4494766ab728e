"""Project the H200 benchmark onto the deployment GPU, RTX PRO 6000 Blackwell (SM120): a roofline
of that GPU applied to the efficiency the portable path measured per case on the H200.

For each case, efficiency = H200 roofline floor / H200 time of the tile the plan picks for a
99 KB GPU (the ``sm120_tile_us`` column: SM120's shared-memory budget; the tl.dot kernel, or for
fp8 e4m3 rows with up to 16 heads under Triton 3.6 the Gluon e4m3 tile with mma.sync), and the
projected time = RTX PRO 6000 floor / that efficiency. The baseline (vLLM's dense-kernel reuse)
is projected the same way, so the projected speedup is the measured one of the SM120 tile.
Where the benchmark measured it (``sm120_tl_dot_us``), the tile SM120 runs without Triton 3.6's
Gluon kernels (under vLLM 0.16 and 0.27 onwards) is projected beside it; compiled for the H200,
its tl.dot runs the H200's MMA instructions, not SM120's mma.sync.
Stdlib only: reads the committed JSON, writes Markdown.

    python3 benchmarks/sparse_mla/project_sm120.py \\
        [--json benchmarks/results/sparse_mla_h200.json] \\
        [--md benchmarks/results/sparse_mla_rtx_pro_6000_projection.md]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TOPK = 2048
ROW_BYTES = {"bf16": 1152, "fp16": 1152, "e4m3": 576, "e4m3h": 576, "fp8": 656}  # one cache row
# RTX PRO 6000 Blackwell (Workstation Edition), public specifications:
# - 1792 GB/s GDDR7 (512-bit, 28 Gbps), 24,064 CUDA cores, 4000 AI TOPS (FP4, sparse):
#   https://www.nvidia.com/en-us/products/workstations/professional-desktop-gpus/rtx-pro-6000/
# - 128 CUDA cores per SM on Blackwell GB20x, so 24,064 cores = 188 SMs (GB202 has 192):
#   https://images.nvidia.com/aem-dam/Solutions/geforce/blackwell/nvidia-rtx-blackwell-gpu-architecture.pdf
# - compute capability 12.0: 99 KB shared memory per block (opt-in), 100 KB per SM:
#   https://docs.nvidia.com/cuda/cuda-c-programming-guide/#features-and-technical-specifications
# Dense 16-bit tensor rate: 4000 sparse FP4 TOPS / 2 (sparsity) / 2 (FP8) / 2 (FP16) = 500.
RTX_BW = 1.792e12
RTX_MMA = 500e12
RTX_SMS = 188
RTX_SMEM_PER_BLOCK = 101376


def floor_us(batch: int, heads: int, row_bytes: int, bandwidth: float, mma: float) -> float:
    """Roofline floor: the gathered rows, q and out once through memory, or the dots' FLOPs."""
    kv_bytes = batch * TOPK * row_bytes
    io_bytes = batch * heads * (576 + 512) * 2
    flops = 2.0 * batch * heads * TOPK * (576 + 512)
    return max((kv_bytes + io_bytes) / bandwidth, flops / mma) * 1e6


def project(result: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for r in result["rows"]:
        row_bytes = ROW_BYTES[r["dtype"]]
        h200_floor = floor_us(r["B"], r["H"], row_bytes, result["mem_bw"], result["mma_rate"])
        rtx_floor = floor_us(r["B"], r["H"], row_bytes, RTX_BW, RTX_MMA)
        eff = h200_floor / r["sm120_tile_us"]
        base_eff = h200_floor / r["baseline_us"] if r["baseline_us"] else None
        projected = rtx_floor / eff
        tl_dot = r.get("sm120_tl_dot_us")
        rows.append(
            {
                "dtype": r["dtype"],
                "B": r["B"],
                "H": r["H"],
                "h200_us": r["sm120_tile_us"],
                "efficiency": eff,
                "rtx_floor_us": rtx_floor,
                "projected_us": projected,
                "projected_baseline_us": rtx_floor / base_eff if base_eff else None,
                "config": r["sm120_config"],
                "h200_tl_dot_us": tl_dot,
                "projected_tl_dot_us": rtx_floor / (h200_floor / tl_dot) if tl_dot else None,
            }
        )
    return rows


def render(result: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    info = result["info"]
    lines = [
        "# Sparse MLA decode projected onto RTX PRO 6000 Blackwell (SM120)",
        "",
        f"Measured on {info['gpu']} ({info['date']}, Triton {info['triton']}; "
        "`sparse_mla_h200.md`, column `SM120 tile`), projected by "
        "`benchmarks/sparse_mla/project_sm120.py`.",
        "",
        f"- Target: {RTX_BW / 1e12:.3f} TB/s, {RTX_SMS} SMs, {RTX_MMA / 1e12:.0f} TFLOP/s dense "
        f"16-bit MMA, {RTX_SMEM_PER_BLOCK} B shared memory per block (sources in the script).",
        f"- H200 roofline as in the benchmark: {result['mem_bw'] / 1e12:.1f} TB/s, "
        f"{result['mma_rate'] / 1e12:.0f} TFLOP/s.",
        "- efficiency = H200 floor / H200 time of the tile the plan picks for a 99 KB GPU; "
        "projected = RTX floor / efficiency. The baseline is projected alike.",
        "- Why it can be off: the H200 holds two 93 KB small-head tl.dot programs per SM where "
        "SM120 (100 KB per SM) holds one (the Gluon tile runs one per SM here too: small heads, "
        "optimistic); the split counts are the H200's, for 132 SMs, where on SM120's 188 the "
        "plan picks counts that fill them (B=8: 22 splits of 32-row tiles, B=32: 5, B=128 with "
        "64 or 128 heads: 4 or 2, in rounds, fp8_ds_mla rows too), which the same fill on H200 "
        "batches that leave as many SMs idle (B=6, 22, 90) measured 1.03-1.35x faster "
        "(backend/DESIGN.md, Splits): "
        "pessimistic there; SM120's 128 MB L2 keeps more of a cache than the H200's 60 MB "
        "(large B: pessimistic); small-B cases are latency-bound, and latency does not scale "
        "with bandwidth.",
        "",
        "| rows | B | H | H200 µs | efficiency | RTX floor µs | projected µs | projected baseline "
        "µs | tile |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    tl_dot = any(p["projected_tl_dot_us"] for p in rows)
    if tl_dot:
        lines[-2:] = [
            lines[-2] + " H200 µs, no Gluon | projected µs, no Gluon |",
            lines[-1] + "---|---|",
        ]
    for p in rows:
        base = f"{p['projected_baseline_us']:.1f}" if p["projected_baseline_us"] else "n/a"
        tile = "{BLOCK_H}x{BLOCK_N}, {num_warps} warps, {num_stages} stages".format(**p["config"])
        tile += ", Gluon mma.sync" if p["config"].get("MMA_V2") else ", tl.dot"
        if p["config"].get("COL_WARPS", 1) > 1:
            tile += ", scores on {COL_WARPS} column groups".format(**p["config"])
        line = (
            f"| {p['dtype']} | {p['B']} | {p['H']} | {p['h200_us']:.1f} | {p['efficiency']:.2f} "
            f"| {p['rtx_floor_us']:.1f} | {p['projected_us']:.1f} | {base} | {tile} |"
        )
        if tl_dot:
            line += f" {p['h200_tl_dot_us']:.1f} | {p['projected_tl_dot_us']:.1f} |"
        lines.append(line)
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default=str(ROOT / "benchmarks/results/sparse_mla_h200.json"))
    ap.add_argument(
        "--md", default=str(ROOT / "benchmarks/results/sparse_mla_rtx_pro_6000_projection.md")
    )
    args = ap.parse_args()
    result = json.loads(Path(args.json).read_text())
    Path(args.md).write_text(render(result, project(result)))


if __name__ == "__main__":
    main()
