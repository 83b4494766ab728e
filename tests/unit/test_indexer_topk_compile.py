"""The indexer fallback's Triton kernels (backend/indexer_logits.py: the paged logits and the
top-k's three passes), compiled for the GPUs the fallback serves, SM120 and SM90 (the GPU
suite's stand-in), by Triton's own compiler without a GPU, under the Triton of every supported
vLLM release (the fallback runs under the vLLM's): the interpreter tests
(tests/patchset/test_indexer.py) check what they compute, not that they compile. Each must
compile without spilling (the finish needs its register cap for that on sm_120), and the
collecting pass must stay within 128 registers a thread: it is latency-bound per program, so it
relies on many programs an SM."""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the kernel module needs torch")
pytest.importorskip("triton", reason="the kernel module imports triton")

from tests.support.tritons import TRITONS, triton_env  # noqa: E402 (needs triton)

SCRIPT = Path(__file__).resolve().parent / "indexer_compile.py"


def _compile(version: str) -> dict:
    done = subprocess.run(
        [sys.executable, str(SCRIPT)],
        capture_output=True,
        text=True,
        env=triton_env(version),
        timeout=900,
    )
    assert done.returncode == 0, f"Triton {version}: {done.stderr[-4000:]}"
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def compiled() -> dict[str, dict]:
    """Triton version -> its compile report, two versions at a time."""
    with ThreadPoolExecutor(2) as pool:
        reports = list(pool.map(_compile, TRITONS))
    return {report["triton"]: report for report in reports}


@pytest.mark.parametrize("version", TRITONS)
def test_indexer_kernels_compile_without_spills(compiled: dict[str, dict], version: str) -> None:
    for k in compiled[version]["kernels"]:
        where = f"{k['kernel']} on sm_{k['arch']} under Triton {version}"
        assert k["stack"] == 0, f"{where} spills: {k['stack']} B of stack"
        if k["kernel"] == "_topk_collect_kernel":
            assert k["regs"] <= 128, f"{where}: {k['regs']} registers, few programs an SM"
