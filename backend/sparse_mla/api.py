"""The public API: ``sparse_mla_decode``, its launchers and where the merge launches (PDL), the
support checks the rendered backend calls at start-up, the float32 reference and the fp8_ds_mla
quantizer."""

from __future__ import annotations

import torch
import triton

from .common import (
    _D_QK,
    _D_V,
    _FP8_GROUP,
    _FP8_ROW_BYTES,
    _LOG2E,
    _device_index,
    _fits_cp_async,
    _gluon_takes,
    _has_gluon_mma,
    _has_pdl,
    _has_wgmma,
    _num_sms,
)
from .plan import _merge_columns, _merge_warps, _plan, _split_chunk
from .tiles import SplitCall, Tile
from .tl_dot import (
    _sparse_mla_combine_kernel,
)


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


def _early_merge(is_split: bool, dev: int) -> bool:
    """Whether the merge launches as a programmatic dependent of the split kernel: wherever
    the GPU has PDL (with the Gluon tiles' trigger where ``_late_trigger`` puts it, it pays at
    every batch measured: DESIGN.md "The merge and its launch"; the benchmark's ``PDL`` turns
    it off)."""
    return is_split and _has_pdl(dev)


def _late_trigger(tile: Tile, programs: int, dev: int) -> bool:
    """Where a Gluon split kernel lets the merge launch: after its main loop (True), or as its
    programs exit. The merge's programs, launched early, take the SMs the split grid leaves
    idle and slow its last programs. Measured on the H200 (16-bit and e4m3 rows): after the
    main loop is 8-11% faster than a plain launch for 8/16-head blocks at about one program per
    SM; 64-head blocks there gain most from the exit (1-6%); a grid that leaves half the SMs
    idle gains from either, least from the exit. 32-head blocks (17-32 heads) follow the
    64-head rule, unmeasured (the benchmark's ``PDL_LATE`` overrides this rule; DESIGN.md "The
    merge and its launch")."""
    return tile.block_h <= 16 or 2 * programs <= _num_sms(dev)


def _launch_merge(
    part_o: torch.Tensor,
    part_lse: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    num_splits: int,
    use_pdl: bool,
    dev: int,
) -> None:
    """The second kernel: merges the split partials of each (token, head) into out/lse."""
    num_tokens, num_heads, _ = out.shape
    block_s = max(2, triton.next_power_of_2(num_splits))
    block_dv = _merge_columns(num_tokens * num_heads, block_s, _num_sms(dev))
    combine_warps = _merge_warps(block_dv, part_o.element_size())
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
    tile: Tile | None = None,
    kv_scale: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sparse MLA decode: each token attends to the KV rows its ``indices`` name.

    ``num_splits`` overrides the top-k split count (``None``: fill the GPU), ``workspace`` is an
    optional flat fp32 buffer of at least ``sparse_mla_workspace_numel`` elements (lets a
    CUDA-graph caller own the scratch), ``tile`` replaces the plan's (the benchmark's sweeps),
    ``kv_scale`` is the one scale of fp8 e4m3 rows (a row's values are its fp8 values times it).
    Returns ``(out [T, H, 512], lse [T, H] fp32)``.
    """
    kv_format = _check_inputs(q, kv_rows, indices, kv_scale)
    if tile is not None:
        tile.validate(kv_format)
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
    tile, num_splits = _plan(
        num_tokens, num_heads, topk, q.device, num_splits, tile, kv_format, wgmma, None, gluon_mma
    )
    num_hb = triton.cdiv(num_heads, tile.block_h)
    chunk = _split_chunk(topk, num_splits, tile.block_n)
    is_split = num_splits > 1
    if is_split:
        part_o, part_lse = _split_scratch(q, num_splits, tile.gluon, workspace)
    else:
        part_o, part_lse = lse, lse  # unused placeholders
    programs = num_tokens * num_splits * num_hb
    use_pdl = _early_merge(is_split, dev)

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
    late = tile.gluon and use_pdl and _late_trigger(tile, programs, dev)
    call = SplitCall(args, programs, kv_format, kv_scale, is_split, use_pdl, late)
    tile.launch(call, gluon_inputs, dev)
    if is_split:
        _launch_merge(part_o, part_lse, out, lse, num_splits, use_pdl, dev)
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
