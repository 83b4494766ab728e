"""Item 2d on a tiny synthetic glm-dsa GGUF written with the gguf package: vLLM 0.16's real
in-tree loader code, and vllm-gguf-plugin's real loader code on vLLM 0.33, each patched,
rebuild kv_b_proj exactly and corrupt no name."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from glmops.gpu.patchset import ANCHOR_FILES, detect_profile, payload, plan_patchset
from glmops.gpu.patchset.common import marker
from glmops.gpu.patchset.gguf import IN_TREE_FILES, PLUGIN_ADAPTER, PLUGIN_FILES
from glmops.gpu.patchset.render import render
from tests.support import vllm_wheels
from tests.support.patchset import ROOT, run_helper, tree_hashes

gguf = pytest.importorskip("gguf")
torch = pytest.importorskip("torch")
Q8 = gguf.GGMLQuantizationType.Q8_0
H, KV_LORA, NOPE, V_HEAD, LAYERS, HIDDEN = 2, 32, 64, 32, 2, 64
Tensors = list[tuple[str, np.ndarray, "gguf.GGMLQuantizationType | None"]]


def helper_module() -> types.ModuleType:
    module = types.ModuleType("glm_dsa_gguf")
    src = render("glm_dsa_gguf.py.j2", marker=marker("gguf"), template_version="test", plugin=False)
    exec(compile(src, "glm_dsa_gguf.py", "exec"), module.__dict__)
    return module


def test_name_table_matches_gguf_py():
    """The explicit table agrees with gguf-py's own GLM_DSA tensor names."""
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.GLM_DSA, 1)
    for g, hf in helper_module().BLOCK_NAMES.items():
        hf = hf.replace("experts.0.", "experts.")  # gguf-py knows the merged expert name
        assert names.get_name(f"model.layers.0.{hf}") == f"blk.0.{g}", (g, hf)


def test_plugin_render_moves_wk_to_dequantized():
    """Both renders map every block tensor once; the plugin's dequantizes the indexer's wk."""
    src = render("glm_dsa_gguf.py.j2", marker=marker("gguf"), template_version="t", plugin=True)
    compile(src, "glmops_glm_dsa.py", "exec")
    in_tree = helper_module()
    assert "indexer.attn_k" in in_tree.BLOCK_NAMES and "indexer.attn_k" not in in_tree.DEQUANTIZED
    assert '    "indexer.attn_k": "self_attn.indexer.wk",\n}' in src  # the DEQUANTIZED entry
    assert src.count('"indexer.attn_k"') == 1 and "class GlmDsaGGUFAdapter(" in src


def test_rebuild_kv_b_inverts_llama_cpp_split():
    kv_b = torch.randn(H * (NOPE + V_HEAD), KV_LORA)
    split = kv_b.view(H, NOPE + V_HEAD, KV_LORA)
    k_b = split[:, :NOPE].transpose(1, 2)  # what llama.cpp stores as attn_k_b
    v_b = split[:, NOPE:]
    assert torch.equal(helper_module().rebuild_kv_b(k_b, v_b), kv_b)


def q8(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(stored Q8_0 bytes, the float values a reader gets back)."""
    q = gguf.quants.quantize(a, Q8)
    return q, gguf.quants.dequantize(q, Q8)


def tiny_glm_dsa() -> tuple[Tensors, dict[str, torch.Tensor]]:
    """Tensors in file order (name, stored data, raw type), and the float tensors a patched
    loader must produce from the ones it rebuilds or dequantizes."""
    rng = np.random.default_rng(0)
    tensors: Tensors = [("token_embd.weight", np.ones((8, HIDDEN), dtype=np.float16), None)]
    expected = {}
    for n in range(LAYERS):
        attn = f"model.layers.{n}.self_attn"
        kv_b = rng.standard_normal((H, NOPE + V_HEAD, KV_LORA)).astype(np.float32)
        k_b_q, k_b = q8(np.ascontiguousarray(kv_b[:, :NOPE].transpose(0, 2, 1)))
        v_b = kv_b[:, NOPE:].astype(np.float16)
        tensors.append((f"blk.{n}.attn_k_b.weight", k_b_q, Q8))
        tensors.append((f"blk.{n}.attn_v_b.weight", v_b, None))
        full = np.concatenate([k_b.transpose(0, 2, 1), v_b.astype(np.float32)], axis=1)
        expected[f"{attn}.kv_b_proj.weight"] = torch.from_numpy(full.reshape(-1, KV_LORA))
        proj_q, proj = q8(rng.standard_normal((4, HIDDEN)).astype(np.float32))
        tensors.append((f"blk.{n}.indexer.proj.weight", proj_q, Q8))
        expected[f"{attn}.indexer.weights_proj.weight"] = torch.from_numpy(proj)
        wk_q, wk = q8(rng.standard_normal((32, HIDDEN)).astype(np.float32))
        tensors.append((f"blk.{n}.indexer.attn_k.weight", wk_q, Q8))
        expected[f"{attn}.indexer.wk.weight"] = torch.from_numpy(wk)
        qa_q, _ = q8(rng.standard_normal((32, HIDDEN)).astype(np.float32))
        tensors.append((f"blk.{n}.attn_q_a.weight", qa_q, Q8))
        tensors.append((f"blk.{n}.attn_norm.weight", np.ones(HIDDEN, dtype=np.float32), None))
        exps_q, _ = q8(rng.standard_normal((4, 32, HIDDEN)).astype(np.float32))
        tensors.append((f"blk.{n}.ffn_gate_exps.weight", exps_q, Q8))
    out_q, _ = q8(rng.standard_normal((8, HIDDEN)).astype(np.float32))
    tensors.append(("output.weight", out_q, Q8))
    return tensors, expected


def write_gguf(path: Path, tensors: Tensors) -> Path:
    w = gguf.GGUFWriter(str(path), "glm-dsa")
    for name, data, raw_dtype in tensors:
        w.add_tensor(name, data, raw_dtype=raw_dtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def write_two_shards(where: Path, tensors: Tensors) -> list[Path]:
    """Split between layer 1's attn_k_b and attn_v_b, and output.weight only in shard 2."""
    cut = [name for name, _, _ in tensors].index(f"blk.{LAYERS - 1}.attn_v_b.weight")
    return [
        write_gguf(where / "tiny-glm-dsa-00001-of-00002.gguf", tensors[:cut]),
        write_gguf(where / "tiny-glm-dsa-00002-of-00002.gguf", tensors[cut:]),
    ]


def run_probe(sp: Path, args: dict, version: str = "0.16.0", compiled: list | None = None):
    deps = vllm_wheels.fetch_vllm_deps(version)
    env = dict(os.environ, PYTHONPATH=f"{sp}{os.pathsep}{deps}", PYTHONDONTWRITEBYTECODE="1")
    cmd = [
        sys.executable,
        str(ROOT / "tests/patchset/cpu_stub.py"),
        json.dumps(vllm_wheels.compiled_modules(version) + (compiled or [])),
        str(Path(__file__).with_name("gguf_probe.py")),
        json.dumps(args),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


def probe(sp: Path, tmp_path: Path, **args) -> tuple[list[str], dict]:
    out = tmp_path / "weights.pt"
    names = run_probe(sp, {**args, "out": str(out)})["names"]
    return names, torch.load(out)


def read(sp: Path) -> dict[str, str | None]:
    args = {"mode": "read", "files": list(ANCHOR_FILES), "site_packages": str(sp)}
    return run_helper("vllm_patch.py", args)["files"]


def apply_gguf(sp: Path, tmp_path: Path) -> tuple[list, dict]:
    """Plan the gguf item alone and apply it: (the planned changes, the helper's reply)."""
    sources = read(sp)
    profile = detect_profile(sources)
    changes = plan_patchset(profile, sources, {"items": ["gguf"]})
    (tmp_path / "p.json").write_text(json.dumps(payload(profile, changes, str(sp))))
    out = run_helper("vllm_patch.py", {"mode": "apply", "payload_file": str(tmp_path / "p.json")})
    assert not out["failed"], out["msg"]
    return changes, out


@pytest.mark.wheels
def test_glm_dsa_gguf_through_patched_016(tmp_path):
    sp = vllm_wheels.scratch_copy("0.16.0", tmp_path / "venv")
    tensors, expected = tiny_glm_dsa()
    model = write_gguf(tmp_path / "tiny-glm-dsa.gguf", tensors)

    # the upstream bug first: the global replace renames indexer.weights_proj
    names, _ = probe(
        sp,
        tmp_path,
        mode="plain",
        gguf=str(model),
        map={"blk.0.indexer.proj.weight": "x.indexer.weights_proj.weight"},
    )
    assert "x.indexer.qweights_proj.qweight" in names

    _, out = apply_gguf(sp, tmp_path)
    assert out["changed"] and sorted(out["paths"]) == sorted(IN_TREE_FILES), out

    names, weights = probe(sp, tmp_path, mode="glm_dsa", gguf=str(model), layers=LAYERS)
    for name, tensor in expected.items():
        if ".indexer.wk." not in name:  # vLLM 0.16 builds wk quantized: it stays so
            assert torch.equal(weights[name].float(), tensor), name
    assert not any("qweights" in n or "qweight_types" in n for n in names), names
    assert all(n.startswith(("model.", "lm_head.")) for n in names)
    assert all(n.endswith((".weight", ".qweight", ".qweight_type", ".bias")) for n in names)
    for n in range(LAYERS):
        layer = f"model.layers.{n}"
        assert {
            f"{layer}.self_attn.q_a_proj.qweight",
            f"{layer}.self_attn.q_a_proj.qweight_type",
            f"{layer}.self_attn.indexer.wk.qweight",
            f"{layer}.mlp.experts.0.gate_proj.qweight",
            f"{layer}.input_layernorm.weight",
        } <= set(names)
        assert not any("attn_k_b" in x or "attn_v_b" in x for x in names)

    # the speculator probe no longer aborts start-up on a GGUF, and still raises otherwise
    out = run_probe(sp, {"mode": "speculators"})
    assert out["gguf"] == ["/m/glm5.gguf", "tok", None] and out["non_gguf"] == "raised"


@pytest.mark.wheels
def test_glm_dsa_gguf_through_patched_plugin(tmp_path):
    """vLLM 0.33 with vllm-gguf-plugin: the plugin's own loader picks the rendered adapter and
    loads a model split in two shards (kv_b_proj's halves in different shards)."""
    sp = vllm_wheels.scratch_copy("0.33.0", tmp_path / "venv")
    vllm_wheels.install_plugin(sp)
    pristine = tree_hashes(sp.parent)
    tensors, expected = tiny_glm_dsa()
    shards = [str(p) for p in write_two_shards(tmp_path, tensors)]
    compiled = vllm_wheels.plugin_compiled_modules()
    attn = [f"model.layers.{n}.self_attn" for n in range(LAYERS)]
    prefixes = [f"{a}.{m}" for a in attn for m in ("kv_b_proj", "q_a_proj")]

    def plugin_probe(**args) -> tuple[dict, dict]:
        out = tmp_path / "weights.pt"
        reply = run_probe(sp, {**args, "out": str(out)}, "0.33.0", compiled)
        return reply, torch.load(out)

    # upstream first: the global replace corrupts the name; no adapter knows glm_moe_dsa
    proj = {"blk.0.indexer.proj.weight": "x.indexer.weights_proj.weight"}
    reply, _ = plugin_probe(mode="plugin_plain", shards=shards, map=proj)
    assert "x.indexer.qweights_proj.qweight" in reply["names"]
    reply, _ = plugin_probe(mode="plugin", gguf=shards[0], layers=LAYERS, prefixes=prefixes)
    assert reply["adapter"] == "GGUFWeightsAdapter"
    assert "Unknown gguf model_type: glm_moe_dsa" in reply["error"]

    changes, out = apply_gguf(sp, tmp_path)
    statuses = {c.path: (c.status, c.reason) for c in changes}
    assert {p: statuses[p][0] for p in PLUGIN_FILES} == {
        "vllm_gguf_plugin/weight_utils.py": "apply",
        "vllm_gguf_plugin/weights_adapter/__init__.py": "apply",
        PLUGIN_ADAPTER: "apply",
        "vllm_gguf_plugin/plugin.py": "ok",
    }
    assert "_patch_speculator_probe" in statuses["vllm_gguf_plugin/plugin.py"][1]
    assert all(statuses[p][0] == "ok" for p in IN_TREE_FILES)
    assert out["changed"] and len(out["paths"]) == 3, out

    reply, weights = plugin_probe(mode="plugin", gguf=shards[0], layers=LAYERS, prefixes=prefixes)
    names = reply["names"]
    assert reply["adapter"] == "GlmDsaGGUFAdapter" and reply["weights_source"] == shards
    assert reply["tie_word_embeddings"] is False  # output.weight is in shard 2
    for name, tensor in expected.items():  # kv_b_proj, weights_proj and wk, as float
        assert torch.equal(weights[name].float(), tensor), name
    assert not any("qweights" in n or "qweight_types" in n for n in names), names
    assert all(n.endswith((".weight", ".qweight", ".qweight_type", ".bias")) for n in names)
    assert not any("attn_k_b" in n or "attn_v_b" in n for n in names)
    assert {"model.embed_tokens.weight", "lm_head.qweight", "lm_head.qweight_type"} <= set(names)
    unquantized = set(reply["unquantized_modules"])
    for n, a in enumerate(attn):
        assert {
            f"{a}.q_a_proj.qweight",
            f"{a}.q_a_proj.qweight_type",
            f"model.layers.{n}.mlp.experts.0.gate_proj.qweight_type",
            f"model.layers.{n}.mlp.experts.3.gate_proj.qweight",  # the plugin's expert split
            f"model.layers.{n}.input_layernorm.weight",
        } <= set(names)
        assert {f"{a}.kv_b_proj", f"{a}.indexer.weights_proj", f"{a}.indexer.wk"} <= unquantized
        assert f"model.layers.{n}.input_layernorm" in unquantized  # the plugin's float tensors
        assert reply["skipped"][f"{a}.kv_b_proj"] is True
        assert reply["skipped"][f"{a}.q_a_proj"] is False

    # patch again: ok, nothing written; unpatch: byte-identical
    again = plan_patchset(detect_profile(read(sp)), read(sp), {"items": ["gguf"]})
    assert {c.status for c in again} == {"ok"}
    assert {c.reason for c in again if c.path in out["paths"]} == {"already applied"}
    out = run_helper("vllm_patch.py", {"mode": "restore", "site_packages": str(sp)})
    assert not out["failed"] and out["changed"] and not out["skipped"], out["msg"]
    assert tree_hashes(sp.parent) == pristine
