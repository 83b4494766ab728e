"""fp8_ds_mla rows in backend/sparse_mla/ without a GPU: the byte layout of the quantizer
the tests and benchmark use, the reference's dequantization, and the call's input checks."""

from __future__ import annotations

from types import ModuleType

import pytest

from tests.support.module_file import load_sparse_mla

torch = pytest.importorskip("torch", reason="the kernel module needs torch")
pytest.importorskip("triton", reason="the kernel module imports triton")


@pytest.fixture(scope="module")
def kmod() -> ModuleType:
    return load_sparse_mla("sparse_mla_fp8_rows")


def test_rows_have_the_fp8_ds_mla_byte_layout(kmod: ModuleType) -> None:
    """512 fp8 e4m3 bytes, 4 fp32 scales (one per 128 columns), 64 bf16 rope values, as the
    FlashMLA sparse format documents them; the kernel reads only the stored bytes."""
    rows = torch.randn(6, 576, generator=torch.Generator().manual_seed(0))
    rows[:, 128:256] *= 40.0  # a group with its own, larger scale
    rows[0, :128] = 0.0  # an all-zero group keeps a finite scale
    packed = kmod.quantize_fp8_ds_mla(rows)
    assert packed.dtype == torch.uint8 and packed.shape == (6, 656)
    scales = packed[:, 512:528].contiguous().view(torch.float32)
    amax = rows[:, :512].reshape(6, 4, 128).abs().amax(-1)
    torch.testing.assert_close(scales[1:], amax[1:] / 448.0)
    assert scales.isfinite().all() and scales[0, 0] > 0
    fp8 = packed[:, :512].contiguous().view(torch.float8_e4m3fn).float()
    group_max = fp8.reshape(6, 4, 128).abs().amax(-1)
    assert (group_max[1:] == 448.0).all()  # each group's largest value maps to e4m3's largest
    rope = packed[:, 528:].contiguous().view(torch.bfloat16)
    assert torch.equal(rope, rows[:, 512:].to(torch.bfloat16))


def test_dequantized_values_are_within_e4m3_rounding(kmod: ModuleType) -> None:
    """fp8 value times its group's scale: within half an e4m3 step (1/16 relative for normal
    numbers, half the smallest subnormal, 2^-10, times the scale below them)."""
    rows = torch.randn(64, 576, generator=torch.Generator().manual_seed(3)) * 0.5
    back = kmod.dequantize_fp8_ds_mla(kmod.quantize_fp8_ds_mla(rows))
    scale = rows[:, :512].reshape(64, 4, 128).abs().amax(-1) / 448.0
    step_floor = scale.repeat_interleave(128, dim=1) * 2.0**-10
    err = (back[:, :512] - rows[:, :512]).abs()
    assert (err <= rows[:, :512].abs() / 16 + step_floor * 1.0001).all()
    assert torch.equal(back[:, 512:], rows[:, 512:].to(torch.bfloat16).float())


@pytest.mark.parametrize(
    ("q_dtype", "rows", "error", "match"),
    [
        (torch.float16, torch.zeros(4, 656, dtype=torch.uint8), TypeError, "bf16 q"),
        (torch.bfloat16, torch.zeros(4, 576, dtype=torch.uint8), ValueError, "656"),
        (torch.bfloat16, torch.zeros(4, 664, dtype=torch.uint8)[:, :656], ValueError, "aligned"),
        (
            torch.bfloat16,
            torch.zeros(2625, dtype=torch.uint8)[1:].view(4, 656),
            ValueError,
            "align",
        ),
        (torch.bfloat16, torch.zeros(4, 576, dtype=torch.float32), ValueError, "uint8"),
    ],
)
def test_bad_rows_are_refused_before_launch(
    kmod: ModuleType, q_dtype: torch.dtype, rows: torch.Tensor, error: type, match: str
) -> None:
    q = torch.zeros(2, 8, 576, dtype=q_dtype)
    idx = torch.zeros(2, 16, dtype=torch.int32)
    with pytest.raises(error, match=match):
        kmod.sparse_mla_decode(q, rows, idx, 1 / 16)


def test_v_half_split_is_refused_for_fp8_rows(kmod: ModuleType) -> None:
    q = torch.zeros(2, 8, 576, dtype=torch.bfloat16)
    rows = torch.zeros(4, 656, dtype=torch.uint8)
    idx = torch.zeros(2, 64, dtype=torch.int32)
    with pytest.raises(ValueError, match="DV_SPLIT"):
        tile = kmod.TlDotTile(16, 32, 4, 2, dv_split=2)
        kmod.sparse_mla_decode(q, rows, idx, 1 / 16, num_splits=2, tile=tile)
