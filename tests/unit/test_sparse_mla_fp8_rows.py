"""fp8_ds_mla rows in backend/sparse_mla.py without a GPU: the byte layout of the quantizer
the tests and benchmark use, the reference's dequantization, and the call's input checks."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
from module_file import load_module_file

torch = pytest.importorskip("torch", reason="the kernel module needs torch")
pytest.importorskip("triton", reason="the kernel module imports triton")
KERNEL = Path(__file__).resolve().parents[2] / "backend" / "sparse_mla.py"


@pytest.fixture(scope="module")
def kmod() -> ModuleType:
    return load_module_file(KERNEL, "sparse_mla_fp8_rows")


def test_row_layout_matches_vllms_fp8_ds_mla(kmod: ModuleType) -> None:
    """512 fp8 e4m3 bytes, 4 fp32 scales (one per 128 columns), 64 bf16 rope values."""
    rows = torch.randn(6, 576, generator=torch.Generator().manual_seed(0))
    rows[:, 128:256] *= 40.0  # a group with its own, larger scale
    packed = kmod.quantize_fp8_ds_mla(rows)
    assert packed.dtype == torch.uint8 and packed.shape == (6, 656)
    scales = packed[:, 512:528].contiguous().view(torch.float32)
    amax = rows[:, :512].reshape(6, 4, 128).abs().amax(-1)
    torch.testing.assert_close(scales, amax / 448.0)
    fp8 = packed[:, :512].contiguous().view(torch.float8_e4m3fn).float()
    assert fp8.abs().max() <= 448.0
    rope = packed[:, 528:].contiguous().view(torch.bfloat16)
    assert torch.equal(rope, rows[:, 512:].to(torch.bfloat16))
    back = kmod.dequantize_fp8_ds_mla(packed)
    # e4m3 keeps 3 mantissa bits: at most 1/16 relative error per value
    assert ((back[:, :512] - rows[:, :512]).abs() <= rows[:, :512].abs() / 16 + 1e-6).all()


def test_reference_reads_fp8_rows_through_their_dequantized_values(kmod: ModuleType) -> None:
    gen = torch.Generator().manual_seed(1)
    packed = kmod.quantize_fp8_ds_mla(torch.randn(50, 576, generator=gen))
    q = torch.randn(3, 8, 576, generator=gen).to(torch.bfloat16)
    idx = torch.randint(-5, 60, (3, 40), generator=gen, dtype=torch.int32)
    got = kmod.reference_sparse_mla(q, packed, idx, 1 / 16)
    want = kmod.reference_sparse_mla(q, kmod.dequantize_fp8_ds_mla(packed), idx, 1 / 16)
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))


@pytest.mark.parametrize(
    ("q_dtype", "rows", "error", "match"),
    [
        (torch.float16, torch.zeros(4, 656, dtype=torch.uint8), TypeError, "bf16 q"),
        (torch.bfloat16, torch.zeros(4, 576, dtype=torch.uint8), ValueError, "656"),
        (torch.bfloat16, torch.zeros(4, 664, dtype=torch.uint8)[:, :656], ValueError, "aligned"),
        (torch.bfloat16, torch.zeros(4, 576, dtype=torch.float32), TypeError, "uint8"),
    ],
)
def test_bad_rows_are_refused_before_launch(
    kmod: ModuleType, q_dtype: torch.dtype, rows: torch.Tensor, error: type, match: str
) -> None:
    q = torch.zeros(2, 8, 576, dtype=q_dtype)
    idx = torch.zeros(2, 16, dtype=torch.int32)
    with pytest.raises(error, match=match):
        kmod.sparse_mla_decode(q, rows, idx, 1 / 16)
