"""Benchmark the DSA indexer logits fallback that `glmops patch` renders for GPUs without
DeepGEMM (SM120, SM8x) against vLLM 0.16's own torch references (not a test).

Ours, from the rendered glmops_dsa_indexer.py: decode with the embedded Triton kernel
(`paged_mqa_logits`, backend/indexer_logits.py, what runs on a CUDA device) and with the tiled
torch code (`paged_mqa_logits_torch`, GLMOPS_INDEXER_PAGED=torch); prefill `mqa_logits_torch`.
Baseline, in the same run: `fp8_mqa_logits_torch` / `fp8_paged_mqa_logits_torch` from vLLM
0.16.0's rocm_aiter_mla_sparse.py (what a user could call instead), extracted verbatim from the
PyPI wheel. Both come from tests/gpu/prepare_rendered.py (.thirdparty/rendered, git-ignored);
vLLM itself is not imported: `current_platform.fp8_dtype()` and `cdiv` are stubbed.

GLM-5's indexer: 32 heads, dim 128, 64-token cache blocks. Decode: every request at the same
context, next_n 1. Prefill: one request's causal chunk of M rows against N = M keys. Eager
timing (the fallback is never captured in a CUDA graph), CUDA events, median of repeats after
a warm-up; the floor is the bytes of q, keys and scales read once at the bandwidth of a copy
probe run on the same GPU (benchmarks/gpu_device.py, which also names the results).

    python3 -m benchmarks.indexer_fallback.bench [--json ...] [--md ...]   (from the checkout)
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

from benchmarks import gpu_device
from tests.support.module_file import load_module_file  # stdlib only; runs without glmops

ROOT = Path(__file__).resolve().parents[2]

RENDERED = ROOT / ".thirdparty" / "rendered"
HEADS, DIM, BLOCK = 32, 128, 64
FP8 = torch.float8_e4m3fn


def load_baseline() -> types.ModuleType:
    """vLLM's references import current_platform (for fp8_dtype) and, lazily, cdiv."""
    platforms = types.ModuleType("vllm.platforms")
    platforms.current_platform = types.SimpleNamespace(fp8_dtype=lambda: FP8)
    math_utils = types.ModuleType("vllm.utils.math_utils")
    math_utils.cdiv = lambda a, b: -(-a // b)
    for name, module in {
        "vllm": types.ModuleType("vllm"),
        "vllm.platforms": platforms,
        "vllm.utils": types.ModuleType("vllm.utils"),
        "vllm.utils.math_utils": math_utils,
    }.items():
        sys.modules.setdefault(name, module)
    return load_module_file(
        RENDERED / "vllm-0.16.0" / "indexer_torch_refs.py", "vllm_indexer_refs_0_16"
    )


def time_ms(fn: Callable[[], Any], reps: int) -> float:
    fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end))
    return statistics.median(samples)


def decode_case(batch: int, ctx: int) -> tuple[tuple, tuple, float]:
    """Arguments of paged logits (q, cache, w, lens, table, max_model_len) for ours and for
    the baseline, and the bytes read. The same fp8 keys and scales, packed two ways: ours as
    vLLM's CUDA cache (per block: BLOCK x DIM values, then BLOCK fp32 scales), the ROCm
    reference as it slices the cache (per row: DIM values, then that row's scale)."""
    blocks = math.ceil(ctx / BLOCK)
    phys = batch * blocks + 1
    keys = torch.randn(phys, BLOCK, DIM, device="cuda").to(FP8).view(torch.uint8)
    scales = (torch.rand(phys, BLOCK, device="cuda") * 0.1 + 0.01).view(torch.uint8)
    scales = scales.view(phys, BLOCK, 4)
    per_block = torch.cat([keys.reshape(phys, -1), scales.reshape(phys, -1)], dim=1)
    per_row = torch.cat([keys, scales], dim=2)
    q = torch.randn(batch, 1, HEADS, DIM, device="cuda").to(FP8)
    w = torch.randn(batch, HEADS, device="cuda")
    lens = torch.full((batch,), ctx, dtype=torch.int32, device="cuda")
    table = (torch.randperm(phys - 1, device="cuda")[: batch * blocks] + 1).view(batch, blocks)
    table = table.to(torch.int32)
    shape = (phys, BLOCK, 1, DIM + 4)
    ours = (q, per_block.view(shape), w, lens, table, ctx)
    base = (q, per_row.view(shape), w, lens, table, ctx)
    read = batch * ctx * (DIM + 4) + q.numel() + w.numel() * 4
    return ours, base, read


def prefill_case(m: int) -> tuple[tuple, float]:
    """Arguments of fp8_mqa_logits(q, (k, scale), w, ks, ke) for one causal chunk."""
    q = torch.randn(m, HEADS, DIM, device="cuda").to(FP8)
    k = torch.randn(m, DIM, device="cuda").to(FP8)
    scale = torch.rand(m, device="cuda") * 0.1 + 0.01
    w = torch.randn(m, HEADS, device="cuda")
    ks = torch.zeros(m, dtype=torch.int32, device="cuda")
    ke = torch.arange(1, m + 1, dtype=torch.int32, device="cuda")
    read = q.numel() + k.numel() + scale.numel() * 4 + w.numel() * 4
    return (q, (k, scale), w, ks, ke), read


def agree(ours: torch.Tensor, base: torch.Tensor) -> float:
    """Largest |difference| over finite entries relative to the largest |logit| (the
    baseline computes the prefill in bf16), after checking both mask the same entries."""
    assert torch.equal(torch.isinf(ours), torch.isinf(base)), "different masks"
    finite = torch.isfinite(ours)
    scale = ours[finite].abs().max().clamp(min=1e-6)
    return float(((ours - base)[finite].abs().max() / scale).item())


def run(reps: int, mem_bw: float) -> list[dict[str, Any]]:
    ours = load_module_file(
        RENDERED / "v0_16-indexer" / "glmops_dsa_indexer.py", "glmops_dsa_indexer"
    )
    base = load_baseline()
    rows: list[dict[str, Any]] = []
    for batch, ctx in [(1, 4096), (1, 32768), (8, 4096), (8, 32768), (32, 4096), (32, 32768)]:
        args, base_args, read = decode_case(batch, ctx)
        o = ours.paged_mqa_logits(*args)
        assert agree(o, ours.paged_mqa_logits_torch(*args)) < 1e-5, "kernel != torch code"
        b = base.fp8_paged_mqa_logits_torch(*base_args)
        rows.append(
            {
                "op": "decode (paged)",
                "shape": f"B={batch} ctx={ctx}",
                "ours_ms": time_ms(lambda a=args: ours.paged_mqa_logits(*a), reps),
                "ours_torch_ms": time_ms(lambda a=args: ours.paged_mqa_logits_torch(*a), reps),
                "baseline_ms": time_ms(lambda a=base_args: base.fp8_paged_mqa_logits_torch(*a), 3),
                "floor_ms": read / mem_bw * 1e3,
                "rel_diff": agree(o, b),
            }
        )
        print(rows[-1], flush=True)
        del args, base_args, o, b
        torch.cuda.empty_cache()
    for m in (2048, 8192):
        args, read = prefill_case(m)
        o = ours.mqa_logits_torch(*args)
        b = base.fp8_mqa_logits_torch(*args)
        rows.append(
            {
                "op": "prefill",
                "shape": f"M=N={m}",
                "ours_ms": time_ms(lambda a=args: ours.mqa_logits_torch(*a), reps),
                "ours_torch_ms": None,
                "baseline_ms": time_ms(lambda a=args: base.fp8_mqa_logits_torch(*a), reps),
                "floor_ms": read / mem_bw * 1e3,
                "rel_diff": agree(o, b),
            }
        )
        print(rows[-1], flush=True)
        del args, o, b
        torch.cuda.empty_cache()
    for row in rows:
        row["speedup"] = row["baseline_ms"] / row["ours_ms"]
    return rows


def _bandwidth(info: dict[str, Any]) -> str:
    """The floors' bandwidth: this run's probe, or (results before the probe) the H200's."""
    if info.get("copy_bw"):
        return gpu_device.bandwidth_line(info)
    return "memory floors at 4.3 TB/s, the H200's measured copy rate (KINDS.md)"


def render_md(result: dict[str, Any]) -> str:
    info = result["info"]
    lines = [
        f"# DSA indexer logits fallback on {info.get('short_name', info['gpu'])}: glmops vs "
        "vLLM 0.16's torch references",
        "",
        f"- GPU: {info['gpu']}; torch {info['torch']}, CUDA {info['cuda']}; {info['date']}",
        f"- GLM-5 indexer: {HEADS} heads, dim {DIM}, {BLOCK}-token blocks; decode next_n 1, "
        "every request at the same context; prefill one causal chunk (M rows, N = M keys).",
        "- Eager (never captured), CUDA events, median; floor = q + keys + scales read once; "
        f"{_bandwidth(info)}. rel diff = max |ours - baseline| / max |logit| (the "
        "baseline's prefill runs in bf16).",
        "- The fallback runs only where DeepGEMM cannot (SM120, SM8x); this GPU stands in.",
        "",
        "- ours: decode = the Triton kernel (backend/indexer_logits.py), prefill = tiled torch; "
        "ours torch = the decode's tiled torch code (GLMOPS_INDEXER_PAGED=torch).",
        "",
        "| op | shape | ours ms | ours torch ms | vLLM ref ms | speedup vs ref | floor ms "
        "| rel diff |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        torch_ms = f"{r['ours_torch_ms']:.3f}" if r["ours_torch_ms"] is not None else "-"
        lines.append(
            f"| {r['op']} | {r['shape']} | {r['ours_ms']:.3f} | {torch_ms} "
            f"| {r['baseline_ms']:.3f} | {r['speedup']:.1f}x | {r['floor_ms']:.4f} "
            f"| {r['rel_diff']:.1e} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--json", default=None, help="default: indexer_fallback_<gpu>.json")
    ap.add_argument("--md", default=None, help="default: indexer_fallback_<gpu>.md")
    args = ap.parse_args()
    torch.manual_seed(0)
    info = gpu_device.device_info()
    rows = run(args.reps, info["copy_bw"])
    result = {"info": info, "reps": args.reps, "rows": rows}
    json_path = args.json or gpu_device.result_path("indexer_fallback", info, ".json")
    Path(json_path).write_text(json.dumps(result, indent=1))
    Path(args.md or gpu_device.result_path("indexer_fallback", info, ".md")).write_text(
        render_md(result)
    )
    print(render_md(result))


if __name__ == "__main__":
    main()
