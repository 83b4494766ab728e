"""The Gluon tiles with mma.sync (SM80-89, SM120; the H200 runs them as SM120's stand-in): q in
registers for 33+ heads in 99 KB, and the e4m3 / fp8_ds_mla tile for up to 16 heads
(DESIGN.md, "The Gluon tiles")."""

from __future__ import annotations

from .common import _cta_barrier, async_copy, gl, gluon, mma_v2
from .gluon_common import (
    _wg_ds_rows,
    _wg_e4m3_buffers,
    _wg_e4m3_query_parts,
    _wg_issue_first_tiles,
    _wg_issue_query,
    _wg_launch_dependents,
    _wg_mma_finish,
    _wg_program,
    _wg_refill_and_wait,
    _wg_rope_query,
    _wg_softmax_step,
    _wg_tile_valid,
    _wg_times_group,
    _wg_top,
    _wg_v_operand,
)

if gluon is not None:

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
        (DESIGN.md "The Gluon tiles"); otherwise before the first gather. 16 and 32 heads over
        16-bit rows run on 4 and 8 warps: two along the keys, the others along the heads, 8 heads
        each (or one along the keys, over 16-row tiles; measured slower, DESIGN.md "The Gluon
        tiles"). ``COL_WARPS`` > 1 (16-bit rows): the scores as a dot batched over that many groups
        of q's columns, each on its own warps with 8 x COL_WARPS heads a warp (the same 72
        registers of q), so each K fragment read from shared memory feeds COL_WARPS times the
        MMAs; the groups' partial scores are summed through shared memory (DESIGN.md "The Gluon
        tiles")."""
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
        the same instruction (QMMA); Hopper runs it as two fp16 MMAs (DESIGN.md "Precision of the
        e4m3 tiles").

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
