"""Prepare .thirdparty/rendered/ for tests/gpu/test_rendered_backend.py (run here, not on the GPU).

The GPU machine has neither vLLM (nor its dependencies) nor glmops' renderer dependencies, so
everything the test needs from them is produced here, at test-preparation time, and carried:

* the backend file exactly as `glmops patch` would place it on a host, rendered by glmops' own
  renderer (`glmops.gpu.patchset.backend.render_backend`) for each profile and kernel mode, and the
  DSA indexer logits fallback (`glmops.gpu.patchset.indexer.render_fallback`, profile v0_16) for
  tests/gpu/test_indexer_fallback.py;
* from the real vLLM wheels on PyPI (tests/support/vllm_wheels.py, cached in ~/.cache/glmops), the
  code the rendered forward path calls, copied byte for byte:
    - 0.16.0: `_convert_req_index_to_global_index_kernel` and
      `triton_convert_req_index_to_global_index` (flashmla_sparse.py, extracted as source
      segments), and the whole `vllm/v1/attention/ops/triton_decode_attention.py`; for
      benchmarks/indexer_fallback/bench.py, vLLM's own torch indexer references
      `fp8_mqa_logits_torch` and `fp8_paged_mqa_logits_torch` (rocm_aiter_mla_sparse.py);
    - 0.33.0: the whole `vllm/v1/attention/backends/mla/sparse_utils.py` (`flat_kv_row_view`
      and `triton_convert_req_index_to_global_index` with its remap kernel), the whole
      `triton_decode_attention.py`, and from the JIT-warmup helpers the launch glue that the
      conversion goes through (`kernel_launcher`, `_LaunchBindingPlan`,
      `_launch_binding_plan`, `triton_scalar_specialization_rep`, as source segments).

Nothing here is committed (.thirdparty/ is git-ignored; vLLM's code never enters the repo).
A manifest records where each file came from and its sha256.

    python3 -m tests.gpu.prepare_rendered [--out .thirdparty/rendered]   (at the repo root)
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import shutil
from pathlib import Path

from glmops.gpu.patchset.backend import KERNELS, render_backend
from glmops.gpu.patchset.common import TEMPLATE_VERSION
from glmops.gpu.patchset.indexer import render_fallback
from glmops.gpu.patchset.profiles import PROFILES, profile_by_name
from tests.support import vllm_wheels

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / ".thirdparty" / "rendered"
PROFILE_VLLM = {"v0_16": "0.16.0", "v0_33": "0.33.0"}
DECODE = "vllm/v1/attention/ops/triton_decode_attention.py"
FLASHMLA_SPARSE = "vllm/v1/attention/backends/mla/flashmla_sparse.py"
SPARSE_UTILS = "vllm/v1/attention/backends/mla/sparse_utils.py"
AITER_SPARSE = "vllm/v1/attention/ops/rocm_aiter_mla_sparse.py"
JIT_WARMUP = "vllm/model_executor/warmup/jit_warmup.py"
JIT_TRITON = "vllm/model_executor/warmup/jit_warmup_triton_helper.py"


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def segments(source: str, names: list[str]) -> str:
    """Top-level definitions `names` of `source`, decorators included, byte for byte."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in names:
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            found[node.name] = "".join(lines[first - 1 : node.end_lineno])
    missing = [n for n in names if n not in found]
    if missing:
        raise SystemExit(f"not found in vLLM source: {missing}")
    return "\n\n".join(found[n] for n in names)


def extracted_file(header: str, origin: str, version: str, source: str, names: list[str]) -> str:
    return (
        f"# Extracted by tests/gpu/prepare_rendered.py from vLLM {version} (PyPI wheel),\n"
        f"# {origin}: {', '.join(names)} (verbatim source segments). Not committed.\n"
        f"{header}\n\n" + segments(source, names) + "\n"
    )


def prepare(out: Path) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    manifest: dict = {"template_version": TEMPLATE_VERSION, "rendered": {}, "vllm": {}}

    for profile in PROFILES:
        for kernel in KERNELS:
            text = render_backend(profile, {"kernel": kernel})
            rel = f"{profile.name}-{kernel}/triton_mla_sparse.py"
            (out / rel).parent.mkdir(parents=True)
            (out / rel).write_text(text)
            manifest["rendered"][f"{profile.name}/{kernel}"] = {"file": rel, "sha256": _sha(text)}
    fallback = render_fallback(profile_by_name("v0_16"), {})
    rel = "v0_16-indexer/glmops_dsa_indexer.py"
    (out / rel).parent.mkdir(parents=True)
    (out / rel).write_text(fallback)
    manifest["rendered"]["v0_16/indexer_fallback"] = {"file": rel, "sha256": _sha(fallback)}

    for profile_name, version in PROFILE_VLLM.items():
        src = vllm_wheels.fetch_vllm_source(version)
        dest = out / f"vllm-{version}"
        dest.mkdir()
        files: dict[str, dict] = {}

        def put(
            name: str,
            text: str,
            origin: str,
            dest: Path = dest,
            files: dict = files,
            src: Path = src,
        ) -> None:
            (dest / name).write_text(text)
            files[name] = {
                "origin": origin,
                "origin_sha256": hashlib.sha256((src / origin).read_bytes()).hexdigest(),
                "sha256": _sha(text),
            }

        decode = (src / DECODE).read_text()
        put("triton_decode_attention.py", decode, DECODE)
        if profile_name == "v0_16":
            names = [
                "_convert_req_index_to_global_index_kernel",
                "triton_convert_req_index_to_global_index",
            ]
            header = "import torch\n\nfrom vllm.triton_utils import tl, triton"
            text = extracted_file(
                header, FLASHMLA_SPARSE, version, (src / FLASHMLA_SPARSE).read_text(), names
            )
            put("flashmla_sparse_convert.py", text, FLASHMLA_SPARSE)
            names = ["fp8_mqa_logits_torch", "fp8_paged_mqa_logits_torch"]
            header = "import torch\n\nfrom vllm.platforms import current_platform"
            text = extracted_file(
                header, AITER_SPARSE, version, (src / AITER_SPARSE).read_text(), names
            )
            put("indexer_torch_refs.py", text, AITER_SPARSE)
        else:
            put("sparse_utils.py", (src / SPARSE_UTILS).read_text(), SPARSE_UTILS)
            launcher = extracted_file(
                "import inspect\nfrom collections.abc import Callable\nfrom functools import wraps"
                "\nfrom typing import Any",
                JIT_WARMUP,
                version,
                (src / JIT_WARMUP).read_text(),
                ["kernel_launcher"],
            )
            put("jit_warmup_launcher.py", launcher, JIT_WARMUP)
            binding = extracted_file(
                "from dataclasses import dataclass\nfrom functools import cache",
                JIT_TRITON,
                version,
                (src / JIT_TRITON).read_text(),
                ["_LaunchBindingPlan", "_launch_binding_plan", "triton_scalar_specialization_rep"],
            )
            put("jit_warmup_binding.py", binding, JIT_TRITON)
        manifest["vllm"][profile_name] = {"version": version, "dir": dest.name, "files": files}

    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    manifest = prepare(args.out)
    print(json.dumps(manifest, indent=2))


if __name__ == "__main__":
    main()
