"""glmops' Triton top-k as of commit a69c561 (backend/indexer_logits.py then), frozen as the
step benchmark's baseline column: four 8-bit histogram passes over every row, then a writing
pass, two memsets (seven launches). Not used by glmops; the current top-k is topk_per_row in
backend/indexer_logits.py."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _orderable(x):
    """fp32 -> uint32 keys in the floats' order (negatives flipped whole, positives' sign set)."""
    bits = x.to(tl.uint32, bitcast=True)
    flip = tl.where((bits >> 31) != 0, 0xFFFFFFFF, 0x80000000).to(tl.uint32)
    return bits ^ flip


@triton.jit
def _visible(CTX, row, next_n, max_model_len):
    """How many positions decode row (b, j) sees: ctx - next_n + j + 1, within the logits."""
    return tl.minimum(tl.load(CTX + row // next_n) - next_n + row % next_n + 1, max_model_len)


@triton.jit
def _radix_prefix(HIST, row, rows, K: tl.constexpr, PASSES: tl.constexpr):
    """From the first PASSES 8-bit histograms of a row: the key prefix the K-th largest key
    has, its bits, and how many keys with that prefix are still to be taken."""
    bins = tl.arange(0, 256)
    prefix = tl.zeros([], dtype=tl.uint32)
    known = tl.zeros([], dtype=tl.uint32)
    left = tl.full([], K, tl.int32)
    for p in tl.static_range(PASSES):
        hist = tl.load(HIST + (p * rows + row).to(tl.int64) * 256 + bins)
        at_or_above = tl.sum(hist) - tl.cumsum(hist, 0) + hist  # keys with digit >= bin
        digit = tl.max(tl.where(at_or_above >= left, bins, -1), 0)
        left -= tl.sum(tl.where(bins > digit, hist, 0))
        prefix |= digit.to(tl.uint32) << (24 - 8 * p)
        known |= tl.full([], 0xFF, tl.uint32) << (24 - 8 * p)
    return prefix, known, left


@triton.jit
def _topk_hist_kernel(
    LOGITS, CTX, HIST, rows, next_n, max_model_len, stride_logits,
    K: tl.constexpr, PASS: tl.constexpr, CHUNK: tl.constexpr,
):  # fmt: skip
    """Pass PASS of the radix select: one chunk of a row adds the histogram of its keys' next
    8 bits, among the keys with the prefix the earlier passes found, to the row's."""
    row = tl.program_id(0)
    at = tl.program_id(1) * CHUNK + tl.arange(0, CHUNK)
    n = _visible(CTX, row, next_n, max_model_len)
    if n > K:
        prefix, known, _ = _radix_prefix(HIST, row, rows, K, PASS)
        src = LOGITS + row.to(tl.int64) * stride_logits
        key = _orderable(tl.load(src + at, mask=at < n, other=0.0))
        match = (at < n) & ((key & known) == prefix)
        digits = ((key >> (24 - 8 * PASS)) & 0xFF).to(tl.int32)
        hist = tl.histogram(digits, 256, mask=match)
        bins = tl.arange(0, 256)
        tl.atomic_add(HIST + (PASS * rows + row).to(tl.int64) * 256 + bins, hist, mask=hist > 0)


@triton.jit
def _topk_write_kernel(
    LOGITS, CTX, HIST, COUNT, OUT, rows, next_n, max_model_len, stride_logits, stride_out,
    K: tl.constexpr, CHUNK: tl.constexpr,
):  # fmt: skip
    """One chunk of a row writes its positions above the K-th largest key, then as many of its
    ties as are still wanted, at slots claimed with atomics (so in no fixed order); a row that
    sees at most K positions gets 0..n-1 and -1 after."""
    row = tl.program_id(0)
    at = tl.program_id(1) * CHUNK + tl.arange(0, CHUNK)
    n = _visible(CTX, row, next_n, max_model_len)
    dst = OUT + row.to(tl.int64) * stride_out
    if n <= K:
        tl.store(dst + at, tl.where(at < n, at, -1), mask=at < K)
    else:
        prefix, _, left = _radix_prefix(HIST, row, rows, K, 4)
        src = LOGITS + row.to(tl.int64) * stride_logits
        key = _orderable(tl.load(src + at, mask=at < n, other=0.0))
        over = ((at < n) & (key > prefix)).to(tl.int32)
        tie = ((at < n) & (key == prefix)).to(tl.int32)
        base = tl.atomic_add(COUNT + row * 2, tl.sum(over))
        tl.store(dst + base + tl.cumsum(over, 0) - 1, at, mask=over > 0)
        rank = tl.atomic_add(COUNT + row * 2 + 1, tl.sum(tie)) + tl.cumsum(tie, 0) - 1
        tl.store(dst + (K - left) + rank, at, mask=(tie > 0) & (rank < left))


_TOPK_CHUNK = 4096


def topk_per_row(
    logits: torch.Tensor,
    context_lens: torch.Tensor,
    next_n: int,
    k: int,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """int32 [rows, k]: each decode row's k highest-scoring visible positions, in no fixed
    order (what vLLM's top_k_per_row_decode computes), into ``out`` (e.g. the indexer's top-k
    buffer) when given. Radix select over the floats' order, every row split into chunks so
    the whole GPU works on it: four histogram passes of 8 bits, then one writing pass; no host
    synchronisation, so it can be captured in a CUDA graph."""
    rows, max_model_len = logits.shape
    if out is None:
        out = torch.empty((rows, k), dtype=torch.int32, device=logits.device)
    if out.dtype != torch.int32 or out.shape[0] < rows or out.shape[1] < k or out.stride(1) != 1:
        raise ValueError(f"out must be int32 [>= {rows}, >= {k}], unit column stride")
    if logits.dtype != torch.float32 or logits.stride(1) != 1:
        raise ValueError("logits must be fp32 with unit column stride")
    if rows == 0:
        return out
    lens = context_lens.to(torch.int32)
    hist = torch.zeros((4, rows, 256), dtype=torch.int32, device=logits.device)
    count = torch.zeros((rows, 2), dtype=torch.int32, device=logits.device)
    chunks = triton.cdiv(max_model_len, _TOPK_CHUNK)
    for p in range(4):
        _topk_hist_kernel[(rows, chunks)](
            logits, lens, hist, rows, next_n, max_model_len, logits.stride(0),
            K=k, PASS=p, CHUNK=_TOPK_CHUNK, num_warps=8,
        )  # fmt: skip
    _topk_write_kernel[(rows, triton.cdiv(max(max_model_len, k), _TOPK_CHUNK))](
        logits, lens, hist, count, out, rows, next_n, max_model_len, logits.stride(0),
        out.stride(0), K=k, CHUNK=_TOPK_CHUNK, num_warps=8,
    )  # fmt: skip
    return out
