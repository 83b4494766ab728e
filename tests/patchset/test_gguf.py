"""Item 2d on a tiny synthetic glm-dsa GGUF written with the gguf package: vLLM 0.16's real
loader code, patched, rebuilds kv_b_proj exactly and corrupts no name."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import vllm_wheels
from conftest import ROOT, run_helper

from glmops.patchset import ANCHOR_FILES, detect_profile, payload, plan_patchset
from glmops.patchset.common import marker
from glmops.patchset.render import render

gguf = pytest.importorskip("gguf")
torch = pytest.importorskip("torch")
Q8 = gguf.GGMLQuantizationType.Q8_0
H, KV_LORA, NOPE, V_HEAD, LAYERS = 2, 32, 64, 32, 2


def helper_module() -> types.ModuleType:
    module = types.ModuleType("glm_dsa_gguf")
    src = render("glm_dsa_gguf.py.j2", marker=marker("gguf"), template_version="test")
    exec(compile(src, "glm_dsa_gguf.py", "exec"), module.__dict__)
    return module


def test_name_table_matches_gguf_py():
    """The explicit table agrees with gguf-py's own GLM_DSA tensor names."""
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.GLM_DSA, 1)
    for g, hf in helper_module().BLOCK_NAMES.items():
        hf = hf.replace("experts.0.", "experts.")  # gguf-py knows the merged expert name
        assert names.get_name(f"model.layers.0.{hf}") == f"blk.0.{g}", (g, hf)


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


def write_gguf(path: Path) -> dict[str, torch.Tensor]:
    rng = np.random.default_rng(0)
    w = gguf.GGUFWriter(str(path), "glm-dsa")
    expected = {}
    for n in range(LAYERS):
        kv_b = rng.standard_normal((H, NOPE + V_HEAD, KV_LORA)).astype(np.float32)
        k_b_q, k_b = q8(np.ascontiguousarray(kv_b[:, :NOPE].transpose(0, 2, 1)))
        v_b = kv_b[:, NOPE:].astype(np.float16)
        w.add_tensor(f"blk.{n}.attn_k_b.weight", k_b_q, raw_dtype=Q8)
        w.add_tensor(f"blk.{n}.attn_v_b.weight", v_b)
        full = np.concatenate([k_b.transpose(0, 2, 1), v_b.astype(np.float32)], axis=1)
        expected[f"model.layers.{n}.self_attn.kv_b_proj.weight"] = torch.from_numpy(
            full.reshape(-1, KV_LORA)
        )
        proj_q, proj = q8(rng.standard_normal((4, 64)).astype(np.float32))
        w.add_tensor(f"blk.{n}.indexer.proj.weight", proj_q, raw_dtype=Q8)
        expected[f"model.layers.{n}.self_attn.indexer.weights_proj.weight"] = torch.from_numpy(proj)
        qa_q, _ = q8(rng.standard_normal((32, 64)).astype(np.float32))
        w.add_tensor(f"blk.{n}.attn_q_a.weight", qa_q, raw_dtype=Q8)
        w.add_tensor(f"blk.{n}.attn_norm.weight", np.ones(64, dtype=np.float32))
        exps_q, _ = q8(rng.standard_normal((4, 32, 64)).astype(np.float32))
        w.add_tensor(f"blk.{n}.ffn_gate_exps.weight", exps_q, raw_dtype=Q8)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return expected


def run_probe(sp: Path, args: dict) -> dict:
    deps = vllm_wheels.fetch_vllm_deps("0.16.0")
    env = dict(os.environ, PYTHONPATH=f"{sp}{os.pathsep}{deps}", PYTHONDONTWRITEBYTECODE="1")
    cmd = [
        sys.executable,
        str(ROOT / "tests/patchset/cpu_stub.py"),
        json.dumps(vllm_wheels.compiled_modules("0.16.0")),
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


@pytest.mark.wheels
def test_glm_dsa_gguf_through_patched_016(tmp_path):
    sp = vllm_wheels.scratch_copy("0.16.0", tmp_path / "venv")
    model = tmp_path / "tiny-glm-dsa.gguf"
    expected = write_gguf(model)

    # the upstream bug first: the global replace renames indexer.weights_proj
    names, _ = probe(
        sp,
        tmp_path,
        mode="plain",
        gguf=str(model),
        map={"blk.0.indexer.proj.weight": "x.indexer.weights_proj.weight"},
    )
    assert "x.indexer.qweights_proj.qweight" in names

    sources = run_helper(
        "vllm_patch.py", {"mode": "read", "files": list(ANCHOR_FILES), "site_packages": str(sp)}
    )["files"]
    profile = detect_profile(sources)
    changes = plan_patchset(profile, sources, {"items": ["gguf"]})
    (tmp_path / "p.json").write_text(json.dumps(payload(profile, changes, str(sp))))
    out = run_helper("vllm_patch.py", {"mode": "apply", "payload_file": str(tmp_path / "p.json")})
    assert out["changed"] and len(out["paths"]) == 4, out

    names, weights = probe(sp, tmp_path, mode="glm_dsa", gguf=str(model), layers=LAYERS)
    for name, tensor in expected.items():
        assert torch.equal(weights[name].float(), tensor), name
    assert not any("qweights" in n or "qweight_types" in n for n in names), names
    assert all(n.startswith("model.layers.") for n in names)
    assert all(n.endswith((".weight", ".qweight", ".qweight_type", ".bias")) for n in names)
    for n in range(LAYERS):
        layer = f"model.layers.{n}"
        assert {
            f"{layer}.self_attn.q_a_proj.qweight",
            f"{layer}.self_attn.q_a_proj.qweight_type",
            f"{layer}.mlp.experts.0.gate_proj.qweight",
            f"{layer}.input_layernorm.weight",
        } <= set(names)
        assert not any("attn_k_b" in x or "attn_v_b" in x for x in names)

    # the speculator probe no longer aborts start-up on a GGUF, and still raises otherwise
    out = run_probe(sp, {"mode": "speculators"})
    assert out["gguf"] == ["/m/glm5.gguf", "tok", None] and out["non_gguf"] == "raised"
