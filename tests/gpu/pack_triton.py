"""Pack a Triton from PyPI for the GPU machine (run here, not on the GPU).

The GPU machine has one Triton (3.6) and no network, and a call carries at most 64 MiB, while
Triton's own folder is 600-900 MB. What a Hopper GPU needs to compile and launch with it is far
less: its Python code, `libtriton.so` without its debug sections, and the NVIDIA backend's
`ptxas`, headers and libdevice (not `ptxas-blackwell`, CUPTI or the profiler's library). Packed
with xz that is 55 MiB for 3.8.0, which travels in `.thirdparty/` beside the tree. Its
compiled part must match the GPU machine's Python (3.12), not this one's: the pack is made from
PyPI's cp312 manylinux wheel (a cp311 Triton fails to import there, "Python version mismatch").

    python3 -m tests.gpu.pack_triton 3.8.0        -> .thirdparty/triton-3.8.0.tar.xz

There, with `.thirdparty` carried (PYTHONPATH first, so torch keeps its own Triton installed):

    mkdir -p /tmp/triton && tar -xJf .thirdparty/triton-3.8.0.tar.xz -C /tmp/triton
    export PYTHONPATH=/tmp/triton:$PWD GLMOPS_SPARSE_MLA_GLUON=1
    python3 -m pytest tests/gpu -q -p no:cacheprovider -n 4

(`GLMOPS_SPARSE_MLA_GLUON=1` runs the Gluon kernels under a Triton they compile under but that
no GPU suite has verified yet: backend/sparse_mla/, ``_GLUON_VERIFIED``; the run that passes
verifies it.)
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

from tests.support.tritons import TRITONS
from tests.support.vllm_wheels import CACHE

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
GPU_PYTHON = "3.12"  # the GPU machine's python3 (shared/research/gpu-machine.md)
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64")
PACKS = CACHE / "triton-packs"  # packs made here, keyed by their wheel and this file


def triton_wheel(version: str, python: str = GPU_PYTHON) -> Path:
    """Triton ``version``'s wheel for CPython ``python`` on x86-64 Linux, from PyPI (kept in
    the test cache, ~/.cache/glmops/triton-wheels, after the first download)."""
    wheels = CACHE / "triton-wheels"
    pattern = f"triton-{version}-cp{python.replace('.', '')}-*.whl"
    if not any(wheels.glob(pattern)):
        platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
             "--python-version", python, "--implementation", "cp", *platforms,
             "-d", str(wheels), f"triton=={version}"],
            check=True,
        )  # fmt: skip
    return sorted(wheels.glob(pattern))[-1]


def unpack_wheel(wheel: Path, into: Path) -> Path:
    """``wheel`` unzipped into ``into``/site (the folder that holds ``triton/`` and its
    ``.dist-info``)."""
    site = into / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    for path in site.rglob("*"):  # zip drops the mode bits: ptxas and friends must run
        if path.is_file() and (path.parent.name == "bin" or path.suffix == ".so"):
            path.chmod(0o755)
    return site


def _kept_pack(wheel: Path) -> Path:
    """Where the pack of ``wheel`` is kept: named by the wheel's bytes and this file's source,
    which together decide what the pack holds (xz and strip are the machine's)."""
    digest = hashlib.sha256(Path(__file__).read_bytes())
    with wheel.open("rb") as f:
        digest.update(hashlib.file_digest(f, "sha256").digest())
    return PACKS / f"{wheel.stem}-{digest.hexdigest()[:16]}.tar.xz"


def pack(version: str, dest: Path, python: str = GPU_PYTHON) -> Path:
    """``dest``/triton-``version``.tar.xz for CPython ``python``, written beside it and renamed:
    whole or not at all. Packed once per machine (``PACKS``), copied from there after."""
    out = dest / f"triton-{version}.tar.xz"
    dest.mkdir(parents=True, exist_ok=True)
    partial = dest / f".{out.name}.partial"
    wheel = triton_wheel(version, python)
    kept = _kept_pack(wheel)
    try:
        if kept.exists():
            shutil.copyfile(kept, partial)
        else:
            _pack_wheel(wheel, partial)
            _keep(partial, kept)
        os.replace(partial, out)
    finally:
        partial.unlink(missing_ok=True)
    return out


def _keep(archive: Path, kept: Path) -> None:
    """A copy of ``archive`` at ``kept``, written beside it and renamed."""
    kept.parent.mkdir(parents=True, exist_ok=True)
    copy = kept.with_name(f".{kept.name}.{os.getpid()}.partial")
    try:
        shutil.copyfile(archive, copy)
        os.replace(copy, kept)
    finally:
        copy.unlink(missing_ok=True)


def _pack_wheel(wheel: Path, archive: Path) -> None:
    """``wheel``'s Triton, less what a Hopper GPU does not need, as xz-compressed ``archive``."""
    with tempfile.TemporaryDirectory() as tmp:
        source = unpack_wheel(wheel, Path(tmp))
        tree = Path(tmp) / "tree"
        for top in sorted(source.iterdir()):
            if top.name == "triton" or top.name.endswith(".dist-info"):
                shutil.copytree(top, tree / top.name, ignore=shutil.ignore_patterns(*LEFT_OUT))
        lib = tree / "triton" / "_C" / "libtriton.so"
        subprocess.run(["strip", "--strip-debug", str(lib)], check=True)
        with tarfile.open(archive, "w:xz", preset=6) as tar:
            for top in sorted(tree.iterdir()):
                tar.add(top, top.name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("version", choices=TRITONS)
    parser.add_argument("--out", type=Path, default=ROOT / ".thirdparty")
    parser.add_argument("--python", default=GPU_PYTHON, help="the GPU machine's Python version")
    args = parser.parse_args()
    out = pack(args.version, args.out, args.python)
    size = out.stat().st_size
    print(f"{out}: {size / 2**20:.1f} MiB (a call carries {CALL_LIMIT // 2**20} MiB in all)")
    if size > CALL_LIMIT - TREE_ROOM:
        raise SystemExit(f"{out} leaves less than {TREE_ROOM // 2**20} MiB for the tree")


if __name__ == "__main__":
    main()
