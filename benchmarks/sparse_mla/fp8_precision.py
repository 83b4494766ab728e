"""How precisely each fp8 e4m3 tile scores as the logits grow: the tiles' errors against the
float32 reference on the same rounded rows, with K scaled so that the largest |lse| runs from
about 8 to about 200 (fp8 MMAs may sum in fewer bits than float32: backend/DESIGN.md "Precision of
the e4m3 tiles").

    python3 -m benchmarks.sparse_mla.fp8_precision --md out.md

Each row: a tile (a ``config`` of ``sparse_mla_decode``), q's dtype, a head count and a K
scale; ``lse`` is the largest absolute lse error over the largest |lse| (the part of the
logits' size the scores miss), ``out`` the relative L2 error of the output, ``rows' own`` that
of the reference on the rounded rows against the reference on the values before rounding (the
error an fp8 cache brings whatever the tile: what the tiles' own errors compare with). Needs a
GPU; the Hopper tiles need Hopper, the mma.sync tile an SM89+ GPU and Triton 3.6.
"""

from __future__ import annotations

import argparse
import datetime

import torch

from benchmarks.sparse_mla import overrides
from tests.support.module_file import load_sparse_mla

kmod = load_sparse_mla("sparse_mla_fp8_precision")

SM_SCALE = 0.0625
ROWS = 65536
TOPK = 2048
TOKENS = 4
# bf16: the model dtype the e4m3 Gluon tiles were built for; fp16: GGUF on SM120's.
Q_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def tiles(num_heads: int) -> dict[str, dict[str, int]]:
    """The tiles compared: Hopper's swapped e4m3 tile as one chain of score MMAs and summed
    in float32 per ``SCORE_COLS`` columns, the e4m3 mma.sync tile (a 99 KB GPU's) and the
    tl.dot tile."""
    capability = torch.cuda.get_device_capability()
    out: dict[str, dict[str, int]] = {}
    if kmod._has_wgmma(torch.cuda.current_device()):
        hopper = {"BLOCK_H": num_heads, "BLOCK_N": 64, "num_warps": 4 if num_heads <= 16 else 8,
                  "num_stages": 2, "WAVES": 1, "WGMMA": 1}  # fmt: skip
        out["Hopper, one chain"] = {**hopper, "SCORE_COLS": 0}
        for cols in (128, 64, 32):
            out[f"Hopper, float32 sums per {cols}"] = {**hopper, "SCORE_COLS": cols}
    if num_heads <= 16 and kmod._gluon_mma_usable(capability, proxy=True):
        tile = kmod._e4m3_mma_tile(num_heads, 1, "fp8", kmod.H200_LIMITS)
        out["mma.sync"] = overrides.config_of(kmod, tile)
    out["tl.dot"] = overrides.config_of(kmod, kmod._default_tile(num_heads, "fp8", wgmma=False))
    return out


def probe(
    num_heads: int, scale: float, q_dtype: torch.dtype
) -> list[tuple[str, float, float, float, float]]:
    """(tile, largest |lse|, lse error / largest |lse|, out relative L2 error, the rows' own
    out error) per tile."""
    gen = torch.Generator(device="cuda").manual_seed(5 + num_heads)
    q = torch.rand(TOKENS, num_heads, 576, device="cuda", generator=gen) * 2 - 1
    q = q.to(q_dtype)
    kv = torch.randn(ROWS, 576, device="cuda", generator=gen) * 0.5 * scale
    kv_scale = float(kv.abs().max()) / 448.0
    rows = (kv / kv_scale).to(torch.float8_e4m3fn)
    idx = torch.stack(
        [torch.randperm(ROWS, device="cuda", generator=gen)[:TOPK] for _ in range(TOKENS)]
    ).to(torch.int32)
    ref_o, ref_l = kmod.reference_sparse_mla(q, rows, idx, SM_SCALE, kv_scale)
    exact_o, _ = kmod.reference_sparse_mla(q, kv, idx, SM_SCALE)  # before rounding
    rows_own = ((ref_o - exact_o).norm() / exact_o.norm()).item()
    largest = ref_l.abs().max().item()
    results = []
    for name, cfg in tiles(num_heads).items():
        out, lse = overrides.decode(kmod, q, rows, idx, SM_SCALE, config=cfg, kv_scale=kv_scale)
        rel_lse = (lse - ref_l).abs().max().item() / largest
        rel_out = ((out.float() - ref_o).norm() / ref_o.norm()).item()
        results.append((name, largest, rel_lse, rel_out, rows_own))
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--md", help="write the table here as Markdown")
    args = ap.parse_args()
    import triton

    lines = [
        f"# fp8 e4m3 tiles' precision ({torch.cuda.get_device_name()}, "
        f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC)",
        "",
        f"torch {torch.__version__}, Triton {triton.__version__}; {TOKENS} tokens, top-k {TOPK}"
        f" of {ROWS} rows, q uniform in [-1, 1], K N(0, 0.5) times the scale, rounded to e4m3"
        f" with one scale; sm_scale {SM_SCALE}. `lse`: largest lse error / largest |lse|;"
        " `out`: relative L2 error; `rows' own`: that of the reference on the rounded rows"
        " against the reference on the values before rounding.",
        "",
        "| tile | q | H | K scale | largest abs(lse) | lse | out | rows' own |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for q_name, q_dtype in Q_DTYPES.items():
        for num_heads in (8, 16, 64):
            for scale in (1.0, 10.0, 100.0):
                for name, largest, rel_lse, rel_out, own in probe(num_heads, scale, q_dtype):
                    row = f"| {name} | {q_name} | {num_heads} | {scale:g} | {largest:.1f} | "
                    lines.append(row + f"{rel_lse:.1e} | {rel_out:.1e} | {own:.1e} |")
                    print(lines[-1], flush=True)
    if args.md:
        with open(args.md, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
