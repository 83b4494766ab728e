"""How fast can a GPU gather top-k rows at all, by row size and index locality (not a test).

The sparse MLA kernel's speed is bounded by a bare gather of the rows its indices name. This
sweep times that gather for rows of 256, 576 (fp8 e4m3), 656 (fp8_ds_mla), 1152 (bf16) and
2304 bytes at the same row count (B tokens x top-k 2048, over a cache of the benchmark's row
count), the fastest of 24 gather shapes per point (``bench._row_gather_kernel``), under four index
patterns:

  uniform      each index uniform over the whole cache (the benchmark's pattern)
  ctx32k       each token's indices a random 2048 of its own sequence's 32K contiguous rows,
               in random order (the indexer's top-k is ordered by score, not by position)
  ctx32k_sort  the same, sorted by row
  paged64k     a 64K-token context in 64-row pages at random places in the cache (vLLM's
               block table after churn), random order

It also times the attention kernel (bf16 and fp8 e4m3 rows, default plan) on each pattern, so
the question "can fp8 rows be 1.3x faster than 16-bit rows?" is answered against the fastest
gather of the fp8 rows on the same indices. Run from the repo root:

    python3 -m benchmarks.sparse_mla.gather_rows --json sparse_mla_h200_gather_row_size.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
from pathlib import Path

import torch

from benchmarks.sparse_mla import bench

ROW_BYTES = (256, 576, 656, 1152, 2304)
PATTERNS = ("uniform", "ctx32k", "ctx32k_sort", "paged64k")
# Gather shapes (rows per tile, warps, stages, programs per SM) tried per point.
SHAPES = list(itertools.product((16, 32), (4, 8), (3, 4), (2, 4, 8)))


def index_sets(n_rows: int, batch: int, n_sets: int, pattern: str) -> list[torch.Tensor]:
    """``n_sets`` [batch, TOPK] int32 index tensors over a cache of ``n_rows`` rows."""
    sets = []
    for _ in range(n_sets):
        if pattern == "uniform":
            idx = torch.randint(0, n_rows, (batch, bench.TOPK), device="cuda")
        elif pattern.startswith("ctx32k"):
            ctx = 32768
            base = torch.randint(0, n_rows - ctx, (batch, 1), device="cuda")
            pick = torch.rand(batch, ctx, device="cuda").argsort(dim=1)[:, : bench.TOPK]
            idx = base + (pick.sort(dim=1).values if pattern.endswith("_sort") else pick)
        elif pattern == "paged64k":
            ctx, page = 65536, 64
            pages = torch.randint(0, n_rows // page, (batch, ctx // page), device="cuda")
            pick = torch.rand(batch, ctx, device="cuda").argsort(dim=1)[:, : bench.TOPK]
            idx = pages.gather(1, pick // page) * page + pick % page
        else:
            raise ValueError(f"unknown index pattern {pattern!r}")
        sets.append(idx.to(torch.int32).contiguous())
    return sets


def n_sets_for(batch: int, row_bytes: int) -> int:
    """Enough index sets that one replay touches more than 4x the L2 (as the benchmark)."""
    per_call = batch * bench.TOPK * row_bytes
    return int(min(128, max(2, math.ceil(4 * bench.L2_BYTES / per_call))))


def gather_us(words: torch.Tensor, row_bytes: int, idx: list[torch.Tensor], shape: tuple) -> float:
    return bench.graph_time_us(bench.row_gather_calls(words, row_bytes, idx, shape), 7)[0]


def kernel_us(kmod, kv: torch.Tensor, batch: int, heads: int, pattern: str) -> float:
    """The attention kernel's default plan on these rows and this index pattern."""
    case = bench.Case(kv, batch, heads, torch.bfloat16)
    case.idx = index_sets(kv.shape[0], batch, case.n_sets, pattern)
    return bench.graph_time_us(case.ours(kmod), 15)[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=bench.CACHE_ROWS)
    ap.add_argument("--batches", default="32,128")
    ap.add_argument("--patterns", default=",".join(PATTERNS))
    ap.add_argument("--heads", default="8,64", help="heads for the attention-kernel timings")
    ap.add_argument("--json", default="sparse_mla_h200_gather_row_size.json")
    args = ap.parse_args()
    torch.manual_seed(0)
    kmod = bench.load_sparse_mla("sparse_mla")
    n = args.rows
    words = torch.randint(-(2**31), 2**31 - 1, (n * max(ROW_BYTES) // 4,), dtype=torch.int32,
                          device="cuda")  # fmt: skip
    bf16 = (torch.randn(n, 576, device="cuda") * 0.5).to(torch.bfloat16)
    e4m3 = (bf16.float() / bench.E4M3_SCALE).to(torch.float8_e4m3fn)
    points, kernels = [], []
    for pattern in args.patterns.split(","):
        for batch in (int(b) for b in args.batches.split(",")):
            for row_bytes in ROW_BYTES:
                idx = index_sets(n, batch, n_sets_for(batch, row_bytes), pattern)
                best = None
                for shape in SHAPES:
                    us = gather_us(words, row_bytes, idx, shape)
                    if best is None or us < best[0]:
                        best = (us, shape)
                us, shape = best
                rows = batch * bench.TOPK
                names = ("block_n", "warps", "stages", "per_sm")
                point = dict(pattern=pattern, B=batch, row_bytes=row_bytes, us=us,
                             shape=dict(zip(names, shape, strict=True)),
                             G_rows_per_s=rows / us / 1e3, GB_per_s=rows * row_bytes / us / 1e3,
                             copy_frac=rows * row_bytes / (us * 1e-6) / bench.MEM_BW)  # fmt: skip
                points.append(point)
                print(json.dumps(point), flush=True)
            for dname, kv in (("bf16", bf16), ("e4m3", e4m3)):
                for heads in (int(h) for h in args.heads.split(",")):
                    us = kernel_us(kmod, kv, batch, heads, pattern)
                    kernels.append(dict(pattern=pattern, B=batch, H=heads, rows=dname, us=us))
                    print(json.dumps(kernels[-1]), flush=True)
    result = {"info": bench.gpu_info(), "cache_rows": n, "shapes": SHAPES, "gathers": points,
              "kernels": kernels}  # fmt: skip
    Path(args.json).write_text(json.dumps(result, indent=1))
    print(summary(result))


def summary(result: dict) -> str:
    """Per pattern and batch: the best gather per row size, and what it allows fp8 rows."""
    lines = ["pattern B | gather us per row size | bf16 kernel H=8 | e4m3 kernel H=8 | "
             "bf16 kernel / e4m3 gather (the most e4m3 rows can gain)"]  # fmt: skip
    for pattern, batch in sorted({(p["pattern"], p["B"]) for p in result["gathers"]}):
        g = {p["row_bytes"]: p["us"] for p in result["gathers"]
             if p["pattern"] == pattern and p["B"] == batch}  # fmt: skip
        k = {(p["rows"], p["H"]): p["us"] for p in result["kernels"]
             if p["pattern"] == pattern and p["B"] == batch}  # fmt: skip
        cells = " ".join(f"{r}B:{g[r]:.1f}" for r in sorted(g))
        bf, e4 = k.get(("bf16", 8)), k.get(("e4m3", 8))
        gain = f"{bf / g[576]:.2f}x" if bf and 576 in g else "n/a"
        lines.append(f"{pattern} B={batch} | {cells} | {bf} | {e4} | {gain}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
