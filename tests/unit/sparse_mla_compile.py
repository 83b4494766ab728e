"""Compile every kernel configuration that backend/sparse_mla/'s plan can choose for GPU
targets, with Triton's own compiler, without a GPU and without a launch.

Reads {"targets": [{"arch": 120, "capability": [12, 0], "smem": 101376}, ...]} on stdin and
writes {"triton": version, "gluon": whether the module runs its Gluon kernels under it,
"gluon_compiles": whether they are written for it (compiled here either way), "jobs": [job +
result, ...]} to stdout. Run as a subprocess so that
the Triton under test can be another version than the installed one (PYTHONPATH first). A job
names a kernel of the module, its target, pointer types, constexprs, warps and stages; its
result is the compiled shared memory per block, registers and stack per thread, or the error;
a job of the plan also names its tile (``tile_fields``).
Only the stdlib, torch (the kernel module imports it) and the Triton under test are used.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

KERNEL = Path(__file__).resolve().parents[2] / "backend" / "sparse_mla"
FLOAT_ARGS = {"qk_scale", "v_scale"}


def _load_kernels():
    sys.path.insert(0, str(KERNEL.parents[1]))  # run as a script: the checkout's tests/ importable
    from tests.support.module_file import load_sparse_mla

    return load_sparse_mla("sparse_mla_under_compile", KERNEL)


def _cuobjdump(cubin: bytes, flag: str) -> str:
    """Triton's bundled cuobjdump run with ``flag`` (``-res-usage``, ``-sass``) on a cubin."""
    import triton

    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        return subprocess.run(
            [str(tool), flag, f.name], capture_output=True, text=True, check=True
        ).stdout


def _resources(cubin: bytes) -> tuple[int, int]:
    """(registers, stack bytes) of the cubin's kernel."""
    usage = [line for line in _cuobjdump(cubin, "-res-usage").splitlines() if "REG:" in line][-1]
    regs = int(re.search(r"REG:(\d+)", usage).group(1))
    stack = int(re.search(r"STACK:(\d+)", usage).group(1))
    return regs, stack


def mma_ops(cubin: bytes) -> dict[str, int]:
    """The cubin's tensor-core instructions by SASS opcode (``HMMA.16816.F32``,
    ``QMMA.16832.F32.E4M3.E4M3``, ``HGMMA...``)."""
    ops: dict[str, int] = {}
    for op in re.findall(r"\b([HQ]G?MMA\.[\w.]+)", _cuobjdump(cubin, "-sass")):
        ops[op] = ops.get(op, 0) + 1
    return ops


def compile_job(module, job: dict) -> dict:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn = getattr(module, job["kernel"])
    pointers, constexprs = job["pointers"], job["constexprs"]
    signature, attrs = {}, {}
    for i, name in enumerate(fn.arg_names):
        if name in constexprs:
            signature[name] = "constexpr"
        elif name in pointers:
            signature[name] = "*" + pointers[name]
            attrs[(i,)] = [["tt.divisibility", 16]]  # torch allocations are 16-byte aligned
        elif name in FLOAT_ARGS:
            signature[name] = "fp32"
        else:
            signature[name] = "i32"
            if name.startswith("stride"):
                attrs[(i,)] = [["tt.divisibility", 16]]
    if fn.is_gluon():
        from triton.experimental.gluon._runtime import GluonASTSource as ASTSource
    src = ASTSource(fn, signature, constexprs, attrs)
    options = {"num_warps": job["num_warps"], "num_stages": job.get("num_stages", 2)}
    compiled = triton.compile(src, target=GPUTarget("cuda", job["arch"], 32), options=options)
    regs, stack = _resources(compiled.asm["cubin"])
    result = {"shared": int(compiled.metadata.shared), "regs": regs, "stack": stack, "error": None}
    if job.get("mma_ops"):
        result["mma_ops"] = mma_ops(compiled.asm["cubin"])
    return result


def tile_fields(tile) -> dict:
    """A tile as JSON: its class's name and its fields but the table's shared memory."""
    fields = {f.name: getattr(tile, f.name) for f in dataclasses.fields(tile) if f.name != "smem"}
    return {"class": type(tile).__name__, **fields}


def _split_job(module, arch: int, kv_format: str, tile) -> dict:
    """The split kernel that runs ``tile`` and its constexprs, both from the tile (what the
    launch passes), for a bf16 q, split, with PDL on SM90+ (the larger epilogue)."""
    import torch

    kv = {"16bit": "bf16", "fp8": "fp8e4nv", "fp8_ds_mla": "u8"}[kv_format]
    pointers = dict(Q="bf16", KV=kv, IDX="i32", Out="bf16", LSE="fp32", PO="fp32", PLSE="fp32")
    constexprs = tile.constexprs(kv_format, torch.bfloat16, True, arch >= 90)
    if tile.gluon:
        pointers["PO"] = "bf16"  # 16-bit partials
    if constexprs.get("DS"):
        pointers["KV"] = "fp8e4nv"  # fp8_ds_mla rows: their bytes, read as e4m3
    return {
        "kernel": tile.kernel(kv_format),
        "arch": arch,
        "kv_format": kv_format,
        "tile": tile_fields(tile),
        "pointers": pointers,
        "constexprs": constexprs,
        "num_warps": tile.warps,
        "num_stages": tile.stages,
    }


def _merge_jobs(module, arch: int, gluon: bool) -> list[dict]:
    """One merge per padded split count up to 128 (topk 2048 over 16-row tiles), at its widest
    column chunk: with the plan's warp rule every chunk of 128+ columns holds 4 x BLOCK_S
    values per thread and narrower ones fewer, so the widest is the largest footprint."""
    jobs = []
    for partial in ("fp32", "bf16") if gluon else ("fp32",):
        elem = 4 if partial == "fp32" else 2
        for block_s in (2, 4, 8, 16, 32, 64, 128):
            block_dv = max(64, min(512, 8192 // block_s))
            jobs.append(
                {
                    "kernel": "_sparse_mla_combine_kernel",
                    "arch": arch,
                    "kv_format": None,
                    "tile": {"BLOCK_S": block_s, "BLOCK_DV": block_dv},
                    "pointers": dict(PO=partial, PLSE="fp32", Out="bf16", LSE="fp32"),
                    "constexprs": dict(
                        BLOCK_S=block_s, D_V=512, BLOCK_DV=block_dv, USE_PDL=arch >= 90
                    ),
                    "num_warps": module._merge_warps(block_dv, elem),
                    "num_stages": 2,
                }
            )
    return jobs


def plan_jobs(module, target: dict) -> list[dict]:
    """Every distinct configuration the plan chooses on this target: each row format the
    target serves, every head count from 1 to MAX_HEADS, with and without the Gluon kernels
    where this Triton and target have them (Hopper's, or the mma.sync tiles), run under this
    Triton or not yet (``_GLUON_COMPILES``); then the merges."""
    limits = module.DeviceLimits(tuple(target["capability"]), target["smem"])
    api = module._GLUON_COMPILES  # verified on a GPU or not: what runs once it is
    wgmma = module._gluon_usable(limits.capability, api=api)
    gluon_mma = module._gluon_mma_usable(limits.capability, api=api)
    jobs, seen = [], set()
    for kv_format in module.KV_FORMATS:
        for heads in range(1, module.MAX_HEADS + 1):
            if module._unsupported(heads, kv_format, limits) is not None:
                continue
            for gluon in (False, True) if wgmma or gluon_mma else (False,):
                tile = module._default_tile(
                    heads, kv_format, gluon and wgmma, limits, gluon and gluon_mma
                )
                if (kv_format, tile) not in seen:
                    seen.add((kv_format, tile))
                    jobs.append(_split_job(module, target["arch"], kv_format, tile))
    return jobs + _merge_jobs(module, target["arch"], wgmma or gluon_mma)


def main() -> None:
    request = json.load(sys.stdin)
    os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="triton-cache-"))
    import triton

    module = _load_kernels()
    jobs = [job for target in request["targets"] for job in plan_jobs(module, target)]
    jobs += request.get("extra_jobs", [])
    for job in jobs:
        try:
            job.update(compile_job(module, job))
        except Exception as exc:  # reported per job: a config that does not compile is a finding
            last = traceback.format_exception_only(type(exc), exc)[-1].strip()
            job.update(shared=None, regs=None, stack=None, error=last[:2000])
    report = {
        "triton": triton.__version__,
        "gluon": module._GLUON_API,
        "gluon_compiles": module._GLUON_COMPILES,
        "jobs": jobs,
    }
    json.dump(report, sys.stdout)


if __name__ == "__main__":
    main()
