"""vllm_serve_config: decide the `vllm serve` flags and unit settings for this host (observes).

Registers what the unit and environment templates render (`serve.exec_start`, `serve.env`,
`serve.unit_path`, ...), the reason for each derived flag, and `serve.inputs_json`: what the
running server depends on beyond its unit file (patch manifest, model files, vLLM version), so a
change there can restart it through a handler too.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from glmops.engine.connection import quote
from glmops.engine.context import TaskContext
from glmops.engine.results import TaskResult
from glmops.errors import ModuleError
from glmops.gpu.serving import ServeError, gguf_loader_problem, serve_flags
from glmops.gpu.serving.flags import INPUTS, default_bind_address, exposure_warning
from glmops.modules.base import Arg, Module, Plan, register

#: Inputs without which no unit can be written.
REQUIRED = ("vllm_venv", "glm5_hf_config_dir")


@register
class VllmServeConfig(Module):
    """`vllm_serve_config: {model: "{{ model.serve_path }}", vllm_venv: ..., ...}`.

    Reads only its arguments (the serving inputs, each declared with its default) and the
    host's facts; playbooks/deploy.yml passes the inventory's values explicitly.
    """

    name = "vllm_serve_config"
    args = {
        "model": Arg(str, required=True, doc="the file vLLM loads (merged file or first shard)"),
        "model_fingerprint": Arg(dict, default={}, doc="identifies the model files' content"),
        "require_files": Arg(bool, default=True, doc="fail when venv or HF config is missing"),
        **{
            name: Arg(spec.types, required=name in REQUIRED, default=spec.default, doc=spec.doc)
            for name, spec in INPUTS.items()
        },
        "vllm_api_key": Arg(str, doc="secret; only checked here, written by the env template"),
        "fleet_replica": Arg(
            dict,
            doc="this host's replica: its address there is vLLM's default bind",
            var="fleet_replica",
        ),
    }

    def plan(self, ctx: TaskContext) -> Plan:
        facts = ctx.facts
        inputs = {name: self.params[name] for name in INPUTS}
        inputs["vllm_host"] = inputs["vllm_host"] or default_bind_address(
            self.bound_params(ctx)["fleet_replica"],
            ctx.host.name,
            ctx.host.connection.address,
            local=ctx.host.connection.connection == "local",
        )
        key = self.params["vllm_api_key"]
        try:
            config = serve_flags(facts, {**inputs, "vllm_model": self.params["model"]})
        except ServeError as error:
            raise ModuleError(str(error)) from None
        data = config.as_data()
        if key is not None and (not isinstance(key, str) or any(c in key for c in '"\\\n\r$`')):
            raise ModuleError(
                "vllm_api_key must be text without quotes, backslashes, $, ` or newlines"
            )
        data["api_key_set"] = bool(key)
        data["exposure_warning"] = exposure_warning(str(data["vllm_host"]), bool(key))
        if self.params["require_files"]:
            self._require(ctx, data)
            if str(self.params["model"]).endswith(".gguf"):
                problem = gguf_loader_problem(facts, inputs)
                if problem:
                    raise ModuleError(f"cannot serve: {problem}")
        manifest = facts.patch_manifest
        started_with = {
            "vllm_version": facts.venv.vllm_version if facts.venv else None,
            "profile": config.profile,
            "patch_manifest_sha256": (
                hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()
                if manifest
                else None
            ),
            "model": self.params["model"],
            "model_fingerprint": self.params["model_fingerprint"],
        }
        data["inputs"] = started_with
        data["inputs_json"] = json.dumps(started_with, indent=1, sort_keys=True) + "\n"
        why = "; ".join(f"{flag} ({reason})" for flag, reason in config.reasons.items())
        warn = f"; warnings: {'; '.join(config.warnings)}" if config.warnings else ""
        return Plan(
            False,
            f"decided only (writes nothing): TP {config.tensor_parallel}, dtype "
            f"{config.dtype or 'auto'}, expect backend "
            f"{'/'.join(config.expectation.names) or '?'}; because {why}{warn}",
            data=data,
        )

    def apply(self, ctx: TaskContext, plan: Plan) -> TaskResult:  # pragma: no cover
        raise AssertionError("vllm_serve_config never plans a change")

    @staticmethod
    def _require(ctx: TaskContext, data: dict[str, Any]) -> None:
        config = data["glm5_hf_config_dir"]
        tokenizer = data["glm5_tokenizer"]
        checks = {
            f"{data['vllm_venv']}/bin/vllm": "the venv's vllm (run `glmops provision`)",
            f"{config}/config.json": "GLM-5's HF config (glm5_hf_config_dir)",
        }
        missing = [
            f"{path}: {what}"
            for path, what in checks.items()
            if not ctx.run(f"test -e {quote(path)}").ok
        ]
        probe = ctx.run(
            f"ls {quote(tokenizer)}/tokenizer.json {quote(tokenizer)}/tokenizer_config.json"
            " 2>/dev/null | head -1"
        )
        if not probe.stdout.strip():
            missing.append(f"{tokenizer}: no tokenizer.json / tokenizer_config.json")
        if missing:
            raise ModuleError("cannot serve: missing " + "; ".join(missing))
