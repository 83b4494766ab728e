"""Load a GGUF through a (patched or pristine) vLLM tree's own loader code; run by the tests
under cpu_stub.py. Args (JSON): mode, out (torch.save path of the loaded tensors), and per mode:
  "glm_dsa"      the patched in-tree loader's glm-dsa path: gguf, layers
  "plain"        vLLM's in-tree gguf_quant_weights_iterator: gguf, map
  "speculators"  the patched in-tree speculator probe on a GGUF and a non-GGUF model
  "plugin_plain" vllm-gguf-plugin's gguf_quant_weights_iterator_multi: shards, map
  "plugin"       vllm-gguf-plugin's GGUFModelLoader picks the adapter and loads: gguf (the
                 first shard), layers, prefixes (asked of the plugin's unquantized check)
Prints one JSON object with the loaded names and what the mode reports."""

from __future__ import annotations

import json
import sys
import types

import torch

Weights = dict[str, torch.Tensor]


def speculators(args: dict) -> tuple[Weights, dict]:
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
    return {}, {"gguf": list(got), "non_gguf": other}


def glm_dsa(args: dict) -> tuple[Weights, dict]:
    from vllm.model_executor.model_loader.glmops_glm_dsa_gguf import (
        glm_dsa_name_map,
        glm_dsa_weights,
    )

    return dict(glm_dsa_weights(args["gguf"], glm_dsa_name_map(args["layers"]))), {}


def plain(args: dict) -> tuple[Weights, dict]:
    from vllm.model_executor.model_loader.weight_utils import gguf_quant_weights_iterator

    return dict(gguf_quant_weights_iterator(args["gguf"], args["map"])), {}


def plugin_plain(args: dict) -> tuple[Weights, dict]:
    from vllm_gguf_plugin.weight_utils import gguf_quant_weights_iterator_multi

    return dict(gguf_quant_weights_iterator_multi(args["shards"], args["map"])), {}


def plugin(args: dict) -> tuple[Weights, dict]:
    """The plugin's load_weights path: GGUFModelLoader._prepare_adapter, then the adapter's
    prepare_weights (what it hands model.load_weights)."""
    from transformers import AutoConfig
    from vllm.config.load import LoadConfig
    from vllm_gguf_plugin.loader import GGUFModelLoader
    from vllm_gguf_plugin.quantization.utils import is_layer_skipped_gguf
    from vllm_gguf_plugin.weights_adapter import get_weights_adapter

    config = AutoConfig.for_model("glm_moe_dsa", num_hidden_layers=args["layers"])
    model_config = types.SimpleNamespace(
        model=args["gguf"], model_weights=args["gguf"], hf_config=config, trust_remote_code=False
    )
    report = {"adapter": type(get_weights_adapter(config)).__name__}
    try:
        adapter = GGUFModelLoader(LoadConfig(load_format="gguf"))._prepare_adapter(model_config)
    except RuntimeError as exc:
        return {}, {**report, "error": str(exc)}
    weights = dict(adapter.prepare_weights(model_config))
    unquantized = adapter.load_spec.unquantized_modules
    return weights, {
        **report,
        "weights_source": adapter.load_spec.weights_source,
        "unquantized_modules": unquantized,
        "tie_word_embeddings": config.tie_word_embeddings,
        "skipped": {p: is_layer_skipped_gguf(p, unquantized) for p in args["prefixes"]},
    }


MODES = {
    "speculators": speculators,
    "glm_dsa": glm_dsa,
    "plain": plain,
    "plugin_plain": plugin_plain,
    "plugin": plugin,
}


def main() -> None:
    args = json.loads(sys.argv[1])
    weights, report = MODES[args["mode"]](args)
    if args.get("out"):
        torch.save(weights, args["out"])
    reply = {"failed": False, "changed": False, "msg": "ok", "names": sorted(weights), **report}
    print(json.dumps(reply))


if __name__ == "__main__":
    main()
