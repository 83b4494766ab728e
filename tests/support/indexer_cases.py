"""DSA indexer logits cases shared by the CPU tests (tests/patchset/test_indexer.py) and the
GPU test (tests/gpu/test_indexer_fallback.py): inputs laid out as vLLM passes them to DeepGEMM's
fp8_mqa_logits / fp8_paged_mqa_logits, and straightforward float64 references, one row at a
time. Only torch is imported, so the GPU machine can use it."""

from __future__ import annotations

import torch

FP8 = torch.float8_e4m3fn


def fp8(x: torch.Tensor) -> torch.Tensor:
    return x.to(FP8)


def prefill_inputs(m=37, heads=8, dim=64, n=90, exact=False, seed=0):
    """Rows of three requests laid out as vLLM's chunk does (ks = request start, ke grows
    causally), plus one row with an empty range. exact: small integers and powers of two,
    so every sum is exact in fp32 and any tiling must give the same bits."""
    g = torch.Generator().manual_seed(seed)
    if exact:
        q = fp8(torch.randint(-3, 4, (m, heads, dim), generator=g).float())
        k = fp8(torch.randint(-3, 4, (n, dim), generator=g).float())
        scale = 2.0 ** torch.randint(-3, 3, (n,), generator=g).float()
        w = torch.randint(-4, 5, (m, heads), generator=g).float() / 8
    else:
        q = fp8(torch.randn(m, heads, dim, generator=g) * 2)
        k = fp8(torch.randn(n, dim, generator=g) * 2)
        scale = torch.rand(n, generator=g) * 0.1 + 0.01
        w = torch.randn(m, heads, generator=g)
    starts, ks, ke = [0, 30, 55], [], []
    lens = [30, 25, n - 55]
    per_req = [m // 3, m // 3, m - 2 * (m // 3)]
    for s, length, rows in zip(starts, lens, per_req, strict=True):
        for r in range(rows):
            ks.append(s)
            ke.append(s + max(1, length - rows + 1 + r))
    ks[5], ke[5] = 10, 10  # empty range
    i32 = torch.int32
    return q, k, scale, w, torch.tensor(ks, dtype=i32), torch.tensor(ke, dtype=i32)


def prefill_reference(q, k, scale, w, ks, ke) -> torch.Tensor:
    qd, kd = q.double(), k.double()
    out = torch.full((q.shape[0], k.shape[0]), float("-inf"), dtype=torch.float64)
    for i in range(q.shape[0]):
        lo, hi = int(ks[i]), int(ke[i])
        if hi > lo:
            s = (qd[i] @ kd[lo:hi].t()) * scale[lo:hi].double()  # [H, n]
            out[i, lo:hi] = (s.relu() * w[i].double()[:, None]).sum(0)
    return out


def pack_indexer_cache(k: torch.Tensor, scale: torch.Tensor, block_size: int) -> torch.Tensor:
    """vLLM's indexer K cache: per block, block_size*D fp8 values then block_size fp32
    scales (csrc indexer_k_quant_and_cache), viewed as [blocks, block_size, 1, D+4] uint8."""
    blocks, dim = k.shape[0] // block_size, k.shape[1]
    raw = torch.empty(blocks, block_size * (dim + 4), dtype=torch.uint8, device=k.device)
    raw[:, : block_size * dim] = k.view(torch.uint8).reshape(blocks, -1)
    raw[:, block_size * dim :] = scale.float().reshape(blocks, block_size).view(torch.uint8)
    return raw.view(blocks, block_size, 1, dim + 4)


def decode_inputs(batch=6, next_n=2, heads=8, dim=64, block_size=16, exact=False, seed=1):
    """Requests of different lengths whose logical blocks sit at shuffled physical blocks:
    a context of next_n tokens, one spanning many blocks, and one (150) longer than its block
    table holds (8 x 16), whose positions past the table are -inf."""
    g = torch.Generator().manual_seed(seed)
    lens = torch.tensor([1 + next_n, 17, 64, 100, 5, 150][:batch], dtype=torch.int32)
    max_blocks = 8
    phys = 1 + batch * max_blocks
    if exact:
        q = fp8(torch.randint(-3, 4, (batch, next_n, heads, dim), generator=g).float())
        kv = fp8(torch.randint(-3, 4, (phys * block_size, dim), generator=g).float())
        scale = 2.0 ** torch.randint(-3, 3, (phys * block_size,), generator=g).float()
        w = torch.randint(-4, 5, (batch * next_n, heads), generator=g).float() / 8
    else:
        q = fp8(torch.randn(batch, next_n, heads, dim, generator=g) * 2)
        kv = fp8(torch.randn(phys * block_size, dim, generator=g) * 2)
        scale = torch.rand(phys * block_size, generator=g) * 0.1 + 0.01
        w = torch.randn(batch * next_n, heads, generator=g)
    perm = torch.randperm(phys - 1, generator=g)[: batch * max_blocks] + 1
    table = perm.view(batch, max_blocks).to(torch.int32)
    return q, kv, scale, w, lens, table, block_size


def decode_reference(q, kv, scale, w, lens, table, block_size, max_model_len):
    """Query row j of request b sees positions p <= ctx - next_n + j that its block table
    holds and max_model_len keeps; everything else is -inf."""
    batch, next_n, heads, _ = q.shape
    out = torch.full((batch * next_n, max_model_len), float("-inf"), dtype=torch.float64)
    for b in range(batch):
        ctx = int(lens[b])
        held = min(ctx, table.shape[1] * block_size, max_model_len)
        slots = [int(table[b, p // block_size]) * block_size + p % block_size for p in range(held)]
        kd, sd = kv[slots].double(), scale[slots].double()
        for j in range(next_n):
            n = max(0, min(ctx - next_n + j + 1, held))
            s = (q[b, j].double() @ kd[:n].t()) * sd[:n]
            out[b * next_n + j, :n] = (s.relu() * w[b * next_n + j].double()[:, None]).sum(0)
    return out


def assert_logits(got: torch.Tensor, ref: torch.Tensor, exact: bool) -> None:
    """got (fp32, any device) against a float64 reference: the same -inf mask, and equal bits
    where every sum is exact, else within 1e-5."""
    got = got.cpu()
    assert got.dtype == torch.float32 and got.shape == ref.shape
    assert torch.equal(torch.isinf(got), torch.isinf(ref)), "different -inf masks"
    if exact:
        assert torch.equal(got.double(), ref), float((got.double() - ref).abs().nan_to_num().max())
    else:
        torch.testing.assert_close(got.double(), ref, rtol=1e-5, atol=1e-5)
