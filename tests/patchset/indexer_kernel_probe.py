"""Run the rendered indexer fallback's paged-logits Triton kernel under Triton's interpreter
(the test sets TRITON_INTERPRET=1) against the float64 reference; run by test_indexer.py in a
fresh process, because the interpreter caches kernels by their source text, so a module with
the same source compiled earlier in the process would be reused. Args (JSON): module path.
Prints one JSON object: the cases checked, or the first mismatch."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from indexer_cases import decode_inputs, decode_reference, pack_indexer_cache  # noqa: E402


def main() -> None:
    args = json.loads(sys.argv[1])
    spec = importlib.util.spec_from_file_location("glmops_dsa_indexer", args["module"])
    assert spec and spec.loader
    fb = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fb)
    checked, problems = [], []
    for exact in (False, True):
        for next_n in (1, 2, 3):
            q, kv, scale, w, lens, table, bs = decode_inputs(exact=exact, next_n=next_n)
            cache = pack_indexer_cache(kv, scale, bs)
            # one request outgrows its 8 x 16 block table; 120 cuts the last block, 200 does not
            for max_model_len in (120, 200):
                got = fb.paged_mqa_logits(q, cache, w, lens, table, max_model_len).double()
                ref = decode_reference(q, kv, scale, w, lens, table, bs, max_model_len)
                case = f"exact={exact} next_n={next_n} max_model_len={max_model_len}"
                checked.append(case)
                if not torch.equal(torch.isinf(got), torch.isinf(ref)):
                    problems.append(f"{case}: -inf pattern differs")
                    continue
                finite = torch.isfinite(ref)
                diff = float((got[finite] - ref[finite]).abs().max()) if finite.any() else 0.0
                peak = float(ref[finite].abs().max()) if finite.any() else 0.0
                if diff > (0.0 if exact else 1e-5 * max(1.0, peak)):
                    problems.append(f"{case}: max abs diff {diff}")
    print(json.dumps({"checked": checked, "problems": problems}))


if __name__ == "__main__":
    main()
