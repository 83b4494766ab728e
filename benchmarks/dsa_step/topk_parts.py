"""Where the top-k's time goes: each pass of ``topk_per_row`` timed alone, and its launch
parameters swept, on random logits (the passes' costs depend on the row length and the
ranks, not on the values' distribution).

    python3 -m benchmarks.dsa_step.topk_parts [--out DIR]   # DIR/topk_parts_<gpu>.json

Times are medians of ``triton.testing.do_bench`` (L2 flushed between calls); a pass is timed
as the difference between the chain up to it and the chain before it (the bounds pass resets
the workspace, as in the real call). (The acq_rel and relaxed-pf columns of
results/sweeps/topk_parts_h100_v3_wide_collect.json came from a variant of the collecting
kernel, since dropped: acquire-release atomics were 5-20% slower, loading the next chunk early
gained nothing.)
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import triton

from backend import indexer_logits as il
from benchmarks import gpu_device

K = 2048
CASES = [(128, 131072), (32, 32768), (32, 131072), (128, 32768), (8, 131072), (1, 131072)]


def _median_us(fn) -> float:
    return triton.testing.do_bench(fn, warmup=20, rep=100, return_mode="median") * 1e3


def profile_case(batch: int, ctx: int) -> dict:
    dev = torch.device("cuda")
    logits = torch.randn((batch, ctx), device=dev)
    lens = torch.full((batch,), ctx, dtype=torch.int32, device=dev)
    out = torch.empty((batch, K), dtype=torch.int32, device=dev)
    work = torch.empty((batch, 4), dtype=torch.int32, device=dev)  # the bounds pass fills it
    cand = torch.empty((batch, 2, il._TOPK_CAP), dtype=torch.int32, device=dev)
    common = (logits, lens, work)

    def bounds(warps=8, sample=il._TOPK_SAMPLE):
        il._topk_bounds_kernel[(batch,)](
            *common, 1, ctx, ctx, K=K, SAMPLE=sample, MARGIN=il._TOPK_MARGIN, num_warps=warps
        )

    def collect(subs=1, chunk=il._TOPK_CHUNK, warps=il._TOPK_COLLECT_WARPS):
        grid = (batch, triton.cdiv(triton.cdiv(ctx, chunk), subs))
        il._topk_collect_kernel[grid](
            *common, out, cand, 1, ctx, ctx, K, K=K, CHUNK=chunk, SUBS=subs,
            CAP=il._TOPK_CAP, num_warps=warps,
        )  # fmt: skip

    def finish(warps=il._TOPK_FINISH_WARPS, slice_=il._TOPK_SLICE):
        il._topk_finish_kernel[(batch,)](
            *common, out, cand, 1, ctx, ctx, K, K=K, CAP=il._TOPK_CAP, SLICE=slice_,
            num_warps=warps, maxnreg=il._TOPK_FINISH_REGS,
        )  # fmt: skip

    def chain(*steps):
        def run():
            for step in steps:
                step()

        return run

    ref = torch.topk(logits, K, dim=1).values.sort(dim=1).values
    res: dict = {"B": batch, "ctx": ctx}
    res["empty_us"] = _median_us(chain())  # do_bench's own cost, taken off every pass
    res["whole_us"] = _median_us(lambda: il.topk_per_row(logits, lens, 1, K, out))
    got = logits.gather(1, out.long()).sort(dim=1).values
    res["matches"] = bool(torch.equal(got, ref))
    b_us = _median_us(chain(bounds))
    res["bounds_us"] = b_us - res["empty_us"]
    for warps in (4, 16):
        res[f"bounds_w{warps}_us"] = _median_us(chain(lambda w=warps: bounds(w))) - res["empty_us"]
    bc_us = _median_us(chain(bounds, collect))
    res["collect_us"] = bc_us - b_us
    variants: dict[str, float] = {}
    for subs in (1, 2, 4, 8):
        for chunk in (1024, 2048, 4096):
            for warps in (4, 8):
                step = lambda s=subs, c=chunk, w=warps: collect(s, c, w)  # noqa: E731
                variants[f"s{subs}c{chunk}w{warps}"] = _median_us(chain(bounds, step)) - b_us
    best = min(variants, key=lambda name: variants[name])
    res["collect_best"] = (best, variants[best])
    res["collect_variants"] = variants
    bcf_us = _median_us(chain(bounds, collect, finish))
    res["finish_us"] = bcf_us - bc_us
    for warps in (4, 8):
        for slice_ in (512, 1024, 2048):
            fn = chain(bounds, collect, lambda w=warps, s=slice_: finish(w, s))
            res[f"finish_w{warps}_s{slice_}_us"] = _median_us(fn) - bc_us
    res["counts"] = work.cpu().tolist()[:2]
    # The sample sets how many candidates the finish scans (~10 sqrt(K n / sample)): the whole
    # chain at each sample size and finishing slice, with the mean candidates a row.
    for sample in (2048, 4096, 8192):
        for slice_ in (512, 1024):
            sampled = lambda s=sample: bounds(sample=s)  # noqa: E731
            fn = chain(sampled, collect, lambda s=slice_: finish(slice_=s))
            res[f"chain_s{sample}_f{slice_}_us"] = _median_us(fn) - res["empty_us"]
        res[f"candidates_s{sample}"] = work[:, 1].float().mean().item()
    res["torch_topk_us"] = _median_us(lambda: torch.topk(logits, K, dim=1, sorted=False))
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    info = gpu_device.device_info(probe=False)
    rows = []
    for batch, ctx in CASES:
        res = profile_case(batch, ctx)
        rows.append(res)
        short = {k: (round(v, 1) if isinstance(v, float) else v) for k, v in res.items()
                 if k != "collect_variants"}  # fmt: skip
        print(json.dumps(short), flush=True)
        if args.out:  # after every case, so a run cut short keeps what it measured
            result = json.dumps({"info": info, "rows": rows}, indent=1)
            (args.out / gpu_device.result_path("topk_parts", info, ".json")).write_text(result)


if __name__ == "__main__":
    main()
