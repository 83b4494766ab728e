"""The v0_16 profile still recognises sparse_attn_indexer.py once the indexer item has routed its
decode top-k call: a second `glmops patch` must detect the layout it patched."""

from __future__ import annotations

from glmops.gpu.patchset.indexer import _TOPK_CALL, _TOPK_ROUTED, SPARSE_INDEXER
from glmops.gpu.patchset.profiles import PROFILES


def test_the_top_k_anchor_matches_the_call_as_shipped_and_as_routed() -> None:
    v0_16 = next(p for p in PROFILES if p.name == "v0_16")
    anchors = [a for a in v0_16.anchors if "top_k_per_row_decode" in a.symbol]
    assert len(anchors) == 1
    for line in (_TOPK_CALL, _TOPK_ROUTED):
        assert anchors[0].found({SPARSE_INDEXER: "x = 1\n" + line + "    y,\n"}), line
    assert not anchors[0].found({SPARSE_INDEXER: "        other_op(\n"})
