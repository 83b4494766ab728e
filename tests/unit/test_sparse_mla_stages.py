"""The Gluon tiles' stage rule under each Triton that compiles them: from 3.7 on Triton lays out
the stage buffers of the mma.sync kernels and the e4m3 warpgroup kernel only for a power-of-two
count (3 stages abort the process inside Triton), so those tiles refuse 3 there; 3.6 builds and
runs 3 (the GPU suite under 3.6.0). The 16-bit warpgroup kernels build 3 under each."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton", reason="the kernel module imports triton")

from tests.support.tritons import triton_env  # noqa: E402 (needs triton)

ROOT = Path(__file__).resolve().parents[2]

# name -> (config, row format), each probed at 2, 3 and 4 stages: the tiles whose 3-stage
# form Triton 3.7 and 3.8 abort on, and the 16-bit warpgroup tiles, which they build at 3.
_E4M3 = {"BLOCK_H": 8, "BLOCK_N": 64, "num_warps": 4}
_MMA_32 = {"BLOCK_H": 32, "BLOCK_N": 32, "num_warps": 8, "MMA_V2": 1}
CASES = {
    "wgmma e4m3": ({**_E4M3, "WGMMA": 1}, "fp8"),
    "mma.sync e4m3": ({**_E4M3, "MMA_V2": 1}, "fp8"),
    "mma.sync fp8_ds_mla": ({**_E4M3, "MMA_V2": 1}, "fp8_ds_mla"),
    "mma.sync q in registers, fp8": (_MMA_32, "fp8"),
    "mma.sync q in registers, 16-bit": (_MMA_32, "16bit"),
}
CONTROLS = {
    "wgmma swapped 16-bit": ({**_E4M3, "WGMMA": 1}, "16bit"),
    "wgmma 16-bit": ({"BLOCK_H": 64, "BLOCK_N": 32, "num_warps": 8, "WGMMA": 1}, "16bit"),
}

# (capability, shared memory per block) of the GPUs the plan serves.
TARGETS = [((8, 0), 166912), ((8, 9), 101376), ((9, 0), 232448), ((12, 0), 101376)]

# Prints {name: {stages: refused}}, each refusal's text and the configs the plan chooses that
# their tile refuses, for the Triton on PYTHONPATH.
PROBE = """
import json, sys
from benchmarks.sparse_mla.overrides import tile_of
from tests.support.module_file import load_sparse_mla
m = load_sparse_mla("k")
cases = json.loads(sys.argv[1])
verdicts, texts = {}, {}
for name, (cfg, fmt) in cases.items():
    for stages in (2, 3, 4):
        tile = tile_of(m, {**cfg, "num_stages": stages}, fmt)
        verdicts.setdefault(name, {})[stages] = tile.problem(fmt)
        texts[name] = tile.requirement
planned_refused = []  # every config the plan chooses, as test_sparse_mla_tiles.py walks them
for capability, smem in json.loads(sys.argv[2]):
    limits = m.DeviceLimits(tuple(capability), smem)
    wgmma = m._gluon_usable(limits.capability, api=True)
    gluon_mma = m._gluon_mma_usable(limits.capability, api=True)
    for fmt in m.KV_FORMATS:
        for heads in range(1, m.MAX_HEADS + 1):
            if m._unsupported(heads, fmt, limits) is not None:
                continue
            for gluon in (False, True):
                tile = m._default_tile(heads, fmt, gluon and wgmma, limits, gluon and gluon_mma)
                if tile.problem(fmt):
                    planned_refused.append([capability, fmt, heads, repr(tile)])
reply = {"verdicts": verdicts, "texts": texts, "planned_refused": planned_refused}
print(json.dumps({"triton": m.triton.__version__, **reply}))
"""


def _probe(version: str) -> dict:
    run = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps({**CASES, **CONTROLS}), json.dumps(TARGETS)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=triton_env(version),
    )
    assert run.returncode == 0, run.stderr[-3000:]
    reply = json.loads(run.stdout)
    assert reply["triton"] == version
    return reply


@pytest.mark.parametrize("version", ["3.6.0", "3.7.1", "3.8.0"])
def test_gluon_tiles_refuse_3_stages_from_triton_3_7_where_it_aborts(version: str) -> None:
    reply = _probe(version)
    verdicts = {name: {int(k): v for k, v in by.items()} for name, by in reply["verdicts"].items()}
    newer = version != "3.6.0"
    for name in CASES:
        assert verdicts[name][2] is False, (name, "2 stages build under every Triton")
        assert verdicts[name][3] is newer, (name, "3 stages: refused from 3.7, taken by 3.6")
        assert "power-of-two" in reply["texts"][name] and "Triton 3.7" in reply["texts"][name]
    for name in ("mma.sync q in registers, fp8", "mma.sync q in registers, 16-bit"):
        assert verdicts[name][4] is False, (name, "4 stages: a power of two, built everywhere")
    assert verdicts["wgmma swapped 16-bit"][3] is False  # 3 stages fit at 8 heads
    assert verdicts["wgmma 16-bit"][3] is False  # 32-row tiles: up to 4 stages fit
    assert reply["planned_refused"] == [], "the plan must choose only tiles this Triton builds"
