"""The indexer fallback's Triton kernels (backend/indexer_logits.py: the paged logits and the
top-k's three passes), compiled for the GPUs the fallback serves, SM120 and SM90 (the GPU
suite's stand-in), by Triton's own compiler without a GPU, under the Triton of every supported
vLLM release (the fallback runs under the vLLM's): the interpreter tests
(tests/patchset/test_indexer.py) check what they compute, not that they compile. Each must
compile without spilling (the finish needs its register cap for that on sm_120), and the
collecting pass must stay within 128 registers a thread: it is latency-bound per program, so it
relies on many programs an SM."""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="the kernel module needs torch")
pytest.importorskip("triton", reason="the kernel module imports triton")

from tests.support.interpreted import run_module  # noqa: E402
from tests.support.tritons import TRITONS, triton_env, under_each_triton  # noqa: E402


def _compile(version: str) -> dict:
    report = run_module("tests.unit.indexer_compile", None, env=triton_env(version))
    assert report["triton"] == version, f"asked for Triton {version}, ran {report['triton']}"
    return report


@pytest.fixture(scope="module")
def compiled() -> dict[str, dict]:
    """Triton version -> its compile report."""
    return under_each_triton(_compile)


@pytest.mark.parametrize("version", TRITONS)
def test_indexer_kernels_compile_without_spills(compiled: dict[str, dict], version: str) -> None:
    for k in compiled[version]["kernels"]:
        where = f"{k['kernel']} on sm_{k['arch']} under Triton {version}"
        assert k["stack"] == 0, f"{where} spills: {k['stack']} B of stack"
        if k["kernel"] == "_topk_collect_kernel":
            assert k["regs"] <= 128, f"{where}: {k['regs']} registers, few programs an SM"
