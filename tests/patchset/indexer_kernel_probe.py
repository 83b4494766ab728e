"""Run the rendered indexer fallback's paged-logits Triton kernel under Triton's interpreter
(the test sets TRITON_INTERPRET=1) against the float64 reference; run by test_indexer.py in a
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
    print(json.dumps({"checked": checked, "problems": problems}))


if __name__ == "__main__":
    main()
