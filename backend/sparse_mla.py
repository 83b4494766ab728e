"""Sparse MLA decode (DSA top-k attention over a latent KV cache) in Triton.

Contract (one query token per row of ``q``):
    q        [T, H, 576]   512 latent ("nope", absorbed) + 64 rope dims, fp16/bf16
    kv_rows  [N, 576]      the latent KV cache viewed as rows; V is the first 512 columns
                           (or uint8 [N, 656]: fp8_ds_mla rows, vLLM's fp8 sparse MLA cache)
    indices  [T, topk]     int32 physical row numbers; any negative value (or >= N) is invalid
    sm_scale float         softmax scale, passed explicitly (GLM-5: 1/16)
    -> out [T, H, 512] in q's dtype, lse [T, H] fp32 (natural log).
A token with no valid index gets out = 0 and lse = -inf (what vLLM's merge expects).

Design, because the problem is a gather (H <= 64 is memory-bound on H200):
  * one program owns (token, top-k split, head block of up to 64 heads); each gathered row is
    loaded once as a [BLOCK_N, 512] + [BLOCK_N, 64] tile and used for both Q.K^T and P.V;
  * heads are the M dimension of both dots (padded to 16; the swapped tile makes them N);
    online softmax in fp32 base 2;
  * the top-k is split across programs only until the grid fills the GPU (and, once every SM
    has about one program, no further than keeps the partials under an eighth of the bytes a
    16-bit row gathers);
    split partials (fp32 from the tl.dot kernel, 16-bit from the Gluon ones; bounded by
    T * splits * H * 513 floats) are merged by a second small kernel, launched as a
    programmatic dependent on SM90+ (the Gluon kernels let it launch after their main loop
    or as they exit: ``_late_trigger``);
  * seven split kernels: ``_sparse_mla_split_kernel`` (tl.dot, every GPU and every row format),
    ``_sparse_mla_ds_split_kernel`` (tl.dot, fp8_ds_mla rows kept in their four scaled fp8
    groups, NOTES.md rounds 18-19) and, on Hopper, three Gluon kernels whose cp.async gathers
    land in shared memory that warpgroup MMAs read: ``_sparse_mla_wgmma_kernel`` for 64-head
    blocks (each warpgroup computes Q.K^T for half of a tile's keys and P.V for half of the V
    columns; 1.6x faster than the tl.dot tile at B=128 with 64 and 128 heads, NOTES.md rounds
    6-7) and ``_sparse_mla_wgmma_swapped_kernel`` for 8 or 16 heads (keys as the MMA's M, heads
    as its N; 1.1-1.4x faster than the 16-head tl.dot tile, NOTES.md round 8), both for 16-bit
    rows, and ``_sparse_mla_wgmma_e4m3_kernel``, the swapped tile for fp8 e4m3 rows under a
    16-bit q (e4m3 MMAs for the scores on the gathered tile, V widened once; 1.1-1.4x faster than
    the e4m3 tl.dot tile at B >= 8, NOTES.md round 12); on SM89 and SM120, whose MMA is
    mma.sync, ``_sparse_mla_mma_e4m3_kernel`` is that e4m3 tile with warp-level MMAs (1.25-1.6x
    over the e4m3 tl.dot tile, NOTES.md rounds 15-16; it also reads fp8_ds_mla rows, there and
    on Hopper: their group scales on the scores and on V, 1.2-1.6x, round 19), and
    ``_sparse_mla_mma_kernel`` serves 33+ heads over 16-bit rows in 99 KB with q in registers
    (each row gathered once instead of once per 32-head block: 1.4x, NOTES.md round 17).
Only the standard library, torch and triton are imported, so this file can be embedded
verbatim elsewhere.
"""

from __future__ import annotations

import functools
import os
from typing import NamedTuple

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

_TRITON = tuple(int(part) for part in triton.__version__.split(".")[:2])

try:  # Gluon: explicit layouts, warpgroup MMA and mma.sync (Triton 3.6 to 3.8: _GLUON_API)
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.ampere import mma_v2
    from triton.experimental.gluon.language.nvidia.hopper import (
        async_copy,
        fence_async_shared,
        warpgroup_mma,
        warpgroup_mma_wait,
    )
    from triton.runtime.jit import constexpr_function

    # Triton 3.7 renamed the block-wide barrier (the same op) and made a reinterpreted
    # shared-memory view span its whole buffer: the kernels' two uses of the 3.6 API that
    # changed. Under 3.6 they compile as they always have.
    _cta_barrier = getattr(gl, "thread_barrier", None) or gl.barrier
    _WHOLE_VIEWS = gl.constexpr(_TRITON >= (3, 7))
except (ImportError, AttributeError):  # no Gluon, or another: tl.dot serves every GPU
    gluon = None

_D_V = 512  # latent (V) width; K uses the whole 576-wide row
_D_PE = 64  # rope part of K
_D_QK = _D_V + _D_PE
_FP8_ROW_BYTES = _D_V + 4 * 4 + _D_PE * 2  # fp8_ds_mla: fp8 latent, 4 fp32 scales, bf16 rope
_FP8_GROUP = 128  # latent columns per fp8_ds_mla scale
_LOG2E = 1.4426950408889634


@triton.jit
def _gather_fp8_ds_mla(row, valid, offs_v, offs_pe, out_ty: tl.constexpr, D_V: tl.constexpr):
    """Gather fp8_ds_mla rows (656 B each, vLLM's FlashMLA sparse format): bytes [0, 512) are
    the latent as fp8 e4m3 with one fp32 scale per 128 columns at bytes [512, 528), and bytes
    [528, 656) the rope part as 64 bf16. Returns the latent columns ``offs_v`` (scaled) and the
    rope part, both as ``out_ty``, like the 16-bit path's tiles."""
    mask = valid[:, None]
    raw = tl.load(row[:, None] + offs_v[None, :], mask=mask, other=0)
    latent = raw.to(tl.float8e4nv, bitcast=True).to(tl.float32)
    scales = (row + D_V).to(tl.pointer_type(tl.float32))
    group = offs_v[None, :] // 128
    # One fp32 scale per row and group, picked per column without a second [N, 512] gather.
    s0 = tl.load(scales + 0, mask=valid, other=0.0)[:, None]
    s1 = tl.load(scales + 1, mask=valid, other=0.0)[:, None]
    s2 = tl.load(scales + 2, mask=valid, other=0.0)[:, None]
    s3 = tl.load(scales + 3, mask=valid, other=0.0)[:, None]
    scale = tl.where(group == 0, s0, tl.where(group == 1, s1, tl.where(group == 2, s2, s3)))
    rope = (row + D_V + 16).to(tl.pointer_type(tl.bfloat16))
    k_pe = tl.load(rope[:, None] + offs_pe[None, :], mask=mask, other=0.0)
    return (latent * scale).to(out_ty), k_pe.to(out_ty)


@triton.jit
def _e4m3_to_f16(x):
    """fp8 e4m3 to fp16, four values per call. Widened this way right after the gather, V stays
    a 16-bit tile in shared memory that the P.V dot reads with ldmatrix.trans; a plain
    conversion is moved past the shared-memory copy by Triton, which then reads the fp8 tile
    a byte at a time in the transposed operand layout (NOTES.md)."""
    return tl.inline_asm_elementwise(
        "{ .reg .b16 lo, hi; mov.b32 {lo, hi}, $2; "
        "cvt.rn.f16x2.e4m3x2 $0, lo; cvt.rn.f16x2.e4m3x2 $1, hi; }",
        "=r,=r,r",
        [x],
        dtype=tl.float16,
        is_pure=False,
        pack=4,
    )


@triton.jit
def _e4m3_bits_to_f16(x):
    """fp8 e4m3 to fp16 by moving bits, four values per call: each byte to the top of a 16-bit
    lane, its seven magnitude bits one place right. The result is the value times 2^-8 (the
    exponent biases differ by 8), exact for every finite value, subnormals included; callers
    fold 2^8 back in. e4m3's NaN (0x7F, 0xFF) is not kept: it reads as +-480 (vLLM's cache
    writers saturate, so a row holds NaN only when the model produced one). Four
    integer instructions per two values, yet faster on the H200 than the one conversion
    instruction per two values of ``_e4m3_to_f16`` (NOTES.md), and fewer registers."""
    return tl.inline_asm_elementwise(
        "{ .reg .b32 a, b, t; "
        "prmt.b32 a, $2, 0, 0x1404; prmt.b32 b, $2, 0, 0x3424; "
        "shr.b32 t, a, 1; and.b32 t, t, 0x3F803F80; and.b32 a, a, 0x80008000; or.b32 $0, a, t; "
        "shr.b32 t, b, 1; and.b32 t, t, 0x3F803F80; and.b32 b, b, 0x80008000; or.b32 $1, b, t; }",
        "=r,=r,r",
        [x],
        dtype=tl.float16,
        is_pure=False,
        pack=4,
    )


@triton.jit
def _fp16_shift(amax):
    """Per head, the power of two (its log2, >= 0) that a bf16 q with largest magnitude
    ``amax`` is divided by to keep |q| <= 2^14 in fp16; the scores take it back."""
    return tl.maximum(tl.ceil(tl.log2(tl.maximum(amax.to(tl.float32), 1e-30))) - 14.0, 0.0)


@triton.jit
def _index_tile(idx_base, n0, end, BLOCK_N: tl.constexpr):
    """The top-k entries [n0, n0 + BLOCK_N) of a split ending at ``end``; -1 past it."""
    offs = n0 + tl.arange(0, BLOCK_N)
    return tl.load(idx_base + offs, mask=offs < end, other=-1)


@triton.jit
def _softmax_step(s, m_i, l_i):
    """One tile of the online softmax in base 2: (p, alpha, m_new, l_new). While a head has seen
    no valid key, m is -inf: it shifts by 0 to avoid (-inf) - (-inf)."""
    m_new = tl.maximum(m_i, tl.max(s, 1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp2(m_i - m_safe)
    p = tl.exp2(s - m_safe[:, None])
    return p, alpha, m_new, l_i * alpha + tl.sum(p, 1)


@triton.jit
def _lse2(m_i, l_i):
    """Base-2 LSE of a head's scores; -inf for a head that saw no valid key."""
    empty = l_i == 0.0
    return tl.where(empty, float("-inf"), m_i + tl.log2(tl.where(empty, 1.0, l_i)))


@triton.jit
def _sparse_mla_split_kernel(
    Q,
    KV,
    IDX,
    Out,
    LSE,
    PO,
    PLSE,
    qk_scale,  # sm_scale * log2(e) (* the fp8 rows' scale): scores live in base 2
    v_scale,  # the fp8 e4m3 rows' tensor scale (KV_FMT 2), applied to the output once
    num_rows,
    topk,
    chunk,  # top-k entries per split, a multiple of BLOCK_N
    num_heads,
    num_hb,
    num_splits,
    stride_qt,
    stride_qh,
    stride_kv,
    stride_it,
    stride_ot,
    stride_oh,
    stride_lt,
    stride_lh,
    BLOCK_H: tl.constexpr,
    BLOCK_N: tl.constexpr,
    D_V: tl.constexpr,
    D_PE: tl.constexpr,
    DV_SPLIT: tl.constexpr,  # 1, or 2: two programs own the two V halves (smaller accumulator)
    KV_FMT: tl.constexpr,  # 0: fp16/bf16 rows, 1: fp8_ds_mla bytes, 2: fp8 e4m3 (a tensor scale)
    IS_SPLIT: tl.constexpr,
    USE_PDL: tl.constexpr,  # the merge is launched as a programmatic dependent (SM90+)
    PREFETCH_IDX: tl.constexpr,  # load the next tile's indices one iteration ahead
    FP8_TWICE: tl.constexpr,  # fp8 e4m3 rows: the latent gathered once per dot (async copies)
    FP16_DOTS: tl.constexpr,  # fp8 e4m3 rows under a bf16 q: the dots in fp16
    V_ASM: tl.constexpr,  # fp8 e4m3 rows, fp16 dots: V widened by inline PTX (_e4m3_to_f16)
    E4M3_BITS: tl.constexpr,  # V_ASM, one gather: widened by moving bits (2^-8 of the value)
):
    if USE_PDL:
        # Lets the merge kernel's programs launch (and wait) while this grid runs; the merge
        # still reads nothing before this grid has finished (gdc_wait there).
        gdc_launch_dependents()
    # Head block (then V half) varies fastest, so the programs that share a (token, split)
    # run together and all but the first find the gathered rows in L2.
    pid = tl.program_id(0)
    hb = pid % num_hb
    rest = pid // num_hb
    dvh = rest % DV_SPLIT
    rest = rest // DV_SPLIT
    split = rest % num_splits
    t = rest // num_splits

    DV_BLOCK: tl.constexpr = D_V // DV_SPLIT
    offs_h = hb * BLOCK_H + tl.arange(0, BLOCK_H)
    mask_h = offs_h < num_heads
    offs_v = dvh * DV_BLOCK + tl.arange(0, DV_BLOCK)  # the V columns this program owns
    offs_o = (DV_BLOCK - dvh * DV_BLOCK) + tl.arange(0, DV_BLOCK)  # the other half (K only)
    offs_pe = tl.arange(0, D_PE)
    # The dots run in the cache's 16-bit type; fp8 rows are widened to q's.
    kv_ty = Q.dtype.element_ty if KV_FMT != 0 else KV.dtype.element_ty
    if FP16_DOTS:
        kv_ty = tl.float16  # e4m3 widens to fp16 in one instruction, to bf16 in two
    if E4M3_BITS:
        tl.static_assert(V_ASM and not FP8_TWICE, "E4M3_BITS widens the one gather, as V_ASM")
        qk_scale = qk_scale * 256.0  # K and V widened to 2^-8 of their values
        v_scale = v_scale * 256.0

    q_base = Q + t.to(tl.int64) * stride_qt + offs_h[:, None] * stride_qh
    q_v = tl.load(q_base + offs_v[None, :], mask=mask_h[:, None], other=0.0)
    q_pe = tl.load(q_base + D_V + offs_pe[None, :], mask=mask_h[:, None], other=0.0)
    if FP16_DOTS:
        # A bf16 q in fp16: shifted per head by a power of two that keeps |q| <= 2^14, so the
        # conversion is exact down to fp16's normal range (2^-14 after the shift; below, fp16's
        # subnormals keep fewer bits); the shift goes into the scores.
        amax = tl.maximum(tl.max(tl.abs(q_v.to(tl.float32)), 1), tl.max(tl.abs(q_pe), 1))
        shift = _fp16_shift(amax)
        q_v = q_v.to(tl.float32) * tl.exp2(-shift)[:, None]
        q_pe = q_pe.to(tl.float32) * tl.exp2(-shift)[:, None]
        qk_row = qk_scale * tl.exp2(shift)
    q_v = q_v.to(kv_ty)
    q_pe = q_pe.to(kv_ty)
    if DV_SPLIT == 2:
        q_o = tl.load(q_base + offs_o[None, :], mask=mask_h[:, None], other=0.0).to(kv_ty)

    m_i = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_H], dtype=tl.float32)
    acc = tl.zeros([BLOCK_H, DV_BLOCK], dtype=tl.float32)

    start = split * chunk
    end = tl.minimum(start + chunk, topk)
    idx_base = IDX + t.to(tl.int64) * stride_it
    if PREFETCH_IDX:
        # Indices one tile ahead, carried in registers: with the index load inside the loop,
        # Triton's pipeliner chains it to the gather and waits for every copy at the top of each
        # iteration, so no gather overlaps the dots; this way num_stages=3 keeps the next gather
        # in flight (NOTES.md round 4). It costs registers, which the 64-head tile lacks.
        idx_next = _index_tile(idx_base, start, end, BLOCK_N)
    for n0 in range(start, end, BLOCK_N):
        if PREFETCH_IDX:
            idx = idx_next
            idx_next = _index_tile(idx_base, n0 + BLOCK_N, end, BLOCK_N)
        else:
            idx = _index_tile(idx_base, n0, end, BLOCK_N)
        valid = (idx >= 0) & (idx < num_rows)
        # int64 row offsets: caches beyond 2^31 elements are normal.
        row = KV + idx.to(tl.int64) * stride_kv
        # Invalid rows are never read (masked), so garbage/NaN there cannot leak in.
        if KV_FMT == 1:
            kv, k_pe = _gather_fp8_ds_mla(row, valid, offs_v, offs_pe, kv_ty, D_V)
            kv_k = kv
        elif KV_FMT == 2:  # one scale for the whole cache: it is folded into qk_scale and v_scale
            kv_ptr = row[:, None] + offs_v[None, :]
            if E4M3_BITS:
                kv = _e4m3_bits_to_f16(tl.load(kv_ptr, mask=valid[:, None], other=0.0))
            elif V_ASM:
                kv = _e4m3_to_f16(tl.load(kv_ptr, mask=valid[:, None], other=0.0))
            else:
                kv = tl.load(kv_ptr, mask=valid[:, None], other=0.0).to(kv_ty)
            # FP8_TWICE gathers the latent once per dot (the second from L2): a load whose
            # widened value feeds two dots stays a plain register load that no gather
            # overlaps, while each single-use load becomes an asynchronous copy (NOTES.md).
            if FP8_TWICE:
                kv_k = tl.load(kv_ptr, mask=valid[:, None], other=0.0, cache_modifier=".cg")
                kv_k = kv_k.to(kv_ty)
            else:
                kv_k = kv
            pe_ptr = row[:, None] + D_V + offs_pe[None, :]
            if E4M3_BITS:
                k_pe = _e4m3_bits_to_f16(tl.load(pe_ptr, mask=valid[:, None], other=0.0))
            else:
                k_pe = tl.load(pe_ptr, mask=valid[:, None], other=0.0).to(kv_ty)
        else:
            kv = tl.load(row[:, None] + offs_v[None, :], mask=valid[:, None], other=0.0)
            kv_k = kv
            k_pe = tl.load(row[:, None] + D_V + offs_pe[None, :], mask=valid[:, None], other=0.0)

        s = tl.dot(q_pe, tl.trans(k_pe))
        if DV_SPLIT == 2:
            k_o = tl.load(row[:, None] + offs_o[None, :], mask=valid[:, None], other=0.0)
            s = tl.dot(q_o, tl.trans(k_o), s)
        s = tl.dot(q_v, tl.trans(kv_k), s)
        if FP16_DOTS:  # noqa: SIM108  (qk_row exists in this constexpr branch only)
            s = s * qk_row[:, None]
        else:
            s = s * qk_scale
        s = tl.where(valid[None, :], s, float("-inf"))

        p, alpha, m_new, l_i = _softmax_step(s, m_i, l_i)
        # V is (part of) the first 512 columns of the same tile: no second gather.
        acc = tl.dot(p.to(kv_ty), kv, acc * alpha[:, None])
        m_i = m_new

    empty = l_i == 0.0
    out = acc / tl.where(empty, 1.0, l_i)[:, None]
    if KV_FMT == 2:
        out = out * v_scale
    lse2 = _lse2(m_i, l_i)
    lse_mask = mask_h & ((offs_h * 0 + dvh) == 0)  # one writer per LSE
    if IS_SPLIT:
        # Partials: PO [T, S, H, D_V] and PLSE [T, S, H], fp32, base-2 LSE.
        row_id = (t * num_splits + split).to(tl.int64) * num_heads + offs_h
        tl.store(PO + row_id[:, None] * D_V + offs_v[None, :], out, mask=mask_h[:, None])
        tl.store(PLSE + row_id, lse2, mask=lse_mask)
    else:
        o_tok = Out + t.to(tl.int64) * stride_ot
        o_ptr = o_tok + offs_h.to(tl.int64)[:, None] * stride_oh + offs_v[None, :]
        tl.store(o_ptr, out.to(Out.dtype.element_ty), mask=mask_h[:, None])
        tl.store(
            LSE + t.to(tl.int64) * stride_lt + offs_h.to(tl.int64) * stride_lh,
            lse2 * 0.6931471805599453,
            mask=lse_mask,
        )


@triton.jit
def _e4m3_group(
    row, valid, offs, out_ty: tl.constexpr, cache: tl.constexpr, WIDEN: tl.constexpr = 0
):
    """One 128-column group of fp8_ds_mla latents, widened (exactly) but not scaled: to
    ``out_ty`` (``WIDEN`` 0), or to fp16 by ``_e4m3_to_f16`` (1) or ``_e4m3_bits_to_f16`` (2,
    2^-8 of the values), which widen in registers right after the load."""
    raw = tl.load(row[:, None] + offs[None, :], mask=valid[:, None], other=0, cache_modifier=cache)
    if WIDEN == 1:
        return _e4m3_to_f16(raw)
    if WIDEN == 2:
        return _e4m3_bits_to_f16(raw)
    return raw.to(tl.float8e4nv, bitcast=True).to(out_ty)


@triton.jit
def _group_pv(p, sc, k, acc, alpha, FP16_DOTS: tl.constexpr):
    """One group's P.V step: ``acc * alpha + (p * sc) . k``. In bf16, whose range holds P times
    any scale; with fp16 groups P times the scales over their largest in the tile (fp16 would
    lose P times a small scale), that largest folded back into the accumulator."""
    if FP16_DOTS:
        top = tl.max(sc, 0)
        top = tl.where(top > 0.0, top, 1.0)  # an empty tile: p is 0 throughout
        p16 = (p * (sc / top)[None, :]).to(tl.float16)
        return tl.dot(p16, k, acc * (alpha / top)[:, None]) * top
    return tl.dot((p * sc[None, :]).to(k.dtype), k, acc * alpha[:, None])


@triton.jit
def _store_group(ptr, acc, inv_l, mask_h):
    tl.store(ptr, (acc * inv_l[:, None]).to(ptr.dtype.element_ty), mask=mask_h[:, None])


@triton.jit
def _sparse_mla_ds_split_kernel(
    Q,
    KV,
    IDX,
    Out,
    LSE,
    PO,
    PLSE,
    qk_scale,  # sm_scale * log2(e): scores live in base 2
    num_rows,
    topk,
    chunk,  # top-k entries per split, a multiple of BLOCK_N
    num_heads,
    num_hb,
    num_splits,
    stride_qt,
    stride_qh,
    stride_kv,
    stride_it,
    stride_ot,
    stride_oh,
    stride_lt,
    stride_lh,
    BLOCK_H: tl.constexpr,
    BLOCK_N: tl.constexpr,
    IS_SPLIT: tl.constexpr,
    USE_PDL: tl.constexpr,
    PREFETCH_IDX: tl.constexpr,
    FP8_TWICE: tl.constexpr,  # the latent gathered again for P.V (L1/L2) instead of kept
    FP16_DOTS: tl.constexpr = False,  # the latent's dots in fp16 (q shifted per head)
    E4M3_BITS: tl.constexpr = False,  # FP16_DOTS, widened by moving bits (2^-8 of the values)
):
    """fp8_ds_mla rows, never dequantized: each row's four 128-column latent groups carry their
    own scale, so the scores are four dots over the widened groups, each times its keys'
    scales, and P.V is four dots into four accumulators, P times the group's scales. What runs
    per cache element is the widening alone; scales cost one multiply per score. The split and
    its partials are those of ``_sparse_mla_split_kernel``."""
    if USE_PDL:
        gdc_launch_dependents()
    pid = tl.program_id(0)
    hb = pid % num_hb
    rest = pid // num_hb
    split = rest % num_splits
    t = rest // num_splits
    G: tl.constexpr = 128  # latent columns per scale
    D_V: tl.constexpr = 4 * G
    dt = Q.dtype.element_ty  # bf16, as the rope part
    offs_h = hb * BLOCK_H + tl.arange(0, BLOCK_H)
    mask_h = offs_h < num_heads
    offs_g = tl.arange(0, G)
    offs_pe = tl.arange(0, 64)

    q_base = Q + t.to(tl.int64) * stride_qt + offs_h[:, None] * stride_qh
    q0 = tl.load(q_base + offs_g[None, :], mask=mask_h[:, None], other=0.0)
    q1 = tl.load(q_base + G + offs_g[None, :], mask=mask_h[:, None], other=0.0)
    q2 = tl.load(q_base + 2 * G + offs_g[None, :], mask=mask_h[:, None], other=0.0)
    q3 = tl.load(q_base + 3 * G + offs_g[None, :], mask=mask_h[:, None], other=0.0)
    q_pe = tl.load(q_base + D_V + offs_pe[None, :], mask=mask_h[:, None], other=0.0)
    WIDEN: tl.constexpr = (2 if E4M3_BITS else 1) if FP16_DOTS else 0  # bits need fp16 dots
    qk_row = qk_scale + tl.zeros([BLOCK_H], dtype=tl.float32)  # the latent's scores, per head
    if FP16_DOTS:
        # The latent's q in fp16, shifted per head as in _sparse_mla_split_kernel (the rope
        # part stays bf16, as the rows' rope); the shift goes into its scores.
        amax = tl.maximum(tl.max(tl.abs(q0), 1), tl.max(tl.abs(q1), 1))
        amax = tl.maximum(amax, tl.maximum(tl.max(tl.abs(q2), 1), tl.max(tl.abs(q3), 1)))
        shift = _fp16_shift(amax)
        q0 = (q0.to(tl.float32) * tl.exp2(-shift)[:, None]).to(tl.float16)
        q1 = (q1.to(tl.float32) * tl.exp2(-shift)[:, None]).to(tl.float16)
        q2 = (q2.to(tl.float32) * tl.exp2(-shift)[:, None]).to(tl.float16)
        q3 = (q3.to(tl.float32) * tl.exp2(-shift)[:, None]).to(tl.float16)
        qk_row = qk_scale * tl.exp2(shift)
    gdt: tl.constexpr = tl.float16 if FP16_DOTS else dt  # the widened groups' type

    m_i = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_H], dtype=tl.float32)
    acc0 = tl.zeros([BLOCK_H, G], dtype=tl.float32)
    acc1 = tl.zeros([BLOCK_H, G], dtype=tl.float32)
    acc2 = tl.zeros([BLOCK_H, G], dtype=tl.float32)
    acc3 = tl.zeros([BLOCK_H, G], dtype=tl.float32)

    start = split * chunk
    end = tl.minimum(start + chunk, topk)
    idx_base = IDX + t.to(tl.int64) * stride_it
    if PREFETCH_IDX:
        idx_next = _index_tile(idx_base, start, end, BLOCK_N)
    for n0 in range(start, end, BLOCK_N):
        if PREFETCH_IDX:
            idx = idx_next
            idx_next = _index_tile(idx_base, n0 + BLOCK_N, end, BLOCK_N)
        else:
            idx = _index_tile(idx_base, n0, end, BLOCK_N)
        valid = (idx >= 0) & (idx < num_rows)
        row = KV + idx.to(tl.int64) * stride_kv  # invalid rows are never read
        k0 = _e4m3_group(row, valid, offs_g, gdt, "", WIDEN)
        k1 = _e4m3_group(row, valid, G + offs_g, gdt, "", WIDEN)
        k2 = _e4m3_group(row, valid, 2 * G + offs_g, gdt, "", WIDEN)
        k3 = _e4m3_group(row, valid, 3 * G + offs_g, gdt, "", WIDEN)
        scales = (row + D_V).to(tl.pointer_type(tl.float32))
        sc0 = tl.load(scales + 0, mask=valid, other=0.0)
        sc1 = tl.load(scales + 1, mask=valid, other=0.0)
        sc2 = tl.load(scales + 2, mask=valid, other=0.0)
        sc3 = tl.load(scales + 3, mask=valid, other=0.0)
        if E4M3_BITS:  # the groups hold 2^-8 of their values
            sc0, sc1, sc2, sc3 = sc0 * 256.0, sc1 * 256.0, sc2 * 256.0, sc3 * 256.0
        rope = (row + D_V + 16).to(tl.pointer_type(tl.bfloat16))
        k_pe = tl.load(rope[:, None] + offs_pe[None, :], mask=valid[:, None], other=0.0)

        s = tl.dot(q0, tl.trans(k0)) * sc0[None, :]
        s += tl.dot(q1, tl.trans(k1)) * sc1[None, :]
        s += tl.dot(q2, tl.trans(k2)) * sc2[None, :]
        s += tl.dot(q3, tl.trans(k3)) * sc3[None, :]
        s = s * qk_row[:, None] + tl.dot(q_pe, tl.trans(k_pe)) * qk_scale
        s = tl.where(valid[None, :], s, float("-inf"))

        p, alpha, m_new, l_i = _softmax_step(s, m_i, l_i)
        if FP8_TWICE:
            k0 = _e4m3_group(row, valid, offs_g, gdt, ".cg", WIDEN)
            k1 = _e4m3_group(row, valid, G + offs_g, gdt, ".cg", WIDEN)
            k2 = _e4m3_group(row, valid, 2 * G + offs_g, gdt, ".cg", WIDEN)
            k3 = _e4m3_group(row, valid, 3 * G + offs_g, gdt, ".cg", WIDEN)
        acc0 = _group_pv(p, sc0, k0, acc0, alpha, FP16_DOTS)
        acc1 = _group_pv(p, sc1, k1, acc1, alpha, FP16_DOTS)
        acc2 = _group_pv(p, sc2, k2, acc2, alpha, FP16_DOTS)
        acc3 = _group_pv(p, sc3, k3, acc3, alpha, FP16_DOTS)
        m_i = m_new

    inv_l = 1.0 / tl.where(l_i == 0.0, 1.0, l_i)
    lse2 = _lse2(m_i, l_i)
    if IS_SPLIT:
        row_id = (t * num_splits + split).to(tl.int64) * num_heads + offs_h
        o_ptr = PO + row_id[:, None] * D_V + offs_g[None, :]
        tl.store(PLSE + row_id, lse2, mask=mask_h)
    else:
        o_tok = Out + t.to(tl.int64) * stride_ot
        o_ptr = o_tok + offs_h.to(tl.int64)[:, None] * stride_oh + offs_g[None, :]
        lse_ptr = LSE + t.to(tl.int64) * stride_lt + offs_h.to(tl.int64) * stride_lh
        tl.store(lse_ptr, lse2 * 0.6931471805599453, mask=mask_h)
    _store_group(o_ptr, acc0, inv_l, mask_h)
    _store_group(o_ptr + G, acc1, inv_l, mask_h)
    _store_group(o_ptr + 2 * G, acc2, inv_l, mask_h)
    _store_group(o_ptr + 3 * G, acc3, inv_l, mask_h)


@triton.jit
def _sparse_mla_combine_kernel(
    PO,
    PLSE,
    Out,
    LSE,
    num_heads,
    num_splits,
    stride_ot,
    stride_oh,
    stride_lt,
    stride_lh,
    BLOCK_S: tl.constexpr,
    D_V: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    if USE_PDL:
        gdc_wait()  # the split kernel's partials are complete and visible after this
    # One program per (token, head, V chunk). All split partials of the chunk are loaded as one
    # [BLOCK_S, BLOCK_DV] tile, so the whole merge is a single round trip to L2.
    NUM_DV: tl.constexpr = D_V // BLOCK_DV
    pid = tl.program_id(0)
    dv = pid % NUM_DV
    h = (pid // NUM_DV) % num_heads
    t = pid // (NUM_DV * num_heads)
    offs_s = tl.arange(0, BLOCK_S)
    mask_s = offs_s < num_splits
    rows = (t.to(tl.int64) * num_splits + offs_s) * num_heads + h  # [T, S, H] row ids
    lse_s = tl.load(PLSE + rows, mask=mask_s, other=float("-inf"))
    m = tl.max(lse_s, 0)
    m_safe = tl.where(m == float("-inf"), 0.0, m)
    w = tl.exp2(lse_s - m_safe)  # 0 for empty splits and padding
    denom = tl.sum(w, 0)
    offs_d = dv * BLOCK_DV + tl.arange(0, BLOCK_DV)
    part = tl.load(PO + rows[:, None] * D_V + offs_d[None, :], mask=mask_s[:, None], other=0.0)
    empty = denom == 0.0
    out = tl.sum(w[:, None] * part, 0) / tl.where(empty, 1.0, denom)
    o_ptr = Out + t.to(tl.int64) * stride_ot + h.to(tl.int64) * stride_oh + offs_d
    tl.store(o_ptr, out.to(Out.dtype.element_ty))
    if dv == 0:
        lse = tl.where(empty, float("-inf"), (m_safe + tl.log2(tl.where(empty, 1.0, denom))))
        tl.store(
            LSE + t.to(tl.int64) * stride_lt + h.to(tl.int64) * stride_lh, lse * 0.6931471805599453
        )


if gluon is not None:

    @gluon.jit
    def _wg_load_indices(idx_base, n0, end, BLOCK_N: gl.constexpr, layout: gl.constexpr):
        offs = n0 + gl.arange(0, BLOCK_N, layout=layout)
        return gl.load(idx_base + offs, mask=offs < end, other=-1)

    @gluon.jit
    def _wg_launch_dependents():
        """griddepcontrol.launch_dependents (PTX, SM90+), which Gluon does not wrap."""
        gl.inline_asm_elementwise(
            "griddepcontrol.launch_dependents;\n mov.u32 $0, 0;",
            "=r",
            [],
            dtype=gl.int32,
            is_pure=False,
            pack=1,
        )

    @gluon.jit
    def _wg_issue_gather(
        dst_nope,
        dst_pe,
        base,
        rows_n,
        rows_p,
        num_rows,
        row_stride,
        nope_layout: gl.constexpr,
        pe_layout: gl.constexpr,
    ):
        """cp.async rows of 576 (KV rows by index, or the program's query heads) into shared
        memory: columns [0, 512) to ``dst_nope``, [512, 576) to ``dst_pe`` (fp8_ds_mla rows,
        where ``dst_pe`` is 16-bit and the rows bytes: the bf16 rope part). Each part takes the
        row numbers in its own layout (``rows_n``, ``rows_p``: two loads of the same 256 bytes
        are cheaper than a layout conversion). Rows outside [0, num_rows) are not read; their
        destination rows are zero-filled."""
        ok_n = (rows_n >= 0) & (rows_n < num_rows)
        ptr_n = base + rows_n.to(gl.int64) * row_stride
        cols = gl.arange(0, 512, layout=gl.SliceLayout(0, nope_layout))
        async_copy.async_copy_global_to_shared(
            dst_nope, ptr_n[:, None] + cols[None, :], mask=ok_n[:, None]
        )
        ok_p = (rows_p >= 0) & (rows_p < num_rows)
        ptr_p = base + rows_p.to(gl.int64) * row_stride
        cols_p = 512 + gl.arange(0, 64, layout=gl.SliceLayout(0, pe_layout))
        if dst_pe.dtype != base.dtype.element_ty:
            # fp8_ds_mla rows (bytes): the rope part is 64 bf16 after the four fp32 scales.
            gl.static_assert(
                (base.dtype.element_ty == gl.float8e4nv) & (dst_pe.dtype == gl.bfloat16),
                "rows and rope stage of different types: fp8_ds_mla rows (e4m3 bytes, bf16)",
            )
            ptr_p = (ptr_p + 528).to(gl.pointer_type(dst_pe.dtype))
            cols_p = gl.arange(0, 64, layout=gl.SliceLayout(0, pe_layout))
        async_copy.async_copy_global_to_shared(
            dst_pe, ptr_p[:, None] + cols_p[None, :], mask=ok_p[:, None]
        )

    @gluon.jit
    def _wg_program(num_hb, num_splits):
        """(head block, split, token) of this program; the head block varies fastest."""
        pid = gl.program_id(0)
        rest = pid // num_hb
        return pid % num_hb, rest % num_splits, rest // num_splits

    @gluon.jit
    def _wg_issue_query(
        q_nope,
        q_pe,
        q_tok,
        head0,
        num_heads,
        stride_qh,
        BLOCK_H: gl.constexpr,
        nope_layout: gl.constexpr,
        pe_layout: gl.constexpr,
    ):
        """The query heads [head0, head0 + BLOCK_H) are rows too, copied like a gather. The
        warpgroup tiles put the first gathers in q's group, the mma.sync tiles right behind it
        where q fits one stage: q's latency overlaps the first gather's."""
        heads = head0 + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, nope_layout))
        heads_p = head0 + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, pe_layout))
        _wg_issue_gather(
            q_nope, q_pe, q_tok, heads, heads_p, num_heads, stride_qh, nope_layout, pe_layout
        )

    @gluon.jit
    def _wg_issue_first_tiles(
        pipe,
        BLOCK_N: gl.constexpr,
        NUM_STAGES: gl.constexpr,
        nope_layout: gl.constexpr,
        pe_layout: gl.constexpr,
    ):
        """Puts the first NUM_STAGES - 1 tiles of the program's rows in flight. ``pipe`` is
        (KV, idx_base, kv_tiles, pe_tiles, start, end, num_rows, stride_kv): the rows, their
        indices [start, end) and the stages they land in. Returns the indices of the next
        tile: they ride in registers, loaded one iteration ahead, so that issuing a gather
        never waits for its index load."""
        KV, idx_base, kv_tiles, pe_tiles, start, end, num_rows, stride_kv = pipe
        n_layout: gl.constexpr = gl.SliceLayout(1, nope_layout)
        p_layout: gl.constexpr = gl.SliceLayout(1, pe_layout)
        for st in gl.static_range(NUM_STAGES - 1):
            n0 = start + st * BLOCK_N
            _wg_issue_gather(
                kv_tiles.index(st),
                pe_tiles.index(st),
                KV,
                _wg_load_indices(idx_base, n0, end, BLOCK_N, n_layout),
                _wg_load_indices(idx_base, n0, end, BLOCK_N, p_layout),
                num_rows,
                stride_kv,
                nope_layout,
                pe_layout,
            )
            async_copy.commit_group()
        n0 = start + (NUM_STAGES - 1) * BLOCK_N
        idx_next_n = _wg_load_indices(idx_base, n0, end, BLOCK_N, n_layout)
        idx_next_p = _wg_load_indices(idx_base, n0, end, BLOCK_N, p_layout)
        return idx_next_n, idx_next_p

    @gluon.jit
    def _wg_refill_and_wait(
        pipe,
        idx_next,
        i,
        BLOCK_N: gl.constexpr,
        NUM_STAGES: gl.constexpr,
        nope_layout: gl.constexpr,
        pe_layout: gl.constexpr,
        ASYNC_PROXY: gl.constexpr,
    ):
        """The top of iteration i. Every warp is done with tile i - 1 (its P included), so its
        stage takes the next gather (indices ``idx_next``) before tile i is waited for: two
        tiles are in flight during that wait. Returns the indices of the gather after that,
        and tile i's stages (fp8/16-bit latent, rope part). ``ASYNC_PROXY``: warpgroup MMAs
        read the tiles (the async proxy, which needs a fence); mma.sync reads them with
        ordinary loads."""
        KV, idx_base, kv_tiles, pe_tiles, start, end, num_rows, stride_kv = pipe
        idx_next_n, idx_next_p = idx_next
        _cta_barrier()
        nxt = (i + NUM_STAGES - 1) % NUM_STAGES
        _wg_issue_gather(
            kv_tiles.index(nxt),
            pe_tiles.index(nxt),
            KV,
            idx_next_n,
            idx_next_p,
            num_rows,
            stride_kv,
            nope_layout,
            pe_layout,
        )
        async_copy.commit_group()
        n0 = start + (i + NUM_STAGES) * BLOCK_N
        idx_next_n = _wg_load_indices(idx_base, n0, end, BLOCK_N, gl.SliceLayout(1, nope_layout))
        idx_next_p = _wg_load_indices(idx_base, n0, end, BLOCK_N, gl.SliceLayout(1, pe_layout))
        async_copy.wait_group(NUM_STAGES - 1)  # tile i has landed for this thread...
        if ASYNC_PROXY:
            fence_async_shared()  # ...is visible to the MMAs (async proxy)...
        _cta_barrier()  # ...and has landed for every thread
        stage = i % NUM_STAGES
        return (idx_next_n, idx_next_p), kv_tiles.index(stage), pe_tiles.index(stage)

    @gluon.jit
    def _wg_tile_valid(idx_base, n0, end, num_rows, BLOCK_N: gl.constexpr, layout: gl.constexpr):
        """Which of the tile's keys are real rows, in the scores' key layout: indices are read
        again rather than converted from the gather's layout (an L1 hit, no shuffle)."""
        idx = _wg_load_indices(idx_base, n0, end, BLOCK_N, layout)
        return (idx >= 0) & (idx < num_rows)

    @gluon.jit
    def _wg_ds_rows(
        KV, idx_base, n0, end, num_rows, stride_kv, BLOCK_N: gl.constexpr, layout: gl.constexpr
    ):
        """fp8_ds_mla rows [n0, n0 + BLOCK_N) of a split: which are real rows, and their four
        group scales (bytes [512, 528), fp32; 0 where not real), in the scores' key layout."""
        idx = _wg_load_indices(idx_base, n0, end, BLOCK_N, layout)
        valid = (idx >= 0) & (idx < num_rows)
        scales = (KV + idx.to(gl.int64) * stride_kv + 512).to(gl.pointer_type(gl.float32))
        sc0 = gl.load(scales, mask=valid, other=0.0)
        sc1 = gl.load(scales + 1, mask=valid, other=0.0)
        sc2 = gl.load(scales + 2, mask=valid, other=0.0)
        sc3 = gl.load(scales + 3, mask=valid, other=0.0)
        return valid, sc0, sc1, sc2, sc3

    @gluon.jit
    def _wg_times_group(o, factors, W: gl.constexpr):
        """``o`` ([512, H], O^T with its rows in ``_wg_v_operand``'s order, W warps along them)
        with each row times its latent group's factor of the four ``factors``. MMA row m is
        value (512 / W) w + ... with w = (m / 16) mod W, the warp that holds it, so a thread's
        rows share one group, w / (W / 4), and one factor."""
        BLOCK_H: gl.constexpr = o.shape[1]
        o4 = gl.reshape(o, [32 // W, W, 16, BLOCK_H])
        warp_layout: gl.constexpr = gl.SliceLayout(
            0, gl.SliceLayout(2, gl.SliceLayout(3, o4.type.layout))
        )
        group = gl.arange(0, W, layout=warp_layout) // (W // 4)
        f0, f1, f2, f3 = factors
        f = gl.where(group == 0, f0, gl.where(group == 1, f1, gl.where(group == 2, f2, f3)))
        o4 = o4 * gl.expand_dims(gl.expand_dims(gl.expand_dims(f, 0), 2), 3)
        return gl.convert_layout(gl.reshape(o4, [512, BLOCK_H]), o.type.layout, assert_trivial=True)

    @gluon.jit
    def _wg_top(scales):
        """The largest of a tile's group scales, 1 where all are 0 (no real row)."""
        top = gl.max(scales, 0)
        return gl.where(top > 0.0, top, 1.0)

    @gluon.jit
    def _wg_softmax_step(s, m_i, l_tile, KEY_AXIS: gl.constexpr):
        """One tile of the online softmax in base 2 over scores ``s`` (scaled, -inf where
        masked), keys along ``KEY_AXIS``. Returns P, the factor the running output is scaled
        by, the new running max and the per-element running sums (reduced once, at the end)."""
        m_new = gl.maximum(m_i, gl.max(s, KEY_AXIS))
        m_safe = gl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = gl.exp2(m_i - m_safe)
        p = gl.exp2(s - gl.expand_dims(m_safe, KEY_AXIS))
        l_tile = l_tile * gl.expand_dims(alpha, KEY_AXIS) + p
        return p, alpha, m_new, l_tile

    @gluon.jit
    def _wg_row_sums(l_tile, m_i, KEY_AXIS: gl.constexpr):
        """Each head's softmax denominator (1 for a head that saw no valid key, whose output
        stays 0) and its base-2 LSE (-inf there)."""
        l_i = gl.sum(l_tile, KEY_AXIS)
        empty = l_i == 0.0
        denom = gl.where(empty, 1.0, l_i)
        return denom, gl.where(empty, float("-inf"), m_i + gl.log2(denom))

    @gluon.jit
    def _wg_store_rows(
        rows_smem,
        out_rows,
        lse2,
        Out,
        LSE,
        PO,
        PLSE,
        t,
        split,
        head0,
        num_heads,
        num_splits,
        stride_ot,
        stride_oh,
        stride_lt,
        stride_lh,
        BLOCK_H: gl.constexpr,
        IS_SPLIT: gl.constexpr,
        nope_layout: gl.constexpr,
    ):
        """Stores the [BLOCK_H, 512] rows ``out_rows`` (the output, or a split's partial rows
        in q's 16-bit dtype, NOTES.md round 7) through ``rows_smem``, free shared memory, as
        whole 16-byte pieces of contiguous rows (the MMA accumulator layouts would store 4-byte
        pieces), and the heads' base-2 LSEs ``lse2``."""
        offs_hl = head0 + gl.arange(0, BLOCK_H, layout=lse2.type.layout)
        mask_hl = offs_hl < num_heads
        _cta_barrier()  # every warp is done with what rows_smem held
        rows_smem.store(out_rows)
        _cta_barrier()
        out_rows = rows_smem.load(nope_layout)
        offs_h = head0 + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, nope_layout))
        offs_v = gl.arange(0, 512, layout=gl.SliceLayout(0, nope_layout))
        mask_h = (offs_h < num_heads)[:, None]
        if IS_SPLIT:
            row0 = (t * num_splits + split).to(gl.int64) * num_heads
            gl.store(PO + (row0 + offs_h)[:, None] * 512 + offs_v[None, :], out_rows, mask=mask_h)
            gl.store(PLSE + row0 + offs_hl, lse2, mask=mask_hl)
        else:
            o_tok = Out + t.to(gl.int64) * stride_ot
            o_ptr = o_tok + offs_h.to(gl.int64)[:, None] * stride_oh + offs_v[None, :]
            gl.store(o_ptr, out_rows, mask=mask_h)
            l_ptr = LSE + t.to(gl.int64) * stride_lt + offs_hl.to(gl.int64) * stride_lh
            gl.store(l_ptr, lse2 * 0.6931471805599453, mask=mask_hl)

    @gluon.jit
    def _sparse_mla_wgmma_kernel(
        Q,
        KV,
        IDX,
        Out,
        LSE,
        PO,
        PLSE,
        qk_scale,
        num_rows,
        topk,
        chunk,
        num_heads,
        num_hb,
        num_splits,
        stride_qt,
        stride_qh,
        stride_kv,
        stride_it,
        stride_ot,
        stride_oh,
        stride_lt,
        stride_lh,
        BLOCK_N: gl.constexpr,
        NUM_STAGES: gl.constexpr,
        IS_SPLIT: gl.constexpr,
        LATE_TRIGGER: gl.constexpr,
    ):
        """The 64-head tile on Hopper, 8 warps. Each warpgroup computes Q.K^T for its own half
        of a tile's keys and owns half of the V columns in P.V, so no MMA work is repeated; the
        row max crosses the warpgroups once per tile, P goes through shared memory, and the row
        sums wait for the end (NOTES.md round 7). Gathers are cp.async copies NUM_STAGES - 1
        tiles ahead into shared memory that the warpgroup MMAs read directly."""
        BLOCK_H: gl.constexpr = 64
        D_V: gl.constexpr = 512
        D_PE: gl.constexpr = 64
        dtype: gl.constexpr = KV.dtype.element_ty
        acc_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 2], instr_shape=[16, 256, 16]
        )
        # Instruction N = BLOCK_N / 2: the two warpgroups split the tile's keys.
        s_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 2], instr_shape=[16, BLOCK_N // 2, 16]
        )
        nope_layout: gl.constexpr = gl.BlockedLayout([1, 8], [1, 32], [8, 1], [1, 0])
        pe_layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [8, 1], [1, 0])
        nope_smem: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, D_V], dtype)
        pe_smem: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, D_PE], dtype)
        qn_smem: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_H, D_V], dtype)
        qp_smem: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_H, D_PE], dtype)
        p_smem: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_H, BLOCK_N], dtype)

        hb, split, t = _wg_program(num_hb, num_splits)

        q_nope = gl.allocate_shared_memory(dtype, [BLOCK_H, D_V], qn_smem)
        q_pe = gl.allocate_shared_memory(dtype, [BLOCK_H, D_PE], qp_smem)
        kv_tiles = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_N, D_V], nope_smem)
        pe_tiles = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_N, D_PE], pe_smem)
        p_tile = gl.allocate_shared_memory(dtype, [BLOCK_H, BLOCK_N], p_smem)
        q_tok = Q + t.to(gl.int64) * stride_qt
        _wg_issue_query(
            q_nope, q_pe, q_tok, hb * BLOCK_H, num_heads, stride_qh, BLOCK_H, nope_layout, pe_layout
        )

        start = split * chunk
        end = gl.minimum(start + chunk, topk)
        n_tiles = gl.cdiv(end - start, BLOCK_N)
        idx_base = IDX + t.to(gl.int64) * stride_it
        pipe = (KV, idx_base, kv_tiles, pe_tiles, start, end, num_rows, stride_kv)
        idx_next = _wg_issue_first_tiles(pipe, BLOCK_N, NUM_STAGES, nope_layout, pe_layout)

        m_i = gl.full([BLOCK_H], float("-inf"), gl.float32, layout=gl.SliceLayout(1, s_layout))
        acc = gl.zeros([BLOCK_H, D_V], gl.float32, layout=acc_layout)
        s_zero = gl.zeros([BLOCK_H, BLOCK_N], gl.float32, layout=s_layout)
        # Row sums, kept per element and reduced once after the loop: a per-tile sum would
        # cross the warpgroups a second time.
        l_tile = s_zero
        for i in range(n_tiles):
            idx_next, k_n, k_p = _wg_refill_and_wait(
                pipe, idx_next, i, BLOCK_N, NUM_STAGES, nope_layout, pe_layout, True
            )
            s = warpgroup_mma(q_nope, k_n.permute((1, 0)), s_zero, use_acc=False, is_async=True)
            s = warpgroup_mma(q_pe, k_p.permute((1, 0)), s, is_async=True)
            n0 = start + i * BLOCK_N
            valid = _wg_tile_valid(
                idx_base, n0, end, num_rows, BLOCK_N, gl.SliceLayout(0, s_layout)
            )
            s = warpgroup_mma_wait(0, deps=(s,))
            s = gl.where(valid[None, :], s * qk_scale, float("-inf"))
            p, alpha, m_i, l_tile = _wg_softmax_step(s, m_i, l_tile, 1)  # max across warpgroups
            acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, acc_layout))[:, None]
            # Each warpgroup's P.V needs both halves of P: exchange them in shared memory.
            p_tile.store(p.to(dtype))
            fence_async_shared()
            _cta_barrier()
            acc = warpgroup_mma(p_tile, k_n, acc, is_async=True)
            acc = warpgroup_mma_wait(0, deps=(acc,))
        async_copy.wait_group(0)
        if LATE_TRIGGER:
            _wg_launch_dependents()

        denom, lse2 = _wg_row_sums(l_tile, m_i, 1)
        out = acc / gl.convert_layout(denom, gl.SliceLayout(1, acc_layout))[:, None]
        _wg_store_rows(
            q_nope,  # free now
            out.to(dtype),
            lse2,
            Out,
            LSE,
            PO,
            PLSE,
            t,
            split,
            hb * BLOCK_H,
            num_heads,
            num_splits,
            stride_ot,
            stride_oh,
            stride_lt,
            stride_lh,
            BLOCK_H,
            IS_SPLIT,
            nope_layout,
        )

    @gluon.jit
    def _sparse_mla_wgmma_swapped_kernel(
        Q,
        KV,
        IDX,
        Out,
        LSE,
        PO,
        PLSE,
        qk_scale,
        num_rows,
        topk,
        chunk,
        num_heads,
        num_hb,
        num_splits,
        stride_qt,
        stride_qh,
        stride_kv,
        stride_it,
        stride_ot,
        stride_oh,
        stride_lt,
        stride_lh,
        BLOCK_H: gl.constexpr,
        NUM_STAGES: gl.constexpr,
        IS_SPLIT: gl.constexpr,
        LATE_TRIGGER: gl.constexpr,
    ):
        """The small-head tile on Hopper (8 or 16 heads), one warpgroup, operands swapped: the
        keys are the warpgroup MMA's M (64 per tile) and the heads its N, so no MMA row is
        padding. S^T = K Q^T, then O^T += V^T P^T with V^T read from the gathered tile in
        shared memory as a transposed operand. Gathers are cp.async copies NUM_STAGES - 1
        tiles ahead, as in the 64-head tile."""
        BLOCK_N: gl.constexpr = 64
        D_V: gl.constexpr = 512
        D_PE: gl.constexpr = 64
        dtype: gl.constexpr = KV.dtype.element_ty
        mma_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_H, 16]
        )
        nope_layout: gl.constexpr = gl.BlockedLayout([1, 8], [1, 32], [4, 1], [1, 0])
        pe_layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
        nope_smem: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, D_V], dtype)
        pe_smem: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, D_PE], dtype)
        qn_smem: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_H, D_V], dtype)
        qp_smem: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_H, D_PE], dtype)
        p_smem: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, BLOCK_H], dtype)

        hb, split, t = _wg_program(num_hb, num_splits)

        q_nope = gl.allocate_shared_memory(dtype, [BLOCK_H, D_V], qn_smem)
        q_pe = gl.allocate_shared_memory(dtype, [BLOCK_H, D_PE], qp_smem)
        kv_tiles = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_N, D_V], nope_smem)
        pe_tiles = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_N, D_PE], pe_smem)
        p_tile = gl.allocate_shared_memory(dtype, [BLOCK_N, BLOCK_H], p_smem)
        q_tok = Q + t.to(gl.int64) * stride_qt
        _wg_issue_query(
            q_nope, q_pe, q_tok, hb * BLOCK_H, num_heads, stride_qh, BLOCK_H, nope_layout, pe_layout
        )

        start = split * chunk
        end = gl.minimum(start + chunk, topk)
        n_tiles = gl.cdiv(end - start, BLOCK_N)
        idx_base = IDX + t.to(gl.int64) * stride_it
        pipe = (KV, idx_base, kv_tiles, pe_tiles, start, end, num_rows, stride_kv)
        idx_next = _wg_issue_first_tiles(pipe, BLOCK_N, NUM_STAGES, nope_layout, pe_layout)

        head_layout: gl.constexpr = gl.SliceLayout(0, mma_layout)
        m_i = gl.full([BLOCK_H], float("-inf"), gl.float32, layout=head_layout)
        acc = gl.zeros([D_V, BLOCK_H], gl.float32, layout=mma_layout)  # O^T
        s_zero = gl.zeros([BLOCK_N, BLOCK_H], gl.float32, layout=mma_layout)
        l_tile = s_zero  # per-head sums (columns of S^T) per element, reduced after the loop
        for i in range(n_tiles):
            idx_next, k_n, k_p = _wg_refill_and_wait(
                pipe, idx_next, i, BLOCK_N, NUM_STAGES, nope_layout, pe_layout, True
            )
            s = warpgroup_mma(k_n, q_nope.permute((1, 0)), s_zero, use_acc=False, is_async=True)
            s = warpgroup_mma(k_p, q_pe.permute((1, 0)), s, is_async=True)
            n0 = start + i * BLOCK_N
            valid = _wg_tile_valid(
                idx_base, n0, end, num_rows, BLOCK_N, gl.SliceLayout(1, mma_layout)
            )
            s = warpgroup_mma_wait(0, deps=(s,))
            s = gl.where(valid[:, None], s * qk_scale, float("-inf"))
            p, alpha, m_i, l_tile = _wg_softmax_step(s, m_i, l_tile, 0)
            acc = acc * alpha[None, :]
            p_tile.store(p.to(dtype))
            fence_async_shared()
            _cta_barrier()
            acc = warpgroup_mma(k_n.permute((1, 0)), p_tile, acc, is_async=True)
            acc = warpgroup_mma_wait(0, deps=(acc,))
        async_copy.wait_group(0)
        if LATE_TRIGGER:
            _wg_launch_dependents()

        denom, lse2 = _wg_row_sums(l_tile, m_i, 0)
        out = acc / denom[None, :]
        _wg_store_rows(
            q_nope,  # free now
            gl.permute(out.to(dtype), (1, 0)),
            lse2,
            Out,
            LSE,
            PO,
            PLSE,
            t,
            split,
            hb * BLOCK_H,
            num_heads,
            num_splits,
            stride_ot,
            stride_oh,
            stride_lt,
            stride_lh,
            BLOCK_H,
            IS_SPLIT,
            nope_layout,
        )

    @gluon.jit
    def _wg_v_operand(v_rows, a_layout: gl.constexpr, W: gl.constexpr, factors=None):
        """16 gathered e4m3 rows of V (keys x 512) as the fp16 A operand of O^T += V^T P^T,
        widened in registers: no fp16 copy of V passes through shared memory. The ``W`` warps
        of ``a_layout`` split V^T's 512 rows, so each widens only its own.

        Thread (warp w, group g) loads 512 / 8W contiguous values of 4 rows
        (``_wg_v_load_layout``). An MMA row m is any value of V^T as long as the output's rows
        are put back in order: the tensor is relabelled (no data moves) so that MMA row
        16W i + 16w + 8b + g holds value (64 / W)(8w + g) + 2i + b, which is what that thread
        loaded; ``_wg_rows_in_order`` undoes it.

        ``factors`` (fp8_ds_mla rows): a [16, 4] fp16 view, each row's factor per 128-column
        group, which its values are multiplied by (a thread's values lie in one group)."""
        x = v_rows.load(_wg_v_load_layout(W)).to(gl.float16)
        if factors is not None:
            x3 = gl.reshape(x, [16, 4, 128])
            f = factors.load(gl.SliceLayout(2, x3.type.layout))
            x = gl.reshape(x3 * gl.expand_dims(f, 2), [16, 512])
        x = gl.permute(gl.reshape(x, [16, W, 8, 32 // W, 2]), (0, 3, 1, 4, 2))
        x = gl.permute(gl.reshape(x, [16, 512]), (1, 0))
        return gl.convert_layout(x, a_layout, assert_trivial=True)

    @constexpr_function
    def _wg_v_load_layout(warps: int):
        """``_wg_v_operand``'s load of 16 rows of V by W = ``warps`` (4 or 8) warps: thread
        (warp w, lane 4g + j) loads values (64 / W)(8w + g) onward of rows 2j, 2j + 1, 2j + 8
        and 2j + 9 (the rows and lanes of an fp16 A operand) in 16- or 8-byte pieces; every
        phase meets each bank of the 128-byte swizzle once."""
        per_thread = 64 // warps
        return gl.DistributedLinearLayout(
            reg_bases=[[0, 1 << b] for b in range(per_thread.bit_length() - 1)] + [[1, 0], [8, 0]],
            lane_bases=[[2, 0], [4, 0]] + [[0, per_thread << b] for b in range(3)],
            warp_bases=[[0, 8 * per_thread << b] for b in range(warps.bit_length() - 1)],
            block_bases=[],
            shape=[16, 512],
        )

    @gluon.jit
    def _wg_rows_in_order(o, BLOCK_H: gl.constexpr, W: gl.constexpr):
        """The [512, BLOCK_H] accumulator of ``_wg_v_operand``'s MMAs (W warps along its rows)
        with its rows in value order."""
        o = gl.permute(gl.reshape(o, [32 // W, W, 2, 8, BLOCK_H]), (1, 3, 0, 2, 4))
        return gl.reshape(o, [512, BLOCK_H])

    @gluon.jit
    def _wg_e4m3_query(q_tok, heads, cols, num_heads, stride_qh, col0):
        """Loads query columns ``col0 + cols`` of ``heads``, returns them as float32 and their
        per-head absolute maximum (stored later, once the scale is known)."""
        mask = (heads < num_heads)[:, None]
        ptr = q_tok + heads.to(gl.int64)[:, None] * stride_qh + col0 + cols[None, :]
        q = gl.load(ptr, mask=mask, other=0.0).to(gl.float32)
        return q, gl.max(gl.abs(q), 1)

    @gluon.jit
    def _wg_rope_query(q_tok, head0, num_heads, stride_qh, BLOCK_H: gl.constexpr, layout):
        """``_wg_e4m3_query`` of the rope part (columns 512-575) of the program's heads."""
        heads = head0 + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, layout))
        cols = gl.arange(0, 64, layout=gl.SliceLayout(0, layout))
        return _wg_e4m3_query(q_tok, heads, cols, num_heads, stride_qh, 512)

    @gluon.jit
    def _wg_e4m3_split_store(q, scale, q_hi, q_lo):
        """q times its per-head power-of-two scale as two e4m3 parts, the value and its
        residual (together about bf16's precision), into shared memory."""
        qs = q * scale[:, None]
        hi = qs.to(gl.float8e4nv)
        q_hi.store(hi)
        q_lo.store((qs - hi.to(gl.float32)).to(gl.float8e4nv))

    @gluon.jit
    def _wg_e4m3_buffers(
        f8: gl.constexpr,
        BLOCK_H: gl.constexpr,
        BLOCK_N: gl.constexpr,
        NUM_STAGES: gl.constexpr,
        pe_ty: gl.constexpr = None,
        Q_ROPE_PARTS: gl.constexpr = 2,
    ):
        """Shared memory of the e4m3 tiles: q's two e4m3 parts (latent hi/lo, rope hi/lo), the
        gather stages (latent, rope) and P^T in fp16. ``pe_ty``: the rope part's type where it
        is not e4m3 (fp8_ds_mla rows: bf16). ``Q_ROPE_PARTS``: the buffers for q's rope part
        after the latent's two in ``q_parts``: two e4m3 parts, one whole (fp8_ds_mla rows), or
        none (fp8_ds_mla rows, q's rope part in registers)."""
        pe_ty = f8 if pe_ty is None else pe_ty
        qn_smem: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_H, 512], f8)
        qp_smem: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_H, 64], pe_ty)
        kv_smem: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, 512], f8)
        pe_smem: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, 64], pe_ty)
        p_smem: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, BLOCK_H], gl.float16)
        qh_n = gl.allocate_shared_memory(f8, [BLOCK_H, 512], qn_smem)
        ql_n = gl.allocate_shared_memory(f8, [BLOCK_H, 512], qn_smem)
        if Q_ROPE_PARTS == 0:
            q_parts = (qh_n, ql_n)
        elif Q_ROPE_PARTS == 1:
            q_parts = (qh_n, ql_n, gl.allocate_shared_memory(pe_ty, [BLOCK_H, 64], qp_smem))
        else:
            qh_p = gl.allocate_shared_memory(pe_ty, [BLOCK_H, 64], qp_smem)
            q_parts = (qh_n, ql_n, qh_p, gl.allocate_shared_memory(pe_ty, [BLOCK_H, 64], qp_smem))
        kv_tiles = gl.allocate_shared_memory(f8, [NUM_STAGES, BLOCK_N, 512], kv_smem)
        pe_tiles = gl.allocate_shared_memory(pe_ty, [NUM_STAGES, BLOCK_N, 64], pe_smem)
        p_tile = gl.allocate_shared_memory(gl.float16, [BLOCK_N, BLOCK_H], p_smem)
        return q_parts, kv_tiles, pe_tiles, p_tile

    @gluon.jit
    def _wg_e4m3_query_parts(
        q_tok,
        head0,
        num_heads,
        stride_qh,
        q_parts,
        BLOCK_H: gl.constexpr,
        qn_layout: gl.constexpr,
        qp_layout: gl.constexpr,
    ):
        """Stores the program's query heads in ``q_parts`` as two e4m3 parts, each head scaled
        by a power of two to |q| <= 256; returns that scale, which leaves through the scores.
        Where ``q_parts`` has no e4m3 buffers for the rope part (fp8_ds_mla rows, whose rope
        part is bf16: ``_wg_e4m3_buffers``), the latent only; the caller keeps the rope part
        as it is."""
        ROPE_WHOLE: gl.constexpr = len(q_parts) < 4
        qn, amax = _wg_e4m3_query(
            q_tok,
            head0 + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, qn_layout)),
            gl.arange(0, 512, layout=gl.SliceLayout(0, qn_layout)),
            num_heads,
            stride_qh,
            0,
        )
        if not ROPE_WHOLE:
            qp, amax_p = _wg_rope_query(q_tok, head0, num_heads, stride_qh, BLOCK_H, qp_layout)
            amax = gl.maximum(amax, gl.convert_layout(amax_p, gl.SliceLayout(1, qn_layout)))
        scale = gl.exp2(8.0 - gl.ceil(gl.log2(gl.maximum(amax, 1e-30))))
        _wg_e4m3_split_store(qn, scale, q_parts[0], q_parts[1])
        if not ROPE_WHOLE:
            qp_scale = gl.convert_layout(scale, gl.SliceLayout(1, qp_layout))
            _wg_e4m3_split_store(qp, qp_scale, q_parts[2], q_parts[3])
        return scale

    @gluon.jit
    def _wg_mma_finish(
        acc,
        l_tile,
        m_i,
        v_scale,
        kv_tiles,
        dest,
        BLOCK_H: gl.constexpr,
        W: gl.constexpr,
        O_ROWS: gl.constexpr,
        IS_SPLIT: gl.constexpr,
        rows_layout: gl.constexpr,
        RELABELLED: gl.constexpr,
    ):
        """The e4m3 tiles' epilogue: O^T ``acc`` (``W`` warps along its rows) normalized,
        scaled by the rows' scale, its rows put back in order and stored through the gather
        stages (free now, ``O_ROWS`` 16-bit rows), with the heads' LSEs. ``dest``: (Out, LSE,
        PO, PLSE, t, split, head0, num_heads, num_splits, stride_ot, stride_oh, stride_lt,
        stride_lh)."""
        Out, LSE, PO, PLSE, t, split, head0, num_heads, num_splits = dest[:9]
        stride_ot, stride_oh, stride_lt, stride_lh = dest[9:]
        out_ty: gl.constexpr = Out.dtype.element_ty
        denom, lse2 = _wg_row_sums(l_tile, m_i, 0)
        out = acc * v_scale / gl.convert_layout(denom, gl.SliceLayout(0, acc.type.layout))[None, :]
        if _WHOLE_VIEWS:  # every 16-bit row the stages hold
            BITS: gl.constexpr = kv_tiles.dtype.primitive_bitwidth * kv_tiles.shape[2]
            ROWS: gl.constexpr = kv_tiles.shape[0] * kv_tiles.shape[1] * BITS // (16 * 512)
        else:
            ROWS: gl.constexpr = O_ROWS
        gl.static_assert(ROWS >= BLOCK_H, "the gather stages hold the output tile")
        o_smem: gl.constexpr = gl.NVMMASharedLayout.get_default_for([ROWS, 512], out_ty)
        o_rows = kv_tiles._reinterpret(out_ty, [ROWS, 512], o_smem)
        _wg_store_rows(
            o_rows.slice(0, BLOCK_H),
            gl.permute(_wg_rows_in_order(out, BLOCK_H, W).to(out_ty), (1, 0))
            if RELABELLED
            else gl.permute(out.to(out_ty), (1, 0)),
            lse2,
            Out,
            LSE,
            PO,
            PLSE,
            t,
            split,
            head0,
            num_heads,
            num_splits,
            stride_ot,
            stride_oh,
            stride_lt,
            stride_lh,
            BLOCK_H,
            IS_SPLIT,
            rows_layout,
        )

    @gluon.jit
    def _mma_query_operands(q_nope, q_pe, KC: gl.constexpr, layout: gl.constexpr):
        """The program's q (in shared memory) as the B operands of S^T = K Q^T, one per
        ``KC`` columns, held in registers for the whole split: 512 / KC latent parts, then
        64 / KC rope parts."""
        qs = ()
        for c in gl.static_range(512 // KC):
            qs = qs + (q_nope.slice(c * KC, KC, dim=1).permute((1, 0)).load(layout),)
        for c in gl.static_range(64 // KC):
            qs = qs + (q_pe.slice(c * KC, KC, dim=1).permute((1, 0)).load(layout),)
        return qs

    @gluon.jit
    def _mma_column_operand(view, CW: gl.constexpr, layout: gl.constexpr, B: gl.constexpr):
        """A shared ``view`` [rows, CW * kc] as an operand of a dot batched over CW column
        groups: [CW, rows, kc] (the A operand) or [CW, kc, rows] (``B``), each group's warps
        loading only its own kc columns. Triton 3.6 reshapes no sliced shared view, so the
        2D load takes the layout that the 3D operand has once permuted and reshaped to 2D,
        which makes the way back a relabelling of registers (no data moves; the SASS holds
        the ldmatrix loads alone)."""
        ROWS: gl.constexpr = view.shape[0]
        KC: gl.constexpr = view.shape[1] // CW
        if B:
            like = gl.permute(gl.zeros([CW, KC, ROWS], view.dtype, layout=layout), (2, 0, 1))
        else:
            like = gl.permute(gl.zeros([CW, ROWS, KC], view.dtype, layout=layout), (1, 0, 2))
        flat: gl.constexpr = gl.reshape(like, [ROWS, CW * KC]).type.layout
        x = gl.reshape(view.load(flat), [ROWS, CW, KC])
        x = gl.permute(x, (1, 2, 0)) if B else gl.permute(x, (1, 0, 2))
        return gl.convert_layout(x, layout)

    @gluon.jit
    def _mma_column_sum(s3, scratch, layout: gl.constexpr):
        """The [CW, rows, heads] partial scores of the column groups (each group on its own
        warps) summed through ``scratch`` ([CW * rows, heads] float32) into ``layout``."""
        CW: gl.constexpr = s3.shape[0]
        ROWS: gl.constexpr = s3.shape[1]
        scratch.store(gl.reshape(s3, [CW * ROWS, s3.shape[2]]))
        _cta_barrier()
        s = scratch.slice(0, ROWS).load(layout)
        for g in gl.static_range(1, CW):
            s = s + scratch.slice(g * ROWS, ROWS).load(layout)
        return s

    @gluon.jit
    def _sparse_mla_mma_kernel(
        Q,
        KV,
        IDX,
        Out,
        LSE,
        PO,
        PLSE,
        qk_scale,
        num_rows,
        topk,
        chunk,
        num_heads,
        num_hb,
        num_splits,
        stride_qt,
        stride_qh,
        stride_kv,
        stride_it,
        stride_ot,
        stride_oh,
        stride_lt,
        stride_lh,
        v_scale,
        BLOCK_H: gl.constexpr,
        BLOCK_N: gl.constexpr,
        NUM_STAGES: gl.constexpr,
        IS_SPLIT: gl.constexpr,
        LATE_TRIGGER: gl.constexpr,
        W: gl.constexpr,
        COL_WARPS: gl.constexpr,
    ):
        """64 heads with mma.sync in a 99 KB block (SM86/89, SM120; Hopper runs it as their
        proxy), so each row is gathered once where no 64-head tl.dot tile fits; 16-bit rows,
        or fp8 e4m3 rows under a 16-bit q. 64 heads of q (72 KB) and the gather stages cannot
        share 99 KB, so q lives in registers: S^T = K Q^T runs on 8 warps of 8 heads each,
        each holding its heads' 576 columns as MMA B operands (72 registers; for e4m3 rows q's
        two e4m3 parts, as in the e4m3 tiles) and reading the whole gathered tile; P^T goes
        through shared memory; O^T += V^T P^T runs on warps along V's columns (e4m3 V widened
        in registers, ``_wg_v_operand``). q passes through the gather stages once: 16-bit q
        that fits one stage through the last, with the first gathers in flight behind it
        (NOTES.md round 24); otherwise before the first gather. 16 and 32 heads over 16-bit
        rows run on 4 and 8 warps: two along the keys, the others along the heads, 8 heads
        each (or one along the keys, over 16-row tiles; measured slower, NOTES.md round 19).
        ``COL_WARPS`` > 1 (16-bit rows): the scores as a dot batched over that many groups of
        q's columns, each on its own warps with 8 x COL_WARPS heads a warp (the same 72
        registers of q), so each K fragment read from shared memory feeds COL_WARPS times the
        MMAs; the groups' partial scores are summed through shared memory (NOTES.md round
        23)."""
        D_V: gl.constexpr = 512
        KC: gl.constexpr = 32  # q columns per score MMA step
        W_H: gl.constexpr = BLOCK_H // 8  # warps along the heads in the scores, 8 heads each
        dtype: gl.constexpr = KV.dtype.element_ty
        FP8: gl.constexpr = dtype.is_fp8()
        p_ty: gl.constexpr = gl.float16 if FP8 else dtype
        Q_ROWS: gl.constexpr = 2 * BLOCK_H if FP8 else BLOCK_H  # e4m3 q: two parts
        gl.static_assert(NUM_STAGES * BLOCK_N >= Q_ROWS, "q passes through the stages")
        gl.static_assert(BLOCK_N >= 16 * (W // W_H), "16 keys per warp along the keys")
        mma: gl.constexpr = gl.NVMMADistributedLayout(
            version=[2, 0], warps_per_cta=[W // W_H, W_H], instr_shape=[16, 8]
        )
        mma_o: gl.constexpr = gl.NVMMADistributedLayout(
            version=[2, 0], warps_per_cta=[W, 1], instr_shape=[16, 8]
        )
        gl.static_assert((COL_WARPS == 1) | (not FP8), "column groups: 16-bit rows")
        gl.static_assert((COL_WARPS == 1) | (COL_WARPS == 2) | (COL_WARPS == 4), "1, 2 or 4")
        W_H3: gl.constexpr = BLOCK_H // (8 * COL_WARPS)
        gl.static_assert(8 * COL_WARPS * W_H3 == BLOCK_H, "a warp per 8 * COL_WARPS heads")
        gl.static_assert(W % (COL_WARPS * W_H3) == 0, "as many warps along the keys per group")
        gl.static_assert(BLOCK_N >= 16 * (W // (COL_WARPS * W_H3)), "16 rows a warp")
        mma3: gl.constexpr = gl.NVMMADistributedLayout(
            version=[2, 0],
            warps_per_cta=[COL_WARPS, W // (COL_WARPS * W_H3), W_H3],
            instr_shape=[1, 16, 8],
        )
        k3_operand: gl.constexpr = gl.DotOperandLayout(0, parent=mma3, k_width=2)
        q3_operand: gl.constexpr = gl.DotOperandLayout(1, parent=mma3, k_width=2)
        K_WIDTH: gl.constexpr = 4 if FP8 else 2
        k_operand: gl.constexpr = gl.DotOperandLayout(0, parent=mma, k_width=K_WIDTH)
        q_operand: gl.constexpr = gl.DotOperandLayout(1, parent=mma, k_width=K_WIDTH)
        v_operand: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma_o, k_width=2)
        p_operand: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=mma_o, k_width=2)
        PIECE: gl.constexpr = 16 // dtype.primitive_bitwidth * 8  # 16-byte pieces
        nope_layout: gl.constexpr = gl.BlockedLayout([1, PIECE], [1, 32], [W, 1], [1, 0])
        pe_layout: gl.constexpr = gl.BlockedLayout(
            [1, PIECE], [32 * PIECE // 64, 64 // PIECE], [W, 1], [1, 0]
        )
        qn_layout: gl.constexpr = gl.BlockedLayout([1, 8], [1, 32], [W, 1], [1, 0])
        qp_layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [W, 1], [1, 0])
        kv_smem: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, D_V], dtype)
        pe_smem: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, 64], dtype)
        qn_smem: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_H, D_V], dtype)
        qp_smem: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_H, 64], dtype)
        p_smem: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, BLOCK_H], p_ty)

        hb, split, t = _wg_program(num_hb, num_splits)
        kv_tiles = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_N, D_V], kv_smem)
        pe_tiles = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_N, 64], pe_smem)
        p_tile = gl.allocate_shared_memory(p_ty, [BLOCK_N, BLOCK_H], p_smem)
        red_smem: gl.constexpr = gl.PaddedSharedLayout.with_identity_for(
            [[BLOCK_H, 8]], [COL_WARPS * BLOCK_N, BLOCK_H], [1, 0]
        )  # 8 words a row: the accumulators' rows land on distinct banks
        if COL_WARPS > 1:
            scratch = gl.allocate_shared_memory(
                gl.float32, [COL_WARPS * BLOCK_N, BLOCK_H], red_smem
            )
        else:
            scratch = p_tile  # a placeholder, never touched: one group sums in registers

        head0 = hb * BLOCK_H
        q_tok = Q + t.to(gl.int64) * stride_qt
        head_layout: gl.constexpr = gl.SliceLayout(0, mma)
        start = split * chunk
        end = gl.minimum(start + chunk, topk)
        n_tiles = gl.cdiv(end - start, BLOCK_N)
        idx_base = IDX + t.to(gl.int64) * stride_it
        pipe = (KV, idx_base, kv_tiles, pe_tiles, start, end, num_rows, stride_kv)
        # 16-bit q that fits one stage lands in the last, so the first gathers fly with it.
        Q_LAST: gl.constexpr = (not FP8) & (BLOCK_H <= BLOCK_N)
        Q_BLOCKS: gl.constexpr = NUM_STAGES * BLOCK_N // BLOCK_H
        QB: gl.constexpr = Q_BLOCKS - 1 if Q_LAST else 0
        qn_all = kv_tiles._reinterpret(dtype, [Q_BLOCKS, BLOCK_H, D_V], qn_smem)
        qp_all = pe_tiles._reinterpret(dtype, [Q_BLOCKS, BLOCK_H, 64], qp_smem)
        if FP8:
            q_parts = (qn_all.index(0), qn_all.index(1), qp_all.index(0), qp_all.index(1))
            scale = _wg_e4m3_query_parts(
                q_tok, head0, num_heads, stride_qh, q_parts, BLOCK_H, qn_layout, qp_layout
            )
            qk_row = qk_scale / gl.convert_layout(scale, head_layout)
            _cta_barrier()
            q_lo = _mma_query_operands(qn_all.index(1), qp_all.index(1), KC, q_operand)
        else:
            _wg_issue_query(
                qn_all.index(QB), qp_all.index(QB), q_tok, head0, num_heads, stride_qh, BLOCK_H,
                qn_layout, qp_layout,
            )  # fmt: skip
            async_copy.commit_group()
            if Q_LAST:
                idx_next = _wg_issue_first_tiles(pipe, BLOCK_N, NUM_STAGES, nope_layout, pe_layout)
                async_copy.wait_group(NUM_STAGES - 1)  # q's group, the oldest
            else:
                async_copy.wait_group(0)
            _cta_barrier()
            qk_row = gl.full([BLOCK_H], qk_scale, gl.float32, layout=head_layout)
        if COL_WARPS > 1:
            q_hi = ()
            for j in gl.static_range(D_V // 64):
                q_j = qn_all.index(QB).slice(j * 64, 64, dim=1)
                q_hi = q_hi + (_mma_column_operand(q_j, COL_WARPS, q3_operand, True),)
            q_hi = q_hi + (_mma_column_operand(qp_all.index(QB), COL_WARPS, q3_operand, True),)
        else:
            q_hi = _mma_query_operands(qn_all.index(QB), qp_all.index(QB), KC, q_operand)
        _cta_barrier()  # every warp holds its q: its stage takes a gather

        if not Q_LAST:
            idx_next = _wg_issue_first_tiles(pipe, BLOCK_N, NUM_STAGES, nope_layout, pe_layout)

        m_i = gl.full([BLOCK_H], float("-inf"), gl.float32, layout=head_layout)
        acc = gl.zeros([D_V, BLOCK_H], gl.float32, layout=mma_o)  # O^T
        s_zero = gl.zeros([BLOCK_N, BLOCK_H], gl.float32, layout=mma)
        l_tile = s_zero
        for i in range(n_tiles):
            idx_next, k_n, k_p = _wg_refill_and_wait(
                pipe, idx_next, i, BLOCK_N, NUM_STAGES, nope_layout, pe_layout, False
            )
            s = s_zero
            s_c = s_zero
            if COL_WARPS > 1:
                s3 = gl.zeros([COL_WARPS, BLOCK_N, BLOCK_H], gl.float32, layout=mma3)
                for j in gl.static_range(D_V // 64 + 1):
                    k_j = k_n.slice(j * 64, 64, dim=1) if j < D_V // 64 else k_p
                    k_j = _mma_column_operand(k_j, COL_WARPS, k3_operand, False)
                    s3 = mma_v2(k_j, q_hi[j], s3)
                s = _mma_column_sum(s3, scratch, mma)
            else:
                for c in gl.static_range(D_V // KC + 64 // KC):
                    if c < D_V // KC:
                        k_c = k_n.slice(c * KC, KC, dim=1).load(k_operand)
                    else:
                        k_c = k_p.slice((c - D_V // KC) * KC, KC, dim=1).load(k_operand)
                    if not FP8:
                        s = mma_v2(k_c, q_hi[c], s)
                    else:  # e4m3: a chain per 128 columns (and the rope), summed in float32
                        if c % (128 // KC) == 0:
                            s = s + s_c
                            s_c = s_zero
                        s_c = mma_v2(k_c, q_lo[c], mma_v2(k_c, q_hi[c], s_c))
            if FP8:
                s = s + s_c
            n0 = start + i * BLOCK_N
            valid = _wg_tile_valid(idx_base, n0, end, num_rows, BLOCK_N, gl.SliceLayout(1, mma))
            s = gl.where(valid[:, None], s * qk_row[None, :], float("-inf"))
            p, alpha, m_i, l_tile = _wg_softmax_step(s, m_i, l_tile, 0)
            acc = acc * gl.convert_layout(alpha, gl.SliceLayout(0, mma_o))[None, :]
            p_tile.store(p.to(p_ty))
            _cta_barrier()
            for k in gl.static_range(BLOCK_N // 16):
                if FP8:
                    v_k = _wg_v_operand(k_n.slice(16 * k, 16), v_operand, W)
                else:
                    v_k = k_n.slice(16 * k, 16).permute((1, 0)).load(v_operand)
                acc = mma_v2(v_k, p_tile.slice(16 * k, 16).load(p_operand), acc)
        async_copy.wait_group(0)
        if LATE_TRIGGER:
            _wg_launch_dependents()

        dest = (Out, LSE, PO, PLSE, t, split, head0, num_heads, num_splits)
        dest += (stride_ot, stride_oh, stride_lt, stride_lh)
        # The output rows leave through the gather stages (BLOCK_H 16-bit rows).
        _wg_mma_finish(
            acc, l_tile, m_i, v_scale, kv_tiles, dest, BLOCK_H, W, BLOCK_H, IS_SPLIT, qn_layout,
            FP8,
        )  # fmt: skip

    @gluon.jit
    def _sparse_mla_wgmma_e4m3_kernel(
        Q,
        KV,
        IDX,
        Out,
        LSE,
        PO,
        PLSE,
        qk_scale,
        num_rows,
        topk,
        chunk,
        num_heads,
        num_hb,
        num_splits,
        stride_qt,
        stride_qh,
        stride_kv,
        stride_it,
        stride_ot,
        stride_oh,
        stride_lt,
        stride_lh,
        v_scale,
        BLOCK_H: gl.constexpr,
        NUM_STAGES: gl.constexpr,
        IS_SPLIT: gl.constexpr,
        LATE_TRIGGER: gl.constexpr,
        SCORE_COLS: gl.constexpr,
    ):
        """The swapped tile for fp8 e4m3 rows: the gathered fp8 tile is the A operand of e4m3
        warpgroup MMAs for S^T = K Q^T as it lands (q in two e4m3 parts), and V is widened in
        registers, 16 rows at a time, into the fp16 A operand of O^T += V^T P^T (e4m3 MMAs
        need both operands K-major, which V^T is not). 8 or 16 heads take one warpgroup; 64
        take two, which share the gathered tiles: 32 heads each for the scores, half of V's
        columns each (all heads) for P.V, so each widens half of V.

        e4m3 warpgroup MMAs keep 13 of the accumulator's mantissa bits (SageAttention2), so one
        chain of them over all 576 columns errs by about 2e-3 of the logits' size. With
        ``SCORE_COLS`` (32, 64 or 128) each run of that many latent columns, and the rope
        part, is its own chain from zero, added to a float32 sum while the next one runs
        (NOTES.md round 22); 0: one chain."""
        BLOCK_N: gl.constexpr = 64
        D_V: gl.constexpr = 512
        f8: gl.constexpr = KV.dtype.element_ty
        # 64 heads: two warpgroups, 32 heads each, share the gathered tiles.
        WG: gl.constexpr = (BLOCK_H + 31) // 32
        W: gl.constexpr = 4 * WG
        # e4m3 MMAs take 32 of K per instruction, fp16 ones 16: one accumulator layout each.
        s_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, WG], instr_shape=[16, BLOCK_H // WG, 32]
        )
        # P.V: the warpgroups split V's columns, not the heads, so each widens half of V.
        o_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[W, 1], instr_shape=[16, BLOCK_H, 16]
        )
        nope_layout: gl.constexpr = gl.BlockedLayout([1, 16], [1, 32], [W, 1], [1, 0])
        pe_layout: gl.constexpr = gl.BlockedLayout([1, 16], [8, 4], [W, 1], [1, 0])
        v_operand: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
        qn_layout: gl.constexpr = gl.BlockedLayout([1, 8], [1, 32], [W, 1], [1, 0])
        qp_layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [W, 1], [1, 0])

        hb, split, t = _wg_program(num_hb, num_splits)
        q_parts, kv_tiles, pe_tiles, p_tile = _wg_e4m3_buffers(f8, BLOCK_H, BLOCK_N, NUM_STAGES)
        qh_n, ql_n, qh_p, ql_p = q_parts

        start = split * chunk
        end = gl.minimum(start + chunk, topk)
        n_tiles = gl.cdiv(end - start, BLOCK_N)
        idx_base = IDX + t.to(gl.int64) * stride_it
        pipe = (KV, idx_base, kv_tiles, pe_tiles, start, end, num_rows, stride_kv)
        idx_next = _wg_issue_first_tiles(pipe, BLOCK_N, NUM_STAGES, nope_layout, pe_layout)

        # q per head scaled by a power of two to |q| <= 256, in two e4m3 parts; the scale
        # leaves through the scores.
        q_tok = Q + t.to(gl.int64) * stride_qt
        head0 = hb * BLOCK_H
        scale = _wg_e4m3_query_parts(
            q_tok, head0, num_heads, stride_qh, q_parts, BLOCK_H, qn_layout, qp_layout
        )

        head_layout: gl.constexpr = gl.SliceLayout(0, s_layout)
        qk_row = qk_scale / gl.convert_layout(scale, head_layout)
        m_i = gl.full([BLOCK_H], float("-inf"), gl.float32, layout=head_layout)
        acc = gl.zeros([D_V, BLOCK_H], gl.float32, layout=o_layout)  # O^T
        s_zero = gl.zeros([BLOCK_N, BLOCK_H], gl.float32, layout=s_layout)
        l_tile = s_zero
        for i in range(n_tiles):
            idx_next, k_n, k_p = _wg_refill_and_wait(
                pipe, idx_next, i, BLOCK_N, NUM_STAGES, nope_layout, pe_layout, True
            )
            if SCORE_COLS == 0:  # one chain of MMAs over all 576 columns
                s = _wg_e4m3_part_scores(k_n, qh_n, ql_n, s_zero)
                s = warpgroup_mma(k_p, qh_p.permute((1, 0)), s, is_async=True)
                s_last = warpgroup_mma(k_p, ql_p.permute((1, 0)), s, is_async=True)
            else:  # a chain per SCORE_COLS columns, each joining a float32 sum once done
                s_last = _wg_e4m3_part_scores(k_p, qh_p, ql_p, s_zero)
                s_sum = s_zero
                for c in gl.static_range(512 // SCORE_COLS):
                    k_c = k_n.slice(c * SCORE_COLS, SCORE_COLS, dim=1)
                    qh_c = qh_n.slice(c * SCORE_COLS, SCORE_COLS, dim=1)
                    ql_c = ql_n.slice(c * SCORE_COLS, SCORE_COLS, dim=1)
                    s_next = _wg_e4m3_part_scores(k_c, qh_c, ql_c, s_zero)
                    # The last group's two MMAs done, this one's in flight.
                    s_sum = s_sum + warpgroup_mma_wait(2, deps=(s_last,))
                    s_last = s_next
            if WG == 1:  # the first 16 rows of V widen while the last score MMAs run
                v_first = _wg_v_operand(k_n.slice(0, 16), v_operand, W)
            n0 = start + i * BLOCK_N
            valid = _wg_tile_valid(
                idx_base, n0, end, num_rows, BLOCK_N, gl.SliceLayout(1, s_layout)
            )
            s = warpgroup_mma_wait(0, deps=(s_last,))
            if SCORE_COLS > 0:
                s = s_sum + s
            s = gl.where(valid[:, None], s * qk_row[None, :], float("-inf"))
            p, alpha, m_i, l_tile = _wg_softmax_step(s, m_i, l_tile, 0)
            acc = acc * gl.convert_layout(alpha, gl.SliceLayout(0, o_layout))[None, :]
            p_tile.store(p.to(gl.float16))
            fence_async_shared()
            _cta_barrier()
            if WG == 1:
                acc = warpgroup_mma(v_first, p_tile.slice(0, 16), acc, is_async=True)
                acc = warpgroup_mma_wait(1, deps=(acc,))
                for k in gl.static_range(1, BLOCK_N // 16):
                    # Widened while the last MMA runs; the one before it has let go of its rows.
                    v_k = _wg_v_operand(k_n.slice(16 * k, 16), v_operand, W)
                    acc = warpgroup_mma(v_k, p_tile.slice(16 * k, 16), acc, is_async=True)
                    acc = warpgroup_mma_wait(1, deps=(acc,))
            else:  # two warpgroups hold 255 registers: one set of widened rows at a time
                for k in gl.static_range(BLOCK_N // 16):
                    v_k = _wg_v_operand(k_n.slice(16 * k, 16), v_operand, W)
                    acc = warpgroup_mma(v_k, p_tile.slice(16 * k, 16), acc, is_async=True)
                    acc = warpgroup_mma_wait(0, deps=(acc,))
            acc = warpgroup_mma_wait(0, deps=(acc,))
        async_copy.wait_group(0)
        if LATE_TRIGGER:
            _wg_launch_dependents()

        dest = (Out, LSE, PO, PLSE, t, split, head0, num_heads, num_splits)
        dest += (stride_ot, stride_oh, stride_lt, stride_lh)
        # The rows leave through the gather stages (a stage holds 32 16-bit rows).
        O_ROWS: gl.constexpr = BLOCK_N // 2 * WG
        _wg_mma_finish(
            acc, l_tile, m_i, v_scale, kv_tiles, dest, BLOCK_H, W, O_ROWS, IS_SPLIT, qn_layout, True
        )

    @gluon.jit
    def _wg_e4m3_part_scores(k, q_hi, q_lo, s_zero):
        """S^T of keys ``k`` against q's two e4m3 parts over the same columns (shared
        memory): two warpgroup MMAs from zero, not waited for."""
        s = warpgroup_mma(k, q_hi.permute((1, 0)), s_zero, use_acc=False, is_async=True)
        return warpgroup_mma(k, q_lo.permute((1, 0)), s, is_async=True)

    @gluon.jit
    def _wg_e4m3_chunk_scores(k_n, qh_n, ql_n, col0, KC: gl.constexpr, s_zero, mma: gl.constexpr):
        """The scores of latent columns [col0, col0 + KC) of an e4m3 tile ``k_n`` (keys x 512,
        shared memory) against q's two e4m3 parts: a chain of two mma.sync steps from zero
        (``s_zero``), for the caller to add in float32."""
        k_operand: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=4)
        q_operand: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=mma, k_width=4)
        k_c = k_n.slice(col0, KC, dim=1).load(k_operand)
        qh_c = qh_n.slice(col0, KC, dim=1).permute((1, 0)).load(q_operand)
        s = mma_v2(k_c, qh_c, s_zero)
        ql_c = ql_n.slice(col0, KC, dim=1).permute((1, 0)).load(q_operand)
        return mma_v2(k_c, ql_c, s)

    @gluon.jit
    def _sparse_mla_mma_e4m3_kernel(
        Q,
        KV,
        IDX,
        Out,
        LSE,
        PO,
        PLSE,
        qk_scale,
        num_rows,
        topk,
        chunk,
        num_heads,
        num_hb,
        num_splits,
        stride_qt,
        stride_qh,
        stride_kv,
        stride_it,
        stride_ot,
        stride_oh,
        stride_lt,
        stride_lh,
        v_scale,
        BLOCK_H: gl.constexpr,
        NUM_STAGES: gl.constexpr,
        IS_SPLIT: gl.constexpr,
        LATE_TRIGGER: gl.constexpr,
        HEAD_GROUPS: gl.constexpr,
        DS: gl.constexpr,
        ROPE_REGS: gl.constexpr = False,
    ):
        """The swapped e4m3 tile for GPUs whose MMA is mma.sync (SM89, SM120; Hopper runs it
        as their proxy): the e4m3 Hopper tile's design with warp-level MMAs. cp.async gathers
        land in shared memory; S^T = K Q^T runs as e4m3 MMAs (q in two e4m3 parts) on
        operands loaded from the gathered tile; V is widened in registers into the fp16 A
        operand of O^T += V^T P^T (``_wg_v_operand``). 8 or 16 heads on ``HEAD_GROUPS`` groups
        of 4 warps for the scores, each group its own heads (16 heads on two groups read half
        of q per warp); P.V runs on all warps, each its own V columns, so V is widened once;
        2 stages fit a 99 KB block (fp8_ds_mla rows with 16 heads only with ``ROPE_REGS``).
        The scores of each 128 columns start from zero and join a float32 sum: SM89's e4m3
        mma.sync keeps 13 of its accumulator's mantissa bits (SageAttention2) and SM120 runs
        the same instruction (QMMA); Hopper runs it as two fp16 MMAs (NOTES.md round 22).

        ``DS``: fp8_ds_mla rows (KV their bytes as e4m3, ``stride_kv`` 656 or more): each
        128-column group of the latent has its own scale per row, so the scores sum four
        group MMAs, each times its keys' scales, and the bf16 rope part scores in a bf16 MMA;
        V is widened times each row's group scale over that group's largest in the tile
        (``_wg_v_operand``'s factors, fp16), which multiplies the P.V rows of its group before
        they join the accumulator. The scales ride in registers, loaded one tile ahead.
        ``ROPE_REGS`` (with ``DS``): q's rope part is held in registers, not shared memory (2 KB
        less: 101,120 bytes at 16 heads; on the H200 as fast at 16 heads, 1.01-1.08x slower at
        8, where the sm_90 build spills)."""
        BLOCK_N: gl.constexpr = 64
        D_V: gl.constexpr = 512
        KC: gl.constexpr = 128  # latent columns per score MMA step (one 128-byte swizzle row)
        f8: gl.constexpr = KV.dtype.element_ty
        W: gl.constexpr = 4 * HEAD_GROUPS
        mma: gl.constexpr = gl.NVMMADistributedLayout(
            version=[2, 0], warps_per_cta=[4, HEAD_GROUPS], instr_shape=[16, 8]
        )
        # P.V: all warps split V's columns, so V is widened once whatever the head groups.
        mma_o: gl.constexpr = gl.NVMMADistributedLayout(
            version=[2, 0], warps_per_cta=[W, 1], instr_shape=[16, 8]
        )
        k_operand: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=4)
        q_operand: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=mma, k_width=4)
        v_operand: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma_o, k_width=2)
        p_operand: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=mma_o, k_width=2)
        nope_layout: gl.constexpr = gl.BlockedLayout([1, 16], [1, 32], [W, 1], [1, 0])
        qn_layout: gl.constexpr = gl.BlockedLayout([1, 8], [1, 32], [W, 1], [1, 0])
        qp_layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [W, 1], [1, 0])
        key_layout: gl.constexpr = gl.SliceLayout(1, mma)
        if DS:
            pe_ty: gl.constexpr = Q.dtype.element_ty  # bf16, as the rows' rope part
            pe_layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [W, 1], [1, 0])
        else:
            pe_ty: gl.constexpr = f8
            pe_layout: gl.constexpr = gl.BlockedLayout([1, 16], [8, 4], [W, 1], [1, 0])

        hb, split, t = _wg_program(num_hb, num_splits)
        Q_ROPE_PARTS: gl.constexpr = (0 if ROPE_REGS else 1) if DS else 2
        q_parts, kv_tiles, pe_tiles, p_tile = _wg_e4m3_buffers(
            f8, BLOCK_H, BLOCK_N, NUM_STAGES, pe_ty, Q_ROPE_PARTS
        )
        qh_n, ql_n = q_parts[0], q_parts[1]

        start = split * chunk
        end = gl.minimum(start + chunk, topk)
        n_tiles = gl.cdiv(end - start, BLOCK_N)
        idx_base = IDX + t.to(gl.int64) * stride_it
        pipe = (KV, idx_base, kv_tiles, pe_tiles, start, end, num_rows, stride_kv)
        idx_next = _wg_issue_first_tiles(pipe, BLOCK_N, NUM_STAGES, nope_layout, pe_layout)

        q_tok = Q + t.to(gl.int64) * stride_qt
        head0 = hb * BLOCK_H
        scale = _wg_e4m3_query_parts(
            q_tok, head0, num_heads, stride_qh, q_parts, BLOCK_H, qn_layout, qp_layout
        )

        head_layout: gl.constexpr = gl.SliceLayout(0, mma)
        qk_row = qk_scale / gl.convert_layout(scale, head_layout)
        m_i = gl.full([BLOCK_H], float("-inf"), gl.float32, layout=head_layout)
        acc = gl.zeros([D_V, BLOCK_H], gl.float32, layout=mma_o)  # O^T
        s_zero = gl.zeros([BLOCK_N, BLOCK_H], gl.float32, layout=mma)
        l_tile = s_zero
        if DS:
            rope_k: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
            rope_q: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=mma, k_width=2)
            f_smem: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
            factors = gl.allocate_shared_memory(gl.float16, [BLOCK_N, 4], f_smem)  # keys x groups
            # q's rope part, whole: the B operand of each tile's rope MMA.
            if ROPE_REGS:
                q_heads = head0 + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(0, rope_q))
                q_cols = 512 + gl.arange(0, 64, layout=gl.SliceLayout(1, rope_q))
                q_pe_ptr = q_tok + q_heads.to(gl.int64)[None, :] * stride_qh + q_cols[:, None]
                q_pe = gl.load(q_pe_ptr, mask=(q_heads < num_heads)[None, :], other=0.0)
            else:
                q_pe_rows, _ = _wg_rope_query(
                    q_tok, head0, num_heads, stride_qh, BLOCK_H, qp_layout
                )
                q_parts[2].store(q_pe_rows.to(pe_ty))
            ds_rows = _wg_ds_rows(
                KV, idx_base, start, end, num_rows, stride_kv, BLOCK_N, key_layout
            )
        for i in range(n_tiles):
            idx_next, k_n, k_p = _wg_refill_and_wait(
                pipe, idx_next, i, BLOCK_N, NUM_STAGES, nope_layout, pe_layout, False
            )
            if DS:
                valid, sc0, sc1, sc2, sc3 = ds_rows
                n1 = start + (i + 1) * BLOCK_N  # the next tile's rows
                ds_rows = _wg_ds_rows(
                    KV, idx_base, n1, end, num_rows, stride_kv, BLOCK_N, key_layout
                )
                sc = (sc0, sc1, sc2, sc3)
                if not ROPE_REGS:
                    q_pe = q_parts[2].permute((1, 0)).load(rope_q)
                s_pe = mma_v2(k_p.load(rope_k), q_pe, s_zero)
                s = s_zero
                for c in gl.static_range(D_V // KC):
                    s_c = _wg_e4m3_chunk_scores(k_n, qh_n, ql_n, c * KC, KC, s_zero, mma)
                    s = s + s_c * gl.expand_dims(sc[c], 1)
                s = gl.where(valid[:, None], s * qk_row[None, :] + s_pe * qk_scale, float("-inf"))
            else:
                qh_p, ql_p = q_parts[2], q_parts[3]
                k_c = k_p.load(k_operand)
                s = mma_v2(k_c, qh_p.permute((1, 0)).load(q_operand), s_zero)
                s = mma_v2(k_c, ql_p.permute((1, 0)).load(q_operand), s)
                for c in gl.static_range(D_V // KC):
                    s = s + _wg_e4m3_chunk_scores(k_n, qh_n, ql_n, c * KC, KC, s_zero, mma)
                n0 = start + i * BLOCK_N
                valid = _wg_tile_valid(idx_base, n0, end, num_rows, BLOCK_N, key_layout)
                s = gl.where(valid[:, None], s * qk_row[None, :], float("-inf"))
            p, alpha, m_i, l_tile = _wg_softmax_step(s, m_i, l_tile, 0)
            acc = acc * gl.convert_layout(alpha, gl.SliceLayout(0, mma_o))[None, :]
            p_tile.store(p.to(gl.float16))
            if DS:
                # Each group's largest scale in the tile (1 where no row is real: p is 0).
                tops = (_wg_top(sc0), _wg_top(sc1), _wg_top(sc2), _wg_top(sc3))
                for c in gl.static_range(4):
                    f_c = gl.expand_dims(sc[c] / tops[c], 1).to(gl.float16)
                    factors.slice(c, 1, dim=1).store(f_c)
            _cta_barrier()
            if DS:
                pv = gl.zeros([D_V, BLOCK_H], gl.float32, layout=mma_o)
                for k in gl.static_range(BLOCK_N // 16):
                    f_k = factors.slice(16 * k, 16)
                    v_k = _wg_v_operand(k_n.slice(16 * k, 16), v_operand, W, f_k)
                    pv = mma_v2(v_k, p_tile.slice(16 * k, 16).load(p_operand), pv)
                # P.V in units of each group's largest scale: its rows times their group's.
                acc = acc + _wg_times_group(pv, tops, W)
            else:
                for k in gl.static_range(BLOCK_N // 16):
                    v_k = _wg_v_operand(k_n.slice(16 * k, 16), v_operand, W)
                    acc = mma_v2(v_k, p_tile.slice(16 * k, 16).load(p_operand), acc)
        async_copy.wait_group(0)
        if LATE_TRIGGER:
            _wg_launch_dependents()

        dest = (Out, LSE, PO, PLSE, t, split, head0, num_heads, num_splits)
        dest += (stride_ot, stride_oh, stride_lt, stride_lh)
        # The rows leave through the gather stages (a stage holds 32 16-bit rows).
        O_ROWS: gl.constexpr = BLOCK_N // 2
        _wg_mma_finish(
            acc, l_tile, m_i, v_scale, kv_tiles, dest, BLOCK_H, W, O_ROWS, IS_SPLIT, qn_layout, True
        )


@functools.lru_cache(maxsize=16)
def _num_sms(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def _dotted(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))


# Gluon is experimental and its API changes between releases. The Gluon kernels compile under
# Triton 3.6 to 3.8 (CI compiles them for every target under each), and run where the GPU suite
# has passed under that Triton; under the others the tl.dot kernels serve every GPU.
# GLMOPS_SPARSE_MLA_GLUON=1 runs them under any Triton they compile under: how a GPU suite run
# verifies one before it is added here.
_GLUON_FIRST, _GLUON_LAST = (3, 6), (3, 8)
_GLUON_COMPILES = gluon is not None and _GLUON_FIRST <= _TRITON <= _GLUON_LAST
_GLUON_VERIFIED = ((3, 6),)
_GLUON_RANGE = f"Triton {_dotted(_GLUON_FIRST)} to {_dotted(_GLUON_LAST)}"
_GLUON_TRITONS = (  # what the refusals say of the Triton
    f"a Triton that runs the Gluon kernels ({', '.join(map(_dotted, _GLUON_VERIFIED))}, "
    f"or any of {_GLUON_RANGE} with GLMOPS_SPARSE_MLA_GLUON=1)"
)
_GLUON_API = _GLUON_COMPILES and (
    _TRITON in _GLUON_VERIFIED or os.environ.get("GLMOPS_SPARSE_MLA_GLUON") == "1"
)


def _gluon_off_reason() -> str | None:
    """Why this Triton runs the tl.dot kernels where a Gluon tile would serve, or None."""
    if _GLUON_API:
        return None
    if not _GLUON_COMPILES:
        return f"needs {_GLUON_RANGE}"
    return (
        f"is not yet verified on a GPU under Triton {triton.__version__}; "
        "GLMOPS_SPARSE_MLA_GLUON=1 runs it"
    )


def _gluon_usable(capability: tuple[int, int], api: bool | None = None) -> bool:
    """The Hopper Gluon kernels: warpgroup MMA (SM90 only: Blackwell has none). ``api``:
    whether the Triton has their Gluon API (``None``: this one)."""
    return (_GLUON_API if api is None else api) and capability[0] == 9


@functools.lru_cache(maxsize=16)
def _has_wgmma(device_index: int) -> bool:
    return _gluon_usable(torch.cuda.get_device_capability(device_index))


def _gluon_mma_usable(
    capability: tuple[int, int], proxy: bool = False, api: bool | None = None
) -> bool:
    """The Gluon tiles with mma.sync: for SM80-89 and SM120/121, whose only MMA that is, under
    Triton's Gluon (``_GLUON_API``; their e4m3 tile needs SM89+, as fp8 rows do:
    ``_unsupported``).
    ``proxy``: Hopper may run them too (the benchmark's stand-in for SM120); its plan takes
    the 32-head one and, for fp8_ds_mla rows, the e4m3 one (``_default_config``), its own
    tiles being faster elsewhere. ``api`` as for ``_gluon_usable``."""
    target = capability[0] in (8, 12) or (proxy and capability[0] == 9)
    return (_GLUON_API if api is None else api) and target


def _gluon_takes(q_dtype: torch.dtype, kv_dtype: torch.dtype, kv_format: str) -> bool:
    """Whether the Gluon tiles take this q over these rows: 16-bit rows of q's dtype, fp8 e4m3
    rows under either 16-bit q, fp8_ds_mla rows under a bf16 q (their rope part is bf16). The
    e4m3 tiles hold q to about bf16's precision (its two e4m3 parts), an fp16 q too: the rows'
    own e4m3 rounding (2^-4 of each value) is the larger error (NOTES.md round 28)."""
    if kv_format == "fp8":
        return q_dtype in (torch.float16, torch.bfloat16)
    if kv_format == "fp8_ds_mla":
        return q_dtype == torch.bfloat16
    return q_dtype == kv_dtype


def _device_index(device: torch.device | int) -> int:
    """A device's index; the current device for ``cuda`` without one."""
    index = device if isinstance(device, int) else device.index
    return torch.cuda.current_device() if index is None else index


@functools.lru_cache(maxsize=16)
def _has_gluon_mma(device_index: int) -> bool:
    return _gluon_mma_usable(torch.cuda.get_device_capability(device_index))


def _gluon_tile(cfg: dict[str, int]) -> bool:
    """Whether a config names one of the Gluon kernels (16-bit partials, Gluon launch)."""
    return bool(cfg.get("WGMMA") or cfg.get("MMA_V2"))


def _fits_cp_async(*tensors: torch.Tensor) -> bool:
    """Every buffer 16-byte aligned and every stride but the last (contiguous) one a multiple
    of 16 elements. The Gluon kernel copies q and KV rows in 16-byte pieces, which Triton emits
    only where it can prove that alignment (its integer specialization); for fp8_ds_mla rows
    (uint8) it is the 16-byte row alignment their fp32 scales and bf16 rope part need."""
    return all(
        t.data_ptr() % 16 == 0 and all(st % 16 == 0 for st in t.stride()[:-1]) for t in tensors
    )


@functools.lru_cache(maxsize=16)
def _has_pdl(device_index: int) -> bool:
    """Programmatic dependent launch (griddepcontrol) exists from SM90 on."""
    return torch.cuda.get_device_capability(device_index)[0] >= 9


class DeviceLimits(NamedTuple):
    """What a tile must fit on a GPU: its compute capability and the opt-in shared memory per
    block in bytes (``cudaDevAttrMaxSharedMemoryPerBlockOptin``). Registers need no entry: no
    tile asks for more than 255 per thread, 64K per block (every target from SM80 on)."""

    capability: tuple[int, int]
    smem_per_block: int


H200_LIMITS = DeviceLimits((9, 0), 232448)
MAX_HEADS = 128  # query heads per GPU that the plan and the GPU suite cover (DeepSeek-V3.2 at TP 1)
KV_FORMATS = ("16bit", "fp8", "fp8_ds_mla")  # fp16/bf16 rows, fp8 e4m3 rows, FlashMLA fp8 rows
_KV_FMT_CODE = {"16bit": 0, "fp8_ds_mla": 1, "fp8": 2}


@functools.lru_cache(maxsize=16)
def _device_limits(device_index: int) -> DeviceLimits:
    props = torch.cuda.get_device_properties(device_index)
    return DeviceLimits((props.major, props.minor), props.shared_memory_per_block_optin)


_RESERVED_SMEM_PER_BLOCK = 1024  # CUDA's own shared memory in each resident block (SM80 on)


def _blocks_per_sm(tile_smem: int, limits: DeviceLimits) -> int:
    """How many programs of a tile one SM holds by shared memory: an SM has the block opt-in
    plus the reserved KB (SM80 164 KB, SM86/89/120 100 KB, SM90/100 228 KB), each block takes
    its own reserved KB. So a 76-93 KB tile runs two per SM on Hopper but one on a 99 KB GPU,
    and the 93 KB ones one on SM80. (Registers never bind first: the tiles that aim for two
    per SM have 4 warps, and two blocks of 4 warps at 255 registers fit every SM's 64K.)"""
    per_sm = limits.smem_per_block + _RESERVED_SMEM_PER_BLOCK
    return per_sm // (tile_smem + _RESERVED_SMEM_PER_BLOCK)


def _mma_family(capability: tuple[int, int]) -> str:
    """How Triton lowers the tl.dot kernel's dots, which sets its shared memory: warpgroup MMA
    on SM90, tensor-memory MMA on SM100/103, mma.sync everywhere else (SM80-89, SM120/121)."""
    return {9: "sm90", 10: "sm100"}.get(capability[0], "mma")


def _tile(
    block_h: int,
    block_n: int,
    warps: int,
    stages: int,
    waves: int,
    prefetch: int = 0,
    fp8_twice: int = 0,
    v_asm: int = 0,
    e4m3_bits: int = 0,
    groups: str = "",
    rounds: int = 1,
):
    """A tl.dot tile. ``groups``: fp8_ds_mla rows on ``_sparse_mla_ds_split_kernel``, the
    latent's groups widened to bf16 and gathered again for P.V ("again") or kept in registers
    ("kept"), or widened to fp16 and kept ("fp16"). ``rounds``: ``ROUNDS``, where one program
    per SM runs (``_fill_splits``)."""
    cfg = {"BLOCK_H": block_h, "BLOCK_N": block_n, "num_warps": warps, "num_stages": stages}
    cfg = {**cfg, "WAVES": waves, **({"PREFETCH_IDX": 1} if prefetch else {})}
    cfg = {**cfg, **({"FP8_TWICE": 1, "FP16_DOTS": 1} if fp8_twice else {})}
    cfg = {**cfg, **({"FP16_DOTS": 1, "E4M3_BITS": 1} if e4m3_bits else {})}
    cfg = {**cfg, **({"FP8_GROUPS": 1} if groups else {})}
    cfg = {**cfg, **({"FP8_TWICE": 1} if groups == "again" else {})}
    cfg = {**cfg, **({"FP16_DOTS": 1} if groups == "fp16" else {})}
    cfg = {**cfg, **({"ROUNDS": rounds} if rounds > 1 else {})}
    return {**cfg, **({"V_ASM": 1} if v_asm or e4m3_bits else {})}


def _fp16_dots(cfg: dict[str, int]) -> bool:
    """fp8 rows (e4m3, or fp8_ds_mla's groups) under a bf16 q: the tl.dot kernels' dots in
    fp16 (q shifted per head)."""
    return bool(cfg.get("FP16_DOTS", 0))


# tl.dot tiles per (row format, head block), best first (the first ones are the H200 sweeps'
# choices, NOTES.md), each with the shared memory per block it needs on each MMA family: the
# larger of Triton 3.5.1's and 3.6.0's compiles, in bytes.
# tests/unit/test_sparse_mla_targets.py compiles every tile the plan can choose for SM80, 86,
# 89, 90, 100 and 120 with both and checks these numbers and each target's limits.
# 16-head tiles keep two gathers in flight (indices prefetched, 3 stages) and aim for two
# programs per SM where an SM holds two (``_blocks_per_sm``); 64-head tiles one. Where a 64-head
# tile does not fit, 32-head blocks read the rows once per block (the second from L2), as
# H = 128 does with 64-head blocks everywhere.
_TILES: dict[tuple[str, int], tuple[tuple[dict[str, int], dict[str, int]], ...]] = {
    ("16bit", 16): ((_tile(16, 32, 4, 3, 2, 1), {"mma": 93184, "sm90": 93184, "sm100": 93184}),),
    ("16bit", 32): ((_tile(32, 32, 4, 2, 2), {"mma": 75904, "sm90": 75904, "sm100": 75904}),),
    ("16bit", 64): (
        (_tile(64, 64, 8, 2, 1), {"mma": 155904, "sm90": 221440, "sm100": 287536}),
        (_tile(64, 32, 8, 2, 1), {"mma": 114816, "sm90": 147584, "sm100": 180912}),
        (_tile(32, 32, 4, 2, 2), {"mma": 75904, "sm90": 75904, "sm100": 75904}),
    ),
    # fp8 e4m3 rows, 16 heads: the latent gathered once, widened once by moving bits into an
    # fp16 tile that both dots read, indices prefetched (1.07-1.2x over the latent gathered
    # per dot, NOTES.md). 32 heads: the latent gathered once per dot, fp16 dots, V widened by
    # inline PTX (1.2-1.4x at B >= 8); 99 KB GPUs take the 32-head tile with the bits
    # (1.09-1.22x over the per-dot gathers at 64+ heads on the H200).
    ("fp8", 16): (
        (_tile(16, 32, 4, 3, 2, 1, e4m3_bits=1), {"mma": 92160, "sm90": 92160, "sm100": 92160}),
    ),
    ("fp8", 32): (
        (_tile(32, 32, 4, 2, 2, 0, 1, 1), {"mma": 106624, "sm90": 106624, "sm100": 106624}),
        (_tile(32, 32, 4, 2, 2, e4m3_bits=1), {"mma": 92288, "sm90": 92288, "sm100": 92288}),
        (_tile(32, 32, 4, 2, 2, fp8_twice=1), {"mma": 73856, "sm90": 73856, "sm100": 73856}),
    ),
    ("fp8", 64): (
        (_tile(64, 64, 8, 2, 1), {"mma": 143616, "sm90": 184576, "sm100": 184608}),
        (_tile(64, 32, 8, 2, 1), {"mma": 108672, "sm90": 131072, "sm100": 129184}),
        (_tile(32, 32, 4, 2, 2, e4m3_bits=1), {"mma": 92288, "sm90": 92288, "sm100": 92288}),
        (_tile(32, 32, 4, 2, 2, fp8_twice=1), {"mma": 73856, "sm90": 73856, "sm100": 73856}),
    ),
    # fp8_ds_mla rows: the kernel that keeps the latent in fp8 groups (``FP8_GROUPS``) for 16-
    # and 32-head blocks, 1.16-1.22x over widening them to scaled values on the H200 (groups in
    # bf16, gathered again for P.V), 1.03-1.13x more with the groups in fp16, kept (NOTES.md
    # round 19), and everywhere on 99 KB GPUs (1.6-3x over the 16-row tile that fit there);
    # where it fits, the widening kernel's 64-head tile, 1.25-1.6x over the grouped one at 64+
    # heads (NOTES.md round 18). The grouped tiles, bound by their widening and MMAs rather than
    # their gathers, queue up to 4 rounds of programs where one runs per SM (NOTES.md round 25).
    ("fp8_ds_mla", 16): (
        (
            _tile(16, 32, 4, 2, 2, groups="fp16", rounds=4),
            {"mma": 73856, "sm90": 73856, "sm100": 73856},
        ),
    ),
    ("fp8_ds_mla", 32): (
        (
            _tile(16, 32, 4, 2, 2, groups="fp16", rounds=4),
            {"mma": 73856, "sm90": 73856, "sm100": 73856},
        ),
    ),
    ("fp8_ds_mla", 64): (
        (_tile(64, 64, 8, 2, 1), {"mma": 247040, "sm90": 189696, "sm100": 190240}),
        (
            _tile(64, 32, 8, 2, 1, groups="kept", rounds=4),
            {"mma": 86656, "sm90": 131712, "sm100": 132176},
        ),
    ),
}


def _unsupported(num_heads: int, kv_format: str, limits: DeviceLimits) -> str | None:
    """Why the kernel cannot serve this head count and row format on a device, or None."""
    major, minor = limits.capability
    device = f"SM{major}{minor} ({limits.smem_per_block} B of shared memory per block)"
    if kv_format not in KV_FORMATS:
        return f"unknown KV row format {kv_format!r} (one of {', '.join(KV_FORMATS)})"
    if limits.capability < (8, 0):
        return f"{device}: the kernel needs SM80 or newer"
    if kv_format != "16bit" and limits.capability < (8, 9):
        return f"{device}: {kv_format} rows need SM89 or newer (fp8 conversion in hardware)"
    if not 1 <= num_heads <= MAX_HEADS:
        return f"{num_heads} query heads per GPU: supported are 1 to {MAX_HEADS}"
    block_h = min(64, max(16, triton.next_power_of_2(num_heads)))
    family = _mma_family(limits.capability)
    if all(smem[family] > limits.smem_per_block for _, smem in _TILES[kv_format, block_h]):
        return f"{device}: no {kv_format} tile for {num_heads} heads fits"
    return None


def sparse_mla_supported_heads(kv_format: str, limits: DeviceLimits) -> list[int]:
    """The query head counts per GPU that the kernel serves on a device with these limits."""
    return [h for h in range(1, MAX_HEADS + 1) if _unsupported(h, kv_format, limits) is None]


def sparse_mla_check(num_heads: int, kv_format: str, device: torch.device | int) -> None:
    """Raises ValueError, naming the device and the reason, where the kernel cannot serve
    ``num_heads`` query heads over ``kv_format`` rows on ``device``: a caller's start-up check,
    so that nothing fails at the first forward."""
    limits = _device_limits(_device_index(device))
    reason = _unsupported(num_heads, kv_format, limits)
    if reason is not None:
        heads = sparse_mla_supported_heads(kv_format, limits) if kv_format in KV_FORMATS else []
        served = f"{heads[0]} to {heads[-1]} query heads" if heads else "no head count"
        raise ValueError(f"{reason} (this GPU serves {served} with {kv_format} rows)")


def sparse_mla_kernel_summary(
    num_heads: int, kv_format: str, device: torch.device | int, q_dtype: torch.dtype
) -> str:
    """The decode tile the plan gives ``num_heads`` heads over ``kv_format`` rows on ``device``
    under this Triton, with q of ``q_dtype`` (16-bit rows: of the rows' dtype), in words for a
    caller's start-up log, with why not a Gluon tile where one would serve otherwise: which
    kernels run depends on the Triton the vLLM release brings (the Gluon ones run under Triton
    3.6, vLLM 0.17 to 0.26: ``_gluon_off_reason``) and on q's dtype (fp8_ds_mla rows: bf16
    only, as the backend casts it)."""
    limits = _device_limits(_device_index(device))
    kv_dtype = q_dtype if kv_format == "16bit" else torch.uint8

    def tile(api: bool | None, q_ok: bool) -> dict[str, int]:
        wgmma = q_ok and _gluon_usable(limits.capability, api)
        gluon_mma = q_ok and _gluon_mma_usable(limits.capability, api=api)
        return _default_config(num_heads, kv_format, wgmma, limits, gluon_mma)

    def words(cfg: dict[str, int]) -> str:
        kinds = {"WGMMA": "Gluon warpgroup-MMA", "MMA_V2": "Gluon mma.sync"}
        kind = next((name for key, name in kinds.items() if cfg.get(key)), "tl.dot")
        return f"{kind} tile {cfg['BLOCK_H']}x{cfg['BLOCK_N']}, {cfg['num_warps']} warps"

    q_ok = _gluon_takes(q_dtype, kv_dtype, kv_format)
    cfg, best = tile(None, q_ok), tile(True, True)
    text = words(cfg)
    if _gluon_tile(cfg) and kv_format != "16bit":
        text += " (the tl.dot tile for batches too small to fill the GPU with 64-row tiles)"
    text += f"; Triton {triton.__version__}"
    if _gluon_tile(cfg) and _TRITON not in _GLUON_VERIFIED:
        text += " (GLMOPS_SPARSE_MLA_GLUON=1: the Gluon tiles are not verified under it)"
    if _gluon_tile(best) and not _gluon_tile(cfg):
        why = [reason] if (reason := _gluon_off_reason()) else []
        q_name = str(q_dtype).removeprefix("torch.")
        why += [] if q_ok else [f"does not take a {q_name} q over {kv_format} rows"]
        text += f" (the {words(best)} {' and '.join(why)})"
    major, minor = limits.capability
    return (
        f"{num_heads} query heads, {str(q_dtype).removeprefix('torch.')} q over {kv_format} "
        f"rows on SM{major}{minor} ({limits.smem_per_block} B of shared memory per block): {text}"
    )


# Shared memory of the 16-head fp8_ds_mla tile with q's rope part in shared memory (Triton
# 3.6, sm_89/90/120; tests/unit/test_sparse_mla_targets.py compiles both forms).
_DS_TILE_16_HEADS_SMEM = 103_168


def _ds_rope_in_registers(cfg: dict[str, int], kv_format: str, limits: DeviceLimits) -> dict:
    """``cfg`` with q's rope part in registers (``ROPE_REGS``) where it is the 16-head e4m3
    mma.sync tile over fp8_ds_mla rows on a GPU whose blocks cannot hold its shared-memory
    form (under 103,168 bytes), unless it says otherwise: the plan's tile and overrides."""
    ds_16 = kv_format == "fp8_ds_mla" and cfg.get("MMA_V2") and cfg["BLOCK_H"] == 16
    if ds_16 and limits.smem_per_block < _DS_TILE_16_HEADS_SMEM:
        return {"ROPE_REGS": 1, **cfg}
    return cfg


def _e4m3_mma_tile(num_heads: int, waves: int) -> dict[str, int]:
    """``_sparse_mla_mma_e4m3_kernel``'s tile for up to 16 heads: 64-row tiles at 2 stages, 8
    heads on 4 warps or 16 on two groups of 4."""
    block_h = 8 if num_heads <= 8 else 16
    return {"BLOCK_H": block_h, "BLOCK_N": 64, "num_warps": block_h // 2, "num_stages": 2,
            "WAVES": waves, "MMA_V2": 1}  # fmt: skip


def _column_groups(kv_format: str) -> dict[str, int]:
    """``_sparse_mla_mma_kernel``'s scores over 16-bit rows as a dot batched over two groups
    of columns, 16 heads a warp (NOTES.md round 23); e4m3 rows keep one (q's two parts would
    need twice the registers)."""
    return {"COL_WARPS": 2} if kv_format == "16bit" else {}


def _default_config(
    num_heads: int,
    kv_format: str = "16bit",
    wgmma: bool = False,
    limits: DeviceLimits = H200_LIMITS,
    gluon_mma: bool = False,
) -> dict[str, int]:
    """Tile shape by head count, row format and device: the first tl.dot tile in ``_TILES``
    that fits the device's shared memory, or a Gluon tile. ``WAVES`` is how many programs per
    SM the split count aims for; ``ROUNDS``, how many rounds of them it may queue to fill SMs
    that a power of two leaves idle (one program per SM only; default 1). ``wgmma`` (Hopper,
    16-bit rows) picks the Gluon kernels: the swapped tile for up to 16 heads (two 64-row
    stages, ~158-168 KB, one per SM; NOTES.md round 8), the 32-head mma.sync tile for 17-32
    (NOTES.md round 17; e4m3 rows too) and the 64-head tile for 33+ (NOTES.md round 6).
    With fp8 e4m3 rows it picks the swapped e4m3 tile for up to 16 heads
    and, with two warpgroups, for 33+ (NOTES.md rounds 12 and 14); other heads and formats
    keep the tl.dot tiles. ``gluon_mma`` (SM8x, SM120: ``_gluon_mma_usable``) picks the e4m3
    tile with mma.sync for fp8 e4m3 rows with up to 16 heads (NOTES.md round
    15), the mma.sync tiles with q in registers for 16-bit rows with up to 32 heads and e4m3
    rows with 17-32, and for 33+ heads (16-bit or e4m3 rows) where no 64-head tl.dot tile fits
    (NOTES.md round 17). fp8_ds_mla rows take the e4m3 mma.sync tile with up to 16 heads
    wherever the mma.sync tiles or Hopper's run (NOTES.md rounds 19 and 20).
    """
    reason = _unsupported(num_heads, kv_format, limits)
    if reason is not None:
        raise ValueError(f"sparse MLA decode: {reason}")
    if kv_format == "fp8_ds_mla" and (gluon_mma or wgmma) and num_heads <= 16:
        # The e4m3 mma.sync tile over fp8_ds_mla rows (``DS``): 8 heads on 4 warps (93 KB; two
        # per SM on Hopper), 16 on 8 warps (103 KB; 101,120 bytes with q's rope part in
        # registers, which a 99 KB GPU needs): 1.2-1.6x over the grouped tl.dot tile at
        # B >= 8 with 8 heads, 1.05-1.21x with 16 (NOTES.md rounds 19 and 20).
        tile = _e4m3_mma_tile(num_heads, waves=2 if wgmma and num_heads <= 8 else 1)
        return _ds_rope_in_registers(tile, kv_format, limits)
    if gluon_mma and kv_format == "fp8" and num_heads <= 16:
        # 84 KB at 8 heads, 94 KB at 16: one program per SM on a 99 KB GPU. 16 heads run on
        # two groups of 4 warps, 8 heads each (5-14% faster than one group on the H200).
        return _e4m3_mma_tile(num_heads, waves=1)
    mma_rows = kv_format == "16bit" or (kv_format == "fp8" and num_heads > 16)
    if mma_rows and num_heads <= 32 and (gluon_mma or (wgmma and num_heads > 16)):
        # q in registers, two warps along the keys and one per 8 heads (one program per SM):
        # 16-bit rows 1.06-1.33x over the 16-head tl.dot tile one per SM at B >= 8,
        # 1.27-1.69x over the 32-head one; e4m3 rows with 17-32 heads 1.02-1.37x over the
        # e4m3 tl.dot tiles (NOTES.md round 17). Hopper keeps its swapped tiles for up to 16.
        block_h = 16 if num_heads <= 16 else 32
        return {"BLOCK_H": block_h, "BLOCK_N": 32, "num_warps": block_h // 4, "num_stages": 2,
                "WAVES": 1, "MMA_V2": 1, **_column_groups(kv_format)}  # fmt: skip
    family = _mma_family(limits.capability)
    block_h = min(64, max(16, triton.next_power_of_2(num_heads)))
    wide_tl_dot = any(
        cfg["BLOCK_H"] == 64 and smem[family] <= limits.smem_per_block
        for cfg, smem in _TILES[kv_format, 64]
    )
    if gluon_mma and kv_format in ("16bit", "fp8") and block_h == 64 and not wide_tl_dot:
        # 64-head blocks that gather each row once where no 64-head tl.dot tile fits (99 KB
        # GPUs), q in registers, 78 KB (16-bit rows: 96.5 KB with the column groups' scratch);
        # the stages hold q on its way there: 64 16-bit rows, 128 e4m3 ones (NOTES.md round
        # 17). Bound by its MMAs, it queues up to 4 rounds of programs per SM where powers of
        # two leave SMs idle (``_fill_splits``; NOTES.md round 24).
        return {"BLOCK_H": 64, "BLOCK_N": 32, "num_warps": 8,
                "num_stages": 4 if kv_format == "fp8" else 2, "WAVES": 1, "ROUNDS": 4,
                "MMA_V2": 1, **_column_groups(kv_format)}  # fmt: skip
    gluon = wgmma and kv_format in ("16bit", "fp8")
    if gluon and num_heads <= 16:
        # The swapped tile: 8 or 16 heads are the MMA's N, so H=8 computes no padding rows.
        # Its e4m3 twin widens V in registers (84-95 KB) and runs two programs per SM where
        # each split keeps 8+ tiles (NOTES.md round 14).
        tile = {"BLOCK_H": 8 if num_heads <= 8 else 16, "BLOCK_N": 64, "num_warps": 4,
                "num_stages": 2, "WAVES": 1, "WGMMA": 1}  # fmt: skip
        return {**tile, "WAVES": 2, "MIN_TILES": 8} if kv_format == "fp8" else tile
    if gluon and block_h == 64:
        # The 64-head tile; for e4m3 rows, the e4m3 tile with two warpgroups sharing its
        # gathers (32 heads each for the scores, half of V's columns each for P.V; NOTES.md
        # rounds 14 and 16). 128 heads run two blocks.
        return {"BLOCK_H": 64, "BLOCK_N": 64, "num_warps": 8, "num_stages": 2, "WAVES": 1,
                "WGMMA": 1}  # fmt: skip
    cfg, smem = next(
        (cfg, smem[family])
        for cfg, smem in _TILES[kv_format, block_h]
        if smem[family] <= limits.smem_per_block
    )
    # Two programs per SM where the SM holds two (Hopper, Blackwell datacenter), else one, whose
    # split count then fills the SMs (``_fill_splits``; NOTES.md round 25).
    return {**cfg, "WAVES": min(cfg["WAVES"], _blocks_per_sm(smem, limits))}


@functools.lru_cache(maxsize=256)  # on every call's path: the fill tries many counts
def _choose_splits(
    num_tokens: int,
    programs_per_token: int,
    topk: int,
    num_heads: int,
    block_n: int,
    num_sms: int,
    waves: int,
    min_tiles: int = 1,
    rounds: int = 1,
) -> int:
    """Split count: a power of two near ``waves`` programs per SM, but once about every SM has
    a program, no more splits than keep the partials written under an eighth of the KV bytes
    gathered (the merge reads them back, so partial traffic stays under a quarter). A token's
    rows are gathered once per head block: 99 KB GPUs serve 64+ heads with 32-head blocks,
    where counting them once cost B=32/H=64 105 µs at 2 splits against 74 at 4 (H200,
    ``sweeps/sparse_mla_h200_sm120_tiles_bf16.json``).

    Each split writes H x 2 KB of fp32 partials per token (the Gluon tiles half as much; the cap
    is not binding for them at one program per SM) against topk x 1152 B of KV; at B=8
    the extra parallelism of a second program per SM costs more in partials than it buys
    (H200: H=8 14.1 us at 16 splits, 15.3 at 32; H=16 14.4 vs 17.0; NOTES.md round 4). The
    cap counts 16-bit rows for fp8_ds_mla rows too: their widening, not their bytes, sets the
    pace (fp8 B=32/H=8: 55.9 us at 8 splits, 75.9 at 4; NOTES.md round 5). Tiles that run
    one program per SM then fill the SMs the power of two leaves idle (``_fill_splits``; up to
    ``rounds`` rounds of programs per SM), and the others up to one program per SM where the
    caps leave them short of one.
    """
    per_split = max(1, num_tokens * programs_per_token)
    splits = _pow2_floor(max(1, (waves * num_sms) // per_split))
    # Each program of a token gathers the token's rows (all but the first from L2).
    gathered = topk * _D_QK * 2 * programs_per_token
    partial_cap = _pow2_floor(max(1, gathered // (8 * num_heads * _D_V * 4)))
    one_wave = _pow2_floor(max(1, num_sms // per_split))  # about one program per SM
    if splits > partial_cap:
        splits = min(splits, max(partial_cap, one_wave))
    # Programs beyond one per SM only where each split keeps min_tiles tiles: the e4m3 Hopper
    # tile gains from a second at B=128 (H=16: 65-66 us at 2 splits, 68-69 at 1) but not at
    # B=32 (8 tiles a split, 4 at 8 splits: H=16 24.7-24.8 us at 4, 25.1-25.3 at 8) or B=8
    # (NOTES.md round 14).
    long_splits = _pow2_floor(max(1, topk // (block_n * min_tiles)))
    splits = min(splits, max(one_wave, long_splits))
    max_splits = _pow2_floor(max(1, topk // block_n))  # a split keeps >= one BLOCK_N tile
    splits = max(1, min(splits, max_splits))
    # Two-per-SM tiles fill too where the partial cap, or the e4m3 Hopper tile's min_tiles, left
    # them short of one program per SM, up to one each (132 SMs: B=5-6, 9-13 with 16+ heads,
    # 17-26 with 32, the e4m3 tile at 9-12 and 17-26, fp8_ds_mla's grouped tile at 32 heads at
    # 3 and 5-6: 1.07-1.38x, NOTES.md round 25).
    if waves == 1 or per_split * splits < num_sms:
        fill_rounds = rounds if waves == 1 else 1
        splits = _fill_splits(splits, per_split, topk, block_n, num_sms, fill_rounds)
    return splits


def _fill_splits(splits: int, per_split: int, topk: int, block_n: int, num_sms: int,
                 rounds: int) -> int:  # fmt: skip
    """A split count from ``splits`` up, not only a power of two, that leaves no SM idle where
    one program per SM runs: powers of two keep 128 programs at B=128, 32 and 8 (up to 16
    heads), which leaves a third of SM120's 188 SMs idle. A count's modelled time is the
    rounds of programs an SM runs times each program's tiles plus one (its fixed cost: q, the
    first gather, the epilogue). ``rounds`` caps the rounds: 1 adds programs only up to one per
    SM; tiles bound by their MMAs rather than their gathers take more (the 99 KB 64-head tile).
    Counts that leave a split without rows are skipped; ties keep fewer splits (less partial
    traffic). Measured on H200 analogs of SM120's B=128, 32 and 8: NOTES.md round 24."""

    def modelled(count: int) -> tuple[int, int]:
        chunk = _split_chunk(topk, count, block_n)
        waves_needed = -(-per_split * count // num_sms)
        empty = -(-topk // chunk) < count
        over = waves_needed > rounds and count != splits
        return (1 << 62 if empty or over else waves_needed * (chunk // block_n + 1), count)

    most = min(max(splits, rounds * num_sms // per_split), topk // block_n)
    return min(range(splits, most + 1), key=modelled, default=splits)


def _split_chunk(topk: int, num_splits: int, block_n: int) -> int:
    """Top-k entries per split, in whole BLOCK_N tiles (the last split takes what is left)."""
    per_split = -(-max(topk, 1) // num_splits)
    return -(-per_split // block_n) * block_n


def _pow2_floor(n: int) -> int:
    return 1 << (n.bit_length() - 1)


# Keys that shape the tile: an override that sets any of them without naming a Gluon kernel
# (WGMMA, MMA_V2) means the tl.dot kernel (the tuning plans were written for it), its default
# tile updated by the override, whatever the default kernel would have been.
_TILE_KEYS = frozenset(
    {"BLOCK_H", "BLOCK_N", "num_warps", "num_stages", "DV_SPLIT", "PREFETCH_IDX", "FP8_TWICE"}
    | {"FP16_DOTS", "V_ASM", "E4M3_BITS", "FP8_GROUPS", "ROPE_REGS"}
)


def _plan(
    num_tokens: int,
    num_heads: int,
    topk: int,
    device: torch.device,
    num_splits: int | None = None,
    config: dict[str, int] | None = None,
    kv_format: str = "16bit",
    wgmma: bool | None = None,
    limits: DeviceLimits | None = None,
    gluon_mma: bool | None = None,
) -> tuple[dict[str, int], int]:
    """Tile config and split count for a call (also used by the benchmark to report them).
    ``wgmma``, ``gluon_mma``: whether the Hopper Gluon kernels, or the tiles with mma.sync,
    may run (``None``: whenever the device has them); ``limits``: the device's (``None``: read
    from it; the benchmark passes a smaller GPU's)."""

    if wgmma is None:
        wgmma = _has_wgmma(_device_index(device))
    if gluon_mma is None:
        gluon_mma = _has_gluon_mma(_device_index(device))
    if limits is None:
        limits = _device_limits(_device_index(device))
    if config and _TILE_KEYS & config.keys():
        # The tile the override was written for, from its kernel's defaults up.
        wgmma = wgmma and "WGMMA" in config
        gluon_mma = gluon_mma and "MMA_V2" in config
    cfg = dict(_default_config(num_heads, kv_format, wgmma, limits, gluon_mma))
    tiles_64 = num_tokens * triton.cdiv(topk, 64)
    if kv_format != "16bit" and _gluon_tile(cfg) and tiles_64 < _num_sms(_device_index(device)):
        # Too few 64-row tiles to fill the GPU (one token): the tl.dot tile's 32-row tiles are
        # faster there (H200, two programs per SM: B=1 8.1 against 8.6 µs, NOTES.md round 12).
        cfg = dict(_default_config(num_heads, kv_format, False, limits))
    cfg.pop("ROPE_REGS", None)  # the rule below decides it for the merged tile
    if any(config[key] != cfg.get(key) for key in ("BLOCK_H", "BLOCK_N") if key in (config or {})):
        cfg.pop("ROUNDS", None)  # measured for the default tile's shape, not for a reshaped one
    cfg = _ds_rope_in_registers({**cfg, **(config or {})}, kv_format, limits)
    cfg = _planned_column_groups(cfg, config or {}, kv_format, limits)
    if cfg.get("SCORE_COLS", 0) not in (0, 32, 64, 128):
        raise ValueError(
            f"sparse MLA decode: SCORE_COLS {cfg['SCORE_COLS']}: latent columns per chain of "
            "e4m3 score MMAs, 32, 64 or 128 (0: one chain)"
        )
    num_hb = triton.cdiv(num_heads, cfg["BLOCK_H"]) * cfg.get("DV_SPLIT", 1)
    if num_splits is None:
        num_splits = _choose_splits(
            num_tokens,
            num_hb,
            topk,
            num_heads,
            cfg["BLOCK_N"],
            _num_sms(_device_index(device)),
            cfg.get("WAVES", 2),
            cfg.get("MIN_TILES", 1),
            cfg.get("ROUNDS", 1),
        )
    return cfg, max(1, min(int(num_splits), max(1, triton.cdiv(topk, cfg["BLOCK_N"]))))


def _merge_columns(rows: int, block_s: int, num_sms: int) -> int:
    """V columns per merge program, for ``rows`` (token, head) rows of ``block_s`` padded splits:
    whole 512-column rows up to 16 splits, narrower beyond (a program holds at most 8192
    partial values, NOTES.md 3d), and narrower still until the merge has about two programs
    per SM: at B=8/H=8, 64 programs of whole rows took 0.5 µs longer than 512 of 64 columns
    (NOTES.md round 8)."""
    block_dv = max(64, min(_D_V, 8192 // block_s))
    while block_dv > 64 and rows * (_D_V // block_dv) < 2 * num_sms:
        block_dv //= 2
    return block_dv


def _merge_warps(block_dv: int, elem_size: int) -> int:
    """Warps of a merge program: no more than its columns fill with 16-byte pieces side by
    side, so that the sum over splits never crosses warps (NOTES.md round 7; in chunks
    narrower than a warp's span it crosses lanes of one warp). With 64+ fp32 splits that is
    256 values per thread in one warp, which spills a little and still measured faster than
    4 warps (B=1/H=8: 7.95 vs 8.11 µs)."""
    lane_cols = 512 // elem_size  # columns that 32 lanes cover with 16-byte pieces
    return max(1, min(4, block_dv // lane_cols))


def sparse_mla_workspace_numel(num_tokens: int, num_heads: int, num_splits: int) -> int:
    """fp32 elements of split scratch (partial outputs + partial LSEs); 0 without a split."""
    if num_splits <= 1:
        return 0
    return num_tokens * num_splits * num_heads * (_D_V + 1)


def _check_inputs(
    q: torch.Tensor,
    kv_rows: torch.Tensor,
    indices: torch.Tensor,
    kv_scale: float,
    config: dict[str, int] | None,
) -> str:
    """Raises on a malformed call; returns the KV row format."""
    if q.dim() != 3 or q.shape[-1] != _D_QK:
        raise ValueError(f"q must be [T, H, {_D_QK}], got {tuple(q.shape)}")
    kv_format = kv_row_format(kv_rows)
    if kv_format == "fp8_ds_mla" and q.dtype != torch.bfloat16:
        raise TypeError(f"fp8_ds_mla rows need a bf16 q (their rope part is bf16), got {q.dtype}")
    if q.dtype not in (torch.float16, torch.bfloat16):
        raise TypeError(f"q must be fp16 or bf16, got {q.dtype}")
    if kv_format == "fp8_ds_mla" and not _fits_cp_async(kv_rows):  # fp32 scales, bf16 rope
        raise ValueError("fp8_ds_mla rows must start 16-byte aligned (buffer and row stride)")
    if kv_format != "fp8" and kv_scale != 1.0:
        raise ValueError("kv_scale belongs to fp8 e4m3 rows (one scale for the whole cache)")
    if indices.dim() != 2 or indices.shape[0] != q.shape[0] or indices.dtype != torch.int32:
        raise ValueError("indices must be int32 [T, topk] with T = q.shape[0]")
    if q.stride(-1) != 1 or kv_rows.stride(-1) != 1 or indices.stride(-1) != 1:
        raise ValueError("the last dimension of q, kv_rows and indices must be contiguous")
    if kv_format != "16bit" and (config or {}).get("DV_SPLIT", 1) != 1:
        raise ValueError("DV_SPLIT is a 16-bit-cache tuning option; fp8 rows need 1")
    return kv_format


def _outputs(
    q: torch.Tensor, out: torch.Tensor | None, lse: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The caller's ``out`` and ``lse`` once checked, or new ones."""
    num_tokens, num_heads, _ = q.shape
    if out is None:
        out = torch.empty((num_tokens, num_heads, _D_V), dtype=q.dtype, device=q.device)
    if lse is None:
        lse = torch.empty((num_tokens, num_heads), dtype=torch.float32, device=q.device)
    if out.shape != (num_tokens, num_heads, _D_V) or out.stride(-1) != 1:
        raise ValueError("out must be [T, H, 512] with a contiguous last dimension")
    if lse.shape != (num_tokens, num_heads) or lse.dtype != torch.float32:
        raise ValueError("lse must be fp32 [T, H]")
    return out, lse


def _split_scratch(
    q: torch.Tensor, num_splits: int, part16: bool, workspace: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Views of the split partials (outputs, then base-2 LSEs) in ``workspace`` or a new
    buffer: 16-bit (q's dtype) where ``part16`` (the Gluon tiles), else fp32."""
    num_tokens, num_heads, _ = q.shape
    need = sparse_mla_workspace_numel(num_tokens, num_heads, num_splits)
    if workspace is None:
        workspace = torch.empty(need, dtype=torch.float32, device=q.device)
    elif (
        workspace.dtype != torch.float32
        or workspace.dim() != 1
        or not workspace.is_contiguous()
        or workspace.numel() < need
    ):
        raise ValueError(f"workspace must be flat contiguous fp32, at least {need} elements")
    n_po = num_tokens * num_splits * num_heads * _D_V // (2 if part16 else 1)
    part_o = workspace[:n_po].view(q.dtype) if part16 else workspace[:n_po]
    return part_o, workspace[n_po : n_po + num_tokens * num_splits * num_heads]


def _early_merge(cfg: dict[str, int], is_split: bool, dev: int) -> bool:
    """Whether the merge launches as a programmatic dependent of the split kernel: wherever
    the GPU has PDL and a config does not turn it off (with the Gluon tiles' trigger where
    ``_late_trigger`` puts it, it pays at every batch measured: NOTES.md round 28)."""
    return is_split and bool(cfg.get("PDL", 1)) and _has_pdl(dev)


def _late_trigger(cfg: dict[str, int], programs: int, dev: int) -> bool:
    """Where a Gluon split kernel lets the merge launch: after its main loop (True), or as its
    programs exit. The merge's programs, launched early, take the SMs the split grid leaves
    idle and slow its last programs (NOTES.md round 7). Measured on the H200 (rounds 27-28,
    plans r27p and r28e, 16-bit and e4m3 rows): after the main loop is 8-11% faster than a
    plain launch for 8/16-head blocks at about one program per SM; 64-head blocks there gain
    most from the exit (1-6%); a grid that leaves half the SMs idle gains from either, least
    from the exit. 32-head blocks (17-32 heads) follow the 64-head rule, unmeasured. A
    config's ``PDL_LATE`` wins (tuning)."""
    if "PDL_LATE" in cfg:
        return bool(cfg["PDL_LATE"])
    return cfg["BLOCK_H"] <= 16 or 2 * programs <= _num_sms(dev)


def _e4m3_score_cols(cfg: dict[str, int]) -> int:
    """Latent columns per chain of score MMAs on Hopper's e4m3 tile, the chains summed in
    float32 (e4m3 MMAs keep 13 accumulator mantissa bits): 32 on one warpgroup (8-16 heads;
    lse 8-24x finer than one chain for 3-7% of the time), 64 on two (64 heads; 32 would cost
    9%, 64 nothing measurable). A config's ``SCORE_COLS`` wins; 0 is one chain over all 576
    columns (NOTES.md round 22)."""
    return cfg.get("SCORE_COLS", 32 if cfg["BLOCK_H"] <= 16 else 64)


def _q_in_registers(cfg: dict[str, int], kv_format: str) -> bool:
    """Whether an ``MMA_V2`` tile of up to 32 heads is ``_sparse_mla_mma_kernel`` (q in
    registers): always for 16-bit rows and 32 heads, for e4m3 rows with 16 heads where the
    tile's rows are fewer than the e4m3 tile's 64."""
    return kv_format == "16bit" or cfg["BLOCK_H"] == 32 or cfg["BLOCK_N"] < 64


_COLUMN_GROUPS_RULE = (
    "COL_WARPS 1, or 2 or 4 over 16-bit rows where each group of columns has a warp per "
    "8 x COL_WARPS heads and 16 rows"
)


def _column_groups_fit(cfg: dict[str, int], kv_format: str) -> bool:
    """Whether ``_sparse_mla_mma_kernel`` can split this tile's scores into ``COL_WARPS``
    groups of columns: ``_COLUMN_GROUPS_RULE``."""
    groups = cfg.get("COL_WARPS", 1)
    if groups == 1:
        return True
    warps, warps_h = cfg["num_warps"], cfg["BLOCK_H"] // (8 * groups)
    if kv_format != "16bit" or groups not in (2, 4) or warps_h < 1 or warps % (groups * warps_h):
        return False
    return cfg["BLOCK_N"] >= 16 * (warps // (groups * warps_h))


def _runs_mma_kernel(cfg: dict[str, int], kv_format: str) -> bool:
    """Whether the launcher runs this tile as ``_sparse_mla_mma_kernel`` (q in registers)."""
    return bool(cfg.get("MMA_V2")) and (cfg["BLOCK_H"] == 64 or _q_in_registers(cfg, kv_format))


def _mma_tile_smem(cfg: dict[str, int]) -> int:
    """Shared memory of ``_sparse_mla_mma_kernel`` over 16-bit rows, an upper bound: the
    gather stages, P, the column groups' float32 scratch (8 words of padding a row) and 256
    bytes for the rest (what Triton 3.6 compiles is within it: tests/unit)."""
    block_n, block_h, groups = cfg["BLOCK_N"], cfg["BLOCK_H"], cfg.get("COL_WARPS", 1)
    scratch = groups * block_n * (block_h + 8) * 4 if groups > 1 else 0
    return cfg["num_stages"] * block_n * (_D_V + 64) * 2 + block_n * block_h * 2 + scratch + 256


def _planned_column_groups(
    cfg: dict[str, int], override: dict[str, int], kv_format: str, limits: DeviceLimits
) -> dict[str, int]:
    """The merged tile's ``COL_WARPS``. Groups from the defaults stay only where the tile is
    still ``_sparse_mla_mma_kernel``'s, keeps ``_COLUMN_GROUPS_RULE`` and fits the block's
    shared memory with their scratch (an override of the rows or stages may break either);
    an override's own groups on another kernel, or past the shared memory, are refused (the
    launcher refuses the rest of the rule)."""
    groups = cfg.get("COL_WARPS", 1)
    if groups == 1:
        return cfg
    mma_kernel = _runs_mma_kernel(cfg, kv_format)
    fits = mma_kernel and _column_groups_fit(cfg, kv_format)
    smem_ok = _mma_tile_smem(cfg) <= limits.smem_per_block
    if "COL_WARPS" not in override:
        if fits and smem_ok:
            return cfg
        return {key: value for key, value in cfg.items() if key != "COL_WARPS"}
    if not mma_kernel:
        raise ValueError(
            f"sparse MLA decode: COL_WARPS {groups}: only the mma.sync tiles with q in "
            "registers (MMA_V2 with 16 or 32 heads over 16-bit rows, or 64-head blocks) score "
            "on groups of columns"
        )
    if fits and not smem_ok:
        raise ValueError(
            f"sparse MLA decode: COL_WARPS {groups} with BLOCK_N {cfg['BLOCK_N']} x "
            f"{cfg['num_stages']} stages needs {_mma_tile_smem(cfg)} bytes of shared memory a "
            f"block; this GPU has {limits.smem_per_block}"
        )
    return cfg


def _launch_gluon(
    args: tuple,
    cfg: dict[str, int],
    programs: int,
    is_split: bool,
    late_trigger: bool,
    inputs_ok: bool,
    capability: tuple[int, int],
    kv_format: str = "16bit",
    kv_scale: float = 1.0,
) -> None:
    """One of the Gluon split kernels (``MMA_V2``: the tiles with mma.sync, the 64-head one,
    its 16-head twin for 16-bit rows, or the e4m3 one; else the three Hopper ones), picked by
    the head block and the row format, after checking that the tile is one they implement.
    ``late_trigger``: the merge, a programmatic dependent, may launch after the main loop.
    ``inputs_ok``: the buffers and dtypes the Gluon kernels take."""
    block_h, block_n, stages = cfg["BLOCK_H"], cfg["BLOCK_N"], cfg["num_stages"]
    common = {"NUM_STAGES": stages, "IS_SPLIT": is_split, "LATE_TRIGGER": late_trigger}
    if cfg.get("MMA_V2") and block_h == 64:
        q_rows = 128 if kv_format == "fp8" else 64  # q (e4m3 rows: its two parts) in the stages
        tile_ok = cfg["num_warps"] == 8 and block_n in (16, 32, 64) and block_n * stages == q_rows
        tile_ok = tile_ok and _column_groups_fit(cfg, kv_format)
        if not (tile_ok and inputs_ok and kv_format in ("16bit", "fp8")) or not (
            _gluon_mma_usable(capability, proxy=True)
        ):
            raise ValueError(
                "MMA_V2 with 64 heads needs 8 warps and BLOCK_N x stages = 64 rows (16-bit rows: "
                "q, out and KV of one dtype) or 128 (fp8 e4m3 rows, q and out of one 16-bit "
                f"dtype), {_COLUMN_GROUPS_RULE}, 16-byte-aligned buffers and strides that are "
                f"multiples of 16 elements, {_GLUON_TRITONS} and an SM8x, SM90 or SM12x GPU"
            )
        _sparse_mla_mma_kernel[(programs,)](
            *args, float(kv_scale), BLOCK_H=64, BLOCK_N=block_n, **common, W=8,
            COL_WARPS=cfg.get("COL_WARPS", 1), num_warps=8,
        )  # fmt: skip
        return
    if cfg.get("MMA_V2") and _q_in_registers(cfg, kv_format):
        warps, warps_h = cfg["num_warps"], block_h // 8  # one or two warps along the keys
        q_rows = 2 * block_h if kv_format == "fp8" else block_h
        tile_ok = block_h in (16, 32) and warps in (warps_h, 2 * warps_h)
        tile_ok = tile_ok and block_n in (16, 32) and block_n >= 16 * (warps // warps_h)
        stages_ok = stages >= 2 and block_n * stages >= q_rows
        tile_ok = tile_ok and _column_groups_fit(cfg, kv_format)
        if not (tile_ok and stages_ok and inputs_ok and kv_format in ("16bit", "fp8")) or not (
            _gluon_mma_usable(capability, proxy=True)
        ):
            raise ValueError(
                "MMA_V2 with up to 32 heads needs BLOCK_H 16 or 32 on one warp per 8 heads "
                "(BLOCK_N 16 or 32) or two (BLOCK_N 32), stages that hold q (BLOCK_H rows, "
                "twice that for fp8 e4m3 rows), 16-bit rows (q, out and KV of one dtype) or "
                "fp8 e4m3 rows (q and out of one 16-bit dtype), "
                f"{_COLUMN_GROUPS_RULE}, 16-byte-aligned buffers and strides that are multiples "
                f"of 16 elements, {_GLUON_TRITONS} and an SM8x, SM90 or SM12x GPU"
            )
        _sparse_mla_mma_kernel[(programs,)](
            *args, float(kv_scale), BLOCK_H=block_h, BLOCK_N=block_n, **common, W=warps,
            COL_WARPS=cfg.get("COL_WARPS", 1), num_warps=warps,
        )  # fmt: skip
        return
    if cfg.get("MMA_V2"):
        warps = cfg["num_warps"]
        tile_ok = block_n == 64 and (block_h, warps) in ((8, 4), (16, 4), (16, 8))
        fp8_rows = kv_format in ("fp8", "fp8_ds_mla")
        if not (tile_ok and 2 <= stages <= 3 and fp8_rows and inputs_ok) or not (
            _gluon_mma_usable(capability, proxy=True)
        ):
            raise ValueError(
                "MMA_V2 needs fp8 e4m3 rows (q and out of one 16-bit dtype) or fp8_ds_mla rows "
                "(bf16 q and out), BLOCK_H 8 "
                "(4 warps) or 16 (4 or 8 warps), BLOCK_N 64, 2 or 3 stages, 16-byte-aligned "
                f"buffers and strides that are multiples of 16 elements, {_GLUON_TRITONS} and "
                "an SM89, SM90 or SM12x GPU"
            )
        ds = kv_format == "fp8_ds_mla"
        if ds:  # the rows' bytes, read as e4m3 (the latent) and by pointer casts (the rest)
            args = (args[0], args[1].view(torch.float8_e4m3fn), *args[2:])
        _sparse_mla_mma_e4m3_kernel[(programs,)](
            *args,
            float(kv_scale),
            BLOCK_H=block_h,
            **common,
            HEAD_GROUPS=warps // 4,
            DS=ds,
            ROPE_REGS=ds and bool(cfg.get("ROPE_REGS", 0)),
            num_warps=warps,
        )
        return
    swapped = block_h in (8, 16)
    if kv_format == "fp8":  # keys as the MMA's M, one warpgroup per 32 heads at most
        warps = 4 if swapped else 8
        tile_ok = block_h in (8, 16, 64) and block_n == 64 and cfg["num_warps"] == warps
        stages_ok = 2 <= stages <= 3
    elif swapped:  # keys as the MMA's M: 64-key tiles, shared memory for 2 (3 at 8 heads)
        tile_ok = block_n == 64 and cfg["num_warps"] == 4
        stages_ok = 2 <= stages <= (3 if block_h == 8 else 2)
    else:
        tile_ok = block_h == 64 and block_n in (16, 32, 64) and cfg["num_warps"] == 8
        stages_ok = stages >= 2 and block_n * stages <= 128  # shared memory
    wgmma = inputs_ok and _gluon_usable(capability)
    if not (tile_ok and stages_ok and cfg.get("DV_SPLIT", 1) == 1 and wgmma):
        raise ValueError(
            "WGMMA needs BLOCK_H 64 (BLOCK_N 16/32/64, 8 warps, 2 to 128 / BLOCK_N "
            "stages) or BLOCK_H 8/16 (BLOCK_N 64, 4 warps, 2 stages, 3 at 8 heads), "
            "DV_SPLIT 1, q, out and 16-bit KV rows of one dtype (or fp8 e4m3 rows, BLOCK_H "
            "8/16 with 4 warps or 64 with 8, BLOCK_N 64, 2 or 3 stages, q and out of one "
            "16-bit dtype), 16-byte-aligned buffers "
            f"and strides that are multiples of 16 elements, {_GLUON_TRITONS} and a "
            "Hopper GPU"
        )
    if kv_format == "fp8":
        _sparse_mla_wgmma_e4m3_kernel[(programs,)](
            *args,
            float(kv_scale),
            BLOCK_H=block_h,
            **common,
            SCORE_COLS=_e4m3_score_cols(cfg),
            num_warps=cfg["num_warps"],
        )
    elif swapped:
        _sparse_mla_wgmma_swapped_kernel[(programs,)](*args, BLOCK_H=block_h, **common, num_warps=4)
    else:
        _sparse_mla_wgmma_kernel[(programs,)](*args, BLOCK_N=block_n, **common, num_warps=8)


def _launch_tl_dot(
    args: tuple,
    cfg: dict[str, int],
    programs: int,
    kv_format: str,
    kv_scale: float,
    is_split: bool,
    use_pdl: bool,
) -> None:
    """The portable split kernels (every GPU, every row format)."""
    if kv_format == "fp8_ds_mla" and cfg.get("FP8_GROUPS", 0):
        _sparse_mla_ds_split_kernel[(programs,)](
            *args,
            BLOCK_H=cfg["BLOCK_H"],
            BLOCK_N=cfg["BLOCK_N"],
            IS_SPLIT=is_split,
            USE_PDL=use_pdl,
            PREFETCH_IDX=bool(cfg.get("PREFETCH_IDX", 0)),
            FP8_TWICE=bool(cfg.get("FP8_TWICE", 0)),
            FP16_DOTS=_fp16_dots(cfg),
            E4M3_BITS=bool(cfg.get("E4M3_BITS", 0)),
            num_warps=cfg["num_warps"],
            num_stages=cfg["num_stages"],
        )
        return
    v_asm = (
        kv_format == "fp8"
        and bool(cfg.get("V_ASM", 0))
        and (args[0].dtype == torch.float16 or _fp16_dots(cfg))
    )
    _sparse_mla_split_kernel[(programs,)](
        *args[:8],
        float(kv_scale),
        *args[8:],
        BLOCK_H=cfg["BLOCK_H"],
        BLOCK_N=cfg["BLOCK_N"],
        D_V=_D_V,
        D_PE=_D_PE,
        DV_SPLIT=cfg.get("DV_SPLIT", 1),
        KV_FMT=_KV_FMT_CODE[kv_format],
        IS_SPLIT=is_split,
        USE_PDL=use_pdl,
        PREFETCH_IDX=bool(cfg.get("PREFETCH_IDX", 0)),
        FP8_TWICE=bool(cfg.get("FP8_TWICE", 0)),
        FP16_DOTS=kv_format == "fp8" and args[0].dtype == torch.bfloat16 and _fp16_dots(cfg),
        V_ASM=v_asm,
        E4M3_BITS=v_asm and bool(cfg.get("E4M3_BITS", 0)) and not cfg.get("FP8_TWICE", 0),
        num_warps=cfg["num_warps"],
        num_stages=cfg["num_stages"],
    )


def _launch_merge(
    part_o: torch.Tensor,
    part_lse: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    num_splits: int,
    cfg: dict[str, int],
    use_pdl: bool,
    dev: int,
) -> None:
    """The second kernel: merges the split partials of each (token, head) into out/lse."""
    num_tokens, num_heads, _ = out.shape
    block_s = max(2, triton.next_power_of_2(num_splits))
    block_dv = cfg.get("COMBINE_DV", _merge_columns(num_tokens * num_heads, block_s, _num_sms(dev)))
    combine_warps = cfg.get("COMBINE_WARPS", _merge_warps(block_dv, part_o.element_size()))
    _sparse_mla_combine_kernel[(num_tokens * num_heads * (_D_V // block_dv),)](
        part_o,
        part_lse,
        out,
        lse,
        num_heads,
        num_splits,
        out.stride(0),
        out.stride(1),
        lse.stride(0),
        lse.stride(1),
        BLOCK_S=block_s,
        D_V=_D_V,
        BLOCK_DV=block_dv,
        USE_PDL=use_pdl,
        num_warps=combine_warps,
        launch_pdl=use_pdl,
    )


def sparse_mla_decode(
    q: torch.Tensor,
    kv_rows: torch.Tensor,
    indices: torch.Tensor,
    sm_scale: float,
    *,
    out: torch.Tensor | None = None,
    lse: torch.Tensor | None = None,
    num_splits: int | None = None,
    workspace: torch.Tensor | None = None,
    config: dict[str, int] | None = None,
    kv_scale: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sparse MLA decode: each token attends to the KV rows its ``indices`` name.

    ``num_splits`` overrides the top-k split count (``None``: fill the GPU), ``workspace`` is an
    optional flat fp32 buffer of at least ``sparse_mla_workspace_numel`` elements (lets a
    CUDA-graph caller own the scratch), ``config`` overrides the tile shape (tuning only),
    ``kv_scale`` is the one scale of fp8 e4m3 rows (a row's values are its fp8 values times it).
    Returns ``(out [T, H, 512], lse [T, H] fp32)``.
    """
    kv_format = _check_inputs(q, kv_rows, indices, kv_scale, config)
    out, lse = _outputs(q, out, lse)
    num_tokens, num_heads, _ = q.shape
    topk = indices.shape[1]
    if num_tokens == 0 or num_heads == 0:
        return out, lse

    dev = _device_index(q.device)
    # Not for a q or out that would need a cast.
    gluon_inputs = (
        _gluon_takes(q.dtype, kv_rows.dtype, kv_format)
        and q.dtype == out.dtype
        and _fits_cp_async(q, kv_rows)
    )
    wgmma = gluon_inputs and _has_wgmma(dev)
    gluon_mma = gluon_inputs and _has_gluon_mma(dev)
    cfg, num_splits = _plan(
        num_tokens, num_heads, topk, q.device, num_splits, config, kv_format, wgmma, None, gluon_mma
    )
    num_hb = triton.cdiv(num_heads, cfg["BLOCK_H"])
    chunk = _split_chunk(topk, num_splits, cfg["BLOCK_N"])
    is_split = num_splits > 1
    if is_split:
        part_o, part_lse = _split_scratch(q, num_splits, _gluon_tile(cfg), workspace)
    else:
        part_o, part_lse = lse, lse  # unused placeholders
    programs = num_tokens * num_splits * num_hb
    use_pdl = _early_merge(cfg, is_split, dev)

    args = (
        q,
        kv_rows,
        indices,
        out,
        lse,
        part_o,
        part_lse,
        float(sm_scale) * float(kv_scale) * _LOG2E,
        kv_rows.shape[0],
        topk,
        chunk,
        num_heads,
        num_hb,
        num_splits,
        q.stride(0),
        q.stride(1),
        kv_rows.stride(0),
        indices.stride(0),
        out.stride(0),
        out.stride(1),
        lse.stride(0),
        lse.stride(1),
    )
    if _gluon_tile(cfg):
        capability = _device_limits(dev).capability
        late = use_pdl and _late_trigger(cfg, programs, dev)
        _launch_gluon(
            args, cfg, programs, is_split, late, gluon_inputs, capability, kv_format, kv_scale
        )
    else:
        programs *= cfg.get("DV_SPLIT", 1)
        _launch_tl_dot(args, cfg, programs, kv_format, kv_scale, is_split, use_pdl)
    if is_split:
        _launch_merge(part_o, part_lse, out, lse, num_splits, cfg, use_pdl, dev)
    return out, lse


def kv_row_format(kv_rows: torch.Tensor) -> str:
    """The row format of a cache viewed as rows: "16bit" (fp16/bf16 [N, 576]), "fp8" (fp8 e4m3
    [N, 576], one scale for the cache: vLLM's ``--kv-cache-dtype fp8`` for MLA) or
    "fp8_ds_mla" (uint8 [N, 656], FlashMLA's format). Raises ValueError for anything else."""
    formats = {
        torch.float16: ("16bit", _D_QK),
        torch.bfloat16: ("16bit", _D_QK),
        torch.float8_e4m3fn: ("fp8", _D_QK),
        torch.uint8: ("fp8_ds_mla", _FP8_ROW_BYTES),
    }
    kv_format, width = formats.get(kv_rows.dtype, (None, None))
    if kv_format is None or kv_rows.dim() != 2 or kv_rows.shape[-1] != width:
        raise ValueError(
            f"kv_rows must be [N, {_D_QK}] fp16/bf16/fp8 e4m3 or [N, {_FP8_ROW_BYTES}] uint8 "
            f"(fp8_ds_mla), got {tuple(kv_rows.shape)} {kv_rows.dtype}"
        )
    return kv_format


def reference_sparse_mla(
    q: torch.Tensor,
    kv_rows: torch.Tensor,
    indices: torch.Tensor,
    sm_scale: float,
    kv_scale: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Float32 reference: gather, mask invalid (negative or >= N), softmax, weighted V.

    Invalid slots are replaced by row 0 *after* masking is decided and their values zeroed, so
    NaN in unselected rows cannot reach the result. Returns fp32 (out [T, H, 512], lse [T, H]).
    """
    if kv_rows.dtype == torch.uint8:
        kv_rows = dequantize_fp8_ds_mla(kv_rows)
    elif kv_rows.dtype == torch.float8_e4m3fn:
        kv_rows = kv_rows.float() * float(kv_scale)
    num_rows = kv_rows.shape[0]
    idx = indices.long()
    valid = (idx >= 0) & (idx < num_rows)
    rows = kv_rows[idx.clamp(0, max(num_rows - 1, 0))].float()  # [T, K, 576]
    rows = torch.where(valid[..., None], rows, torch.zeros((), device=rows.device))
    scores = torch.einsum("thd,tkd->thk", q.float(), rows) * float(sm_scale)
    scores = scores.masked_fill(~valid[:, None, :], float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)  # -inf for a token with no valid index
    probs = torch.exp(scores - torch.where(torch.isinf(lse), 0.0, lse)[..., None])
    probs = torch.where(valid[:, None, :], probs, torch.zeros((), device=probs.device))
    out = torch.einsum("thk,tkd->thd", probs, rows[..., :_D_V])
    return out, lse


def quantize_fp8_ds_mla(rows: torch.Tensor) -> torch.Tensor:
    """[N, 576] rows -> uint8 [N, 656] fp8_ds_mla rows: per 128 latent columns one fp32 scale
    (amax / 448, e4m3's largest finite value), the latent divided by it in fp8 e4m3, the rope
    part as bf16 (tests and benchmarks; vLLM writes its cache with its own kernel)."""
    latent = rows[:, :_D_V].float().reshape(rows.shape[0], _D_V // _FP8_GROUP, _FP8_GROUP)
    scale = latent.abs().amax(dim=-1).clamp_min(1e-12) / 448.0  # [N, 4]
    fp8 = (latent / scale[..., None]).to(torch.float8_e4m3fn).reshape(rows.shape[0], _D_V)
    rope = rows[:, _D_V:].to(torch.bfloat16).contiguous()
    return torch.cat([fp8.view(torch.uint8), scale.view(torch.uint8), rope.view(torch.uint8)], 1)


def dequantize_fp8_ds_mla(rows: torch.Tensor) -> torch.Tensor:
    """uint8 [N, 656] fp8_ds_mla rows -> float32 [N, 576] (latent times its group's scale)."""
    n = rows.shape[0]
    latent = rows[:, :_D_V].contiguous().view(torch.float8_e4m3fn).float()
    scale = rows[:, _D_V : _D_V + 16].contiguous().view(torch.float32)  # [N, 4]
    latent = (latent.reshape(n, _D_V // _FP8_GROUP, _FP8_GROUP) * scale[..., None]).reshape(n, _D_V)
    rope = rows[:, _D_V + 16 :].contiguous().view(torch.bfloat16).float()
    return torch.cat([latent, rope], dim=1)
