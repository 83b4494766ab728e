"""Benchmark backend/sparse_mla against the dense-kernel reuse it replaces (not a test).

Baseline: vLLM 0.16's Triton MLA decode kernel (``decode_attention_fwd`` from
``vllm/v1/attention/ops/triton_decode_attention.py``) fed the top-k as a page_size=1 block table
with 4 KV splits, called as the TRITON_MLA backend's ``forward_mqa`` calls it. That file is not
part of this repository: extract it from the vllm==0.16.0 wheel into ``.thirdparty/`` (git-ignored).

Timing: each case captures one CUDA graph that runs the kernel over enough rotating index sets
(and q tensors) that the touched KV exceeds 4x the L2 cache; the per-call time is a graph replay
divided by the number of calls, and the reported value is the median over replays.

Modes:
  bench  the issue's grid (B x H x dtype), ours vs baseline, JSON + Markdown results (dtype
         fp8: fp8_ds_mla cache rows, ours only)
  sweep  tile/split search for ours (bf16), JSON of every point, prints the best per case
  sweep2 a named point list (--plan NAME) from plans.py, each named by what it measures
         (each says what its round compared and with which --dtypes it runs)
The bare gather's shapes, by row size and index locality: gather_rows.py.

Run from the repo root: python3 -m benchmarks.sparse_mla.bench [--mode ...]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import triton
import triton.language as tl

from benchmarks import gpu_device
from benchmarks.sparse_mla import overrides
from benchmarks.sparse_mla.plans import FP8_DS_PLANS, PLANS, TOPK
from tests.support.module_file import (  # stdlib only; runs without glmops
    SPARSE_MLA,
    load_module_file,
    load_sparse_mla,
)

ROOT = Path(__file__).resolve().parents[2]

KERNEL_PATH = SPARSE_MLA
BASELINE_PATH = ROOT / ".thirdparty/vllm/v1/attention/ops/triton_decode_attention.py"

# q dtype per --dtypes name; "fp8" runs fp8_ds_mla cache rows (656 B) under a bf16 q, "e4m3"
# fp8 e4m3 rows (576 B, one scale: vLLM's --kv-cache-dtype fp8) under a bf16 q, "e4m3h" the same
# rows under an fp16 q (GGUF on SM120 serves float16, which the Gluon e4m3 tiles take since
# backend/DESIGN.md "Precision of the e4m3 tiles").
Q_DTYPES = {
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "fp8": torch.bfloat16,
    "e4m3": torch.bfloat16,
    "e4m3h": torch.float16,
}
KV_FORMAT = {"bf16": "16bit", "fp16": "16bit", "fp8": "fp8_ds_mla", "e4m3": "fp8", "e4m3h": "fp8"}
# The 16-bit rows each fp8 --dtypes name is compared with: those of its q's dtype.
SIXTEEN_BIT = {
    name: other
    for name, kv_format in KV_FORMAT.items()
    if kv_format != "16bit"
    for other in ("bf16", "fp16")
    if Q_DTYPES[other] == Q_DTYPES[name]
}
E4M3_SCALE = 2.0**-6  # rows of N(0, 0.5) values reach ~2.5: well inside e4m3's 448 after scaling
# The plan's tiles for a 99 KB GPU (RTX PRO 6000 Blackwell, SM120): run here as overrides.
SM120_LIMITS = (12, 0), 101376
# The H200's measured copy rate (KINDS.md): sweeps' and gather_rows' reference only; the bench
# mode's floors use the copy probe of the GPU it runs on (benchmarks/gpu_device.py).
MEM_BW = 4.3e12
MMA_RATE = 790e12  # measured bf16 matmul rate on random data (KINDS.md)
L2_BYTES = 60 * 2**20
SM_SCALE = 1.0 / 16.0
# 3.5 Mi rows keeps row * 576 below 2^31: the baseline kernel computes offsets in int32.
CACHE_ROWS = 3_670_016
# Issue 4's per-case latency targets (µs) on the H200; every case also needs >= 3x the baseline.
TARGET_US = {(8, 8): 12.0, (128, 8): 95.0, (128, 16): 95.0, (128, 64): 120.0, (128, 128): 250.0}
MIN_SPEEDUP = 3.0


def load_baseline() -> types.ModuleType | None:
    """Import vLLM's kernel file without vLLM: stub the two vLLM modules it imports."""
    if not BASELINE_PATH.exists():
        return None
    if "vllm" not in sys.modules:
        vllm = types.ModuleType("vllm")
        platforms = types.ModuleType("vllm.platforms")
        platforms.current_platform = types.SimpleNamespace(is_rocm=lambda: False)
        triton_utils = types.ModuleType("vllm.triton_utils")
        triton_utils.tl = triton.language
        triton_utils.triton = triton
        sys.modules.update(
            {"vllm": vllm, "vllm.platforms": platforms, "vllm.triton_utils": triton_utils}
        )
    return load_module_file(BASELINE_PATH, "vllm_triton_decode_attention_0_16")


def graph_time_us(calls: list[Callable[[], Any]], reps: int) -> tuple[float, list[float]]:
    """Median per-call µs of a CUDA graph that runs every call once, in order."""
    for c in calls:
        c()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for c in calls:
            c()
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(reps):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / len(calls))
    del graph
    return statistics.median(samples), samples


class Case:
    """Rotating inputs for one (B, H, dtype): q and indices per set over one big KV cache."""

    def __init__(self, kv: torch.Tensor, batch: int, heads: int, dtype: torch.dtype) -> None:
        self.batch, self.heads, self.dtype = batch, heads, dtype
        self.row_bytes = kv.shape[1] * kv.element_size()
        per_call = batch * TOPK * self.row_bytes
        self.n_sets = int(min(128, max(2, math.ceil(4 * L2_BYTES / per_call))))
        n = kv.shape[0]
        self.kv = kv
        self.qs = [
            (torch.rand(batch, heads, 576, device="cuda") * 2 - 1).to(dtype)
            for _ in range(self.n_sets)
        ]
        self.idx = [
            torch.randint(0, n, (batch, TOPK), device="cuda", dtype=torch.int32)
            for _ in range(self.n_sets)
        ]
        self.outs = [
            torch.empty(batch, heads, 512, device="cuda", dtype=dtype) for _ in range(self.n_sets)
        ]
        self.lses = [
            torch.empty(batch, heads, device="cuda", dtype=torch.float32)
            for _ in range(self.n_sets)
        ]

    def ours(self, kmod: types.ModuleType, **kw: Any) -> list[Callable[[], Any]]:
        """One call per input set; a config's benchmark knobs (``overrides``) act around it."""
        if self.kv.dtype == torch.float8_e4m3fn:
            kw = {"kv_scale": E4M3_SCALE, **kw}
        config = kw.pop("config", None)

        def call(i: int) -> Any:
            return overrides.decode(
                kmod, self.qs[i], self.kv, self.idx[i], SM_SCALE, out=self.outs[i],
                lse=self.lses[i], config=config, **kw,
            )  # fmt: skip

        return [lambda i=i: call(i) for i in range(self.n_sets)]

    def baseline(self, bmod: types.ModuleType) -> list[Callable[[], Any]]:
        """TRITON_MLA.forward_mqa's call, minus its per-call torch.zeros of o/lse."""
        cache = self.kv.view(-1, 1, 576).unsqueeze(2)  # [blocks, page=1, kv_heads=1, 576]
        kv_c = cache[..., :512]
        seq_lens = torch.full((self.batch,), TOPK, dtype=torch.int32, device="cuda")
        o = [
            torch.zeros(self.batch, self.heads, 512, dtype=self.dtype, device="cuda")
            for _ in range(self.n_sets)
        ]
        lse = [
            torch.zeros(self.batch, self.heads, dtype=self.dtype, device="cuda")
            for _ in range(self.n_sets)
        ]
        logits = torch.empty(self.batch, self.heads, 4, 513, dtype=torch.float32, device="cuda")
        self.base_out = o
        return [
            (
                lambda i=i: bmod.decode_attention_fwd(
                    self.qs[i],
                    cache,
                    kv_c,
                    o[i],
                    lse[i],
                    self.idx[i],
                    seq_lens,
                    logits,
                    4,
                    SM_SCALE,
                    1,
                )
            )
            for i in range(self.n_sets)
        ]


@triton.jit
def _row_gather_kernel(
    CACHE,
    IDX,
    OUT,
    chunk,
    ROW_WORDS: tl.constexpr,  # row stride in int32 words (a multiple of 4: 16-byte rows)
    W0: tl.constexpr,  # the row's words in up to three power-of-two pieces (0: none)
    W1: tl.constexpr,
    W2: tl.constexpr,
    TOPK_: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """Reads every word of the rows a token's chunk of indices names and sums them (one
    reduction at the end): the attention kernel's gather with next to no arithmetic, for rows
    of any size. Integer words, not the rows' own elements: widening each fp8 byte to fp32
    made an older probe bound by the conversions (benchmarks/results/kernel-log.md, round 12)."""
    t = tl.program_id(0)
    split = tl.program_id(1)
    acc0 = tl.zeros([BLOCK_N, W0], dtype=tl.int32)
    if W1 > 0:
        acc1 = tl.zeros([BLOCK_N, W1], dtype=tl.int32)
    if W2 > 0:
        acc2 = tl.zeros([BLOCK_N, W2], dtype=tl.int32)
    for n0 in range(split * chunk, split * chunk + chunk, BLOCK_N):
        idx = tl.load(IDX + t * TOPK_ + n0 + tl.arange(0, BLOCK_N))
        row = CACHE + idx.to(tl.int64) * ROW_WORDS
        acc0 += tl.load(row[:, None] + tl.arange(0, W0)[None, :])
        if W1 > 0:
            acc1 += tl.load(row[:, None] + W0 + tl.arange(0, W1)[None, :])
        if W2 > 0:
            acc2 += tl.load(row[:, None] + W0 + W1 + tl.arange(0, W2)[None, :])
    total = tl.sum(tl.sum(acc0, 1), 0)
    if W1 > 0:
        total += tl.sum(tl.sum(acc1, 1), 0)
    if W2 > 0:
        total += tl.sum(tl.sum(acc2, 1), 0)
    tl.store(OUT + t * tl.num_programs(1) + split, total)


def row_pieces(row_bytes: int) -> tuple[int, int, int]:
    """A row's int32 words as up to three power-of-two pieces of at least 4 words (16 B)."""
    words, out = row_bytes // 4, []
    while words:
        out.append(1 << (words.bit_length() - 1))
        words -= out[-1]
    if len(out) > 3 or min(out) < 4:
        raise ValueError(f"{row_bytes}-byte rows: not three 16-byte-multiple pieces")
    return (*out, 0, 0)[:3]


# Gather shapes (rows per tile, warps, stages, programs per SM): the benchmark reports the
# fastest of these, the winners of gather_rows.py's 24 shapes for every row size from 256 to
# 2304 bytes at B=32 and 128 (sweeps/sparse_mla_h200_gather_row_size.json).
GATHER_SHAPES = ((32, 8, 3, 4), (32, 8, 4, 4), (16, 8, 3, 4), (16, 8, 4, 8))


def row_gather_calls(
    words: torch.Tensor, row_bytes: int, idx: list[torch.Tensor], shape: tuple[int, ...]
) -> list[Callable[[], Any]]:
    """The bare gather over each index set: ``words`` is the cache as int32 words, its rows
    ``row_bytes`` apart."""
    block_n, warps, stages, per_sm = shape
    batch = idx[0].shape[0]
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    splits = max(1, min(TOPK // block_n, triton.next_power_of_2(per_sm * sms // batch)))
    out = torch.empty(batch * splits, device="cuda", dtype=torch.int32)
    w0, w1, w2 = row_pieces(row_bytes)
    return [
        (
            lambda i=i: _row_gather_kernel[(batch, splits)](
                words, i, out, TOPK // splits, row_bytes // 4, w0, w1, w2, TOPK, block_n,
                num_warps=warps, num_stages=stages,
            )
        )
        for i in idx
    ]  # fmt: skip


def gather_us(case: Case, reps: int) -> float:
    """The fastest bare gather of the case's rows over its index sets (GATHER_SHAPES)."""
    kv = case.kv
    if kv.stride(1) != 1 or kv.stride(0) * kv.element_size() != case.row_bytes:
        raise ValueError("the gather probe reads whole rows of a contiguous cache")
    words = kv.view(torch.uint8).view(torch.int32)
    return min(
        graph_time_us(row_gather_calls(words, case.row_bytes, case.idx, shape), reps)[0]
        for shape in GATHER_SHAPES
    )


def floors_us(
    batch: int, heads: int, row_bytes: int, mem_bw: float = MEM_BW
) -> tuple[float, float]:
    kv_bytes = batch * TOPK * row_bytes
    io_bytes = batch * heads * (576 + 512) * 2
    flops = 2.0 * batch * heads * TOPK * (576 + 512)
    return (kv_bytes + io_bytes) / mem_bw * 1e6, flops / MMA_RATE * 1e6


def gpu_info(probe: bool = False) -> dict[str, Any]:
    """The card and versions (benchmarks/gpu_device.py); ``probe``: its copy rate too."""
    return gpu_device.device_info(probe=probe)


def run_bench(
    args: argparse.Namespace, kmod: types.ModuleType, kv: dict[str, torch.Tensor]
) -> None:
    info = gpu_info(probe=True)
    mem_bw = info["copy_bw"]
    bmod = load_baseline()
    if bmod is None:
        print(f"baseline file missing: {BASELINE_PATH}", file=sys.stderr)
    rows = []
    for dname in args.dtypes.split(","):
        dtype = Q_DTYPES[dname]
        for batch in [int(x) for x in args.batches.split(",")]:
            for heads in [int(x) for x in args.heads.split(",")]:
                case = Case(kv[dname], batch, heads, dtype)
                ours, ours_s = graph_time_us(case.ours(kmod), args.reps)
                ours2, _ = graph_time_us(case.ours(kmod), args.reps)  # spread check
                kv_format = KV_FORMAT[dname]
                # The portable path: the tl.dot tile this GPU's limits pick, and what the plan
                # picks for a 99 KB SM120 under this Triton (under a Triton in _GLUON_VERIFIED
                # the Gluon tiles with mma.sync) and without the Gluon kernels (vLLM 0.16's
                # Triton 3.5: tl.dot tiles), all as overrides.
                tl_dot_tile = kmod._default_tile(heads, kv_format, limits=kmod.H200_LIMITS)
                tl_dot_cfg = overrides.config_of(kmod, tl_dot_tile)
                sm120 = kmod.DeviceLimits(*SM120_LIMITS)
                takes = kmod._gluon_takes(dtype, case.kv.dtype, kv_format)
                sm120_cfg, sm120_tl_dot_cfg = (
                    overrides.plan(
                        kmod, batch, heads, TOPK, torch.device("cuda"), None, None, kv_format,
                        False, sm120, gluon_mma,
                    )[0]
                    for gluon_mma in (takes and kmod._gluon_mma_usable(sm120.capability), False)
                )  # fmt: skip
                tl_dot, _ = graph_time_us(case.ours(kmod, config=tl_dot_cfg), args.reps)
                sm120_us, _ = graph_time_us(case.ours(kmod, config=sm120_cfg), args.reps)
                sm120_tl_dot = sm120_us
                if sm120_tl_dot_cfg != sm120_cfg:
                    sm120_tl_dot, _ = graph_time_us(
                        case.ours(kmod, config=sm120_tl_dot_cfg), args.reps
                    )
                gather = gather_us(case, args.reps)
                base = base_err = None
                if bmod is not None and dname in ("bf16", "fp16"):  # 16-bit caches only
                    base, _ = graph_time_us(case.baseline(bmod), args.reps)
                    ref = case.outs[0].float()
                    diff = (case.base_out[0].float() - ref).norm() / ref.norm()
                    base_err = float(diff)
                t_mem, t_comp = floors_us(batch, heads, case.row_bytes, mem_bw)
                flops = 2.0 * batch * heads * TOPK * (576 + 512)
                target = TARGET_US.get((batch, heads)) if kv_format == "16bit" else None
                cfg, splits = overrides.plan(
                    kmod, batch, heads, TOPK, torch.device("cuda"), None, None, kv_format
                )
                row = {
                    "dtype": dname,
                    "B": batch,
                    "H": heads,
                    "topk": TOPK,
                    "splits": splits,
                    "config": cfg,
                    "ours_us": ours,
                    "ours_us_repeat": ours2,
                    "ours_us_min": min(ours_s),
                    "ours_us_max": max(ours_s),
                    "baseline_us": base,
                    "speedup": (base / ours) if base else None,
                    "tl_dot_us": tl_dot,
                    "tl_dot_config": tl_dot_cfg,
                    "tl_dot_speedup": (base / tl_dot) if base else None,
                    "sm120_tile_us": sm120_us,
                    "sm120_config": sm120_cfg,
                    "sm120_tl_dot_us": sm120_tl_dot,
                    "sm120_tl_dot_config": sm120_tl_dot_cfg,
                    "gather_us": gather,
                    "tl_dot_vs_gather": (gather / tl_dot) if gather else None,
                    "gather_frac_of_floor": (
                        floors_us(batch, 0, case.row_bytes, mem_bw)[0] / gather if gather else None
                    ),
                    "gathered_GBps": batch * TOPK * case.row_bytes / ours / 1e3,
                    "TFLOPs": flops / ours / 1e6,
                    "floor_us": max(t_mem, t_comp),
                    "bound": "mem" if t_mem >= t_comp else "compute",
                    "frac_of_floor": max(t_mem, t_comp) / ours,
                    "tl_dot_frac_of_floor": max(t_mem, t_comp) / tl_dot,
                    "sm120_tile_frac_of_floor": max(t_mem, t_comp) / sm120_us,
                    "sm120_tl_dot_frac_of_floor": max(t_mem, t_comp) / sm120_tl_dot,
                    "baseline_vs_ours_rel_err": base_err,
                    "n_sets": case.n_sets,
                    "target_us": target,
                    "target_met": (ours <= target) if target else None,
                    "speedup_met": (base / ours >= MIN_SPEEDUP) if base else None,
                }
                rows.append(row)
                print(
                    f"{dname} B={batch:4d} H={heads:4d} S={splits:3d} ours {ours:8.1f} us "
                    f"(rep {ours2:8.1f}) base {base or float('nan'):8.1f} us "
                    f"x{row['speedup'] or float('nan'):5.2f}  {row['gathered_GBps']:7.0f} GB/s "
                    f"{row['TFLOPs']:6.1f} TF/s  floor {row['frac_of_floor']:.2f}"
                    f"  err {base_err if base_err is not None else float('nan'):.1e}"
                    f" | tl.dot {tl_dot:7.1f} sm120-tile {sm120_us:7.1f} sm120-tl.dot "
                    f"{sm120_tl_dot:7.1f} gather "
                    f"{gather or float('nan'):7.1f}",
                    flush=True,
                )
                del case
                torch.cuda.empty_cache()
    result = {
        "info": info,
        "reps": args.reps,
        "cache_rows": args.cache_rows,
        "mem_bw": mem_bw,
        "mma_rate": MMA_RATE,
        "rows": rows,
    }
    Path(args.json or gpu_device.result_path("sparse_mla", info, ".json")).write_text(
        json.dumps(result, indent=1)
    )
    Path(args.md or gpu_device.result_path("sparse_mla", info, ".md")).write_text(render_md(result))
    print(render_md(result))


def _bandwidth_source(info: dict[str, Any]) -> str:
    """Where the memory floor's bandwidth came from: this run's probe, or (older results) the
    H200's measured rate."""
    if info.get("copy_bw"):
        return gpu_device.bandwidth_line(info)
    return "the H200's measured copy rate, KINDS.md"


def render_md(result: dict[str, Any]) -> str:
    info = result["info"]
    lines = [
        f"# Sparse MLA decode on {info.get('short_name', info['gpu'])}: backend/sparse_mla vs "
        "vLLM 0.16 TRITON_MLA (page_size=1)",
        "",
        f"- GPU: {info['gpu']} ({info['sms']} SMs); nvidia-smi: `{info.get('nvidia_smi')}`",
        f"- torch {info['torch']}, Triton {info['triton']}, CUDA {info['cuda']}; {info['date']}",
        f"- topk {TOPK}, all indices valid, uniform random over a "
        f"{result.get('cache_rows', 0) / 1e6:.1f} M-row cache; CUDA-graph replay over rotating "
        f"index sets (touched KV > 4x L2), median of {result['reps']} replays.",
        f"- Floors: memory at {result['mem_bw'] / 1e12:.2f} TB/s (KV + q + out; "
        f"{_bandwidth_source(info)}), compute at "
        f"{MMA_RATE / 1e12:.0f} TFLOP/s; baseline = `decode_attention_fwd`, 4 KV splits, "
        "page_size 1, its o/lse preallocated. dtype fp8: fp8_ds_mla cache rows (656 B: fp8 "
        "latent, 4 fp32 scales, bf16 rope) under a bf16 q; vLLM's Triton MLA has no such path, "
        "so no baseline, and the issue's targets are for 16-bit caches.",
        *([f"- {result['note']}"] if result.get("note") else []),
        "",
        "| dtype | B | H | splits | ours µs | baseline µs | speedup | GB/s gathered | TFLOP/s "
        "| floor µs | frac of floor | target µs | met |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        base = f"{r['baseline_us']:.1f}" if r["baseline_us"] else "n/a"
        spd = f"{r['speedup']:.2f}x" if r["speedup"] else "n/a"
        tgt = f"{r['target_us']:.0f}" if r["target_us"] else "-"
        met = []
        if r["speedup_met"] is not None:
            met.append("3x ok" if r["speedup_met"] else "3x MISSED")
        if r["target_met"] is not None:
            met.append("µs ok" if r["target_met"] else "µs MISSED")
        lines.append(
            f"| {r['dtype']} | {r['B']} | {r['H']} | {r['splits']} | {r['ours_us']:.1f} | {base} "
            f"| {spd} | {r['gathered_GBps']:.0f} | {r['TFLOPs']:.1f} | {r['floor_us']:.1f} "
            f"| {r['frac_of_floor']:.2f} | {tgt} | {', '.join(met) or '-'} |"
        )
    return "\n".join(lines + portable_md(result["rows"]) + fp8_md(result["rows"])) + "\n"


def _f(value: float | None, fmt: str) -> str:
    return "n/a" if value is None else format(value, fmt)


def portable_md(rows: list[dict[str, Any]]) -> list[str]:
    """The tl.dot path in the same run: the tile this GPU's limits pick (what a GPU without the
    Gluon kernels runs), the tiles a 99 KB SM120 picks with and without the Gluon kernels,
    and a bare gather of the same rows."""
    lines = [
        "",
        "## Portable (tl.dot) path, same run and baseline",
        "",
        "`tl.dot` = the tl.dot tile for this GPU's shared memory (no Gluon kernels); `SM120 tile` ="
        " the tile the plan picks for a 99 KB GPU (SM120, SM86/89), run here (under a Triton the"
        " GPU suite verified, 3.6, 3.7 and 3.8, the Gluon tiles with mma.sync, one program per SM"
        " as on SM120, for 16-bit and e4m3 rows and for fp8_ds_mla rows with up to 16 heads;"
        " more heads of fp8_ds_mla rows and other Tritons: a tl.dot tile); `SM120 tl.dot` = the"
        " tile it picks without the Gluon kernels: what SM120 runs under vLLM 0.16 (Triton"
        " 3.5.1), compiled here for this GPU's MMA instructions, not SM120's mma.sync;"
        " `gather` = a bare "
        "gather of the same rows (`_row_gather_kernel`: loads them as int32 words and sums "
        "them; the fastest of four shapes).",
        "",
        "| dtype | B | H | default µs | tl.dot µs | tl.dot speedup | SM120 tile µs "
        "| SM120 tl.dot µs | gather µs | gather / tl.dot | tl.dot frac of floor |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['dtype']} | {r['B']} | {r['H']} | {r['ours_us']:.1f} | {r['tl_dot_us']:.1f} "
            f"| {_f(r['tl_dot_speedup'], '.2f')} | {r['sm120_tile_us']:.1f} "
            f"| {_f(r.get('sm120_tl_dot_us'), '.1f')} "
            f"| {_f(r['gather_us'], '.1f')} | {_f(r['tl_dot_vs_gather'], '.2f')} "
            f"| {r['tl_dot_frac_of_floor']:.2f} |"
        )
    return lines


def fp8_md(rows: list[dict[str, Any]]) -> list[str]:
    """fp8 rows against the 16-bit rows of q's dtype in the same case: the speed ratio and the
    memory floor, and the ceiling the bare gather of the fp8 rows sets on that ratio (a kernel
    cannot outrun the gather of its own rows): 16-bit kernel time over that gather's time."""
    by_case = {(r["dtype"], r["B"], r["H"]): r for r in rows}
    lines = [
        "",
        "## fp8 rows against 16-bit rows (same run)",
        "",
        "Each against the 16-bit rows of its q's dtype (bf16; `e4m3h`, e4m3 rows under an fp16 "
        "q: fp16). `gather vs 16-bit` = 16-bit kernel µs / bare-gather µs of the fp8 rows: the "
        "speed-up over 16-bit rows an fp8 kernel would have at its own gather's speed (the "
        "issue's 1.3x needs it >= 1.3); `speed vs own gather` = gather µs / fp8 kernel µs.",
        "",
        "| rows | B | H | µs | 16-bit µs | speed vs 16-bit | frac of floor | gather µs "
        "| gather frac of its floor (rows only) | gather vs 16-bit | speed vs own gather |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ref = by_case.get((SIXTEEN_BIT.get(r["dtype"]), r["B"], r["H"]))
        if ref:
            gather = r["gather_us"]
            lines.append(
                f"| {r['dtype']} | {r['B']} | {r['H']} | {r['ours_us']:.1f} | {ref['ours_us']:.1f} "
                f"| {ref['ours_us'] / r['ours_us']:.2f}x | {r['frac_of_floor']:.2f} "
                f"| {_f(gather, '.1f')} "
                f"| {_f(r.get('gather_frac_of_floor'), '.2f')} "
                f"| {_f(ref['ours_us'] / gather if gather else None, '.2f')} "
                f"| {_f(gather / r['ours_us'] if gather else None, '.2f')} |"
            )
    return lines


def sweep_configs(heads: int) -> list[dict[str, int]]:
    if heads <= 16:
        shapes = [
            (16, 4, 2),
            (16, 4, 3),
            (32, 4, 2),
            (32, 4, 3),
            (32, 4, 4),
            (64, 4, 2),
            (64, 4, 3),
            (32, 8, 3),
        ]
        return [
            {"BLOCK_H": 16, "BLOCK_N": n, "num_warps": w, "num_stages": s} for n, w, s in shapes
        ]
    out = [
        {"BLOCK_H": 64, "BLOCK_N": n, "num_warps": w, "num_stages": s}
        for n, w, s in [(16, 8, 3), (32, 8, 2), (32, 8, 3), (64, 8, 2), (32, 4, 2)]
    ]
    out += [
        {"BLOCK_H": 32, "BLOCK_N": n, "num_warps": w, "num_stages": s}
        for n, w, s in [(32, 4, 3), (32, 8, 3)]
    ]
    return out


def run_sweep(
    args: argparse.Namespace, kmod: types.ModuleType, kv: dict[str, torch.Tensor]
) -> None:
    points = []
    best: dict[tuple[int, int], tuple[float, Any]] = {}
    for batch in [int(x) for x in args.batches.split(",")]:
        for heads in [int(x) for x in args.heads.split(",")]:
            case = Case(kv["bf16"], batch, heads, torch.bfloat16)
            for cfg in sweep_configs(heads):
                hb = triton.cdiv(heads, cfg["BLOCK_H"])
                for splits in (1, 2, 4, 8, 16, 32, 64):
                    progs = batch * hb * splits
                    if progs < 16 or progs > 12 * 132 or TOPK // splits < cfg["BLOCK_N"]:
                        continue
                    try:
                        us, _ = graph_time_us(case.ours(kmod, num_splits=splits, config=cfg), 7)
                    except Exception as exc:  # noqa: BLE001 - out-of-resources configs are data
                        points.append(
                            {
                                "B": batch,
                                "H": heads,
                                "cfg": cfg,
                                "splits": splits,
                                "error": str(exc)[:200],
                            }
                        )
                        print(f"B={batch} H={heads} {cfg} S={splits}: {str(exc)[:120]}")
                        break
                    points.append({"B": batch, "H": heads, "cfg": cfg, "splits": splits, "us": us})
                    key = (batch, heads)
                    if key not in best or us < best[key][0]:
                        best[key] = (us, (cfg, splits))
            print(f"best B={batch} H={heads}: {best.get((batch, heads))}", flush=True)
            del case
            torch.cuda.empty_cache()
    Path(args.json or "sparse_mla_sweep.json").write_text(
        json.dumps({"info": gpu_info(), "points": points}, indent=1)
    )
    report_compiled(kmod)
    # Per-case table: best time per split count (over configs) to see the split trade-off.
    for (batch, heads), (us, choice) in sorted(best.items()):
        per_split: dict[int, float] = {}
        for p in points:
            if p["B"] == batch and p["H"] == heads and "us" in p:
                per_split[p["splits"]] = min(per_split.get(p["splits"], 1e9), p["us"])
        sp = " ".join(f"S{s}:{t:.1f}" for s, t in sorted(per_split.items()))
        print(f"B={batch:4d} H={heads:4d} best {us:7.1f} us {choice} | {sp}")


def report_compiled(kmod: types.ModuleType) -> None:
    """Registers, spills, shared memory and MMA flavour of every compiled variant (best effort:
    Triton's cache layout is internal)."""
    try:
        for fn in (kmod._sparse_mla_split_kernel, kmod._sparse_mla_combine_kernel):
            for cache in fn.device_caches.values():
                for key, k in cache[0].items():
                    ptx = k.asm.get("ptx", "")
                    md = k.metadata
                    print(
                        f"{md.name[:28]} warps={md.num_warps} stages={md.num_stages} "
                        f"regs={k.n_regs} spills={k.n_spills} smem={md.shared} "
                        f"wgmma={'wgmma' in ptx} mma.sync={'mma.sync' in ptx} key={str(key)[-90:]}"
                    )
    except Exception as exc:  # noqa: BLE001 - diagnostics only
        print(f"compiled-kernel report unavailable: {exc!r}")


def hold_one_per_sm(kmod: types.ModuleType) -> int:
    """Launch every compiled tile of ``kmod`` (variants over 48 KB of shared memory: the split
    kernels, not the merge) with half an SM's shared memory (H200: 116,736 of 233,472 bytes, so
    with the 1 KB CUDA reserves per block a second cannot fit), so an SM holds one program at a
    time, as SM120's, SM86's and SM89's 100 KB do for these tiles: the H200 holds two of a
    tile under 113 KB where the registers allow, which makes it no proxy for a 99 KB GPU's
    split counts past one program per SM. Only the launch's dynamic shared memory changes
    (Triton's packed launch metadata; its loader already allowed the opt-in maximum); the
    kernel is the same. Call it after the variants have compiled and before a graph captures
    them. Returns how many variants it held."""
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    held_smem = props.shared_memory_per_multiprocessor // 2
    held = 0
    for fn in vars(kmod).values():
        for cache in getattr(fn, "device_caches", {}).values():
            for compiled in cache[0].values():
                warps, ctas, shared = compiled.packed_metadata
                if 48 * 1024 < shared < held_smem:
                    compiled.packed_metadata = (warps, ctas, held_smem)
                    held += 1
    return held


class _NoLaunch:
    """Stands in for a kernel (``k[grid](...)`` does nothing) to time the split kernel alone."""

    def __getitem__(self, grid: Any) -> Callable[..., None]:
        return lambda *a, **k: None


def _no_split_launch(*args: Any, **kwargs: Any) -> None:
    """Stands in for the split kernel's launcher, to time the merge alone (on stale partials)."""


def check_point(kmod: types.ModuleType, case: Case) -> dict[str, float]:
    """Relative error of the last timed call's out and lse against the float32 reference."""
    scale = E4M3_SCALE if case.kv.dtype == torch.float8_e4m3fn else 1.0
    i = case.n_sets - 1
    ref_o, ref_lse = kmod.reference_sparse_mla(case.qs[i], case.kv, case.idx[i], SM_SCALE, scale)
    err_o = (case.outs[i].float() - ref_o).norm() / ref_o.norm()
    err_lse = (case.lses[i] - ref_lse).abs().max() / ref_lse.abs().max()
    return {"err_out": float(err_o), "err_lse": float(err_lse)}


def run_sweep_v2(
    args: argparse.Namespace, kmod: types.ModuleType, kv: dict[str, torch.Tensor]
) -> None:
    points = []
    cases: dict[tuple[int, int], Case] = {}
    combine = kmod._sparse_mla_combine_kernel
    launch_split = kmod.Tile.launch
    name = args.dtypes.split(",")[0]  # the rows every point runs on
    if (args.plan in FP8_DS_PLANS) != (name == "fp8"):
        raise SystemExit(f"--plan {' or '.join(FP8_DS_PLANS)} goes with --dtypes fp8 (and only it)")
    for batch, heads, cfg, splits in PLANS[args.plan]():
        key = (batch, heads)
        if key not in cases:
            cases.clear()
            torch.cuda.empty_cache()
            cases[key] = Case(kv[name], batch, heads, Q_DTYPES[name])
        case = cases[key]
        if splits is None:  # the plan's split count for this config
            cuda = torch.device("cuda")
            splits = overrides.plan(kmod, batch, heads, TOPK, cuda, None, cfg, KV_FORMAT[name])[1]
        try:
            if args.one_per_sm:  # compile this point's variants, then hold them to one per SM
                case.ours(kmod, num_splits=splits, config=cfg)[0]()
                hold_one_per_sm(kmod)
            us, _ = graph_time_us(case.ours(kmod, num_splits=splits, config=cfg), 7)
            errors = check_point(kmod, case) if args.check else {}  # before the partial timings
            us_split = us_merge = None
            if args.split_alone and splits > 1:
                kmod._sparse_mla_combine_kernel = _NoLaunch()
                us_split, _ = graph_time_us(case.ours(kmod, num_splits=splits, config=cfg), 7)
                kmod._sparse_mla_combine_kernel = combine
            if args.merge_alone and splits > 1:
                kmod.Tile.launch = _no_split_launch
                us_merge, _ = graph_time_us(case.ours(kmod, num_splits=splits, config=cfg), 7)
        except Exception as exc:  # noqa: BLE001 - out-of-resources configs are data
            points.append(
                {"B": batch, "H": heads, "cfg": cfg, "splits": splits, "error": str(exc)[:200]}
            )
            print(f"B={batch} H={heads} {cfg} S={splits}: ERROR {str(exc)[:100]}", flush=True)
            continue
        finally:
            kmod._sparse_mla_combine_kernel = combine
            kmod.Tile.launch = launch_split
        points.append(
            {
                "B": batch,
                "H": heads,
                "cfg": cfg,
                "splits": splits,
                "us": us,
                "us_split_only": us_split,
                "us_merge_only": us_merge,
                **errors,
            }
        )
        err = f" err {points[-1]['err_out']:.2e}" if args.check else ""
        print(
            f"B={batch:4d} H={heads:4d} S={splits:4d} {us:8.1f} us (split kernel alone "
            f"{us_split or float('nan'):8.1f}, merge alone {us_merge or float('nan'):6.1f})"
            f"{err} {cfg}",
            flush=True,
        )
    result = {"info": gpu_info(), "dtype": name, "plan": args.plan, "points": points}
    result["one_per_sm"] = bool(args.one_per_sm)
    Path(args.json or f"sparse_mla_sweep2_{args.plan}.json").write_text(
        json.dumps(result, indent=1)
    )
    report_compiled(kmod)


def cache_rows(kmod: types.ModuleType, name: str, count: int, device: str = "cuda") -> Any:
    """``count`` random cache rows for a --dtypes name: N(0, 0.5) values in q's dtype, as
    fp8_ds_mla rows (``fp8``) or e4m3 rows scaled by ``E4M3_SCALE`` (``e4m3``, ``e4m3h``)."""
    rows = (torch.randn(count, 576, device=device) * 0.5).to(Q_DTYPES[name])
    if name == "fp8":
        return kmod.quantize_fp8_ds_mla(rows)
    if KV_FORMAT[name] == "fp8":
        return (rows.float() / E4M3_SCALE).to(torch.float8_e4m3fn)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=["bench", "sweep", "sweep2"], default="bench")
    ap.add_argument("--batches", default="1,8,32,128")
    ap.add_argument("--heads", default="8,16,64,128")
    ap.add_argument(
        "--dtypes",
        default="bf16,fp16,e4m3,e4m3h,fp8",
        help="fp8: fp8_ds_mla rows; e4m3: fp8 e4m3 rows (e4m3h: under an fp16 q)",
    )
    ap.add_argument("--reps", type=int, default=30)
    default_plan = "merge_trigger_32_heads"
    ap.add_argument("--plan", choices=sorted(PLANS), default=default_plan, help="sweep2's plan")
    ap.add_argument(
        "--split-alone",
        action="store_true",
        help="sweep2: also time the split kernel without the merge",
    )
    ap.add_argument(
        "--merge-alone",
        action="store_true",
        help="sweep2: also time the merge kernel without the split kernel",
    )
    ap.add_argument(
        "--check", action="store_true", help="sweep2: each point's error against the reference"
    )
    ap.add_argument(
        "--one-per-sm",
        action="store_true",
        help="sweep2: launch the split kernels with shared memory that holds one per SM, as on"
        " a 99 KB GPU (SM120, SM86/89)",
    )
    ap.add_argument("--cache-rows", type=int, default=CACHE_ROWS)
    ap.add_argument("--json", default=None, help="default: sparse_mla_<gpu>.json")
    ap.add_argument("--md", default=None, help="default: sparse_mla_<gpu>.md")
    ap.add_argument(
        "--kernel",
        type=Path,
        default=KERNEL_PATH,
        help="the kernel to time: a parts folder, or an earlier single-file version (A/B)",
    )
    args = ap.parse_args()
    torch.manual_seed(0)
    kmod = load_sparse_mla("sparse_mla", args.kernel)
    kv = {name: cache_rows(kmod, name, args.cache_rows) for name in args.dtypes.split(",")}
    if args.mode == "sweep":
        run_sweep(args, kmod, kv)
    elif args.mode == "sweep2":
        run_sweep_v2(args, kmod, kv)
    else:
        run_bench(args, kmod, kv)


if __name__ == "__main__":
    main()
