"""The sparse MLA kernel's test cases, shared by the GPU suite (tests/gpu/test_sparse_mla.py)
and the interpreted tier (tests/unit/test_sparse_mla_interpreted.py): random inputs whose
unselected KV rows are NaN, and one call on poisoned outputs checked against the float32
reference."""

from __future__ import annotations

from types import ModuleType

import torch

from benchmarks.sparse_mla import overrides

SM_SCALE = 1.0 / 16.0  # GLM-5's scale


def make_inputs(
    gen: torch.Generator,
    num_tokens: int,
    num_heads: int,
    topk: int,
    dtype: torch.dtype,
    pattern: str,
    num_rows: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random q, KV rows and indices on ``gen``'s device; unselected KV rows are NaN."""
    dev = gen.device
    n = num_rows or max(4 * topk, 4096)
    q = (torch.rand(num_tokens, num_heads, 576, generator=gen, device=dev) * 2 - 1).to(dtype)
    kv = (torch.randn(n, 576, generator=gen, device=dev) * 0.5).to(dtype)
    idx = torch.randint(0, n, (num_tokens, topk), generator=gen, device=dev, dtype=torch.int32)
    t_ids = torch.arange(num_tokens, device=dev)
    if pattern in ("tail", "mixed"):
        # Short contexts: -1 padding at the tail, a different valid length per token.
        valid_len = torch.randint(0, topk + 1, (num_tokens,), generator=gen, device=dev)
        sel = t_ids % 3 == 0 if pattern == "mixed" else torch.ones_like(t_ids, dtype=torch.bool)
        tail = torch.arange(topk, device=dev)[None, :] >= valid_len[:, None]
        idx[tail & sel[:, None]] = -1
    if pattern in ("scattered", "mixed"):
        # Interior invalid slots with assorted negative values (any negative is invalid).
        holes = torch.rand(num_tokens, topk, generator=gen, device=dev) < 0.3
        sel = t_ids % 3 == 1 if pattern == "mixed" else torch.ones_like(t_ids, dtype=torch.bool)
        negs = -torch.randint(1, 1 << 30, (num_tokens, topk), generator=gen, device=dev)
        idx = torch.where(holes & sel[:, None], negs.to(torch.int32), idx)
    if pattern in ("empty", "mixed"):
        # Whole rows invalid: token 0 (and every 7th) sees nothing.
        idx[t_ids % 7 == 0] = -1
    if pattern == "dups":
        # Heavy duplication: every index drawn from a pool a tenth of topk's size.
        pool = torch.randint(0, n, (max(1, topk // 10),), generator=gen, device=dev)
        pick = torch.randint(0, pool.numel(), (num_tokens, topk), generator=gen, device=dev)
        idx = pool[pick].to(torch.int32)
    used = torch.zeros(n, dtype=torch.bool, device=dev)
    ok = idx[idx >= 0].long()
    used[ok] = True
    kv[~used] = float("nan")
    return q, kv, idx


def check_call(
    kmod: ModuleType,
    q: torch.Tensor,
    kv: torch.Tensor,
    idx: torch.Tensor,
    sm_scale: float = SM_SCALE,
    out_dtype: torch.dtype | None = None,
    precision: torch.dtype | None = None,
    **kwargs: object,
) -> None:
    """Run on poisoned outputs (``out_dtype``: q's unless given) and compare with the fp32
    reference, within the bounds of ``precision`` (q's dtype unless given: the Gluon e4m3
    tiles hold an fp16 q to bf16's precision). ``config``: a tuning config, as the benchmark
    runs one (``overrides.decode``)."""
    num_tokens, num_heads, _ = q.shape
    out_shape = (num_tokens, num_heads, 512)
    out = torch.full(out_shape, float("nan"), dtype=out_dtype or q.dtype, device=q.device)
    lse = torch.full((num_tokens, num_heads), float("nan"), dtype=torch.float32, device=q.device)
    o2, l2 = overrides.decode(kmod, q, kv, idx, sm_scale, out=out, lse=lse, **kwargs)
    if q.is_cuda:
        torch.cuda.synchronize()
    assert o2 is out and l2 is lse
    kv_scale = float(kwargs.get("kv_scale", 1.0))
    ref_o, ref_l = kmod.reference_sparse_mla(q, kv, idx, sm_scale, kv_scale)

    assert not torch.isnan(out).any(), "output has NaN: unwritten element or NaN row read"
    assert not torch.isnan(lse).any(), "lse has NaN: unwritten element or NaN row read"
    empty = ((idx < 0) | (idx >= kv.shape[0])).all(dim=1)
    if empty.any():
        assert (out[empty] == 0).all(), "a token with no valid index must give zeros"
        assert torch.isneginf(lse[empty]).all(), "a token with no valid index must give -inf"
    full = ~empty
    if full.any():
        o, r = out[full].float(), ref_o[full]
        rel = ((o - r).norm() / r.norm().clamp_min(1e-12)).item()
        fp16 = (precision or q.dtype) == torch.float16
        bound = 2e-3 if fp16 else 1.2e-2
        assert rel < bound, f"relative L2 error {rel:.3e} >= {bound}"
        atol = 2e-3 if fp16 else 1.5e-2
        max_abs = (o - r).abs().max().item()
        assert max_abs < atol + 0.02 * r.abs().max().item(), f"max abs error {max_abs:.3e}"
        lse_err = (lse[full] - ref_l[full]).abs().max().item()
        assert torch.isfinite(lse[full]).all()
        assert lse_err < 2e-3, f"lse max abs error {lse_err:.3e}"
