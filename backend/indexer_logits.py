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

One program owns (request, query row, cache block): it loads the block's keys and scales once,
[block, D] x [D, H] with heads as the small MMA dimension, then the weighted ReLU head sum.
fp8 values are widened to fp16 by moving their bits (exact, and no fp8 hardware needed: SM80
runs it too), products are exact in fp16 and summed in fp32. No host synchronisation, so the
launch could be captured in a CUDA graph. Only torch and triton are imported, so this file can
be embedded verbatim elsewhere.
"""

from __future__ import annotations

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
):
    row = tl.program_id(0)  # b * next_n + j
    col = tl.program_id(1)  # logical cache block
    b = row // next_n
    j = row % next_n
    pos = col * BLOCK + tl.arange(0, BLOCK)
    ctx = tl.load(CTX + b)
    last = ctx - next_n + j  # the query's own position: it sees every p <= last
    out_ptr = OUT + row.to(tl.int64) * stride_out + pos
    in_row = pos < max_model_len
    if (col >= max_blocks) | (col * BLOCK > last):
        tl.store(out_ptr, tl.full([BLOCK], float("-inf"), tl.float32), mask=in_row)
        return

    block = tl.load(TABLE + b.to(tl.int64) * stride_table + col)
    block = tl.minimum(tl.maximum(block, 0), num_blocks - 1).to(tl.int64)
    base = block * (BLOCK * (D + 4))
    offs_d = tl.arange(0, D)
    keys = tl.load(KV + base + tl.arange(0, BLOCK)[:, None] * D + offs_d[None, :])
    scale = tl.load(KV_F32 + (base + BLOCK * D) // 4 + tl.arange(0, BLOCK))

    offs_h = tl.arange(0, BLOCK_H)
    mask_h = offs_h < num_heads
    q_ptr = Q + (row.to(tl.int64) * num_heads + offs_h[:, None]) * D + offs_d[None, :]
    q = tl.load(q_ptr, mask=mask_h[:, None], other=0)
    w = tl.load(W + row.to(tl.int64) * num_heads + offs_h, mask=mask_h, other=0.0)

    s = tl.dot(_e4m3_to_f16(keys), tl.trans(_e4m3_to_f16(q)))  # [BLOCK, BLOCK_H], fp32
    s = tl.maximum(s * scale[:, None], 0.0)
    logits = tl.sum(s * w[None, :], axis=1)
    visible = (pos <= last) & (pos < ctx)
    tl.store(out_ptr, tl.where(visible, logits, float("-inf")), mask=in_row)


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
    grid = (batch * next_n, triton.cdiv(max_model_len, block))
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
        num_warps=4,
    )
    return out
