"""Benchmark one layer's whole DSA decode step as the rendered backend runs it on SM120, against
vLLM 0.16's path on SM120, in the same run (not a test).

A decode token first scores its whole context with the DSA indexer (fp8 keys, 132 B a token),
takes the top 2048, then attends over those rows. Ours, each part the code a patched host runs:

1. indexer logits: ``paged_mqa_logits`` of the rendered fallback (.thirdparty/rendered/
   v0_16-indexer/glmops_dsa_indexer.py, backend/indexer_logits.py embedded) over the paged fp8
   cache, GLM-5's indexer (32 heads, dim 128, 64-token blocks);
2. top-k: the rendered fallback's Triton ``topk_per_row``, which the patched
   sparse_attn_indexer calls instead of vLLM's compiled ``torch.ops._C.top_k_per_row_decode``
   wherever the logits fallback runs; its selection is checked against torch.topk's values.
   Timed beside it in the same run: the previous glmops top-k (benchmarks/dsa_step/
   topk_baseline.py, frozen; a second step graph runs it) and ``torch.topk`` (unsorted, into
   the indexer's int32 buffer), which stands in for vLLM's op (no vLLM on the GPU machine) on
   vLLM 0.16's path;
3. sparse MLA: the rendered v0_16 backend's real ``TritonMLASparseImpl.forward_mqa`` (vLLM 0.16's
   own index conversion, then glmops' kernel) on a bf16 cache, with the tile the plan picks for
   a 99 KB SM120 (the kernel's ``_plan`` under SM120's limits, as an override: this GPU is not
   one), loaded with tests/gpu/test_rendered_backend.py's stand-in vLLM.

vLLM 0.16's path on SM120 (DeepGEMM does not run there): its torch indexer reference
``fp8_paged_mqa_logits_torch`` (eager: it loops over requests and blocks on the host, so it
cannot be captured; timed on a sub-batch of at most SUB_TOKENS context tokens and scaled by
B / sub-batch, since its loop is per request and the requests are alike), the same top-k, and
its Triton MLA (``decode_attention_fwd``) fed the top-k as a page_size=1 table: the rendered
dense_reuse backend, which is that call.

Timing: one CUDA graph per part and one for the whole step (ours), each replaying every
rotating input set once (touched bytes > 4x L2, at most 16 sets), median per step over
replays. Floors: the bytes a step must move (indexer keys + scales, q and weights, the 2048
cache rows, q and out; the logits are an intermediate a fused kernel never writes) at the copy
probe's bandwidth (benchmarks/gpu_device.py).

    python3 -m tests.gpu.prepare_rendered                  (here, once)
    python3 -m benchmarks.dsa_step.bench [--batches 1,8,32,128] [--contexts 4096,...] [--heads 8,16]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from benchmarks import gpu_device
from benchmarks.dsa_step import topk_baseline
from benchmarks.indexer_fallback.bench import load_baseline as load_indexer_refs
from tests.gpu import test_rendered_backend as rb
from tests.support.module_file import load_module_file

ROOT = Path(__file__).resolve().parents[2]
RENDERED = ROOT / ".thirdparty" / "rendered"
IDX_HEADS, IDX_DIM, BLOCK, TOPK = 32, 128, 64, 2048
IDX_TOKEN_BYTES = IDX_DIM + 4  # fp8 key + fp32 scale
ROW_BYTES = 576 * 2  # a bf16 cache row
MLA_CACHE_BLOCKS = 3_670_016 // BLOCK  # the baseline kernel's offsets are int32: rows*576 < 2^31
SM_SCALE = 1.0 / 16.0
SUB_TOKENS = 1 << 20  # the torch reference's sub-batch: at most this many context tokens
MAX_SETS = 16
SM120_LIMITS = ((12, 0), 101376)
FP8 = torch.float8_e4m3fn


def graph_us(steps: list[Callable[[], Any]], reps: int) -> float:
    """Median µs per step of a CUDA graph that runs every step once, in order."""
    for step in steps:
        step()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for step in steps:
            step()
    graph.replay()
    torch.cuda.synchronize()
    samples = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / len(steps))
    del graph
    return statistics.median(samples)


def step_bytes(batch: int, ctx: int, heads: int) -> int:
    """What one step must move: the indexer's keys and scales, its q (fp8) and weights (fp32),
    the top-k cache rows, the attention q and out (bf16)."""
    indexer = batch * (ctx * IDX_TOKEN_BYTES + IDX_HEADS * IDX_DIM + IDX_HEADS * 4)
    attention = batch * (TOPK * ROW_BYTES + heads * (576 + 512) * 2)
    return indexer + attention


def sm120_decode(mod: Any) -> Callable[..., Any]:
    """The rendered module's ``sparse_mla_decode`` with the tile SM120's plan picks (this GPU
    plans for itself otherwise)."""
    plain = mod.sparse_mla_decode
    limits = mod.DeviceLimits(*SM120_LIMITS)

    def decode(q: torch.Tensor, kv: torch.Tensor, idx: torch.Tensor, scale: float, **kw: Any):
        kv_format = "16bit" if kv.element_size() == 2 else "fp8"
        takes = mod._gluon_takes(q.dtype, kv.dtype, kv_format)
        gluon_mma = takes and mod._gluon_mma_usable(limits.capability)
        tile = mod._plan(
            q.shape[0], q.shape[1], idx.shape[1], q.device, None, None, kv_format, False,
            limits, gluon_mma,
        )[0]  # fmt: skip
        return plain(q, kv, idx, scale, tile=tile, **kw)

    decode.sm120_plain = plain  # type: ignore[attr-defined]
    return decode


class StepCase:
    """Inputs for one (B, context): the indexer cache and the attention cache shared by every
    set; per set its own tables (distinct blocks), q's, weights and top-k buffer."""

    def __init__(self, batch: int, ctx: int, heads: int, mla_cache: torch.Tensor, l2: int):
        self.batch, self.ctx, self.heads = batch, ctx, heads
        self.blocks = math.ceil(ctx / BLOCK)
        per_set = batch * ctx * IDX_TOKEN_BYTES + batch * TOPK * ROW_BYTES
        self.n_sets = int(min(MAX_SETS, max(1, math.ceil(4 * l2 / per_set))))
        phys = self.n_sets * batch * self.blocks
        keys = torch.randn(phys, BLOCK * IDX_DIM, device="cuda").to(FP8).view(torch.uint8)
        scales = (torch.rand(phys, BLOCK, device="cuda") * 0.1 + 0.01).view(torch.uint8)
        self.icache = torch.cat([keys, scales.view(phys, -1)], dim=1).view(
            phys, BLOCK, 1, IDX_TOKEN_BYTES
        )
        del keys, scales
        perm = torch.randperm(phys, device="cuda", dtype=torch.int64).to(torch.int32)
        self.itables = list(perm.view(self.n_sets, batch, self.blocks))
        mla_blocks = mla_cache.shape[0]
        self.mtables = [(t.long() % mla_blocks).to(torch.int32) for t in self.itables]
        self.mla_cache = mla_cache
        self.lens = torch.full((batch,), ctx, dtype=torch.int32, device="cuda")
        self.q_idx = [
            torch.randn(batch, 1, IDX_HEADS, IDX_DIM, device="cuda").to(FP8)
            for _ in range(self.n_sets)
        ]
        self.w = [torch.randn(batch, IDX_HEADS, device="cuda") for _ in range(self.n_sets)]
        self.q = [
            (torch.rand(batch, heads, 576, device="cuda") * 2 - 1).to(torch.bfloat16)
            for _ in range(self.n_sets)
        ]
        self.bufs = [
            torch.full((batch, TOPK), -1, dtype=torch.int32, device="cuda")
            for _ in range(self.n_sets)
        ]
        self.logits = [None] * self.n_sets

    def meta(self, mod: Any, s: int) -> Any:
        return mod.FlashMLASparseMetadata(
            num_reqs=self.batch,
            max_query_len=1,
            max_seq_len=self.ctx,
            num_actual_tokens=self.batch,
            query_start_loc=torch.arange(self.batch + 1, dtype=torch.int32, device="cuda"),
            slot_mapping=torch.zeros(self.batch, dtype=torch.int64, device="cuda"),
            block_table=self.mtables[s],
            req_id_per_token=torch.arange(self.batch, dtype=torch.int32, device="cuda"),
            block_size=BLOCK,
            topk_tokens=TOPK,
        )


def impl_for(mod: Any, heads: int, buf: torch.Tensor) -> Any:
    return rb._v0_16_impl(mod, heads, "auto", buf)


def topk_into(logits: torch.Tensor, buf: torch.Tensor) -> None:
    """The stand-in for vLLM's top_k_per_row_decode: the top-k positions into the int32 buffer."""
    buf.copy_(torch.topk(logits, TOPK, dim=1, sorted=False).indices)


def same_topk(logits: torch.Tensor, ours: torch.Tensor, ctx: int) -> bool:
    """Whether ``ours`` selects TOPK distinct visible positions whose logits are the top ones."""
    top = torch.topk(logits, TOPK, dim=1).values.sort(dim=1).values
    picked = ours.long()
    distinct = bool((picked.sort(dim=1).values.diff(dim=1) > 0).all())
    visible = bool(((picked >= 0) & (picked < ctx)).all())
    return distinct and visible and torch.equal(logits.gather(1, picked).sort(dim=1).values, top)


def glmops_topk(case: StepCase, fb: Any, s: int) -> None:
    """The rendered fallback's Triton top-k (backend/indexer_logits.py) into set ``s``'s buffer."""
    fb.topk_per_row(case.logits[s], case.lens, 1, TOPK, out=case.bufs[s])


def old_topk(case: StepCase, s: int) -> None:
    """The previous glmops top-k (frozen in topk_baseline.py) into set ``s``'s buffer."""
    topk_baseline.topk_per_row(case.logits[s], case.lens, 1, TOPK, out=case.bufs[s])


def run_case(
    case: StepCase,
    mods: SimpleNamespace,
    reps: int,
    bw: float,
    ref_times: dict[tuple[int, int], tuple[float, int, float]],
) -> dict[str, Any]:
    """Times and checks one case; the vLLM reference's indexer time is taken once per (B, ctx)
    (``ref_times``): it does not depend on the attention's heads."""
    fb, ours_mod, base_mod = mods.fallback, mods.ours, mods.base
    b, ctx, heads = case.batch, case.ctx, case.heads
    layer = rb.AttentionLayer()
    ours_impls = [impl_for(ours_mod, heads, case.bufs[s]) for s in range(case.n_sets)]
    base_impls = [impl_for(base_mod, heads, case.bufs[s]) for s in range(case.n_sets)]
    metas = [case.meta(ours_mod, s) for s in range(case.n_sets)]
    outs: dict[str, Any] = {}

    def logits(s: int) -> torch.Tensor:
        case.logits[s] = fb.paged_mqa_logits(
            case.q_idx[s], case.icache, case.w[s], case.lens, case.itables[s], ctx
        )
        return case.logits[s]

    def attend(impls: list[Any], s: int, key: str) -> None:
        outs[key] = impls[s].forward_mqa(case.q[s], case.mla_cache, metas[s], layer)

    sets = range(case.n_sets)
    t_logits = graph_us([lambda s=s: logits(s) for s in sets], reps)
    t_topk = graph_us([lambda s=s: topk_into(case.logits[s], case.bufs[s]) for s in sets], reps)
    t_topk_old = graph_us([lambda s=s: old_topk(case, s) for s in sets], reps)
    topk_old_ok = same_topk(case.logits[-1], case.bufs[-1], ctx)
    t_topk_ours = graph_us([lambda s=s: glmops_topk(case, fb, s) for s in sets], reps)
    topk_ok = same_topk(case.logits[-1], case.bufs[-1], ctx)
    t_mla = graph_us([lambda s=s: attend(ours_impls, s, f"o{s}") for s in sets], reps)
    t_base_mla = graph_us([lambda s=s: attend(base_impls, s, f"b{s}") for s in sets], reps)
    t_step_old = graph_us(
        [lambda s=s: (logits(s), old_topk(case, s), attend(ours_impls, s, f"o{s}")) for s in sets],
        reps,
    )
    t_step = graph_us(
        [
            lambda s=s: (logits(s), glmops_topk(case, fb, s), attend(ours_impls, s, f"o{s}"))
            for s in sets
        ],
        reps,
    )
    # Same top-k buffer, both attention paths: their outputs agree.
    last = case.n_sets - 1
    attend(ours_impls, last, "o")
    attend(base_impls, last, "b")
    ours_out, base_out = outs["o"][0].float(), outs["b"][0].float()
    mla_err = float((ours_out - base_out).norm() / base_out.norm())

    if (b, ctx) not in ref_times:
        ref_times[(b, ctx)] = reference_indexer(case, mods.refs, logits)
    t_base_logits, sub, idx_err = ref_times[(b, ctx)]

    nbytes = step_bytes(b, ctx, heads)

    floor = nbytes / bw * 1e6
    base_step = t_base_logits + t_topk + t_base_mla
    row = {
        "B": b,
        "ctx": ctx,
        "H": heads,
        "n_sets": case.n_sets,
        "step_us": t_step,
        "step_old_topk_us": t_step_old,
        "step_over_floor_old_topk": t_step_old / floor,
        "topk_glmops_us": t_topk_ours,
        "topk_glmops_matches": topk_ok,
        "topk_old_us": t_topk_old,
        "topk_old_matches": topk_old_ok,
        "topk_torch_us": t_topk,
        "logits_us": t_logits,
        "mla_us": t_mla,
        "parts_sum_us": t_logits + t_topk_ours + t_mla,
        "floor_us": floor,
        "step_bytes": nbytes,
        "frac_of_floor": floor / t_step,
        "step_over_floor": t_step / floor,
        "base_logits_us": t_base_logits,
        "base_logits_sub_batch": sub,
        "base_topk_us": t_topk,
        "base_mla_us": t_base_mla,
        "base_step_us": base_step,
        "speedup": base_step / t_step,
        "indexer_rel_diff": idx_err,
        "mla_rel_diff_vs_base": mla_err,
    }
    parts = {"logits": t_logits, "topk": t_topk_ours, "mla": t_mla}
    for part, us in parts.items():
        row[f"{part}_share"] = us / sum(parts.values())
    return row


def reference_indexer(
    case: StepCase, refs: Any, logits: Callable[[int], torch.Tensor]
) -> tuple[float, int, float]:
    """vLLM 0.16's torch indexer reference on a sub-batch of the last set (its per-row cache
    layout): µs scaled to the whole batch, the sub-batch, and its largest |difference| from our
    logits relative to the largest |logit|."""
    b, ctx, last = case.batch, case.ctx, case.n_sets - 1
    sub = max(1, min(b, SUB_TOKENS // ctx))
    table = case.itables[last][:sub]
    used = table.reshape(-1).long()
    raw = case.icache.view(-1, BLOCK * IDX_TOKEN_BYTES)[used]
    keys = raw[:, : BLOCK * IDX_DIM].reshape(-1, BLOCK, IDX_DIM)
    scales = raw[:, BLOCK * IDX_DIM :].reshape(-1, BLOCK, 4)
    per_row = torch.cat([keys, scales], dim=2).view(-1, BLOCK, 1, IDX_TOKEN_BYTES)
    compact = torch.arange(sub * case.blocks, device="cuda", dtype=torch.int32).view(sub, -1)
    args = (case.q_idx[last][:sub], per_row, case.w[last][:sub], case.lens[:sub], compact, ctx)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    ref_logits = refs.fp8_paged_mqa_logits_torch(*args)
    torch.cuda.synchronize()
    t_ref_sub = (time.perf_counter() - t0) * 1e6
    ours_sub = logits(last)[:sub]
    finite = torch.isfinite(ref_logits)
    assert torch.equal(finite, torch.isfinite(ours_sub)), "indexer masks differ"
    idx_err = float(
        (ours_sub - ref_logits)[finite].abs().max() / ref_logits[finite].abs().max().clamp(min=1e-6)
    )
    return t_ref_sub * b / sub, sub, idx_err


def warm_up_reference(mods: SimpleNamespace, mla_cache: torch.Tensor) -> None:
    """One small call of the reference first: its first call pays one-time costs."""
    case = StepCase(1, 4 * BLOCK, 8, mla_cache, 0)
    fb = mods.fallback
    reference_indexer(
        case,
        mods.refs,
        lambda s: fb.paged_mqa_logits(
            case.q_idx[s], case.icache, case.w[s], case.lens, case.itables[s], case.ctx
        ),
    )


def render_md(result: dict[str, Any]) -> str:
    info = result["info"]
    lines = [
        f"# DSA decode step on {info['short_name']}: indexer logits + top-k + sparse MLA "
        "(rendered backend, SM120 plan) vs vLLM 0.16's SM120 path",
        "",
        f"- GPU: {info['gpu']} ({info['sms']} SMs, sm_{info['capability'].replace('.', '')}); "
        f"nvidia-smi: `{info.get('nvidia_smi')}`",
        f"- torch {info['torch']}, Triton {info['triton']}, CUDA {info['cuda']}; {info['date']}",
        f"- {gpu_device.bandwidth_line(info)}.",
        f"- GLM-5: indexer {IDX_HEADS} heads x {IDX_DIM} (fp8 keys + fp32 scale, "
        f"{IDX_TOKEN_BYTES} B a token, {BLOCK}-token blocks), top-{TOPK}, bf16 MLA cache "
        f"({ROW_BYTES} B rows), H query heads per GPU; every request at the same context.",
        "- ours = rendered fallback's Triton logits -> top-k -> rendered v0_16 forward_mqa "
        "(vLLM 0.16's index conversion + glmops' kernel, the tile SM120's plan picks), one CUDA "
        "graph; parts timed in their own graphs (share = part / sum of parts).",
        "- vLLM 0.16 = its torch indexer reference (eager: host loop; timed on a sub-batch of "
        f"<= {SUB_TOKENS >> 20} Mi context tokens, scaled by B / sub-batch) + the same top-k + "
        "Triton MLA `decode_attention_fwd` with a page_size=1 table (graph).",
        "- top-k: the rendered path calls glmops' Triton `topk_per_row` (backend/"
        "indexer_logits.py) where the logits fallback runs; old = the previous glmops top-k "
        "(benchmarks/dsa_step/topk_baseline.py), timed in the same run; torch = `torch.topk` "
        "(unsorted), standing in for vLLM's compiled `top_k_per_row_decode` (no vLLM on the "
        "GPU machine) on vLLM 0.16's path.",
        "- floor = indexer keys/scales + q/weights + 2048 rows + q/out, read/written once, at "
        "the probe's bandwidth; the logits are not counted (a fused step never writes them).",
        "",
        "- step = ours as rendered; step (old top-k) = the same with the previous glmops top-k; "
        "each top-k's selection is checked against `torch.topk`'s values (MISMATCH if not); "
        "shares are of the step's parts.",
        "",
        "| B | ctx | H | floor µs | step µs | / floor | step (old top-k) µs | / floor "
        "| logits µs (share) | top-k µs (share) | top-k old / torch µs | MLA µs (share) "
        "| vLLM 0.16 µs | speedup | indexer diff | MLA diff |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['B']} | {r['ctx'] // 1024}k | {r['H']} | {r['floor_us']:.1f} "
            f"| {r['step_us']:.1f} | {r['step_over_floor']:.2f} "
            f"| {r['step_old_topk_us']:.1f} | {r['step_over_floor_old_topk']:.2f} "
            f"| {r['logits_us']:.1f} ({r['logits_share']:.0%}) "
            f"| {r['topk_glmops_us']:.1f} ({r['topk_share']:.0%})"
            f"{'' if r['topk_glmops_matches'] else ' MISMATCH'} "
            f"| {r['topk_old_us']:.1f}{'' if r['topk_old_matches'] else ' MISMATCH'} "
            f"/ {r['topk_torch_us']:.1f} "
            f"| {r['mla_us']:.1f} ({r['mla_share']:.0%}) | {r['base_step_us']:.0f} "
            f"| {r['speedup']:.0f}x "
            f"| {r['indexer_rel_diff']:.1e} "
            f"| {r['mla_rel_diff_vs_base']:.1e} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", default="1,8,32,128")
    ap.add_argument("--contexts", default="4096,32768,131072")
    ap.add_argument("--heads", default="8,16")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--out", type=Path, default=Path("."))
    args = ap.parse_args()
    torch.manual_seed(0)
    info = gpu_device.device_info()
    print(f"{info['gpu']}: {gpu_device.bandwidth_line(info)}", flush=True)
    base_mod, _ = rb.load_rendered("v0_16", "dense_reuse")
    ours_mod, _ = rb.load_rendered("v0_16", "sparse_mla")
    ours_mod.sparse_mla_decode = sm120_decode(ours_mod)
    # The reference reads fp8_dtype and, lazily, cdiv from vLLM: stand-ins beside the backend's.
    rb._module("vllm.utils.math_utils", cdiv=lambda a, b: -(-a // b))
    refs = load_indexer_refs()
    refs.current_platform = SimpleNamespace(fp8_dtype=lambda: FP8)
    mods = SimpleNamespace(
        fallback=load_module_file(
            RENDERED / "v0_16-indexer" / "glmops_dsa_indexer.py", "glmops_dsa_indexer"
        ),
        refs=refs,
        ours=ours_mod,
        base=base_mod,
    )
    ref_times: dict[tuple[int, int], tuple[float, int, float]] = {}
    mla_cache = (torch.randn(MLA_CACHE_BLOCKS, BLOCK, 576, device="cuda") * 0.5).to(torch.bfloat16)
    warm_up_reference(mods, mla_cache)
    rows = []
    for batch in [int(x) for x in args.batches.split(",")]:
        for ctx in [int(x) for x in args.contexts.split(",")]:
            for heads in [int(x) for x in args.heads.split(",")]:
                case = StepCase(batch, ctx, heads, mla_cache, info["l2_bytes"])
                row = run_case(case, mods, args.reps, info["copy_bw"], ref_times)
                rows.append(row)
                print(
                    f"B={batch:4d} ctx={ctx:6d} H={heads:3d} step {row['step_us']:8.1f} us "
                    f"floor {row['floor_us']:7.1f} (x{row['step_over_floor']:.2f}) logits "
                    f"{row['logits_us']:7.1f} topk {row['topk_glmops_us']:7.1f}"
                    f"{'' if row['topk_glmops_matches'] else ' MISMATCH'} (v2 "
                    f"{row['topk_old_us']:.1f}, torch {row['topk_torch_us']:.1f}) mla "
                    f"{row['mla_us']:6.1f} v2-topk step {row['step_old_topk_us']:8.1f} "
                    f"(x{row['step_over_floor_old_topk']:.2f})"
                    f" | vllm {row['base_step_us']:10.0f} x{row['speedup']:.0f} (logits "
                    f"{row['base_logits_us']:.0f}, mla {row['base_mla_us']:.1f}) err "
                    f"{row['indexer_rel_diff']:.1e}/{row['mla_rel_diff_vs_base']:.1e}",
                    flush=True,
                )
                del case
                torch.cuda.empty_cache()
    result = {"info": info, "reps": args.reps, "rows": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / gpu_device.result_path("dsa_step", info, ".json")).write_text(
        json.dumps(result, indent=1)
    )
    md = render_md(result)
    (args.out / gpu_device.result_path("dsa_step", info, ".md")).write_text(md)
    print(md)


if __name__ == "__main__":
    main()
