"""Run one sparse MLA decode case a few times, for a profiler (not a benchmark, not a test).

    ncu --kernel-name regex:sparse_mla --launch-skip 2 --launch-count 1 --set full \
        python -m benchmarks.sparse_mla.profile_case --batch 128 --heads 64

Inputs as in bench.py (its cache size, top-k and scale): random bf16 rows (``--rows e4m3``:
fp8 e4m3 rows, one scale, as vLLM's ``--kv-cache-dtype fp8`` writes them), random indices.
"""

from __future__ import annotations

import argparse
import json

import torch

from benchmarks.sparse_mla import bench, overrides


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--heads", type=int, default=64)
    ap.add_argument("--config", default="", help="JSON tile override, e.g. '{\"WGMMA\": 0}'")
    ap.add_argument("--calls", type=int, default=4)
    ap.add_argument("--rows", choices=["bf16", "e4m3"], default="bf16")
    args = ap.parse_args()
    kmod = bench.load_sparse_mla("sparse_mla")
    torch.manual_seed(0)
    kv = bench.cache_rows(kmod, args.rows, bench.CACHE_ROWS)
    kv_scale = bench.E4M3_SCALE if args.rows == "e4m3" else 1.0
    q = (torch.rand(args.batch, args.heads, 576, device="cuda") * 2 - 1).to(torch.bfloat16)
    idx = torch.randint(0, kv.shape[0], (args.batch, bench.TOPK), device="cuda", dtype=torch.int32)
    config = json.loads(args.config) if args.config else None
    for _ in range(args.calls):
        overrides.decode(kmod, q, kv, idx, bench.SM_SCALE, config=config, kv_scale=kv_scale)
    torch.cuda.synchronize()
    fmt = "fp8" if args.rows == "e4m3" else "16bit"
    print(overrides.plan(kmod, args.batch, args.heads, bench.TOPK, q.device, None, config, fmt))


if __name__ == "__main__":
    main()
