"""hf_model: a Hugging Face model folder (config.json, safetensors, tokenizer) on the host.

The counterpart of gguf_model for hosts whose vLLM loads a safetensors folder (the CPU build:
its GGUF path needs vllm-gguf-plugin, which pulls the CUDA vLLM). It registers what
vllm_serve_config needs: `serve_path` (the folder) and a `fingerprint` (file names and sizes,
sha256 of the small JSON files), so changed weights restart the server through the deploy's
inputs file. Observes only: it never writes.
"""

from __future__ import annotations

from typing import Any, cast

from glmops.engine.connection import quote
from glmops.engine.context import TaskContext
from glmops.engine.results import TaskResult
from glmops.errors import ModuleError
from glmops.hosthelpers.file_digests import DigestsReply
from glmops.modules.base import Arg, Module, Plan, register


@register
class HfModel(Module):
    """`hf_model: {path: /srv/models/tiny-llama/hf}`."""

    name = "hf_model"
    args = {"path": Arg(str, required=True, doc="folder with config.json and *.safetensors")}

    def plan(self, ctx: TaskContext) -> Plan:
        path = self.params["path"].rstrip("/")
        listing = ctx.run(f"find {quote(path)} -maxdepth 1 -type f -printf '%f %s\\n'")
        if not listing.ok:
            raise ModuleError(f"model folder {path} is missing on the host")
        files = dict(
            (name, int(size))
            for name, _, size in (line.rpartition(" ") for line in listing.stdout.splitlines())
            if name
        )
        missing = [n for n in ("config.json",) if n not in files]
        if not any(n.endswith(".safetensors") for n in files):
            missing.append("*.safetensors")
        if "tokenizer.json" not in files and "tokenizer_config.json" not in files:
            missing.append("tokenizer.json / tokenizer_config.json")
        if missing:
            raise ModuleError(f"model folder {path} lacks {', '.join(missing)}")
        small = sorted(f"{path}/{n}" for n in files if n.endswith(".json"))
        digests = cast(DigestsReply, ctx.run_helper("file_digests", {"paths": small}))["digests"]
        fingerprint: dict[str, Any] = {
            "folder": path,
            "files": sorted([name, size] for name, size in files.items()),
            "json_sha256": {p.rsplit("/", 1)[-1]: d for p, d in digests.items()},
        }
        weights = sum(size for name, size in files.items() if name.endswith(".safetensors"))
        return Plan(
            False,
            f"{path}: {len(files)} files, {weights} bytes of safetensors weights",
            data={"serve_path": path, "fingerprint": fingerprint, "merged": False},
        )

    def apply(self, ctx: TaskContext, plan: Plan) -> TaskResult:  # pragma: no cover
        raise AssertionError("hf_model never plans a change")
