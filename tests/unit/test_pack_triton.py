"""tests/gpu/pack_triton.py packs a Triton small enough to carry to the GPU machine, and what it
packs is a Triton that works there: unpacked, it imports as that version ahead of the installed
one, and compiles the Gluon tiles for the H200 (sm_90) with its own ptxas. (Launching needs the
GPU: that is the device run the pack is for.) A machine packs a wheel once (``PACKS``, keyed by
the wheel and pack_triton.py); the compile here starts from an empty Triton cache each time, so
the unpacked ptxas runs."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

pytest.importorskip("triton", reason="the kernel module imports triton")

from tests.gpu.pack_triton import CALL_LIMIT, TREE_ROOM, pack  # noqa: E402 (needs triton)
from tests.support.tritons import triton_env  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
VERSION = "3.8.0"  # vLLM 0.33's, the newest: the Triton a nightly vLLM brings

COMPILE = """
import json, sys, triton
from tests.unit import sparse_mla_compile as sc
m = sc._load_kernels()
jobs = sc.plan_jobs(m, {"arch": 90, "capability": [9, 0], "smem": 232448})
gluon = {j["kernel"]: j for j in jobs if getattr(m, j["kernel"]).is_gluon()}
done = {name: sc.compile_job(m, job) for name, job in sorted(gluon.items())}
print(json.dumps({"triton": triton.__file__, "version": triton.__version__,
                  "api": m._GLUON_API, "compiled": done}))
"""


def test_the_packed_triton_compiles_the_gluon_tiles(tmp_path: Path) -> None:
    here = f"{sys.version_info.major}.{sys.version_info.minor}"  # so that it imports here
    archive = pack(VERSION, tmp_path / "out", python=here)
    assert archive.name == f"triton-{VERSION}.tar.xz"
    assert archive.stat().st_size <= CALL_LIMIT - TREE_ROOM, "leaves too little for the tree"
    assert [p.name for p in archive.parent.iterdir()] == [archive.name]  # no partial left
    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
        tar.extractall(tmp_path / "site", filter="data")
    assert "triton/_C/libtriton.so" in names
    assert "triton/backends/nvidia/bin/ptxas" in names
    nvidia = "triton/backends/nvidia"
    assert not {f"{nvidia}/bin/ptxas-blackwell", f"{nvidia}/lib/cupti"} & names
    assert not any("__pycache__" in name for name in names)

    env = triton_env(VERSION)  # the installed Triton is another: PYTHONPATH decides which
    env["PYTHONPATH"] = f"{tmp_path / 'site'}:{ROOT}"
    env["GLMOPS_SPARSE_MLA_GLUON"] = "1"
    env["TRITON_CACHE_DIR"] = str(tmp_path / "cache")
    run = subprocess.run(
        [sys.executable, "-c", COMPILE], capture_output=True, text=True, cwd=ROOT, env=env
    )
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout)
    assert report["triton"].startswith(str(tmp_path / "site")), report["triton"]
    assert report["version"] == VERSION and report["api"]
    # Hopper's three warpgroup-MMA kernels, and the mma.sync tile its plan takes for 17-32 heads.
    wgmma = {"_sparse_mla_wgmma_kernel", "_sparse_mla_wgmma_swapped_kernel"}
    assert wgmma | {"_sparse_mla_wgmma_e4m3_kernel", "_sparse_mla_mma_kernel"} <= set(
        report["compiled"]
    )
    for name, result in report["compiled"].items():
        assert result["error"] is None, f"{name}: {result['error']}"
        assert 0 < result["shared"] <= 232448 and result["regs"] <= 255, (name, result)
