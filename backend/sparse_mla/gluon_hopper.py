"""Hopper's Gluon tiles (warpgroup MMA, SM90): the 64-head tile, the swapped 8/16-head tile for
16-bit rows and the swapped e4m3 tile (DESIGN.md, "The Gluon tiles")."""

from __future__ import annotations

from .common import (
    _cta_barrier,
    async_copy,
    fence_async_shared,
    gl,
    gluon,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from .gluon_common import (
    _wg_e4m3_buffers,
    _wg_e4m3_query_parts,
    _wg_issue_first_tiles,
    _wg_issue_query,
    _wg_launch_dependents,
    _wg_mma_finish,
    _wg_program,
    _wg_refill_and_wait,
    _wg_row_sums,
    _wg_softmax_step,
    _wg_store_rows,
    _wg_tile_valid,
    _wg_v_operand,
)

if gluon is not None:

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
        sums wait for the end (DESIGN.md "The Gluon tiles"). Gathers are cp.async copies
        NUM_STAGES - 1 tiles ahead into shared memory that the warpgroup MMAs read directly."""
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
        (DESIGN.md "Precision of the e4m3 tiles"); 0: one chain."""
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
