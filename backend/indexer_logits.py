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
top_k_per_row_decode computes): a sorted sample of each row bounds the k-th largest logit, one
read of every row (split across the GPU) writes the positions above the bounds and copies those
between them aside, and one program a row finishes a radix select over the floats' order on
the copies (on the whole row, exactly, where the bounds missed; see topk_per_row).

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
        tl.store(out_ptr, tl.where(visible, logits, float("-inf")), mask=pos < max_model_len)


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
) -> torch.Tensor:
    """fp32 logits [B * next_n, max_model_len]; see the module docstring for the contract."""
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
def _pick_digit(hist, prefix, known, left, shift):
    """One radix step: the 8-bit digit at bit ``shift`` of the key still sought, given the
    histogram of that digit among the keys with ``prefix``; returns the longer prefix, its
    mask, how many keys with it are still to be taken, and how many have it."""
    bins = tl.arange(0, 256)
    at_or_above = tl.sum(hist) - tl.cumsum(hist, 0) + hist  # keys with digit >= bin
    digit = tl.max(tl.where(at_or_above >= left, bins, -1), 0)
    left -= tl.sum(tl.where(bins > digit, hist, 0))
    count = tl.sum(tl.where(bins == digit, hist, 0))
    prefix |= digit.to(tl.uint32) << shift
    known |= tl.full([], 0xFF, tl.uint32) << shift
    return prefix, known, left, count


@triton.jit
def _sample_key_at_rank(key, rank):
    """The 16-bit bin (top bits of the keys' order) of the ``rank``-th largest of ``key``
    (1-based, 1 <= rank <= its size), by two 8-bit radix steps: the bin's lowest key."""
    hist = tl.histogram((key >> 24).to(tl.int32), 256)
    prefix, known, left, _ = _pick_digit(
        hist, tl.zeros([], tl.uint32), tl.zeros([], tl.uint32), rank, 24
    )
    match = (key & known) == prefix
    hist = tl.histogram(((key >> 16) & 0xFF).to(tl.int32), 256, mask=match)
    prefix, _, _, _ = _pick_digit(hist, prefix, known, left, 16)
    return prefix


@triton.jit
def _topk_bounds_kernel(
    LOGITS, CTX, WORK, next_n, max_model_len, stride_logits,
    K: tl.constexpr, SAMPLE: tl.constexpr, MARGIN: tl.constexpr,
):  # fmt: skip
    """One program a row: SAMPLE evenly spaced keys bound the K-th largest key of the row.
    About j = K * SAMPLE / n of them lie above it, so the 16-bit bins of the sample's
    (j - m)-th and (j + m)-th largest keys (m = MARGIN standard deviations of that count, plus
    4) give ``hi``, below which it lies, and ``lo``, above which it lies, with probability
    1 - 1e-6 on any row whose values are not laid out with the sample's stride. Only a guess:
    the finishing pass checks it and reads the whole row when it was wrong. Also zeroes the
    row's two counters, which the collecting pass (a later launch) counts up: no memset."""
    row = tl.program_id(0)
    n = _visible(CTX, row, next_n, max_model_len)
    if n > K:
        at = (tl.arange(0, SAMPLE).to(tl.int64) * n) // SAMPLE
        key = _orderable(tl.load(LOGITS + row.to(tl.int64) * stride_logits + at))
        j = (K * SAMPLE) // n
        m = (MARGIN * tl.sqrt(j.to(tl.float32))).to(tl.int32) + 4
        hi = _sample_key_at_rank(key, tl.maximum(j - m, 0) + 1) | 0xFFFF
        lo = _sample_key_at_rank(key, tl.minimum(j + m, SAMPLE - 1) + 1)
        hi = tl.where(j - m < 0, 0xFFFFFFFF, hi)  # no upper bound: every key a candidate
        lo = tl.where(j + m >= SAMPLE, 0, lo)
        work = WORK + row.to(tl.int64) * 4
        tl.store(work + tl.arange(0, 2), tl.zeros([2], tl.int32))
        tl.store(work + 2, lo.to(tl.int32, bitcast=True))
        tl.store(work + 3, hi.to(tl.int32, bitcast=True))


@triton.jit
def _topk_collect_kernel(
    LOGITS, CTX, WORK, OUT, CAND, next_n, max_model_len, stride_logits, stride_out,
    K: tl.constexpr, CHUNK: tl.constexpr, SUBS: tl.constexpr, CAP: tl.constexpr,
):  # fmt: skip
    """SUBS chunks of a row: positions whose key is above ``hi`` go to the output (slots
    claimed with one atomic a chunk; the set is fixed, its order not), keys between ``lo`` and
    ``hi`` and their positions to the row's candidates; both counted, stored while they fit.
    The atomics only hand out slots (nothing here reads another program's stores; the finishing
    pass is a later launch), so they are relaxed: no fence holds the next chunk's loads back.
    A row that sees at most K positions gets 0..n-1, -1 after."""
    row = tl.program_id(0)
    first = tl.program_id(1) * SUBS * CHUNK
    n = _visible(CTX, row, next_n, max_model_len)
    dst = OUT + row.to(tl.int64) * stride_out
    if n <= K:
        for s in range(SUBS):
            at = first + s * CHUNK + tl.arange(0, CHUNK)
            tl.store(dst + at, tl.where(at < n, at, -1), mask=at < K)
    elif first < n:
        work = WORK + row.to(tl.int64) * 4
        lo = tl.load(work + 2).to(tl.uint32, bitcast=True)
        hi = tl.load(work + 3).to(tl.uint32, bitcast=True)
        src = LOGITS + row.to(tl.int64) * stride_logits
        cand = CAND + row.to(tl.int64) * 2 * CAP
        for s in range(SUBS):
            at = first + s * CHUNK + tl.arange(0, CHUNK)
            key = _orderable(tl.load(src + at, mask=at < n, other=0.0))
            over = ((at < n) & (key > hi)).to(tl.int32)
            slot = tl.atomic_add(work, tl.sum(over), sem="relaxed") + tl.cumsum(over, 0) - 1
            tl.store(dst + slot, at, mask=(over > 0) & (slot < K))
            near = ((at < n) & (key >= lo) & (key <= hi)).to(tl.int32)
            slot = tl.atomic_add(work + 1, tl.sum(near), sem="relaxed") + tl.cumsum(near, 0) - 1
            tl.store(cand + slot, key.to(tl.int32, bitcast=True), mask=(near > 0) & (slot < CAP))
            tl.store(cand + CAP + slot, at, mask=(near > 0) & (slot < CAP))


@triton.jit
def _finish_items(src, cand, start, length, from_row, CAP: tl.constexpr, SLICE: tl.constexpr):
    """SLICE items of what the finishing pass scans: the row's keys and positions, or its
    candidates' (the keys between the bounds, copied by the collecting pass)."""
    i = start + tl.arange(0, SLICE)
    ok = i < length
    if from_row:
        key = _orderable(tl.load(src + i, mask=ok, other=0.0))
        pos = i
    else:
        key = tl.load(cand + i, mask=ok, other=0).to(tl.uint32, bitcast=True)
        pos = tl.load(cand + CAP + i, mask=ok, other=0)
    return key, pos, ok


@triton.jit
def _topk_finish_kernel(
    LOGITS, CTX, WORK, OUT, CAND, next_n, max_model_len, stride_logits, stride_out,
    K: tl.constexpr, CAP: tl.constexpr, SLICE: tl.constexpr,
):  # fmt: skip
    """One program a row. The bounds held when at most K keys are above ``hi`` and the
    candidates (all stored) make up the rest: then the K-th largest key is found among the
    candidates by radix select from the bits ``lo`` and ``hi`` share, and the candidates above
    it and as many of its ties as are still wanted join the output. Otherwise the select runs
    over the whole row and rewrites the output. Ties at the K-th take the lowest positions, so
    the selected set does not depend on the order in which atomics handed out slots."""
    row = tl.program_id(0)
    n = _visible(CTX, row, next_n, max_model_len)
    if n > K:
        work = WORK + row.to(tl.int64) * 4
        above, near = tl.load(work), tl.load(work + 1)
        lo = tl.load(work + 2).to(tl.uint32, bitcast=True)
        hi = tl.load(work + 3).to(tl.uint32, bitcast=True)
        from_row = (above > K) | (above + near < K) | (near > CAP)  # the bounds missed
        src = LOGITS + row.to(tl.int64) * stride_logits
        cand = CAND + row.to(tl.int64) * 2 * CAP
        length = tl.where(from_row, n, near)
        left = tl.where(from_row, K, K - above)
        dst = OUT + row.to(tl.int64) * stride_out + tl.where(from_row, 0, above)
        # the bits every candidate shares: those above the highest bit where lo and hi differ
        differ = lo ^ hi
        shared = tl.zeros([], dtype=tl.uint32)
        for b in tl.static_range(32):
            bit = tl.full([], 1, tl.uint32) << b
            shared = tl.where((differ >> b) == 0, shared | bit, shared)
        known = tl.where(from_row, 0, shared)
        prefix = lo & known
        ties = length
        if left > 0:
            for p in tl.static_range(4):  # 8 bits a pass, from the top; known digits skipped
                if ((known >> (24 - 8 * p)) & 0xFF) != 0xFF:
                    hist = tl.zeros([256], dtype=tl.int32)
                    for start in range(0, length, SLICE):
                        key, pos, ok = _finish_items(src, cand, start, length, from_row, CAP, SLICE)
                        match = ok & ((key & known) == prefix)
                        digits = ((key >> (24 - 8 * p)) & 0xFF).to(tl.int32)
                        hist += tl.histogram(digits, 256, mask=match)
                    prefix, known, left, ties = _pick_digit(hist, prefix, known, left, 24 - 8 * p)
            # prefix is now the K-th largest key; `ties` items have it, `left` are wanted.
            taken = 0
            for start in range(0, length, SLICE):
                key, pos, ok = _finish_items(src, cand, start, length, from_row, CAP, SLICE)
                over = (ok & (key > prefix)).to(tl.int32)
                tl.store(dst + taken + tl.cumsum(over, 0) - 1, pos, mask=over > 0)
                taken += tl.sum(over)
            # Candidates are in no fixed order: more ties than wanted are taken from the row.
            tie_from_row = from_row | (ties > left)
            tie_length = tl.where(tie_from_row, n, length)
            seen = 0
            start = 0
            while (start < tie_length) & (seen < left):
                key, pos, ok = _finish_items(src, cand, start, tie_length, tie_from_row, CAP, SLICE)
                tie = (ok & (key == prefix)).to(tl.int32)
                rank = seen + tl.cumsum(tie, 0) - 1
                tl.store(dst + taken + rank, pos, mask=(tie > 0) & (rank < left))
                seen += tl.sum(tie)
                start += SLICE


_TOPK_CHUNK = 1024  # keys a collecting program loads (4 warps: 8 a thread)
_TOPK_COLLECT_WARPS = 4
_TOPK_FINISH_WARPS = 8  # 1-2 us off the top-k against 4 on an H100 (benchmarks/dsa_step/NOTES.md)
# At 8 warps ptxas holds the finish to 64 registers on sm_120 and spills 16 B; it needs 71.
_TOPK_FINISH_REGS = 80
_TOPK_SAMPLE = 4096  # keys a row's bounds are guessed from
_TOPK_MARGIN = 5.0  # the bounds' distance from the guess, in standard deviations
_TOPK_CAP = 8192  # candidates kept per row: keys between the bounds (~2,900 at 128k keys)
_TOPK_SLICE = 1024  # keys the finishing program scans at once


def topk_per_row(
    logits: torch.Tensor,
    context_lens: torch.Tensor,
    next_n: int,
    k: int,
    out: torch.Tensor | None = None,
    *,
    chunks_per_program: int | None = None,
) -> torch.Tensor:
    """int32 [rows, k]: each decode row's k highest-scoring visible positions, in no fixed
    order (what vLLM's top_k_per_row_decode computes), into ``out`` (e.g. the indexer's top-k
    buffer) when given; of equal logits at the k-th, the lowest positions. Three passes: a
    sample of each row bounds its k-th largest logit; one read of every row (split across the
    GPU) writes the positions above the upper bound and copies those between the bounds aside
    (about 1.4 k of them); one program a row finishes the select on the copies, or on the whole
    row where the bounds missed (a row whose values repeat with the sample's stride, or many
    ties: exact, only slower). No host synchronisation: capturable in a CUDA graph.
    ``chunks_per_program``: 1024-key chunks a program of the collecting pass takes
    (default 1: a program's chunks run in series, load, scans and atomics one after another, so
    one a program was the fastest launch measured, benchmarks/dsa_step/topk_parts.py)."""
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
    # per row: keys above hi, candidates, lo, hi (all four written by the bounds pass)
    work = torch.empty((rows, 4), dtype=torch.int32, device=logits.device)
    cand = torch.empty((rows, 2, _TOPK_CAP), dtype=torch.int32, device=logits.device)
    chunks = triton.cdiv(max(max_model_len, k), _TOPK_CHUNK)
    subs = chunks_per_program or 1
    row_args = (logits, lens, work)
    _topk_bounds_kernel[(rows,)](
        *row_args, next_n, max_model_len, logits.stride(0), K=k, SAMPLE=_TOPK_SAMPLE,
        MARGIN=_TOPK_MARGIN, num_warps=8,
    )  # fmt: skip
    _topk_collect_kernel[(rows, triton.cdiv(chunks, subs))](
        *row_args, out, cand, next_n, max_model_len, logits.stride(0), out.stride(0), K=k,
        CHUNK=_TOPK_CHUNK, SUBS=subs, CAP=_TOPK_CAP, num_warps=_TOPK_COLLECT_WARPS,
    )  # fmt: skip
    _topk_finish_kernel[(rows,)](
        *row_args, out, cand, next_n, max_model_len, logits.stride(0), out.stride(0), K=k,
        CAP=_TOPK_CAP, SLICE=_TOPK_SLICE, num_warps=_TOPK_FINISH_WARPS, maxnreg=_TOPK_FINISH_REGS,
    )  # fmt: skip
    return out
