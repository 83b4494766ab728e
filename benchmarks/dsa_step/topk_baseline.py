"""glmops' Triton top-k as of commit 1f2edeb (backend/indexer_logits.py then: "top-k v2"),
frozen as the step benchmark's baseline column: radix select over the floats' order, two 8-bit
histogram passes over every row (split across the GPU) for the k-th key's top 16 bits, a split
pass writing every position above that bin and copying the bin aside, one program a row
finishing on the bin (five launches with the memset). Not used by glmops; the current top-k is
topk_per_row in backend/indexer_logits.py."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

# v2's helpers that the current top-k kept unchanged: one home for them
from backend.indexer_logits import _blocks_per_program, _finish_items, _orderable, _visible


@triton.jit
def _pick_digit(hist, prefix, known, left, SHIFT: tl.constexpr, BITS: tl.constexpr):
    """One radix step: the BITS-bit digit at bit SHIFT of the key still sought, given the
    histogram of that digit among the keys with ``prefix``; returns the longer prefix, its
    mask, how many keys with it are still to be taken, and how many have it."""
    bins = tl.arange(0, 1 << BITS)
    at_or_above = tl.sum(hist) - tl.cumsum(hist, 0) + hist  # keys with digit >= bin
    digit = tl.max(tl.where(at_or_above >= left, bins, -1), 0)
    left -= tl.sum(tl.where(bins > digit, hist, 0))
    count = tl.sum(tl.where(bins == digit, hist, 0))
    prefix |= digit.to(tl.uint32) << SHIFT
    known |= tl.full([], (1 << BITS) - 1, tl.uint32) << SHIFT
    return prefix, known, left, count


@triton.jit
def _radix_prefix(
    WORK, row, K: tl.constexpr, PASSES: tl.constexpr, WS: tl.constexpr,
    D0: tl.constexpr, D1: tl.constexpr, D2: tl.constexpr,
):  # fmt: skip
    """From a row's first PASSES histograms (its workspace; pass p's digit is Dp bits wide,
    from the top): the key prefix the K-th largest key has, its mask, how many keys with it are
    still to be taken, and how many have it."""
    prefix = tl.zeros([], dtype=tl.uint32)
    known = tl.zeros([], dtype=tl.uint32)
    left = tl.full([], K, tl.int32)
    count = tl.zeros([], dtype=tl.int32)
    work = WORK + row.to(tl.int64) * WS
    if PASSES > 0:
        hist = tl.load(work + tl.arange(0, 1 << D0))
        prefix, known, left, count = _pick_digit(hist, prefix, known, left, 32 - D0, D0)
    if PASSES > 1:
        hist = tl.load(work + 256 + tl.arange(0, 1 << D1))
        prefix, known, left, count = _pick_digit(hist, prefix, known, left, 32 - D0 - D1, D1)
    if PASSES > 2:
        hist = tl.load(work + 512 + tl.arange(0, 1 << D2))
        prefix, known, left, count = _pick_digit(hist, prefix, known, left, 32 - D0 - D1 - D2, D2)
    return prefix, known, left, count


@triton.jit
def _topk_hist_kernel(
    LOGITS, CTX, WORK, next_n, max_model_len, stride_logits,
    K: tl.constexpr, PASS: tl.constexpr, SHIFT: tl.constexpr, BITS: tl.constexpr,
    CHUNK: tl.constexpr, SUBS: tl.constexpr, WS: tl.constexpr,
    D0: tl.constexpr, D1: tl.constexpr, D2: tl.constexpr,
):  # fmt: skip
    """Pass PASS of the radix select over the whole row (its digit: BITS bits at SHIFT): SUBS
    chunks of a row build, in registers, the histogram of their keys' digit among the keys with
    the prefix the earlier passes found, then add it to the row's with one atomic per bin."""
    row = tl.program_id(0)
    first = tl.program_id(1) * SUBS * CHUNK
    n = _visible(CTX, row, next_n, max_model_len)
    if (n > K) & (first < n):
        prefix, known, _, _ = _radix_prefix(WORK, row, K, PASS, WS, D0, D1, D2)
        src = LOGITS + row.to(tl.int64) * stride_logits
        hist = tl.zeros([1 << BITS], dtype=tl.int32)
        for s in range(SUBS):
            at = first + s * CHUNK + tl.arange(0, CHUNK)
            key = _orderable(tl.load(src + at, mask=at < n, other=0.0))
            match = (at < n) & ((key & known) == prefix)
            digits = ((key >> SHIFT) & ((1 << BITS) - 1)).to(tl.int32)
            hist += tl.histogram(digits, 1 << BITS, mask=match)
        bins = tl.arange(0, 1 << BITS)
        tl.atomic_add(WORK + row.to(tl.int64) * WS + PASS * 256 + bins, hist, mask=hist > 0)


@triton.jit
def _topk_split_kernel(
    LOGITS, CTX, WORK, OUT, CAND, next_n, max_model_len, stride_logits, stride_out,
    K: tl.constexpr, CHUNK: tl.constexpr, SUBS: tl.constexpr, WS: tl.constexpr,
    CAP: tl.constexpr, PASSES: tl.constexpr, D0: tl.constexpr, D1: tl.constexpr,
    D2: tl.constexpr,
):  # fmt: skip
    """With the K-th largest key's top 16 bits known: SUBS chunks of a row write the positions
    whose key is above that 16-bit bin (slots claimed with one atomic per chunk; the set is
    fixed, its order not), and copy the bin's keys and positions into the row's candidates
    when they fit (at most CAP). A row that sees at most K positions gets 0..n-1, -1 after."""
    row = tl.program_id(0)
    first = tl.program_id(1) * SUBS * CHUNK
    n = _visible(CTX, row, next_n, max_model_len)
    dst = OUT + row.to(tl.int64) * stride_out
    if n <= K:
        for s in range(SUBS):
            at = first + s * CHUNK + tl.arange(0, CHUNK)
            tl.store(dst + at, tl.where(at < n, at, -1), mask=at < K)
    elif first < n:
        bin16, _, _, in_bin = _radix_prefix(WORK, row, K, PASSES, WS, D0, D1, D2)
        collect = in_bin <= CAP
        src = LOGITS + row.to(tl.int64) * stride_logits
        work = WORK + row.to(tl.int64) * WS
        cand = CAND + row.to(tl.int64) * 2 * CAP
        for s in range(SUBS):
            at = first + s * CHUNK + tl.arange(0, CHUNK)
            key = _orderable(tl.load(src + at, mask=at < n, other=0.0))
            top16 = key & 0xFFFF0000
            over = ((at < n) & (top16 > bin16)).to(tl.int32)
            base = tl.atomic_add(work + WS - 2, tl.sum(over))
            tl.store(dst + base + tl.cumsum(over, 0) - 1, at, mask=over > 0)
            tie = ((at < n) & (top16 == bin16) & collect).to(tl.int32)
            slot = tl.atomic_add(work + WS - 1, tl.sum(tie)) + tl.cumsum(tie, 0) - 1
            tl.store(cand + slot, key.to(tl.int32, bitcast=True), mask=tie > 0)
            tl.store(cand + CAP + slot, at, mask=tie > 0)


@triton.jit
def _topk_finish_kernel(
    LOGITS, CTX, WORK, OUT, CAND, next_n, max_model_len, stride_logits, stride_out,
    K: tl.constexpr, WS: tl.constexpr, CAP: tl.constexpr, SLICE: tl.constexpr,
    PASSES: tl.constexpr, D0: tl.constexpr, D1: tl.constexpr, D2: tl.constexpr,
):  # fmt: skip
    """One program a row: the low 16 bits of the K-th largest key, from the candidates (the
    whole row where more than CAP keys share its 16-bit bin), then the bin's positions above
    that key and as many of its ties as are still wanted, the ties lowest position first (so
    the selected set does not depend on the order in which the split pass wrote candidates)."""
    row = tl.program_id(0)
    n = _visible(CTX, row, next_n, max_model_len)
    if n > K:
        prefix, known, left16, in_bin = _radix_prefix(WORK, row, K, PASSES, WS, D0, D1, D2)
        src = LOGITS + row.to(tl.int64) * stride_logits
        cand = CAND + row.to(tl.int64) * 2 * CAP
        from_row = in_bin > CAP
        length = tl.where(from_row, n, in_bin)
        left = left16
        ties = in_bin
        for p in tl.static_range(2):  # the low 16 bits, 8 at a time
            hist = tl.zeros([256], dtype=tl.int32)
            for start in range(0, length, SLICE):
                key, pos, ok = _finish_items(src, cand, start, length, from_row, CAP, SLICE)
                match = ok & ((key & known) == prefix)
                digits = ((key >> (8 - 8 * p)) & 0xFF).to(tl.int32)
                hist += tl.histogram(digits, 256, mask=match)
            prefix, known, left, ties = _pick_digit(hist, prefix, known, left, 8 - 8 * p, 8)
        # prefix is now the K-th largest key; `ties` positions have it, `left` are wanted.
        dst = OUT + row.to(tl.int64) * stride_out + (K - left16)
        taken = 0
        for start in range(0, length, SLICE):
            key, pos, ok = _finish_items(src, cand, start, length, from_row, CAP, SLICE)
            over = (ok & ((key & 0xFFFF0000) == (prefix & 0xFFFF0000)) & (key > prefix)).to(
                tl.int32
            )
            tl.store(dst + taken + tl.cumsum(over, 0) - 1, pos, mask=over > 0)
            taken += tl.sum(over)
        # Candidates are in no fixed order: more ties than wanted are taken from the row.
        tie_from_row = from_row | (ties > left)
        tie_length = tl.where(tie_from_row, n, in_bin)
        seen = 0
        start = 0
        while (start < tie_length) & (seen < left):
            key, pos, ok = _finish_items(src, cand, start, tie_length, tie_from_row, CAP, SLICE)
            tie = (ok & (key == prefix)).to(tl.int32)
            rank = seen + tl.cumsum(tie, 0) - 1
            tl.store(dst + taken + rank, pos, mask=(tie > 0) & (rank < left))
            seen += tl.sum(tie)
            start += SLICE


_TOPK_CHUNK = 4096  # keys a histogram or split step loads at once (8 warps: 16 a thread)
_TOPK_CAP = 4096  # candidates kept per row: keys in the K-th largest key's 16-bit bin
_TOPK_SLICE = 1024  # keys the finishing program scans at once
_TOPK_WS = 3 * 256 + 2  # a row's workspace: up to three histograms, two slot counters


def topk_per_row(
    logits: torch.Tensor, context_lens: torch.Tensor, next_n: int, k: int, out: torch.Tensor
) -> torch.Tensor:
    """int32 [rows, k]: each decode row's k highest-scoring visible positions into ``out``."""
    rows, max_model_len = logits.shape
    digits = (8, 8)
    work = torch.zeros((rows, _TOPK_WS), dtype=torch.int32, device=logits.device)
    lens = context_lens.to(torch.int32)
    cand = torch.empty((rows, 2, _TOPK_CAP), dtype=torch.int32, device=logits.device)
    chunks = triton.cdiv(max(max_model_len, k), _TOPK_CHUNK)
    subs = _blocks_per_program(rows, chunks, logits.device)
    grid = (rows, triton.cdiv(chunks, subs))
    shape = dict(K=k, WS=_TOPK_WS, D0=digits[0], D1=digits[1], D2=0)
    for p, bits in enumerate(digits):
        _topk_hist_kernel[grid](
            logits, lens, work, next_n, max_model_len, logits.stride(0), PASS=p,
            SHIFT=32 - sum(digits[: p + 1]), BITS=bits, CHUNK=_TOPK_CHUNK, SUBS=subs,
            num_warps=8, **shape,
        )  # fmt: skip
    # The same keys a program in half-chunk steps: its scans and slots at 4096 keys took 136
    # registers a thread on sm_90 (one 8-warp program an SM).
    _topk_split_kernel[grid](
        logits, lens, work, out, cand, next_n, max_model_len, logits.stride(0), out.stride(0),
        CHUNK=_TOPK_CHUNK // 2, SUBS=2 * subs, CAP=_TOPK_CAP, PASSES=len(digits), num_warps=8,
        **shape,
    )  # fmt: skip
    _topk_finish_kernel[(rows,)](
        logits, lens, work, out, cand, next_n, max_model_len, logits.stride(0), out.stride(0),
        CAP=_TOPK_CAP, SLICE=_TOPK_SLICE, PASSES=len(digits), num_warps=4, **shape,
    )  # fmt: skip
    return out
