"""Run the rendered indexer fallback's paged-logits Triton kernel under Triton's interpreter
(the test sets TRITON_INTERPRET=1) against the float64 reference, and its top-k against
torch.topk; run by test_indexer.py in a
fresh process, because the interpreter caches kernels by their source text, so a module with
the same source compiled earlier in the process would be reused. Reads a JSON object on stdin
(the module's path). Prints one JSON object: the cases checked and every mismatch."""

from __future__ import annotations

import json
import sys

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
    checked.append("topk next_n=2")  # next_n 2 covers 1's rows too; ~15 s interpreted
    problems += [f"topk next_n=2: {p}" for p in topk_problems(fb, 2)]
    print(json.dumps({"checked": checked, "problems": problems}))


def topk_problems(fb, next_n: int, k: int = 64) -> list[str]:
    """topk_per_row on logits whose rows see fewer, exactly k and more positions than k (one
    of them all ties, one over two chunks): what differs from torch.topk's values."""
    import torch

    g = torch.Generator().manual_seed(next_n)
    lens = torch.tensor([40, k + next_n - 1, 300, 5000], dtype=torch.int32)
    rows, mml = lens.numel() * next_n, 5000
    logits = torch.randn(rows, mml, generator=g) * 3
    logits[next_n : 2 * next_n] = 1.5
    logits[2 * next_n :] = torch.randint(-3, 3, (rows - 2 * next_n, mml), generator=g).float()
    out = fb.topk_per_row(logits, lens, next_n, k)
    problems = []
    for r in range(rows):
        n = min(int(lens[r // next_n]) - next_n + r % next_n + 1, mml)
        got = out[r].long()
        if n <= k:
            want = torch.cat([torch.arange(n), torch.full((k - n,), -1)])
            if not torch.equal(got, want):
                problems.append(f"row {r} ({n} visible): {got.tolist()}")
            continue
        top = torch.topk(logits[r, :n], k).values.sort().values
        ok = got.unique().numel() == k and int(got.min()) >= 0 and int(got.max()) < n
        if not (ok and torch.equal(logits[r, got].sort().values, top)):
            problems.append(f"row {r}: not the top {k} of {n}")
    return problems


if __name__ == "__main__":
    main()
