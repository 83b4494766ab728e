"""The portable kernels, written with ``tl.dot``: the split kernel for every row format and GPU,
the grouped split kernel for fp8_ds_mla rows, and the merge of split partials (DESIGN.md,
"The tl.dot tiles" and "Splits and the merge")."""

from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait


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
    a byte at a time in the transposed operand layout (DESIGN.md "fp8 rows on the tl.dot tiles")."""
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
    instruction per two values of ``_e4m3_to_f16`` (DESIGN.md "fp8 rows on the tl.dot tiles"), and
    fewer registers."""
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
        # in flight (DESIGN.md "Tiles per device"). It costs registers, which the 64-head tile
        # lacks.
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
            # overlaps, while each single-use load becomes an asynchronous copy (DESIGN.md "fp8 rows
            # on the tl.dot tiles").
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
