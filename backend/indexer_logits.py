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
top_k_per_row_decode computes), by radix select over the floats' order, each row split into
chunks across the GPU (five launches: four histogram passes, one writing pass).

No host synchronisation, so both launches can be captured in a CUDA graph. Only torch, triton
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
