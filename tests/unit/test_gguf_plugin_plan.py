"""Item 2d's planner for vllm-gguf-plugin on small stand-in sources (no wheels): statuses with
and without the plugin, refusal on each missing anchor, idempotent re-plan, and the host
helper writing and restoring plugin files while refusing paths outside its package roots."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from glmops.gpu.patchset import ANCHOR_FILES, PatchError, payload
from glmops.gpu.patchset import gguf as item
from glmops.gpu.patchset.profiles import profile_by_name
from glmops.hosthelpers import vllm_patch

# Only the lines of vllm-gguf-plugin 0.0.5 that the item anchors on or edits.
PLUGIN = {
    item.PLUGIN_WEIGHT_UTILS: """\
def gguf_quant_weights_iterator_multi(gguf_files, gguf_to_hf_name_map=None):
    for gguf_file in gguf_files:
        for tensor in reader.tensors:
            if weight_type.name not in _QUANT_TYPES:
                yield name.replace("weight", "qweight_type"), torch.tensor(weight_type)
                name = name.replace("weight", "qweight")
            yield name, param
""",
    item.PLUGIN_REGISTRY: """\
from .gemma3 import Gemma3GGUFAdapter

_ADAPTER_REGISTRY: list[type[GGUFWeightsAdapter]] = [
    Gemma3GGUFAdapter,
]


def get_weights_adapter(config) -> GGUFWeightsAdapter:
    for cls in _ADAPTER_REGISTRY:
        if cls.matches(config):
            return cls(config)
    return GGUFWeightsAdapter(config)
""",
    item.PLUGIN_DEFAULT_ADAPTER: """\
class GGUFWeightsAdapter(BaseGGUFWeightsAdapter):
    def prepare_loading(
        self,
        model_path: str,
        model_config: ModelConfig,
    ) -> GGUFLoadSpec:
        gguf_to_hf_name_map = self.build_name_map(model_config)
        self.update_tie_word_embeddings(
            model_path, model_config.hf_config, gguf_to_hf_name_map
        )
        self.load_spec = GGUFLoadSpec(
            weights_source=self._get_all_gguf_files(model_path),
        )

    def prepare_weights(
        self,
        model_config: ModelConfig,
    ):
        pass
""",
    item.PLUGIN_LOADER: """\
        vllm_config.quant_config.unquantized_modules.extend(
            adapter.load_spec.unquantized_modules
        )
""",
    item.PLUGIN_ENTRY: """\
def _patch_speculator_probe() -> None:
    pass


def register() -> None:
    _patch_speculator_probe()
""",
}


def statuses(changes: list) -> dict[str, str]:
    return {c.path: c.status for c in changes}


def test_every_file_the_item_reads_is_read():
    assert set(item.READ_FILES) <= set(ANCHOR_FILES)


def test_no_gguf_loader_names_the_plugin():
    changes = item.plan(None, {}, {})
    assert [c.path for c in changes] == list(item.FILES)
    assert {c.status for c in changes} == {"ok"}
    assert all("pip install vllm-gguf-plugin" in c.reason for c in changes)


def test_plugin_planned_in_tree_ok():
    changes = item.plan(None, dict(PLUGIN), {})
    assert statuses(changes) == {
        **dict.fromkeys(item.IN_TREE_FILES, "ok"),
        item.PLUGIN_WEIGHT_UTILS: "apply",
        item.PLUGIN_REGISTRY: "apply",
        item.PLUGIN_ADAPTER: "apply",
        item.PLUGIN_ENTRY: "ok",
    }
    reasons = {c.path: c.reason for c in changes}
    assert "vllm-gguf-plugin loads GGUF" in reasons[item.WEIGHT_UTILS]
    assert reasons[item.PLUGIN_ENTRY].startswith("already upstream: plugin.py's _patch_spec")
    after = {c.path: c.after for c in changes if c.changed}
    assert 'name.replace("weight"' not in after[item.PLUGIN_WEIGHT_UTILS]
    registry = after[item.PLUGIN_REGISTRY]
    assert "from .glmops_glm_dsa import GlmDsaGGUFAdapter  # glmops-patch: gguf v" in registry
    assert "= [\n    GlmDsaGGUFAdapter,  # glmops-patch" in registry  # first in the list
    assert "class GlmDsaGGUFAdapter(GGUFWeightsAdapter):" in after[item.PLUGIN_ADAPTER]
    compile(after[item.PLUGIN_ADAPTER], item.PLUGIN_ADAPTER, "exec")

    again = item.plan(None, {**PLUGIN, **after}, {})
    assert {c.status for c in again} == {"ok"}
    assert {c.reason for c in again if c.path in after} == {"already applied"}


def test_in_tree_only_reports_plugin_not_installed():
    sources = {item.WEIGHT_UTILS: "def gguf_quant_weights_iterator(\n"}
    changes = item.plan(None, sources, {})
    plugin = [c for c in changes if c.path in item.PLUGIN_FILES]
    assert {c.status for c in plugin} == {"ok"}
    assert all("vllm-gguf-plugin not installed" in c.reason for c in plugin)


@pytest.mark.parametrize("anchor", item.PLUGIN_ANCHORS, ids=lambda a: a.symbol)
def test_missing_plugin_anchor_refused(anchor):
    text = re.sub(anchor.pattern, "# gone", PLUGIN[anchor.path], count=1, flags=re.MULTILINE)
    assert text != PLUGIN[anchor.path]
    with pytest.raises(PatchError) as err:
        item.plan(None, {**PLUGIN, anchor.path: text}, {})
    assert f"missing {anchor.symbol} in {anchor.path}" in str(err.value)


def test_rename_fixed_upstream_is_ok_and_unknown_form_refused():
    fixed = PLUGIN[item.PLUGIN_WEIGHT_UTILS].replace('.replace("weight", ', ".with_suffix(")
    changes = item.plan(None, {**PLUGIN, item.PLUGIN_WEIGHT_UTILS: fixed}, {})
    utils = next(c for c in changes if c.path == item.PLUGIN_WEIGHT_UTILS)
    assert utils.status == "ok" and utils.reason.startswith("already upstream")
    other = PLUGIN[item.PLUGIN_WEIGHT_UTILS].replace('"weight", ', "'weight', ")
    with pytest.raises(PatchError, match="gguf_quant_weights_iterator_multi"):
        item.plan(None, {**PLUGIN, item.PLUGIN_WEIGHT_UTILS: other}, {})


def test_helper_writes_and_restores_plugin_files(tmp_path: Path):
    sp = tmp_path / "site-packages"
    for rel, text in PLUGIN.items():
        (sp / rel).parent.mkdir(parents=True, exist_ok=True)
        (sp / rel).write_text(text)
    files = sorted(p for p in sp.rglob("*") if p.is_file())
    pristine = {p: p.read_bytes() for p in files}
    read = vllm_patch.mode_read({"files": list(ANCHOR_FILES), "site_packages": str(sp)})
    changes = item.plan(None, read["files"], {})
    body = payload(profile_by_name("v0_33"), changes, str(sp))
    (tmp_path / "payload.json").write_text(json.dumps(body))

    out = vllm_patch.mode_apply({"payload_file": str(tmp_path / "payload.json")})
    assert not out["failed"] and len(out["paths"]) == 3, out["msg"]
    manifest = vllm_patch.mode_manifest({"site_packages": str(sp)})["manifest"]
    assert set(manifest["files"]) == set(out["paths"])
    assert manifest["files"][item.PLUGIN_ADAPTER]["created"]
    # what importing the patched plugin leaves behind: bytecode of the created and other files
    cache = (sp / item.PLUGIN_ADAPTER).parent / "__pycache__"
    cache.mkdir()
    (cache / "glmops_glm_dsa.cpython-311.pyc").write_bytes(b"x")
    (cache / "default.cpython-311.pyc").write_bytes(b"y")

    out = vllm_patch.mode_restore({"site_packages": str(sp)})
    assert not out["failed"] and out["changed"] and not out["skipped"], out["msg"]
    assert {p: p.read_bytes() for p in files} == pristine
    assert not (sp / item.PLUGIN_ADAPTER).exists()
    assert [p.name for p in cache.iterdir()] == ["default.cpython-311.pyc"]


def test_restore_after_the_plugin_was_uninstalled(tmp_path: Path):
    """Unpatch after `pip uninstall vllm-gguf-plugin`: the plugin is not brought back, the
    rest is restored, and the state is cleared (a second unpatch has nothing to do)."""
    sp = tmp_path / "site-packages"
    for rel, text in PLUGIN.items():
        (sp / rel).parent.mkdir(parents=True, exist_ok=True)
        (sp / rel).write_text(text)
    read = vllm_patch.mode_read({"files": list(ANCHOR_FILES), "site_packages": str(sp)})
    body = payload(profile_by_name("v0_33"), item.plan(None, read["files"], {}), str(sp))
    (tmp_path / "payload.json").write_text(json.dumps(body))
    assert not vllm_patch.mode_apply({"payload_file": str(tmp_path / "payload.json")})["failed"]
    shutil.rmtree(sp / "vllm_gguf_plugin")

    out = vllm_patch.mode_restore({"site_packages": str(sp)})
    assert not out["failed"], out["msg"]
    assert not (sp / "vllm_gguf_plugin").exists()
    assert set(out["skipped"]) == {item.PLUGIN_WEIGHT_UTILS, item.PLUGIN_REGISTRY}
    again = vllm_patch.mode_restore({"site_packages": str(sp)})
    assert not again["changed"] and "nothing to restore" in again["msg"]


@pytest.mark.parametrize(
    "rel", ["vllm/platforms/cuda.py", "vllm_gguf_plugin/weight_utils.py", "vllm/x/new.py"]
)
def test_helper_allows_package_roots(tmp_path: Path, rel: str):
    sp = tmp_path.resolve()
    assert vllm_patch._target(sp, rel) == sp / rel


@pytest.mark.parametrize(
    "rel",
    [
        "six.py",
        "vllm",
        "vllm_other/x.py",
        "vllm/../x.py",
        "vllm/../vllm_gguf_plugin/x.py",
        "vllm_gguf_plugin/../../x.py",
        "/etc/passwd",
    ],
)
def test_helper_refuses_other_paths(tmp_path: Path, rel: str):
    with pytest.raises(ValueError, match="refusing a path outside"):
        vllm_patch._target(tmp_path.resolve(), rel)


def test_helper_refuses_a_package_linked_out_of_site_packages(tmp_path: Path):
    sp, elsewhere = tmp_path / "site-packages", tmp_path / "elsewhere"
    sp.mkdir()
    elsewhere.mkdir()
    (sp / "vllm_gguf_plugin").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(ValueError, match="refusing a path outside"):
        vllm_patch._target(sp.resolve(), "vllm_gguf_plugin/weight_utils.py")
