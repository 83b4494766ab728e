"""Synthetic glm-dsa GGUF models (GLM-5's llama.cpp architecture and tensor names), written with
the gguf package: one file, or a split set the way llama.cpp's gguf-split writes one."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

Q = gguf.GGMLQuantizationType


def glm_dsa_tensors() -> list[tuple[str, np.ndarray, Q | None]]:
    """GLM-DSA-style names; sizes deliberately not multiples of 32 (padding must be right)."""
    rng = np.random.default_rng(5)

    def raw(qt: Q, rows: int, cols: int) -> np.ndarray:
        block, size = gguf.GGML_QUANT_SIZES[qt]
        return rng.integers(0, 256, (rows, cols // block * size), dtype=np.uint8)

    out: list[tuple[str, np.ndarray, Q | None]] = [
        ("token_embd.weight", raw(Q.Q4_K, 3, 256), Q.Q4_K),
        ("output_norm.weight", rng.standard_normal(7).astype(np.float32), None),
    ]
    for b in range(3):
        out += [
            (f"blk.{b}.attn_kv_a_mqa.weight", raw(Q.Q8_0, 3, 64), Q.Q8_0),
            (f"blk.{b}.attn_k_b.weight", rng.standard_normal((3, 5)).astype(np.float16), None),
            (f"blk.{b}.attn_v_b.weight", raw(Q.Q6_K, 2, 256), Q.Q6_K),
            (f"blk.{b}.indexer.k_norm.weight", rng.standard_normal(9).astype(np.float32), None),
            (f"blk.{b}.ffn_gate_exps.weight", raw(Q.Q4_K, 4, 512), Q.Q4_K),
            (f"blk.{b}.exp_probs_b.bias", rng.standard_normal(3).astype(np.float32), None),
        ]
    return out


def write_model(path: Path, **split) -> None:
    """One GGUFWriter run; `split` (split_max_tensors, small_first_shard) makes a split set."""
    w = gguf.GGUFWriter(str(path), "glm-dsa", **split)
    w.add_uint32("glm-dsa.block_count", 3)
    w.add_int32("test.i32", -7)
    w.add_float32("test.f32", 0.5)
    w.add_float64("test.f64", 1e-9)
    w.add_bool("test.bool", True)
    w.add_uint64("test.u64", 1 << 40)
    w.add_int8("test.i8", -1)
    w.add_uint16("test.u16", 65535)
    w.add_string("general.name", "GLM-5 synthetic")
    w.add_array("tokenizer.ggml.tokens", [f"tok{i}" for i in range(1000)])
    w.add_array("tokenizer.ggml.scores", [float(i) for i in range(100)])
    w.add_array("tokenizer.ggml.token_type", [1, 2, 3])
    for name, arr, qt in glm_dsa_tensors():
        w.add_tensor(name, arr, raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def split_set(d: Path, stem: str = "model", **split) -> Path:
    """The split set written into folder `d` as <stem>-0000N-of-0000M.gguf; its first shard."""
    d.mkdir(parents=True, exist_ok=True)
    write_model(d / f"{stem}.gguf", **split)
    firsts = sorted(d.glob(f"{stem}-00001-of-*.gguf"))
    assert len(firsts) == 1
    return firsts[0]
