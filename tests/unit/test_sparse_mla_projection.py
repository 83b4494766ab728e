"""The committed RTX PRO 6000 projection is what benchmarks/sparse_mla/project_sm120.py makes of
the committed H200 benchmark (one source of numbers), and it is a projection a reader can
check: never under the target's roofline floor, the efficiency the H200 measured."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.module_file import load_module_file

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"


def test_projection_matches_the_committed_benchmark() -> None:
    script = load_module_file(ROOT / "benchmarks/sparse_mla/project_sm120.py", "project_sm120")
    result = json.loads((RESULTS / "sparse_mla_h200.json").read_text())
    rows = script.project(result)
    committed = (RESULTS / "sparse_mla_rtx_pro_6000_projection.md").read_text()
    assert committed == script.render(result, rows)
    assert len(rows) == len(result["rows"]) > 0
    for row, measured in zip(rows, result["rows"], strict=True):
        assert 0 < row["efficiency"] <= 1.0
        assert row["projected_us"] >= row["rtx_floor_us"]
        if row["projected_tl_dot_us"] is not None:  # benchmarks from round 27 on measure it
            assert row["projected_tl_dot_us"] >= row["rtx_floor_us"]
        assert row["config"] == measured["sm120_config"]
        # A 99 KB GPU's 64-head tiles: mma.sync with q in registers, or fp8_ds_mla's grouped
        # kernel (the compile-for-every-target test checks their fit for sm_120).
        wide_ok = row["config"].get("MMA_V2") == 1 or row["config"].get("FP8_GROUPS") == 1
        assert row["config"]["BLOCK_H"] <= 32 or wide_ok


def test_the_tl_dot_columns_keep_the_table_whole() -> None:
    """The committed benchmark measures `SM120 tl.dot` (from round 27 on): the projection has
    it for every row, and every row of its table has the header's cells."""
    script = load_module_file(ROOT / "benchmarks/sparse_mla/project_sm120.py", "project_sm120")
    result = json.loads((RESULTS / "sparse_mla_h200.json").read_text())
    rows = script.project(result)
    assert all(row["projected_tl_dot_us"] >= row["rtx_floor_us"] for row in rows)
    table = [line for line in script.render(result, rows).splitlines() if line.startswith("|")]
    assert len(table) == len(rows) + 2
    assert {line.count("|") for line in table} == {12}, table[:3]
