"""Load a GGUF through a (patched or pristine) vLLM tree's own loader code; run by the tests
under cpu_stub.py. Args (JSON): gguf, out (torch.save path), mode "glm_dsa" (the patched
loader's glm-dsa path) or "plain" (vLLM's gguf_quant_weights_iterator with the given map)."""

from __future__ import annotations

import json
import sys

import torch


def main() -> None:
    args = json.loads(sys.argv[1])
    if args["mode"] == "speculators":
        import vllm.engine.arg_utils as arg_utils

        def probe_fails(*a, **k):  # what transformers does for an unknown GGUF arch
            raise ValueError("GGUF model with architecture glm-dsa is not supported yet.")

        arg_utils.maybe_override_with_speculators = probe_fails
        kw = {
            "tokenizer": "tok",
            "revision": None,
            "trust_remote_code": False,
            "vllm_speculative_config": None,
        }
        got = arg_utils._glmops_safe_speculators(model="/m/glm5.gguf", **kw)
        try:
            arg_utils._glmops_safe_speculators(model="/m/glm5-hf", **kw)
            other = "returned"
        except ValueError:
            other = "raised"
        print(
            json.dumps(
                {
                    "failed": False,
                    "changed": False,
                    "msg": "ok",
                    "gguf": list(got),
                    "non_gguf": other,
                }
            )
        )
        return
    if args["mode"] == "glm_dsa":
        from vllm.model_executor.model_loader.glmops_glm_dsa_gguf import (
            glm_dsa_name_map,
            glm_dsa_weights,
        )

        weights = dict(glm_dsa_weights(args["gguf"], glm_dsa_name_map(args["layers"])))
    else:
        from vllm.model_executor.model_loader.weight_utils import gguf_quant_weights_iterator

        weights = dict(gguf_quant_weights_iterator(args["gguf"], args["map"]))
    torch.save(weights, args["out"])
    print(json.dumps({"failed": False, "changed": False, "msg": "ok", "names": sorted(weights)}))


if __name__ == "__main__":
    main()
