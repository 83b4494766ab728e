"""The DSA indexer logits fallback on a real GPU.

The module is the file `glmops patch` writes onto a vLLM 0.16 host, rendered beforehand by
tests/gpu/prepare_rendered.py into .thirdparty/rendered/ (git-ignored, carried to the GPU
machine, which has no vLLM). Its functions run here on CUDA tensors laid out as vLLM passes
them to DeepGEMM's fp8_mqa_logits / fp8_paged_mqa_logits (fp8 e4m3 values, fp32 scales, the
packed indexer cache), against float64 references computed on the CPU.

Shown: the torch code's logits match the reference (bit for bit where every sum is exact); at
GLM-5's indexer shapes (32 heads, dim 128, 8k-row prefill chunks, 32k-token contexts) its tiled
result equals the untiled one and the CUDA caching allocator's peak stays within the output plus
MAX_TILE_BYTES; it refuses capture into a CUDA graph. The embedded decode kernel
(backend/indexer_logits.py) matches the reference, equals the torch code bit for bit at GLM-5's
shapes, is what fp8_paged_mqa_logits runs on a CUDA device (GLMOPS_INDEXER_PAGED=torch: the
torch code), and replays correctly from a CUDA graph. Not shown here: DeepGEMM is not installed
on this machine, so the fallback is not compared with it, and the GPU is an H200 (SM90), not
SM120; the fallback has no capability-specific code besides the dispatch decision (tested on
CPU in tests/patchset/test_indexer.py).
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (GPU tests need it)")

from tests.support.indexer_cases import (  # noqa: E402
    FP8,
    assert_logits,
    decode_inputs,
    decode_reference,
    pack_indexer_cache,
    prefill_inputs,
    prefill_reference,
)
from tests.support.module_file import load_module_file  # noqa: E402

RENDERED = (
    Path(__file__).resolve().parents[2] / ".thirdparty/rendered/v0_16-indexer/glmops_dsa_indexer.py"
)

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
    pytest.mark.skipif(
        not RENDERED.is_file(),
        reason="run python3 -m tests.gpu.prepare_rendered first (.thirdparty/rendered missing)",
    ),
]
CUDA = torch.device("cuda")


@pytest.fixture(scope="module")
def fb() -> ModuleType:
    module = load_module_file(RENDERED, "glmops_dsa_indexer_gpu")
    torch.ones(64, 64, device=CUDA) @ torch.ones(64, 64, device=CUDA)  # cuBLAS workspace now
    return module


def on_gpu(*tensors):
    return [t.to(CUDA) if isinstance(t, torch.Tensor) else t for t in tensors]


@pytest.mark.parametrize("exact", [False, True])
def test_prefill_logits_on_gpu(fb: ModuleType, exact: bool) -> None:
    q, k, scale, w, ks, ke = prefill_inputs(exact=exact)
    ref = prefill_reference(q, k, scale, w, ks, ke)
    qd, kd, sd, wd, ksd, ked = on_gpu(q, k, scale, w, ks, ke)
    got = fb.mqa_logits_torch(qd, (kd, sd), wd, ksd, ked)
    assert got.device.type == "cuda"
    assert_logits(got, ref, exact)


@pytest.mark.parametrize("exact", [False, True])
def test_paged_logits_on_gpu(fb: ModuleType, exact: bool) -> None:
    q, kv, scale, w, lens, table, bs = decode_inputs(exact=exact)
    ref = decode_reference(q, kv, scale, w, lens, table, bs, 120)
    cache = pack_indexer_cache(kv, scale, bs)
    qd, cd, wd, ld, td = on_gpu(q, cache, w, lens, table)
    got = fb.paged_mqa_logits_torch(qd, cd, wd, ld, td, 120)
    assert_logits(got, ref, exact)


def exact_fp8(shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    """Small integers in fp8: with power-of-two scales and weights in 1/8 steps every dot
    product and head sum below is exact in fp32, so any tiling must give the same bits."""
    return torch.randint(-3, 4, shape, generator=gen, device=CUDA).float().to(FP8)


def peak_extra_bytes(fn) -> tuple[torch.Tensor, int]:
    """fn's result and the allocator's peak above what was allocated before the call."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    out = fn()
    torch.cuda.synchronize()
    return out, torch.cuda.max_memory_allocated() - before


def test_glm5_prefill_chunk_tiled_and_bounded(fb: ModuleType) -> None:
    """One 8k-token prefill chunk of a request (causal rows), GLM-5's indexer: 32 x 128."""
    gen = torch.Generator(device=CUDA).manual_seed(3)
    m = n = 8192
    heads, dim = 32, 128
    q, k = exact_fp8((m, heads, dim), gen), exact_fp8((n, dim), gen)
    scale = 2.0 ** torch.randint(-3, 3, (n,), generator=gen, device=CUDA).float()
    w = torch.randint(-4, 5, (m, heads), generator=gen, device=CUDA).float() / 8
    ks = torch.zeros(m, dtype=torch.int32, device=CUDA)
    ke = torch.arange(1, m + 1, dtype=torch.int32, device=CUDA)
    budget = fb.MAX_TILE_BYTES
    assert len(fb.plan_prefill_tiles(ks.cpu(), ke.cpu(), n, heads, dim, budget)) > 1

    tiled, extra = peak_extra_bytes(lambda: fb.mqa_logits_torch(q, (k, scale), w, ks, ke))
    out_bytes = tiled.numel() * 4
    assert extra <= out_bytes + budget, (extra, out_bytes, budget)
    whole, whole_extra = peak_extra_bytes(
        lambda: fb.mqa_logits_torch(q, (k, scale), w, ks, ke, max_tile_bytes=1 << 40)
    )
    assert whole_extra > out_bytes + budget  # the bound above is not vacuous
    assert torch.equal(tiled, whole)
    rows = [0, 1, 4095, m - 1]  # spot rows against the float64 reference
    ref = prefill_reference(q[rows].cpu(), k.cpu(), scale.cpu(), w[rows].cpu(), ks[rows], ke[rows])
    assert torch.equal(tiled[rows].cpu().double(), ref)


@pytest.fixture(scope="module")
def glm5_decode() -> dict:
    """64 requests decoding (next_n 2: one speculative token) over contexts up to 32k tokens
    in 64-token cache blocks at shuffled physical positions; exact inputs."""
    gen = torch.Generator(device=CUDA).manual_seed(4)
    batch, next_n, heads, dim, bs = 64, 2, 32, 128, 64
    max_model_len = 32768
    lens = torch.randint(next_n, max_model_len + 1, (batch,), generator=gen, device=CUDA)
    lens[0], lens[1] = next_n, max_model_len
    blocks_per_req = max_model_len // bs
    phys = batch * blocks_per_req + 1
    perm = torch.randperm(phys - 1, generator=gen, device=CUDA)[: batch * blocks_per_req] + 1
    kv = exact_fp8((phys * bs, dim), gen)
    scale = 2.0 ** torch.randint(-3, 3, (phys * bs,), generator=gen, device=CUDA).float()
    return {
        "q": exact_fp8((batch, next_n, heads, dim), gen),
        "kv": kv,
        "scale": scale,
        "cache": pack_indexer_cache(kv, scale, bs),
        "w": torch.randint(-4, 5, (batch * next_n, heads), generator=gen, device=CUDA).float() / 8,
        "lens": lens.to(torch.int32),
        "table": perm.view(batch, blocks_per_req).to(torch.int32),
        "bs": bs,
        "max_model_len": max_model_len,
    }


def decode_args(case: dict) -> tuple:
    return (case["q"], case["cache"], case["w"], case["lens"], case["table"])


def test_glm5_decode_tiled_and_bounded(fb: ModuleType, glm5_decode: dict) -> None:
    """The torch path: tiles change nothing and bound the temporaries; spot rows exact."""
    case, budget = glm5_decode, fb.MAX_TILE_BYTES
    mml, next_n = case["max_model_len"], case["q"].shape[1]

    def call(tile_bytes: int) -> torch.Tensor:
        return fb.paged_mqa_logits_torch(*decode_args(case), mml, max_tile_bytes=tile_bytes)

    tiled, extra = peak_extra_bytes(lambda: call(budget))
    out_bytes = tiled.numel() * 4
    assert extra <= out_bytes + budget, (extra, out_bytes, budget)
    whole, _ = peak_extra_bytes(lambda: call(1 << 40))
    assert torch.equal(tiled, whole)
    # request 0 (a context of next_n tokens) and 1 (the longest) against the reference
    sub = [0, 1]
    ref = decode_reference(
        case["q"][sub].cpu(), case["kv"].cpu(), case["scale"].cpu(),
        case["w"][: 2 * next_n].cpu(), case["lens"][sub].cpu(), case["table"][sub].cpu(),
        case["bs"], mml,
    )  # fmt: skip
    assert torch.equal(tiled[: 2 * next_n].cpu().double(), ref)


@pytest.mark.parametrize("exact", [False, True])
def test_triton_paged_logits_match_reference(fb: ModuleType, exact: bool) -> None:
    for next_n in (1, 2, 3):
        q, kv, scale, w, lens, table, bs = decode_inputs(exact=exact, next_n=next_n)
        for max_model_len in (120, 200):
            ref = decode_reference(q, kv, scale, w, lens, table, bs, max_model_len)
            cache = pack_indexer_cache(kv, scale, bs)
            got = fb.paged_mqa_logits(*on_gpu(q, cache, w, lens, table), max_model_len)
            assert_logits(got, ref, exact)


def test_triton_paged_logits_equal_torch_at_glm5_shapes(
    fb: ModuleType, glm5_decode: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bit for bit (exact inputs) the torch path's logits; reached through the name vLLM
    calls (fp8_paged_mqa_logits) whenever the fallback is active, unless
    GLMOPS_INDEXER_PAGED=torch; and capturable in a CUDA graph (no host synchronisation)."""
    case, mml = glm5_decode, glm5_decode["max_model_len"]
    expected = fb.paged_mqa_logits_torch(*decode_args(case), mml)
    assert torch.equal(fb.paged_mqa_logits(*decode_args(case), mml), expected)

    monkeypatch.setattr(fb, "use_torch_fallback", lambda: True)
    calls = []
    monkeypatch.setattr(fb, "paged_mqa_logits_torch", lambda *a: calls.append(a) or expected)
    got = fb.fp8_paged_mqa_logits(*decode_args(case), None, mml, False)
    assert torch.equal(got, expected) and not calls  # the kernel ran, not the torch code
    monkeypatch.setenv("GLMOPS_INDEXER_PAGED", "torch")
    fb.fp8_paged_mqa_logits(*decode_args(case), None, mml, False)
    assert len(calls) == 1

    graph, stream = torch.cuda.CUDAGraph(), torch.cuda.Stream()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        captured = fb.paged_mqa_logits(*decode_args(case), mml)
    captured.fill_(0.0)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, expected)


def test_capture_is_refused(fb: ModuleType) -> None:
    """The fallback reads lengths on the host, so a CUDA graph of it would replay stale
    shapes: it raises instead of being captured."""
    q, k, scale, w, ks, ke = on_gpu(*prefill_inputs())
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    with (
        pytest.raises(RuntimeError, match="cannot be captured"),
        torch.cuda.stream(stream),
        torch.cuda.graph(graph, stream=stream),
    ):
        fb.mqa_logits_torch(q, (k, scale), w, ks, ke)
    torch.cuda.synchronize()
    assert fb.mqa_logits_torch(q, (k, scale), w, ks, ke).isfinite().any()


@pytest.mark.parametrize("next_n", [1, 2])
def test_triton_topk_per_row_selects_the_top_logits(fb: ModuleType, next_n: int) -> None:
    """topk_per_row (backend/indexer_logits.py): each decode row's 2048 visible positions with
    the highest logits, of equal logits at the 2048th the lowest positions (so the set is the
    same on every run, whatever order the GPU's atomics take): integer rows (more ties than
    candidates kept: the finishing pass reads the whole row), continuous rows (it reads the
    candidates between the sampled bounds), continuous rows whose sampled positions hold their
    lowest values (the bounds miss: the whole row), and continuous rows with the 2048th value
    repeated (candidates, ties taken from the row); a row that sees at
    most 2048 positions gets 0..n-1 and -1 after; into a wider buffer, leaving its other
    columns alone; and replayed from a CUDA graph."""
    k, mml = 2048, 70_000
    gen = torch.Generator(device=CUDA).manual_seed(46 + next_n)
    lens = torch.tensor(
        [1000, 2048 + next_n - 1, 2049 + next_n, 5000, mml, 40_000, 60_000], device=CUDA
    )
    rows = lens.numel() * next_n
    logits = torch.randn(rows, mml, device=CUDA, generator=gen) * 3 - 1
    logits[0 : 2 * next_n] = torch.randint(-4, 4, (2 * next_n, mml), device=CUDA, generator=gen)
    ints = torch.randint(-2, 3, (next_n, mml), device=CUDA, generator=gen).float()
    logits[-2 * next_n : -next_n] = ints.masked_fill(ints == 0, 0.5)  # no -0.0 against +0.0
    visible = (lens - next_n).repeat_interleave(next_n) + torch.arange(rows, device=CUDA) % next_n
    visible = (visible + 1).clamp(max=mml)
    for r in range(rows - next_n, rows):
        kth = logits[r, : visible[r]].topk(k).values[-1]
        logits[r, ::40] = kth  # the 2048th value 1 500 times: fewer candidates than kept
    for r in range(3 * next_n, 4 * next_n):  # the sampled positions hold the lowest values
        n = int(visible[r])
        logits[r, torch.arange(fb._TOPK_SAMPLE, device=CUDA) * n // fb._TOPK_SAMPLE] = -100.0
    cols = torch.arange(mml, device=CUDA)
    logits = logits.masked_fill(cols[None, :] >= visible[:, None], float("-inf"))
    buf = torch.full((rows + 3, k + 128), 777, dtype=torch.int32, device=CUDA)
    out = buf[:rows, :k]

    def check() -> None:
        assert (buf[:, k:] == 777).all() and (buf[rows:] == 777).all(), "wrote outside its rows"
        for r in range(rows):
            n, got = int(visible[r]), out[r].long()
            if n <= k:
                want = torch.cat(
                    [torch.arange(n, device=CUDA), torch.full((k - n,), -1, device=CUDA)]
                )
                assert torch.equal(got, want), f"row {r} ({n} visible)"
                continue
            row = logits[r, :n]
            kth = torch.topk(row, k).values[-1]
            above = (row > kth).nonzero().flatten()
            ties = (row == kth).nonzero().flatten()[: k - above.numel()]
            want = torch.cat([above, ties]).sort().values
            assert torch.equal(got.sort().values, want), f"row {r}: not the top {k} of {n}"

    fb.topk_per_row(logits, lens.to(torch.int32), next_n, k, out=out)
    torch.cuda.synchronize()
    check()
    graph, stream = torch.cuda.CUDAGraph(), torch.cuda.Stream()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        fb.topk_per_row(logits, lens.to(torch.int32), next_n, k, out=out)
    out.fill_(-5)
    graph.replay()
    torch.cuda.synchronize()
    check()
