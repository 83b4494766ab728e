"""benchmarks/gpu_device.py names results after the GPU they ran on and states where the floors'
bandwidth came from; benchmarks/dsa_step counts the bytes the issue's step must move."""

from __future__ import annotations

import pytest

from benchmarks import gpu_device


@pytest.mark.parametrize(
    ("name", "short", "slug", "bandwidth"),
    [
        ("NVIDIA H100 80GB HBM3", "H100", "h100", 3.35e12),
        ("NVIDIA H100 PCIe", "H100 PCIe", "h100_pcie", 2.0e12),
        ("NVIDIA H200", "H200", "h200", 4.8e12),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "RTX PRO 6000", "rtx_pro_6000", 1.792e12),
        ("Tesla T4", "Tesla T4", "tesla_t4", None),
    ],
)
def test_names_and_datasheet(name: str, short: str, slug: str, bandwidth: float | None) -> None:
    assert gpu_device.short_name(name) == short
    assert gpu_device.slug(name) == slug
    assert gpu_device.datasheet_bw(name) == bandwidth
    info = {"slug": gpu_device.slug(name)}
    assert gpu_device.result_path("dsa_step", info, ".md") == f"dsa_step_{slug}.md"


def test_bandwidth_line_names_the_probe_and_the_datasheet() -> None:
    line = gpu_device.bandwidth_line({"copy_bw": 2.97e12, "datasheet_bw": 3.35e12})
    assert "probe's 2.97 TB/s" in line and "datasheet 3.35 TB/s" in line
    line = gpu_device.bandwidth_line({"copy_bw": None, "datasheet_bw": None})
    assert "not measured" in line and "not in the table" in line


def test_step_bytes_match_the_issue() -> None:
    """B=32 at a 32k context: the indexer reads ~138 MB a layer, sparse MLA's rows 75 MB."""
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    from benchmarks.dsa_step import bench

    indexer_only = bench.step_bytes(32, 32768, 0) - 32 * bench.TOPK * bench.ROW_BYTES
    assert 138 <= indexer_only / 1e6 < 139
    assert round(32 * bench.TOPK * bench.ROW_BYTES / 1e6) == 75
    assert bench.step_bytes(32, 32768, 16) > bench.step_bytes(32, 32768, 8)
