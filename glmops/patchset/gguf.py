"""Item 2d (first slice): GGUF loading fixes in the in-tree loader (0.16 line).

* weight_utils.gguf_quant_weights_iterator renames quantized tensors with a global
  str.replace("weight", "qweight"), which turns GLM-5's indexer.weights_proj.weight into
  indexer.qweights_proj.qweight; the fix rewrites the suffix only.
* EngineArgs calls maybe_override_with_speculators before the model config exists; for a
  GGUF whose architecture transformers does not know (glm-dsa) that probe raises and aborts
  start-up; the fix keeps start-up going when the probe fails on a .gguf model.

Both are exact text replacements, so the pristine file is recovered by the reverse
replacement and re-planning is idempotent. Layouts without the in-tree GGUF loader (0.24+,
where vllm-gguf-plugin owns it) report 'ok: not in this layout'.
"""

from __future__ import annotations

from .common import MARKER, TEMPLATE_VERSION, FileChange, marker
from .render import render

NAME = "gguf"
WEIGHT_UTILS = "vllm/model_executor/model_loader/weight_utils.py"
ARG_UTILS = "vllm/engine/arg_utils.py"
LOADER = "vllm/model_executor/model_loader/gguf_loader.py"
HELPER = "vllm/model_executor/model_loader/glmops_glm_dsa_gguf.py"
FILES = (WEIGHT_UTILS, ARG_UTILS, LOADER, HELPER)
_MOD = "vllm.model_executor.model_loader.glmops_glm_dsa_gguf"


def _suffix(var: str, new: str) -> str:
    return f'({var}[: -len("weight")] + "{new}" if {var}.endswith("weight") else {var})'


def _weight_utils_edits() -> list[tuple[str, str]]:
    tag = f"  # {marker(NAME)}"
    return [
        (
            'weight_type_name = name.replace("weight", "qweight_type")\n',
            f"weight_type_name = {_suffix('name', 'qweight_type')}{tag}\n",
        ),
        (
            'name = name.replace("weight", "qweight")\n',
            f"name = {_suffix('name', 'qweight')}{tag}\n",
        ),
    ]


_WRAPPER = '''

def _glmops_safe_speculators(*args, **kwargs):  # {tag}
    """Speculator probe that cannot abort start-up on an unknown GGUF architecture."""  # {tag}
    try:  # {tag}
        return maybe_override_with_speculators(*args, **kwargs)  # {tag}
    except (ValueError, OSError, KeyError) as exc:  # {tag}
        model = kwargs.get("model", args[0] if args else "")  # {tag}
        if not str(model).endswith(".gguf"):  # {tag}
            raise  # {tag}
        logger.warning("speculator probe failed on GGUF %s: %s", model, exc)  # {tag}
        return (model, kwargs.get("tokenizer"), kwargs.get("vllm_speculative_config"))  # {tag}
'''


def _arg_utils_edits() -> list[tuple[str, str]]:
    tag = marker(NAME)
    anchor = "logger = init_logger(__name__)\n"
    return [
        (anchor, anchor + _WRAPPER.format(tag=tag)),
        (
            "                maybe_override_with_speculators(\n",
            f"                _glmops_safe_speculators(  # {tag}\n",
        ),
    ]


def _loader_edits() -> list[tuple[str, str]]:
    """glm_moe_dsa hooks: explicit name map, rebuilt kv_b_proj / dequantized weights_proj,
    both kept out of GGUF quantization."""
    t = f"  # {marker(NAME)}"
    is_glm = 'model_type == "glm_moe_dsa":'
    a = "        model_type = config.model_type\n"
    b = "        yield from gguf_quant_weights_iterator(model_name_or_path, gguf_to_hf_name_map)\n"
    c = "        vllm_config.quant_config.unquantized_modules.extend(unquant_names)\n"
    return [
        (
            a,
            a + f"        if {is_glm}{t}\n"
            f"            from {_MOD} import glm_dsa_name_map{t}\n\n"
            f"            return glm_dsa_name_map(text_config.num_hidden_layers){t}\n",
        ),
        (
            b,
            f"        if hf_config.{is_glm}{t}\n"
            f"            from {_MOD} import glm_dsa_weights{t}\n\n"
            f"            yield from glm_dsa_weights(model_name_or_path, gguf_to_hf_name_map){t}\n"
            f"            return{t}\n" + b,
        ),
        (
            c,
            f"        if model_config.hf_config.{is_glm}{t}\n"
            f"            from {_MOD} import glm_dsa_unquantized_modules{t}\n\n"
            f"            layers = model_config.hf_config.num_hidden_layers{t}\n"
            f"            unquant_names += glm_dsa_unquantized_modules(layers){t}\n" + c,
        ),
    ]


def _plan_helper(text: str | None) -> FileChange:
    after = render("glm_dsa_gguf.py.j2", marker=marker(NAME), template_version=TEMPLATE_VERSION)
    if text is not None and MARKER not in text:
        return FileChange(HELPER, text, text, NAME, "ok", "already upstream")
    if text == after:
        return FileChange(HELPER, text, text, NAME, "ok", "already applied")
    return FileChange(HELPER, text, after, NAME, "apply", "glm-dsa GGUF helper")


def _forward(text: str, edits: list[tuple[str, str]]) -> str | None:
    """Apply each edit exactly once; None when an anchor is missing or ambiguous."""
    for old, new in edits:
        if text.count(old) != 1:
            return None
        text = text.replace(old, new)
    return text


def _reverse(text: str, edits: list[tuple[str, str]]) -> str:
    for old, new in reversed(edits):
        text = text.replace(new, old)
    return text


def plan_file(path: str, text: str | None, edits: list[tuple[str, str]]) -> FileChange:
    if text is None:
        return FileChange(path, None, "", NAME, "ok", "not in this layout")
    pristine = _reverse(text, edits)
    after = _forward(pristine, edits)
    if after is None:
        return FileChange(path, text, text, NAME, "ok", "not in this layout (already upstream)")
    if after == text:
        return FileChange(path, text, text, NAME, "ok", "already applied")
    return FileChange(path, text, after, NAME, "apply", "GGUF loader fixes")


def plan(profile: object, sources: dict[str, str | None], options: dict) -> list[FileChange]:
    weight_utils = sources.get(WEIGHT_UTILS) or ""
    if "def gguf_quant_weights_iterator(" not in weight_utils:
        return [
            FileChange(
                p,
                sources.get(p),
                sources.get(p) or "",
                NAME,
                "ok",
                "no in-tree GGUF loader (vllm-gguf-plugin fixes not covered yet)",
            )
            for p in FILES
        ]
    return [
        plan_file(WEIGHT_UTILS, sources.get(WEIGHT_UTILS), _weight_utils_edits()),
        plan_file(ARG_UTILS, sources.get(ARG_UTILS), _arg_utils_edits()),
        plan_file(LOADER, sources.get(LOADER), _loader_edits()),
        _plan_helper(sources.get(HELPER)),
    ]
