"""A tiny llama-architecture model made here, so a real vLLM can serve something with no hub.

`python -m glmops.testbed.tinymodel OUT` writes, deterministically (fixed seed):

* `OUT/hf/`: config.json (LlamaForCausalLM), generation_config.json, model.safetensors (F32,
  random weights), tokenizer.json + tokenizer_config.json: a byte-level BPE trained here on a
  few KB of text by a small pure-Python trainer, so any text round-trips;
* `OUT/gguf/tiny-llama-F32-0000k-of-0000n.gguf`: the same tensors as split GGUF shards (gguf's
  writer, llama tensor names), for glmops' shard validation and merge.

It needs only numpy and gguf (the test extras), never transformers, tokenizers or torch: the
controller that builds it has no ML stack. Weights are random: the output is gibberish, but
every token goes through a real tokenizer, a real forward pass and real sampling. Sizes are
chosen for vLLM's CPU attention (head size 64 is one it supports) and stay near 2 MB.
"""

from __future__ import annotations

import argparse
import json
import re
import struct
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SPECIALS = ("<|bos|>", "<|eos|>", "<|pad|>")
ARCH = "llama"
NAME = "tiny-llama"
# The GPT-2 pre-tokenizer split, approximated with Python's re (letters = [^\W\d_]).
PRETOKEN = re.compile(r"'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d+| ?[^\s\w]+|\s+(?!\S)|\s+")
CORPUS = (
    "glmops provisions GPU hosts and serves a model with vLLM over SSH. "
    "The quick brown fox jumps over the lazy dog. A tiny model answers with tokens, "
    "one after another, until it reaches the limit it was given. "
    "Hello, world! How are you today? The server is ready and the health check passed. "
    "Numbers like 1, 2, 3, 10, 42 and 2026 appear in text too. "
    "def main():\n    return 0\n"
    "Inventory, playbook, handlers, facts, the recap and exit codes; a second run changes "
    "nothing. The attention backend, the KV cache, the tokenizer and the weights. "
)


@dataclass(frozen=True)
class Shape:
    """The model's dimensions (defaults: ~0.5 M parameters, ~2 MB in F32)."""

    merges: int = 200
    hidden: int = 128
    intermediate: int = 256
    layers: int = 2
    heads: int = 2
    kv_heads: int = 1
    max_positions: int = 512

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


def byte_alphabet() -> dict[int, str]:
    """GPT-2's byte -> printable character map (what a ByteLevel pre-tokenizer emits)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    chars = list(keep)
    extra = 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + extra)
            extra += 1
    return dict(zip(keep, (chr(c) for c in chars), strict=True))


def train_bpe(text: str, merges: int) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Byte-level BPE: the 256 byte symbols, then the most frequent pair merged, `merges` times."""
    alphabet = byte_alphabet()
    words = Counter(tuple(alphabet[b] for b in piece.encode()) for piece in PRETOKEN.findall(text))
    vocab = {alphabet[b]: i for i, b in enumerate(sorted(alphabet))}
    learned: list[tuple[str, str]] = []
    for _ in range(merges):
        pairs: Counter[tuple[str, str]] = Counter()
        for word, count in words.items():
            for pair in zip(word, word[1:], strict=False):
                pairs[pair] += count
        if not pairs:
            break
        best = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))[0]
        learned.append(best)
        vocab["".join(best)] = len(vocab)
        words = Counter({_merge(word, best): count for word, count in words.items()})
    return vocab, learned


def _merge(word: tuple[str, ...], pair: tuple[str, str]) -> tuple[str, ...]:
    out: list[str] = []
    i = 0
    while i < len(word):
        if i + 1 < len(word) and (word[i], word[i + 1]) == pair:
            out.append(word[i] + word[i + 1])
            i += 2
        else:
            out.append(word[i])
            i += 1
    return tuple(out)


def tokenizer_json(vocab: dict[str, int], merges: list[tuple[str, str]]) -> dict[str, Any]:
    """A `tokenizers` BPE file (GPT-2 layout) with the special tokens after the vocab."""
    specials = [
        {
            "id": len(vocab) + i,
            "content": tok,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for i, tok in enumerate(SPECIALS)
    ]
    byte_level = {"add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": specials,
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", **byte_level},
        "post_processor": {"type": "ByteLevel", **byte_level, "trim_offsets": False},
        "decoder": {"type": "ByteLevel", **byte_level},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": [f"{a} {b}" for a, b in merges],
        },
    }


def hf_config(shape: Shape, vocab_size: int) -> dict[str, Any]:
    bos, eos = vocab_size - len(SPECIALS), vocab_size - len(SPECIALS) + 1
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": vocab_size,
        "hidden_size": shape.hidden,
        "intermediate_size": shape.intermediate,
        "num_hidden_layers": shape.layers,
        "num_attention_heads": shape.heads,
        "num_key_value_heads": shape.kv_heads,
        "head_dim": shape.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": shape.max_positions,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "attention_bias": False,
        "mlp_bias": False,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "pad_token_id": eos + 1,
        "torch_dtype": "float32",
    }


def weights(shape: Shape, vocab_size: int, seed: int = 7) -> dict[str, Any]:
    """HF llama tensor name -> float32 array (random, scaled so activations stay finite)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    h, i, d = shape.hidden, shape.intermediate, shape.head_dim

    def mat(rows: int, cols: int) -> Any:
        return (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)

    out: dict[str, Any] = {"model.embed_tokens.weight": mat(vocab_size, h)}
    for n in range(shape.layers):
        p = f"model.layers.{n}."
        out[p + "input_layernorm.weight"] = np.ones(h, np.float32)
        out[p + "self_attn.q_proj.weight"] = mat(shape.heads * d, h)
        out[p + "self_attn.k_proj.weight"] = mat(shape.kv_heads * d, h)
        out[p + "self_attn.v_proj.weight"] = mat(shape.kv_heads * d, h)
        out[p + "self_attn.o_proj.weight"] = mat(h, shape.heads * d)
        out[p + "post_attention_layernorm.weight"] = np.ones(h, np.float32)
        out[p + "mlp.gate_proj.weight"] = mat(i, h)
        out[p + "mlp.up_proj.weight"] = mat(i, h)
        out[p + "mlp.down_proj.weight"] = mat(h, i)
    out["model.norm.weight"] = np.ones(h, np.float32)
    out["lm_head.weight"] = mat(vocab_size, h)
    return out


def write_safetensors(path: Path, tensors: dict[str, Any]) -> None:
    """The safetensors layout by hand (8-byte header size, JSON header, raw little-endian data)."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, array in tensors.items():
        header[name] = {
            "dtype": "F32",
            "shape": list(array.shape),
            "data_offsets": [offset, offset + array.nbytes],
        }
        offset += array.nbytes
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    with path.open("wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for array in tensors.values():
            f.write(array.astype("<f4").tobytes())


GGUF_NAMES = {
    "input_layernorm": "attn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "post_attention_layernorm": "ffn_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}


def gguf_name(hf: str) -> str:
    """HF llama name -> llama.cpp's (`model.layers.0.mlp.up_proj.weight` -> `blk.0.ffn_up...`)."""
    fixed = {
        "model.embed_tokens.weight": "token_embd.weight",
        "model.norm.weight": "output_norm.weight",
        "lm_head.weight": "output.weight",
    }
    if hf in fixed:
        return fixed[hf]
    m = re.fullmatch(r"model\.layers\.(\d+)\.(.+)\.weight", hf)
    if not m or m[2] not in GGUF_NAMES:
        raise ValueError(f"no GGUF name for {hf}")
    return f"blk.{m[1]}.{GGUF_NAMES[m[2]]}.weight"


def write_gguf(
    folder: Path,
    shape: Shape,
    config: dict[str, Any],
    tok: dict[str, Any],
    tensors: dict[str, Any],
    shards: int,
) -> Path:
    """Split GGUF (`<NAME>-F32-0000k-of-0000n.gguf`); returns the first shard's path."""
    import gguf

    per_shard = -(-len(tensors) // shards)
    writer = gguf.GGUFWriter(str(folder / f"{NAME}-F32.gguf"), ARCH, split_max_tensors=per_shard)
    writer.add_name(NAME)
    writer.add_context_length(shape.max_positions)
    writer.add_embedding_length(shape.hidden)
    writer.add_block_count(shape.layers)
    writer.add_feed_forward_length(shape.intermediate)
    writer.add_head_count(shape.heads)
    writer.add_head_count_kv(shape.kv_heads)
    writer.add_rope_dimension_count(shape.head_dim)
    writer.add_rope_freq_base(config["rope_theta"])
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    writer.add_vocab_size(config["vocab_size"])
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    vocab = {**tok["model"]["vocab"], **{t["content"]: t["id"] for t in tok["added_tokens"]}}
    tokens = sorted(vocab, key=vocab.__getitem__)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(
        [gguf.TokenType.CONTROL if t in SPECIALS else gguf.TokenType.NORMAL for t in tokens]
    )
    writer.add_token_merges(tok["model"]["merges"])
    writer.add_bos_token_id(config["bos_token_id"])
    writer.add_eos_token_id(config["eos_token_id"])
    for name, array in tensors.items():
        writer.add_tensor(gguf_name(name), array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    found = sorted(folder.glob(f"{NAME}-F32-*-of-*.gguf"))
    if len(found) != shards:
        raise RuntimeError(f"expected {shards} GGUF shards in {folder}, found {len(found)}")
    return found[0]


def build(out: Path, shape: Shape | None = None, shards: int = 3) -> dict[str, Path]:
    """Write the HF folder and the GGUF shards under `out`; returns their paths."""
    shape = shape or Shape()
    vocab, merges = train_bpe(CORPUS * 4, shape.merges)
    tok = tokenizer_json(vocab, merges)
    vocab_size = len(vocab) + len(SPECIALS)
    config = hf_config(shape, vocab_size)
    tensors = weights(shape, vocab_size)
    hf = out / "hf"
    hf.mkdir(parents=True, exist_ok=True)
    (hf / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    (hf / "generation_config.json").write_text(
        json.dumps({"bos_token_id": config["bos_token_id"], "eos_token_id": config["eos_token_id"]})
        + "\n"
    )
    (hf / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False) + "\n")
    (hf / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": SPECIALS[0],
                "eos_token": SPECIALS[1],
                "pad_token": SPECIALS[2],
                "model_max_length": shape.max_positions,
                "add_bos_token": False,
                "clean_up_tokenization_spaces": False,
            },
            indent=1,
        )
        + "\n"
    )
    write_safetensors(hf / "model.safetensors", tensors)
    gguf_dir = out / "gguf"
    gguf_dir.mkdir(parents=True, exist_ok=True)
    for old in gguf_dir.glob("*.gguf"):
        old.unlink()
    first = write_gguf(gguf_dir, shape, config, tok, tensors, shards)
    return {"hf": hf, "gguf_dir": gguf_dir, "first_shard": first}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder to write hf/ and gguf/ into")
    parser.add_argument("--shards", type=int, default=3, help="GGUF shard count")
    args = parser.parse_args(argv)
    paths = build(args.out, shards=args.shards)
    for key, path in paths.items():
        print(f"{key}: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
