"""DSA indexer logits over the paged fp8 indexer cache, in Triton (decode).

What DeepGEMM's fp8_paged_mqa_logits computes, for GPUs it does not run on (SM120, SM8x):
    q            [B, next_n, H, D]  fp8 e4m3 (passed as torch.float8_e4m3fn or uint8)
    kv_cache     [num_blocks, block_size, 1, D + 4] uint8: per block, block_size x D fp8 key
                 values, then block_size fp32 scales (vLLM's indexer_k_quant_and_cache layout)
    weights      [B * next_n, H] fp32
    context_lens [B] int32, block_tables [B, max_blocks] int32, max_model_len
    -> logits [B * next_n, max_model_len] fp32: row (b, j) at position p is
       sum_h weights[h] * relu(scale[p] * q[b, j, h] . k[p]) for p <= context_lens[b] - next_n + j,
       -inf elsewhere (every element is written).

One program owns (request, query row, a run of cache blocks): q and the weights are loaded
once, then each block's keys and scales, [block, D] x [D, H] with heads as the small MMA
dimension, then the weighted ReLU head sum; the loop has no branches, so the compiler keeps the
next blocks' loads in flight. On SM89+ the MMA takes the e4m3 bytes as they are (Hopper's fp8
MMA adds in reduced precision, about 2e-4 of the largest logit on random data: the selection
the logits feed is what matters, and DeepGEMM's kernel does the same); elsewhere (SM80, the
interpreter) fp8 values are widened to fp16 by moving their bits (exact), products exact in
fp16, summed in fp32.

topk_per_row: each decode row's top-k positions from those logits (what vLLM's
top_k_per_row_decode computes), by radix select over the floats' order: two or three histogram
passes over every row (split across the GPU) find the k-th key's top 16 bits; a split pass
writes every position above that bin and copies the bin aside; one program a row finishes the
select on the bin (see topk_per_row). A TopkPlan shared by both calls moves the first histogram
pass into the logits kernel.

No host synchronisation, so every launch can be captured in a CUDA graph. Only torch, triton
and os are imported, so this file can be embedded verbatim elsewhere.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl


@triton.jit
def _e4m3_to_f16(bits):
    """fp8 e4m3 bits (uint8) -> fp16, exactly: e4m3's sign/exponent/mantissa shifted into
    fp16's fields is the value times 2^-8 (the exponent biases differ by 8), normals and
    subnormals alike; the scaling back by 2^8 is exact."""
    b = bits.to(tl.uint16)
    f16 = (((b & 0x80) << 8) | ((b & 0x7F) << 7)).to(tl.float16, bitcast=True)
    return f16 * 256.0


@triton.jit
def _paged_logits_kernel(
    Q,  # uint8 [B, next_n, H, D]
    KV,  # uint8, the cache as bytes
    KV_F32,  # the same storage as fp32 (scales)
    W,  # fp32 [B * next_n, H]
    CTX,  # int32 [B]
    TABLE,  # int32 [B, max_blocks]
    OUT,  # fp32 [B * next_n, max_model_len]
    HIST,  # int32 top-k workspace [B * next_n, HIST_STRIDE] (read only when HIST_BITS > 0)
    next_n,
    num_heads,
    num_blocks,
    max_blocks,
    max_model_len,
    stride_table,
    stride_out,
    BLOCK: tl.constexpr,  # cache block size (positions per block)
    D: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCKS_PER_PROGRAM: tl.constexpr,  # cache blocks one program scores, in a pipelined loop
    FP8_DOT: tl.constexpr,  # SM89+: the MMA takes the e4m3 bytes as they are
    HIST_BITS: tl.constexpr,  # > 0: also the top-k's first histogram (of the top HIST_BITS)
    HIST_STRIDE: tl.constexpr,
):
    row = tl.program_id(0)  # b * next_n + j
    group = tl.program_id(1)  # BLOCKS_PER_PROGRAM logical cache blocks
    b = row // next_n
    j = row % next_n
    ctx = tl.load(CTX + b)
    last = ctx - next_n + j  # the query's own position: it sees every p <= last

    offs_h = tl.arange(0, BLOCK_H)
    offs_d = tl.arange(0, D)
    mask_h = offs_h < num_heads
    q_ptr = Q + (row.to(tl.int64) * num_heads + offs_h[:, None]) * D + offs_d[None, :]
    q_bits = tl.load(q_ptr, mask=mask_h[:, None], other=0)
    if FP8_DOT:
        q = tl.trans(q_bits.to(tl.float8e4nv, bitcast=True))
    else:
        q = tl.trans(_e4m3_to_f16(q_bits))
    w = tl.load(W + row.to(tl.int64) * num_heads + offs_h, mask=mask_h, other=0.0)
    seen = tl.minimum(last + 1, max_model_len)  # the positions the top-k ranks
    hist = tl.zeros([1 << HIST_BITS], dtype=tl.int32)

    # Branch-free body (masked loads read nothing for blocks past the context), so the
    # compiler can prefetch the next blocks' table entry, keys and scales under this one's MMA.
    for i in range(BLOCKS_PER_PROGRAM):
        col = group * BLOCKS_PER_PROGRAM + i
        pos = col * BLOCK + tl.arange(0, BLOCK)
        live = (col < max_blocks) & (col * BLOCK <= last)
        block = tl.load(TABLE + b.to(tl.int64) * stride_table + col, mask=live, other=0)
        block = tl.minimum(tl.maximum(block, 0), num_blocks - 1).to(tl.int64)
        base = block * (BLOCK * (D + 4))
        key_ptr = KV + base + tl.arange(0, BLOCK)[:, None] * D + offs_d[None, :]
        keys = tl.load(key_ptr, mask=live, other=0)
        scale = tl.load(KV_F32 + (base + BLOCK * D) // 4 + tl.arange(0, BLOCK), mask=live, other=0)
        if FP8_DOT:
            s = tl.dot(keys.to(tl.float8e4nv, bitcast=True), q)  # [BLOCK, BLOCK_H], fp32
        else:
            s = tl.dot(_e4m3_to_f16(keys), q)
        s = tl.maximum(s * scale[:, None], 0.0)
        logits = tl.sum(s * w[None, :], axis=1)
        visible = (pos <= last) & (pos < ctx) & live
        out_ptr = OUT + row.to(tl.int64) * stride_out + pos
        value = tl.where(visible, logits, float("-inf"))
        tl.store(out_ptr, value, mask=pos < max_model_len)
        if HIST_BITS > 0:
            digits = (_orderable(value) >> (32 - HIST_BITS)).to(tl.int32)
            hist += tl.histogram(digits, 1 << HIST_BITS, mask=pos < seen)
    if HIST_BITS > 0:
        bins = tl.arange(0, 1 << HIST_BITS)
        tl.atomic_add(HIST + row.to(tl.int64) * HIST_STRIDE + bins, hist, mask=hist > 0)


def _fp8_mma(device: torch.device) -> bool:
    """Whether the GPU's MMA takes e4m3 operands (SM89 on); never under the interpreter."""
    if device.type != "cuda" or os.environ.get("TRITON_INTERPRET") == "1":
        return False
    return torch.cuda.get_device_capability(device) >= (8, 9)


def _blocks_per_program(rows: int, blocks: int, device: torch.device) -> int:
    """Cache blocks per program: as many as keep about four programs per SM (fewer programs
    load q and the weights fewer times and keep more keys in flight each), 1 to 16."""
    sms = (
        torch.cuda.get_device_properties(device).multi_processor_count
        if device.type == "cuda"
        else 1
    )
    per_program = 1
    while per_program < 16 and rows * triton.cdiv(blocks, per_program * 2) >= 4 * sms:
        per_program *= 2
    return per_program


def paged_mqa_logits(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    weights: torch.Tensor,
    context_lens: torch.Tensor,
    block_tables: torch.Tensor,
    max_model_len: int,
    topk_plan: TopkPlan | None = None,
) -> torch.Tensor:
    """fp32 logits [B * next_n, max_model_len]; see the module docstring for the contract.
    ``topk_plan`` (for these rows and max_model_len): the kernel also builds the top-k's first
    histogram into it, so topk_per_row given the same plan skips its first row-wide pass."""
    batch, next_n, heads, dim = q.shape
    num_blocks, block = kv_cache.shape[0], kv_cache.shape[1]
    if kv_cache.shape[-1] != dim + 4 or kv_cache.dtype != torch.uint8:
        raise ValueError(f"kv_cache must be uint8 [..., {dim + 4}], got {tuple(kv_cache.shape)}")
    if q.element_size() != 1:
        raise TypeError(f"q must hold fp8 e4m3 bytes (float8_e4m3fn or uint8), got {q.dtype}")
    if tuple(weights.shape) != (batch * next_n, heads):
        raise ValueError(f"weights must be [{batch * next_n}, {heads}], got {tuple(weights.shape)}")
    if block < 16 or block & (block - 1) or dim < 16 or dim & (dim - 1):
        raise ValueError(f"block size {block} and head dim {dim} must be powers of two >= 16")
    out = torch.empty((batch * next_n, max_model_len), dtype=torch.float32, device=q.device)
    if out.numel() == 0:
        return out
    if block_tables.stride(-1) != 1:
        block_tables = block_tables.contiguous()
    cache = kv_cache.contiguous().view(-1)
    hist_bits = 0
    if topk_plan is not None:
        if topk_plan.work.shape[0] < batch * next_n or topk_plan.first_pass_built:
            raise ValueError("topk_plan is for fewer rows or already has its first histogram")
        hist_bits, topk_plan.first_pass_built = topk_plan.digits[0], True
    per_program = _blocks_per_program(batch * next_n, triton.cdiv(max_model_len, block), q.device)
    grid = (batch * next_n, triton.cdiv(max_model_len, block * per_program))
    _paged_logits_kernel[grid](
        q.contiguous().view(torch.uint8),
        cache,
        cache.view(torch.float32),
        weights.contiguous().float(),
        context_lens.to(torch.int32),
        block_tables,
        out,
        out if topk_plan is None else topk_plan.work,
        next_n,
        heads,
        num_blocks,
        block_tables.shape[1],
        max_model_len,
        block_tables.stride(0),
        out.stride(0),
        BLOCK=block,
        D=dim,
        BLOCK_H=max(16, triton.next_power_of_2(heads)),
        BLOCKS_PER_PROGRAM=per_program,
        FP8_DOT=_fp8_mma(q.device),
        HIST_BITS=hist_bits,
        HIST_STRIDE=_TOPK_WS,
        num_warps=4,
        num_stages=3,
    )
    return out


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
        cand_key = CAND + row.to(tl.int64) * 2 * CAP
        for s in range(SUBS):
            at = first + s * CHUNK + tl.arange(0, CHUNK)
            key = _orderable(tl.load(src + at, mask=at < n, other=0.0))
            top16 = key & 0xFFFF0000
            over = ((at < n) & (top16 > bin16)).to(tl.int32)
            base = tl.atomic_add(work + WS - 2, tl.sum(over))
            tl.store(dst + base + tl.cumsum(over, 0) - 1, at, mask=over > 0)
            tie = ((at < n) & (top16 == bin16) & collect).to(tl.int32)
            slot = tl.atomic_add(work + WS - 1, tl.sum(tie)) + tl.cumsum(tie, 0) - 1
            tl.store(cand_key + slot, key.to(tl.int32, bitcast=True), mask=tie > 0)
            tl.store(cand_key + CAP + slot, at, mask=tie > 0)


@triton.jit
def _finish_items(src, cand_key, start, length, from_row, CAP: tl.constexpr, SLICE: tl.constexpr):
    """SLICE items of what the finishing pass scans: the row's keys and positions, or its
    candidates' (the keys in the K-th largest key's 16-bit bin, copied by the split pass)."""
    i = start + tl.arange(0, SLICE)
    ok = i < length
    if from_row:
        key = _orderable(tl.load(src + i, mask=ok, other=0.0))
        pos = i
    else:
        key = tl.load(cand_key + i, mask=ok, other=0).to(tl.uint32, bitcast=True)
        pos = tl.load(cand_key + CAP + i, mask=ok, other=0)
    return key, pos, ok


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
        cand_key = CAND + row.to(tl.int64) * 2 * CAP
        from_row = in_bin > CAP
        length = tl.where(from_row, n, in_bin)
        left = left16
        ties = in_bin
        for p in tl.static_range(2):  # the low 16 bits, 8 at a time
            hist = tl.zeros([256], dtype=tl.int32)
            for start in range(0, length, SLICE):
                key, pos, ok = _finish_items(src, cand_key, start, length, from_row, CAP, SLICE)
                match = ok & ((key & known) == prefix)
                digits = ((key >> (8 - 8 * p)) & 0xFF).to(tl.int32)
                hist += tl.histogram(digits, 256, mask=match)
            prefix, known, left, ties = _pick_digit(hist, prefix, known, left, 8 - 8 * p, 8)
        # prefix is now the K-th largest key; `ties` positions have it, `left` are wanted.
        dst = OUT + row.to(tl.int64) * stride_out + (K - left16)
        taken = 0
        for start in range(0, length, SLICE):
            key, pos, ok = _finish_items(src, cand_key, start, length, from_row, CAP, SLICE)
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
            key, pos, ok = _finish_items(src, cand_key, start, tie_length, tie_from_row, CAP, SLICE)
            tie = (ok & (key == prefix)).to(tl.int32)
            rank = seen + tl.cumsum(tie, 0) - 1
            tl.store(dst + taken + rank, pos, mask=(tie > 0) & (rank < left))
            seen += tl.sum(tie)
            start += SLICE


_TOPK_CHUNK = 4096  # keys a histogram or split step loads at once (8 warps: 16 a thread)
_TOPK_CAP = 4096  # candidates kept per row: keys in the K-th largest key's 16-bit bin
_TOPK_SLICE = 1024  # keys the finishing program scans at once
_TOPK_WS = 3 * 256 + 2  # a row's workspace: up to three histograms, two slot counters


def _row_digits(rows: int, max_model_len: int) -> tuple[int, ...]:
    """Digit widths of the row-wide passes (the keys' top 16 bits): two 8-bit passes. Three
    of 6, 6 and 4 bits (cheaper histograms, one more pass over the row) were slower at every
    size the step benchmark measured on an H100 (2026-12-06: 1-128 rows, 4k-128k positions;
    at 128 x 128k 366 against 353 us), so they are only taken when asked for."""
    return (8, 8)


class TopkPlan:
    """One call's top-k plan: the row-wide passes' digit widths (default: _row_digits) and
    their zeroed workspace. Given to paged_mqa_logits first, its kernel builds the first
    histogram while it writes the logits, and topk_per_row, given it next, skips that pass."""

    def __init__(
        self,
        rows: int,
        max_model_len: int,
        device: torch.device,
        digits: tuple[int, ...] | None = None,
    ) -> None:
        self.digits = tuple(digits or _row_digits(rows, max_model_len))
        if (
            sum(self.digits) != 16
            or len(self.digits) not in (2, 3)
            or not all(1 <= d <= 8 for d in self.digits)
        ):
            raise ValueError(
                f"digits must be 2 or 3 widths of 1-8 bits summing to 16, got {self.digits}"
            )
        self.work = torch.zeros((rows, _TOPK_WS), dtype=torch.int32, device=device)
        self.first_pass_built = False  # set by paged_mqa_logits
        self.used = False  # set by topk_per_row: its counters are spent


def topk_per_row(
    logits: torch.Tensor,
    context_lens: torch.Tensor,
    next_n: int,
    k: int,
    out: torch.Tensor | None = None,
    *,
    chunks_per_program: int | None = None,
    digits: tuple[int, ...] | None = None,
    plan: TopkPlan | None = None,
) -> torch.Tensor:
    """int32 [rows, k]: each decode row's k highest-scoring visible positions, in no fixed
    order (what vLLM's top_k_per_row_decode computes), into ``out`` (e.g. the indexer's top-k
    buffer) when given; of equal logits at the k-th, the lowest positions. Radix select over
    the floats' order: one memset, two or three histogram passes over every row (each row
    split across the GPU) for the k-th key's top 16 bits, a split pass that writes every
    position above that 16-bit bin and copies the bin (usually tens of keys) aside, and one
    program a row that finishes the select on the bin. No host synchronisation: capturable in
    a CUDA graph. ``chunks_per_program``: 4096-key chunks a program of the row-wide passes
    takes (default: as many as keep about four programs an SM); ``digits``: the row-wide
    passes' digit widths, 2 or 3 of 1-8 bits summing to 16 (default: _row_digits); ``plan``:
    instead of digits, a TopkPlan, used once (paged_mqa_logits may have built its first
    histogram)."""
    rows, max_model_len = logits.shape
    if out is None:
        out = torch.empty((rows, k), dtype=torch.int32, device=logits.device)
    if out.dtype != torch.int32 or out.shape[0] < rows or out.shape[1] < k or out.stride(1) != 1:
        raise ValueError(f"out must be int32 [>= {rows}, >= {k}], unit column stride")
    if logits.dtype != torch.float32 or logits.stride(1) != 1:
        raise ValueError("logits must be fp32 with unit column stride")
    if plan is None:
        plan = TopkPlan(rows, max_model_len, logits.device, digits)
    elif digits is not None or plan.used or plan.work.shape[0] < rows:
        raise ValueError("a plan brings its digits, serves one call, and must cover the rows")
    plan.used = True
    digits, work = plan.digits, plan.work
    if rows == 0:
        return out
    lens = context_lens.to(torch.int32)
    cand = torch.empty((rows, 2, _TOPK_CAP), dtype=torch.int32, device=logits.device)
    chunks = triton.cdiv(max(max_model_len, k), _TOPK_CHUNK)
    subs = chunks_per_program or _blocks_per_program(rows, chunks, logits.device)
    grid = (rows, triton.cdiv(chunks, subs))
    shape = dict(K=k, WS=_TOPK_WS, D0=digits[0], D1=digits[1], D2=(digits + (0,))[2])
    for p, bits in enumerate(digits):
        if p == 0 and plan.first_pass_built:
            continue
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
