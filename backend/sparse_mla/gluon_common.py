"""Gluon helpers shared by the Hopper (warpgroup MMA) and mma.sync tiles: cp.async gathers into
swizzled shared memory, the online softmax, the e4m3 query parts, V widened in registers and
the epilogues (DESIGN.md, "The Gluon tiles"). Defined only where this Triton has Gluon."""

from __future__ import annotations

from .common import (
    _WHOLE_VIEWS,
    _cta_barrier,
    async_copy,
    constexpr_function,
    fence_async_shared,
    gl,
    gluon,
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
        in q's 16-bit dtype, DESIGN.md "The Gluon tiles") through ``rows_smem``, free shared memory,
        as whole 16-byte pieces of contiguous rows (the MMA accumulator layouts would store 4-byte
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
