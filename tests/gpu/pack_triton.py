"""Pack a Triton from PyPI for the GPU machine (run here, not on the GPU).

The GPU machine has one Triton (3.6) and no network, and a call carries at most 64 MiB, while
Triton's own folder is 600-900 MB. What a Hopper GPU needs to compile and launch with it is far
less: its Python code, `libtriton.so` without its debug sections, and the NVIDIA backend's
`ptxas`, headers and libdevice (not `ptxas-blackwell`, CUPTI or the profiler's library). Packed
with xz that is 55 MiB for 3.8.0, which travels in `.thirdparty/` beside the tree.

    python3 -m tests.gpu.pack_triton 3.8.0        -> .thirdparty/triton-3.8.0.tar.xz

There, with `.thirdparty` carried (PYTHONPATH first, so torch keeps its own Triton installed):

    mkdir -p /tmp/triton && tar -xJf .thirdparty/triton-3.8.0.tar.xz -C /tmp/triton
    export PYTHONPATH=/tmp/triton:$PWD GLMOPS_SPARSE_MLA_GLUON=1
    python3 -m pytest tests/gpu -q -p no:cacheprovider -n 4

(`GLMOPS_SPARSE_MLA_GLUON=1` runs the Gluon kernels under a Triton they compile under but that
no GPU suite has verified yet: backend/sparse_mla/, ``_GLUON_VERIFIED``.)
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from tests.support.tritons import TRITONS, triton_path

ROOT = Path(__file__).resolve().parents[2]
LEFT_OUT = (
    "ptxas-blackwell",  # SM100+ only
    "cupti",
    "cupti-blackwell",
    "libproton.so",  # the profiler
    "libGPUInstrumentationTestLib.so",  # Triton's own tests
    "__pycache__",
)
CALL_LIMIT = 64 * 2**20  # what one device call carries, the working tree included
TREE_ROOM = 6 * 2**20  # the tracked tree (4.3 MiB) and .thirdparty/rendered (0.5 MiB)


def pack(version: str, dest: Path) -> Path:
    """``dest``/triton-``version``.tar.xz, written beside it and renamed: whole or not at all."""
    source = triton_path(version)
    if source is None:
        raise SystemExit(f"Triton {version} is the installed one: the GPU machine has it")
    out = dest / f"triton-{version}.tar.xz"
    dest.mkdir(parents=True, exist_ok=True)
    partial = dest / f".{out.name}.partial"
    try:
        with tempfile.TemporaryDirectory() as tmp:
            tree = Path(tmp) / "tree"
            for top in sorted(source.iterdir()):
                if top.name == "triton" or top.name.endswith(".dist-info"):
                    shutil.copytree(top, tree / top.name, ignore=shutil.ignore_patterns(*LEFT_OUT))
            lib = tree / "triton" / "_C" / "libtriton.so"
            subprocess.run(["strip", "--strip-debug", str(lib)], check=True)
            with tarfile.open(partial, "w:xz", preset=6) as tar:
                for top in sorted(tree.iterdir()):
                    tar.add(top, top.name)
        os.replace(partial, out)
    finally:
        partial.unlink(missing_ok=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("version", choices=TRITONS)
    parser.add_argument("--out", type=Path, default=ROOT / ".thirdparty")
    args = parser.parse_args()
    out = pack(args.version, args.out)
    size = out.stat().st_size
    print(f"{out}: {size / 2**20:.1f} MiB (a call carries {CALL_LIMIT // 2**20} MiB in all)")
    if size > CALL_LIMIT - TREE_ROOM:
        raise SystemExit(f"{out} leaves less than {TREE_ROOM // 2**20} MiB for the tree")


if __name__ == "__main__":
    main()
