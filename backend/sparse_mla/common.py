"""Sparse MLA decode (DSA top-k attention over a latent KV cache) in Triton.

Contract (one query token per row of ``q``):
    q        [T, H, 576]   512 latent ("nope", absorbed) + 64 rope dims, fp16/bf16
    kv_rows  [N, 576]      the latent KV cache viewed as rows; V is the first 512 columns
                           (or fp8 e4m3 [N, 576] with a tensor scale, or uint8 [N, 656]:
                           fp8_ds_mla rows, vLLM's fp8 sparse MLA cache)
    indices  [T, topk]     int32 physical row numbers; any negative value (or >= N) is invalid
    sm_scale float         softmax scale, passed explicitly (GLM-5: 1/16)
    -> out [T, H, 512] in q's dtype, lse [T, H] fp32 (natural log).
A token with no valid index gets out = 0 and lse = -inf (what vLLM's merge expects).

One program owns (token, top-k split, head block); each gathered row is loaded once and used
for both Q.K^T and P.V; the top-k is split only until the grid fills the GPU, and a second
small kernel merges the splits. Which tile runs where, and why: backend/DESIGN.md.

This module is joined from the parts of backend/sparse_mla/ (``assemble.py``); it imports only
the standard library, torch and triton, so its text can be embedded verbatim elsewhere. This
part: the Triton and Gluon versions, the row constants and the device queries.
"""

from __future__ import annotations

import functools
import os
from typing import NamedTuple

import torch
import triton

_TRITON = tuple(int(part) for part in triton.__version__.split(".")[:2])

try:  # Gluon: explicit layouts, warpgroup MMA and mma.sync (Triton 3.6 to 3.8: _GLUON_API)
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.ampere import mma_v2  # noqa: F401
    from triton.experimental.gluon.language.nvidia.hopper import (  # noqa: F401
        async_copy,
        fence_async_shared,
        warpgroup_mma,
        warpgroup_mma_wait,
    )
    from triton.runtime.jit import constexpr_function  # noqa: F401

    # Triton 3.7 renamed the block-wide barrier (the same op) and made a reinterpreted
    # shared-memory view span its whole buffer: the kernels' two uses of the 3.6 API that
    # changed. Under 3.6 they compile as they always have.
    _cta_barrier = getattr(gl, "thread_barrier", None) or gl.barrier
    _WHOLE_VIEWS = gl.constexpr(_TRITON >= (3, 7))
except (ImportError, AttributeError):  # no Gluon, or another: tl.dot serves every GPU
    gluon = None

_D_V = 512  # latent (V) width; K uses the whole 576-wide row
_D_PE = 64  # rope part of K
_D_QK = _D_V + _D_PE
_FP8_ROW_BYTES = _D_V + 4 * 4 + _D_PE * 2  # fp8_ds_mla: fp8 latent, 4 fp32 scales, bf16 rope
_FP8_GROUP = 128  # latent columns per fp8_ds_mla scale
_LOG2E = 1.4426950408889634


@functools.lru_cache(maxsize=16)
def _num_sms(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def _dotted(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))


# Gluon is experimental and its API changes between releases. The Gluon kernels compile under
# Triton 3.6 to 3.8 (CI compiles them for every target under each), and run where the GPU suite
# has passed under that Triton; under the others the tl.dot kernels serve every GPU.
# GLMOPS_SPARSE_MLA_GLUON=1 runs them under any Triton they compile under: how a GPU suite run
# verifies one before it is added here.
_GLUON_FIRST, _GLUON_LAST = (3, 6), (3, 8)
_GLUON_COMPILES = gluon is not None and _GLUON_FIRST <= _TRITON <= _GLUON_LAST
_GLUON_VERIFIED = ((3, 6), (3, 7), (3, 8))
_GLUON_RANGE = f"Triton {_dotted(_GLUON_FIRST)} to {_dotted(_GLUON_LAST)}"
_GLUON_TRITONS = (  # what the refusals say of the Triton
    f"a Triton that runs the Gluon kernels ({', '.join(map(_dotted, _GLUON_VERIFIED))}, "
    f"or any of {_GLUON_RANGE} with GLMOPS_SPARSE_MLA_GLUON=1)"
)
_GLUON_API = _GLUON_COMPILES and (
    _TRITON in _GLUON_VERIFIED or os.environ.get("GLMOPS_SPARSE_MLA_GLUON") == "1"
)


def _gluon_off_reason() -> str | None:
    """Why this Triton runs the tl.dot kernels where a Gluon tile would serve, or None."""
    if _GLUON_API:
        return None
    if not _GLUON_COMPILES:
        return f"needs {_GLUON_RANGE}"
    return (
        f"is not yet verified on a GPU under Triton {triton.__version__}; "
        "GLMOPS_SPARSE_MLA_GLUON=1 runs it"
    )


def _gluon_usable(capability: tuple[int, int], api: bool | None = None) -> bool:
    """The Hopper Gluon kernels: warpgroup MMA (SM90 only: Blackwell has none). ``api``:
    whether the Triton has their Gluon API (``None``: this one)."""
    return (_GLUON_API if api is None else api) and capability[0] == 9


@functools.lru_cache(maxsize=16)
def _has_wgmma(device_index: int) -> bool:
    return _gluon_usable(torch.cuda.get_device_capability(device_index))


def _gluon_mma_usable(
    capability: tuple[int, int], proxy: bool = False, api: bool | None = None
) -> bool:
    """The Gluon tiles with mma.sync: for SM80-89 and SM120/121, whose only MMA that is, under
    Triton's Gluon (``_GLUON_API``; their e4m3 tile needs SM89+, as fp8 rows do:
    ``_unsupported``).
    ``proxy``: Hopper may run them too (the benchmark's stand-in for SM120); its plan takes
    the 32-head one and, for fp8_ds_mla rows, the e4m3 one (``_default_tile``), its own
    tiles being faster elsewhere. ``api`` as for ``_gluon_usable``."""
    target = capability[0] in (8, 12) or (proxy and capability[0] == 9)
    return (_GLUON_API if api is None else api) and target


def _gluon_takes(q_dtype: torch.dtype, kv_dtype: torch.dtype, kv_format: str) -> bool:
    """Whether the Gluon tiles take this q over these rows: 16-bit rows of q's dtype, fp8 e4m3
    rows under either 16-bit q, fp8_ds_mla rows under a bf16 q (their rope part is bf16). The
    e4m3 tiles hold q to about bf16's precision (its two e4m3 parts), an fp16 q too: the rows'
    own e4m3 rounding (2^-4 of each value) is the larger error (DESIGN.md "Precision of the e4m3
    tiles")."""
    if kv_format == "fp8":
        return q_dtype in (torch.float16, torch.bfloat16)
    if kv_format == "fp8_ds_mla":
        return q_dtype == torch.bfloat16
    return q_dtype == kv_dtype


def _device_index(device: torch.device | int) -> int:
    """A device's index; the current device for ``cuda`` without one."""
    index = device if isinstance(device, int) else device.index
    return torch.cuda.current_device() if index is None else index


@functools.lru_cache(maxsize=16)
def _has_gluon_mma(device_index: int) -> bool:
    return _gluon_mma_usable(torch.cuda.get_device_capability(device_index))


def _fits_cp_async(*tensors: torch.Tensor) -> bool:
    """Every buffer 16-byte aligned and every stride but the last (contiguous) one a multiple
    of 16 elements. The Gluon kernel copies q and KV rows in 16-byte pieces, which Triton emits
    only where it can prove that alignment (its integer specialization); for fp8_ds_mla rows
    (uint8) it is the 16-byte row alignment their fp32 scales and bf16 rope part need."""
    return all(
        t.data_ptr() % 16 == 0 and all(st % 16 == 0 for st in t.stride()[:-1]) for t in tensors
    )


@functools.lru_cache(maxsize=16)
def _has_pdl(device_index: int) -> bool:
    """Programmatic dependent launch (griddepcontrol) exists from SM90 on."""
    return torch.cuda.get_device_capability(device_index)[0] >= 9


class DeviceLimits(NamedTuple):
    """What a tile must fit on a GPU: its compute capability and the opt-in shared memory per
    block in bytes (``cudaDevAttrMaxSharedMemoryPerBlockOptin``). Registers need no entry: no
    tile asks for more than 255 per thread, 64K per block (every target from SM80 on)."""

    capability: tuple[int, int]
    smem_per_block: int


H200_LIMITS = DeviceLimits((9, 0), 232448)
MAX_HEADS = 128  # query heads per GPU that the plan and the GPU suite cover (DeepSeek-V3.2 at TP 1)
KV_FORMATS = ("16bit", "fp8", "fp8_ds_mla")  # fp16/bf16 rows, fp8 e4m3 rows, FlashMLA fp8 rows
_KV_FMT_CODE = {"16bit": 0, "fp8_ds_mla": 1, "fp8": 2}


@functools.lru_cache(maxsize=16)
def _device_limits(device_index: int) -> DeviceLimits:
    props = torch.cuda.get_device_properties(device_index)
    return DeviceLimits((props.major, props.minor), props.shared_memory_per_block_optin)


_RESERVED_SMEM_PER_BLOCK = 1024  # CUDA's own shared memory in each resident block (SM80 on)


def _blocks_per_sm(tile_smem: int, limits: DeviceLimits) -> int:
    """How many programs of a tile one SM holds by shared memory: an SM has the block opt-in
    plus the reserved KB (SM80 164 KB, SM86/89/120 100 KB, SM90/100 228 KB), each block takes
    its own reserved KB. So a 76-93 KB tile runs two per SM on Hopper but one on a 99 KB GPU,
    and the 93 KB ones one on SM80. (Registers never bind first: the tiles that aim for two
    per SM have 4 warps, and two blocks of 4 warps at 255 registers fit every SM's 64K.)"""
    per_sm = limits.smem_per_block + _RESERVED_SMEM_PER_BLOCK
    return per_sm // (tile_smem + _RESERVED_SMEM_PER_BLOCK)


def _mma_family(capability: tuple[int, int]) -> str:
    """How Triton lowers the tl.dot kernel's dots, which sets its shared memory: warpgroup MMA
    on SM90, tensor-memory MMA on SM100/103, mma.sync everywhere else (SM80-89, SM120/121)."""
    return {9: "sm90", 10: "sm100"}.get(capability[0], "mma")
