"""Patch-set item: GLM-5 (glm_moe_dsa, GGUF architecture glm-dsa) GGUF loading, in whichever loader
the venv has.

vLLM's in-tree loader (the 0.16 line):
* weight_utils.gguf_quant_weights_iterator renames quantized tensors with a global
  str.replace("weight", "qweight"), which turns GLM-5's indexer.weights_proj.weight into
  indexer.qweights_proj.qweight; the fix rewrites the suffix only.
* EngineArgs calls maybe_override_with_speculators before the model config exists; for a
  GGUF whose architecture transformers does not know (glm-dsa) that probe raises and aborts
  start-up; the fix keeps start-up going when the probe fails on a .gguf model.
* gguf_loader.py calls a rendered helper (templates/vllm/glm_dsa_gguf.py.j2) for glm_moe_dsa:
  explicit name map, kv_b_proj rebuilt from attn_k_b/attn_v_b and indexer.weights_proj
  dequantized, both kept out of GGUF quantization.

vllm-gguf-plugin (vLLM 0.24+, where GGUF left the tree; checked on 0.0.5):
* weight_utils.gguf_quant_weights_iterator_multi has the same global replace: same fix.
* The same template, rendered with plugin=True, becomes weights_adapter/glmops_glm_dsa.py:
  GlmDsaGGUFAdapter, the default adapter's flow over all shards with the explicit name map,
  the rebuilt/dequantized tensors (the indexer's wk too: 0.33 fuses it unquantized with
  weights_proj) and their modules in the load spec's unquantized_modules.
* weights_adapter/__init__.py lists that adapter first in _ADAPTER_REGISTRY.
* plugin.py's _patch_speculator_probe already skips the probe for GGUF: ok, upstream.
The plugin files the adapter relies on are checked first (PLUGIN_ANCHORS); one missing
refuses the item, naming file and symbol, before anything changes.

Text edits are exact replacements or marked insertions, so the pristine file is recovered by
reversing them and re-planning is idempotent. A loader the venv lacks is ok with the reason;
with neither, the reason names vllm-gguf-plugin as the package to install.
"""

from __future__ import annotations

import re

from .common import MARKER, TEMPLATE_VERSION, FileChange, PatchError, marker, strip_marked
from .profiles import Anchor
from .render import render

NAME = "gguf"
WEIGHT_UTILS = "vllm/model_executor/model_loader/weight_utils.py"
ARG_UTILS = "vllm/engine/arg_utils.py"
LOADER = "vllm/model_executor/model_loader/gguf_loader.py"
HELPER = "vllm/model_executor/model_loader/glmops_glm_dsa_gguf.py"
IN_TREE_FILES = (WEIGHT_UTILS, ARG_UTILS, LOADER, HELPER)
_MOD = "vllm.model_executor.model_loader.glmops_glm_dsa_gguf"

PLUGIN_WEIGHT_UTILS = "vllm_gguf_plugin/weight_utils.py"
PLUGIN_REGISTRY = "vllm_gguf_plugin/weights_adapter/__init__.py"
PLUGIN_ADAPTER = "vllm_gguf_plugin/weights_adapter/glmops_glm_dsa.py"
PLUGIN_ENTRY = "vllm_gguf_plugin/plugin.py"
PLUGIN_DEFAULT_ADAPTER = "vllm_gguf_plugin/weights_adapter/default.py"
PLUGIN_LOADER = "vllm_gguf_plugin/loader.py"
PLUGIN_FILES = (PLUGIN_WEIGHT_UTILS, PLUGIN_REGISTRY, PLUGIN_ADAPTER, PLUGIN_ENTRY)
# One FileChange per file here; READ_FILES adds the plugin files only checked for anchors.
FILES = IN_TREE_FILES + PLUGIN_FILES
READ_FILES = FILES + (PLUGIN_DEFAULT_ADAPTER, PLUGIN_LOADER)
_REGISTRY_LIST = r"^_ADAPTER_REGISTRY\b[^\n=]*= \[$"
# What GlmDsaGGUFAdapter and its registration rely on in the plugin.
PLUGIN_ANCHORS = (
    Anchor(
        PLUGIN_WEIGHT_UTILS,
        "def gguf_quant_weights_iterator_multi",
        r"^def gguf_quant_weights_iterator_multi\(",
    ),
    Anchor(PLUGIN_REGISTRY, "_ADAPTER_REGISTRY = [", _REGISTRY_LIST),
    Anchor(
        PLUGIN_REGISTRY,
        "get_weights_adapter: for cls in _ADAPTER_REGISTRY",
        r"^    for cls in _ADAPTER_REGISTRY:$",
    ),
    Anchor(PLUGIN_DEFAULT_ADAPTER, "class GGUFWeightsAdapter", r"^class GGUFWeightsAdapter\("),
    Anchor(
        PLUGIN_DEFAULT_ADAPTER,
        "GGUFWeightsAdapter.prepare_loading(self, model_path, model_config)",
        r"^    def prepare_loading\(\s*self,\s*model_path\b[^,]*,\s*model_config\b",
    ),
    Anchor(
        PLUGIN_DEFAULT_ADAPTER,
        "prepare_loading: self.build_name_map(model_config)",
        r"= self\.build_name_map\(model_config\)$",
    ),
    Anchor(
        PLUGIN_DEFAULT_ADAPTER,
        "prepare_loading: self.update_tie_word_embeddings(",
        r"^        self\.update_tie_word_embeddings\(",
    ),
    Anchor(
        PLUGIN_DEFAULT_ADAPTER,
        "GGUFLoadSpec(weights_source=self._get_all_gguf_files(model_path))",
        r"weights_source=self\._get_all_gguf_files\(model_path\),",
    ),
    Anchor(
        PLUGIN_DEFAULT_ADAPTER,
        "GGUFWeightsAdapter.prepare_weights(self, model_config)",
        r"^    def prepare_weights\(\s*self,\s*model_config\b",
    ),
    Anchor(
        PLUGIN_LOADER,
        "quant_config.unquantized_modules.extend(adapter.load_spec.unquantized_modules)",
        r"\.unquantized_modules\.extend\(\s*adapter\.load_spec\.unquantized_modules\s*\)",
    ),
    Anchor(PLUGIN_ENTRY, "def _patch_speculator_probe", r"^def _patch_speculator_probe\("),
    Anchor(
        PLUGIN_ENTRY, "register(): _patch_speculator_probe()", r"^    _patch_speculator_probe\(\)$"
    ),
)
_REGISTRY_OPEN = re.compile(_REGISTRY_LIST + r"\n", re.MULTILINE)
_GLOBAL_RENAME = re.compile(r"\.replace\(\s*[\"']weight[\"']")


def _suffix(var: str, new: str) -> str:
    return f'({var}[: -len("weight")] + "{new}" if {var}.endswith("weight") else {var})'


def _rename_edits(type_line: str) -> list[tuple[str, str]]:
    """A GGUF iterator's two global renames made suffix-only; type_line is its qweight_type
    line with {} where name.replace("weight", "qweight_type") stands."""
    tag = f"  # {marker(NAME)}"
    return [
        (
            type_line.format('name.replace("weight", "qweight_type")') + "\n",
            type_line.format(_suffix("name", "qweight_type")) + f"{tag}\n",
        ),
        (
            'name = name.replace("weight", "qweight")\n',
            f"name = {_suffix('name', 'qweight')}{tag}\n",
        ),
    ]


def _weight_utils_edits() -> list[tuple[str, str]]:
    return _rename_edits("weight_type_name = {}")


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


def _plan_rendered(path: str, current: str | None, plugin: bool) -> FileChange:
    """The template rendered as the in-tree helper module or the plugin's adapter module."""
    after = render(
        "glm_dsa_gguf.py.j2", marker=marker(NAME), template_version=TEMPLATE_VERSION, plugin=plugin
    )
    if current is not None and MARKER not in current:
        return FileChange(path, current, current, NAME, "ok", "already upstream")
    if current == after:
        return FileChange(path, current, current, NAME, "ok", "already applied")
    reason = "glm-dsa GGUF adapter" if plugin else "glm-dsa GGUF helper"
    return FileChange(path, current, after, NAME, "apply", reason)


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


def _plan_plugin_weight_utils(text: str) -> FileChange:
    edits = _rename_edits("yield {}, torch.tensor(weight_type)")
    pristine = _reverse(text, edits)
    after = _forward(pristine, edits)
    if after is None:
        if _GLOBAL_RENAME.search(pristine):
            raise PatchError(
                f"{PLUGIN_WEIGHT_UTILS}: gguf_quant_weights_iterator_multi renames with "
                'name.replace("weight", ...) in lines glmops does not know'
            )
        reason = "already upstream: gguf_quant_weights_iterator_multi renames no substring"
        return FileChange(PLUGIN_WEIGHT_UTILS, text, text, NAME, "ok", reason)
    if after == text:
        return FileChange(PLUGIN_WEIGHT_UTILS, text, text, NAME, "ok", "already applied")
    reason = "suffix-only qweight rename"
    return FileChange(PLUGIN_WEIGHT_UTILS, text, after, NAME, "apply", reason)


def _plan_plugin_registry(text: str) -> FileChange:
    """The adapter first in _ADAPTER_REGISTRY, so get_weights_adapter returns it for glm-dsa."""
    pristine = strip_marked(text, NAME)
    found = list(_REGISTRY_OPEN.finditer(pristine))
    if len(found) != 1:
        raise PatchError(f"{PLUGIN_REGISTRY}: _ADAPTER_REGISTRY = [ not found exactly once")
    tag = f"  # {marker(NAME)}"
    module = PLUGIN_ADAPTER.rsplit("/", 1)[1].removesuffix(".py")
    start, end = found[0].span()
    after = (
        pristine[:start]
        + f"from .{module} import GlmDsaGGUFAdapter{tag}\n"
        + pristine[start:end]
        + f"    GlmDsaGGUFAdapter,{tag}\n"
        + pristine[end:]
    )
    if after == text:
        return FileChange(PLUGIN_REGISTRY, text, text, NAME, "ok", "already applied")
    return FileChange(PLUGIN_REGISTRY, text, after, NAME, "apply", "register glm-dsa adapter")


def _plan_plugin(sources: dict[str, str | None]) -> list[FileChange]:
    missing = [a for a in PLUGIN_ANCHORS if not a.found(sources)]
    if missing:
        raise PatchError(
            f"vllm-gguf-plugin layout not supported: missing {missing[0].symbol} in "
            f"{missing[0].path} ({len(missing)} anchor(s) missing: "
            + "; ".join(f"{a.path}: {a.symbol}" for a in missing)
            + ")"
        )
    weight_utils = sources.get(PLUGIN_WEIGHT_UTILS)
    registry = sources.get(PLUGIN_REGISTRY)
    entry = sources.get(PLUGIN_ENTRY)
    if weight_utils is None or registry is None or entry is None:  # PLUGIN_ANCHORS needs all 3
        absent = [
            p
            for p in (PLUGIN_WEIGHT_UTILS, PLUGIN_REGISTRY, PLUGIN_ENTRY)
            if sources.get(p) is None
        ]
        raise PatchError(f"vllm-gguf-plugin layout not supported: {absent} missing")
    speculators = (
        "already upstream: plugin.py's _patch_speculator_probe skips the speculator probe "
        "for GGUF models"
    )
    return [
        _plan_plugin_weight_utils(weight_utils),
        _plan_plugin_registry(registry),
        _plan_rendered(PLUGIN_ADAPTER, sources.get(PLUGIN_ADAPTER), plugin=True),
        FileChange(PLUGIN_ENTRY, entry, entry, NAME, "ok", speculators),
    ]


def _absent(
    sources: dict[str, str | None], paths: tuple[str, ...], reason: str
) -> list[FileChange]:
    return [FileChange(p, sources.get(p), sources.get(p) or "", NAME, "ok", reason) for p in paths]


def plan(profile: object, sources: dict[str, str | None], options: dict) -> list[FileChange]:
    """In-tree loader changes, then the plugin's; each loader the venv lacks is ok."""
    in_tree = "def gguf_quant_weights_iterator(" in (sources.get(WEIGHT_UTILS) or "")
    plugin = sources.get(PLUGIN_WEIGHT_UTILS) is not None
    if not in_tree and not plugin:
        reason = (
            "no GGUF loader in this venv: vLLM 0.24+ loads GGUF through vllm-gguf-plugin; "
            "install it (pip install vllm-gguf-plugin) and patch again"
        )
        return _absent(sources, FILES, reason)
    if in_tree:
        changes = [
            plan_file(WEIGHT_UTILS, sources.get(WEIGHT_UTILS), _weight_utils_edits()),
            plan_file(ARG_UTILS, sources.get(ARG_UTILS), _arg_utils_edits()),
            plan_file(LOADER, sources.get(LOADER), _loader_edits()),
            _plan_rendered(HELPER, sources.get(HELPER), plugin=False),
        ]
    else:
        reason = "no in-tree GGUF loader: vllm-gguf-plugin loads GGUF in this layout"
        changes = _absent(sources, IN_TREE_FILES, reason)
    if plugin:
        return changes + _plan_plugin(sources)
    reason = "vllm-gguf-plugin not installed: the in-tree loader serves GGUF"
    return changes + _absent(sources, PLUGIN_FILES, reason)
