"""Run the rendered indexer fallback's paged-logits Triton kernel under Triton's interpreter
(the test sets TRITON_INTERPRET=1) against the float64 reference, and its top-k against the
selection torch.topk's k-th value fixes; run by test_indexer.py in a
fresh process, because the interpreter caches kernels by their source text, so a module with
the same source compiled earlier in the process would be reused. Reads a JSON object on stdin
(the module's path). Prints one JSON object: the cases checked and every mismatch."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator

import torch

from tests.support.indexer_cases import (  # noqa: E402
    assert_logits,
    decode_inputs,
    decode_reference,
    pack_indexer_cache,
)
from tests.support.module_file import load_module_file  # noqa: E402


def main() -> None:
    args = json.load(sys.stdin)
    fb = load_module_file(args["module"], "glmops_dsa_indexer")
    checked, problems = [], []
    for exact in (False, True):
        for next_n in (1, 2, 3):
            q, kv, scale, w, lens, table, bs = decode_inputs(exact=exact, next_n=next_n)
            cache = pack_indexer_cache(kv, scale, bs)
            # one request outgrows its 8 x 16 block table; 120 cuts the last block, 200 does not
            for max_model_len in (120, 200):
                got = fb.paged_mqa_logits(q, cache, w, lens, table, max_model_len)
                ref = decode_reference(q, kv, scale, w, lens, table, bs, max_model_len)
                case = f"exact={exact} next_n={next_n} max_model_len={max_model_len}"
                checked.append(case)
                try:
                    assert_logits(got, ref, exact)
                except AssertionError as error:
                    problems.append(f"{case}: {str(error).splitlines()[0]}")
    with poisoned_allocations():
        # next_n 2 covers 1's rows too; one chunk a program puts three programs on the long rows
        for chunks_per_program in (None, 2):
            case = f"topk next_n=2 chunks_per_program={chunks_per_program}"
            checked.append(case)
            problems += [f"{case}: {p}" for p in topk_problems(fb, 2, chunks_per_program)]
        checked.append("top_k_per_row_decode routed to topk_per_row")
        problems += routed_decode_problems(fb)
    print(json.dumps({"checked": checked, "problems": problems}))


@contextlib.contextmanager
def poisoned_allocations() -> Iterator[None]:
    """``torch.empty`` fills what it hands out with garbage (-7, NaN), as a GPU's caching
    allocator may: a workspace the top-k forgets to initialise fails here, not in production."""
    real = torch.empty

    def empty(*args, **kwargs):
        tensor = real(*args, **kwargs)
        return tensor.fill_(float("nan") if tensor.is_floating_point() else -7)

    torch.empty = empty
    try:
        yield
    finally:
        torch.empty = real


def routed_decode_problems(fb, next_n: int = 2, k: int = 64) -> list[str]:
    """The routed call as sparse_attn_indexer makes it (vLLM's op's arguments, into a slice of
    a wider indexer buffer) writes what topk_per_row writes and nothing else. The backend
    decision is fixed to Triton here; it is tested through vLLM's module on the real wheel."""
    import torch

    logits, lens, _ = topk_rows(next_n, k, fb._TOPK_SAMPLE)
    rows = logits.shape[0]
    buf = torch.full((rows + 2, k + 16), 777, dtype=torch.int32)
    fb.use_triton_topk = lambda: True
    strides = logits.stride()
    fb.top_k_per_row_decode(logits, next_n, lens, buf[:rows, :k], rows, *strides, k)
    want = fb.topk_per_row(logits, lens, next_n, k)
    problems = []
    if not ((buf[:rows, k:] == 777).all() and (buf[rows:] == 777).all()):
        problems.append("wrote outside the rows' first k columns")
    if not torch.equal(buf[:rows, :k].sort(dim=1).values, want.sort(dim=1).values):
        problems.append("selected other positions than topk_per_row")
    return problems


def topk_rows(next_n: int, k: int, sample: int):
    """Logits whose rows see fewer, exactly k and more positions than k, each past one 2048-key
    chunk: continuous values (a few candidates between the sampled bounds), integers (more
    ties than wanted), all equal (every key a tie), continuous values with duplicates
    straddling the k-th, and continuous values whose ``sample`` sampled positions hold the
    row's lowest values (the bounds miss: the finishing pass reads the whole row)."""
    import torch

    g = torch.Generator().manual_seed(next_n)
    lens = torch.tensor([40, k + next_n - 1, 5000, 5000, 5000, 5000, 5000], dtype=torch.int32)
    rows, mml = lens.numel() * next_n, 5000
    logits = torch.randn(rows, mml, generator=g) * 3
    ints = torch.randint(-3, 3, (next_n, mml), generator=g).float()
    logits[3 * next_n : 4 * next_n] = ints.masked_fill(ints == 0, 0.5)  # no -0.0 against +0.0
    logits[4 * next_n : 5 * next_n] = 1.5
    dup = logits[5 * next_n : 6 * next_n]
    kth = dup.topk(k, dim=1).values[:, -1:]
    dup[:, ::7] = kth  # the k-th value, 700+ times, among distinct others
    for r in range(6 * next_n, 7 * next_n):
        n = min(int(lens[r // next_n]) - next_n + r % next_n + 1, mml)
        logits[r, torch.arange(sample) * n // sample] = -100.0
    return logits, lens, mml


def topk_problems(fb, next_n: int, chunks_per_program: int | None, k: int = 64) -> list[str]:
    """topk_per_row against the one selection it must make: every visible position above the
    k-th largest logit, then the lowest positions of those equal to it; -1 past a short row."""
    import torch

    logits, lens, mml = topk_rows(next_n, k, fb._TOPK_SAMPLE)
    out = fb.topk_per_row(logits, lens, next_n, k, chunks_per_program=chunks_per_program)
    problems = []
    for r in range(logits.shape[0]):
        n = min(int(lens[r // next_n]) - next_n + r % next_n + 1, mml)
        got = out[r].long()
        if n <= k:
            want = torch.cat([torch.arange(n), torch.full((k - n,), -1)])
            if not torch.equal(got, want):
                problems.append(f"row {r} ({n} visible): {got.tolist()}")
            continue
        row = logits[r, :n]
        kth = torch.topk(row, k).values[-1]
        above = (row > kth).nonzero().flatten()
        ties = (row == kth).nonzero().flatten()[: k - above.numel()]
        want = torch.cat([above, ties]).sort().values
        if not torch.equal(got.sort().values, want):
            problems.append(f"row {r}: not the top {k} of {n} (lowest positions of ties)")
    return problems


if __name__ == "__main__":
    main()
