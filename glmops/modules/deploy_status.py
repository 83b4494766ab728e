"""deploy_status: observe what `glmops deploy` put on a host (for `glmops status`; read-only).

Collects the unit's state and its ExecStart line, /health, the backend in the journal, the
model files (shards valid, merged file current), the patch files against their manifest, the
last deploy record and the inputs the server was started with. Never changes anything, so it
runs under --check too.
"""

from __future__ import annotations

import json
import os
import shlex
from typing import Any, cast

from glmops.engine.connection import quote
from glmops.engine.context import TaskContext
from glmops.engine.notifications import PENDING_FILE, pending_names
from glmops.engine.results import TaskResult
from glmops.fleet.gang import record_path
from glmops.gpu.serving.flags import INPUTS, listening_address, serving_device
from glmops.gpu.serving.journal import STATUS_GREP, parse_backend, parse_kernel
from glmops.gpu.serving.patches import manifest_files
from glmops.hosthelpers.file_digests import DigestsReply
from glmops.hosthelpers.gguf_split import MergeReply
from glmops.hosthelpers.vllm_patch import Manifest
from glmops.hosthelpers.vllm_probe import ProbeReply
from glmops.modules.base import Arg, Module, Plan, register
from glmops.modules.gguf_model import _default_output, validate


def _deployed(name: str) -> Arg:
    """An input deploy.yml serves with: unset, the host variable of the same name (what
    `glmops status` relies on), then glmops' serving default."""
    spec = INPUTS[name]
    return Arg(spec.types, default=spec.default, doc=spec.doc, var=name)


@register
class DeployStatus(Module):
    """`deploy_status: {}`: what deploy put on the host, observed without changing it.

    Each input left unset comes from the host variable of the same name, as deploy.yml passes
    them.
    """

    name = "deploy_status"
    args = {
        "health": Arg(bool, default=True, doc="ask /health"),
        **{
            name: _deployed(name)
            for name in ("vllm_unit", "vllm_port", "deploy_state_dir", "vllm_device")
        },
        "vllm_package": _deployed("vllm_package"),
        "vllm_model_dir": Arg(
            str, doc="a safetensors folder served instead of GGUF", var="vllm_model_dir"
        ),
        "gguf_shards": Arg(str, doc="the first GGUF shard or its folder", var="gguf_shards"),
        "gguf_merged_path": Arg(
            str, doc="merged file (default: <shard prefix>.gguf)", var="gguf_merged_path"
        ),
        "fleet_replica": Arg(
            dict,
            doc="this host's replica (the inventory sets it); a gang has 2+ members",
            var="fleet_replica",
        ),
    }

    def plan(self, ctx: TaskContext) -> Plan:
        v = self.bound_params(ctx)
        unit = str(v["vllm_unit"])
        facts = ctx.facts
        out: dict[str, Any] = {"unit_name": unit}
        unit_text = (ctx.read(f"/etc/systemd/system/{unit}.service") or b"").decode()
        out["exec_start"] = next(
            (
                line[len("ExecStart=") :]
                for line in unit_text.splitlines()
                if line.startswith("ExecStart=")
            ),
            None,
        )
        probe: ProbeReply = ctx.run_helper(  # type: ignore[assignment]  # its reply schema
            "vllm_probe",
            {
                "unit": unit,
                "address": _bound_address(out["exec_start"]),
                "port": int(v["vllm_port"]),
                "http": self.params["health"],
                "models": False,
                "journal_grep": STATUS_GREP,
            },
            timeout=120,
        )
        out["unit"] = probe.get("unit", {})
        out["health"] = probe.get("health", {}).get("status")
        out["health_error"] = probe.get("health", {}).get("error")
        selection = parse_backend(probe.get("journal_matches") or [])
        out["backend"] = selection.backend
        out["backend_failed"] = selection.reasons if selection.failed else None
        out["backend_kernel"] = parse_kernel(probe.get("journal_matches") or [])
        state_dir = str(v["deploy_state_dir"])
        out["last_deploy"] = _json(ctx.read(f"{state_dir}/{unit}.last-deploy.json"))
        out["inputs"] = _json(ctx.read(f"{state_dir}/{unit}.inputs.json"))
        out["pending_handlers"] = pending_names(ctx.read(f"{ctx.state_dir}/{PENDING_FILE}"))
        if len((v.get("fleet_replica") or {}).get("members") or ()) > 1:
            out["gang_record"] = _json(ctx.read(record_path(state_dir, unit)))
        if not selection.found and serving_device(v)[0] == "cpu":
            # vLLM's CPU platform logs no selection; the deploy asked its selector and recorded it.
            out["backend"] = (out["last_deploy"] or {}).get("backend")
            out["backend_source"] = "recorded by the last deploy (vLLM's selector)"
        out["model"] = self._model(ctx, v)
        base = facts.venv.vllm_path if facts.venv else None
        patched = cast("Manifest | None", facts.patch_manifest)  # the vllm_patch helper's
        wanted = manifest_files(patched, os.path.dirname(base) if base else None)
        out["patch_expected"] = wanted
        digests = (
            cast(DigestsReply, ctx.run_helper("file_digests", {"paths": sorted(wanted)}))
            if wanted
            else None
        )
        out["patch_on_disk"] = digests["digests"] if digests else {}
        return Plan(False, "observed only", data=out)

    def apply(self, ctx: TaskContext, plan: Plan) -> TaskResult:  # pragma: no cover
        raise AssertionError("deploy_status never plans a change")

    @staticmethod
    def _model(ctx: TaskContext, v: dict[str, Any]) -> dict[str, Any]:
        folder = v["vllm_model_dir"]
        if folder:  # a safetensors folder (hf_model in deploy.yml), e.g. on CPU hosts
            ok = ctx.run(
                f"test -f {quote(str(folder))}/config.json && "
                f"ls {quote(str(folder))}/*.safetensors >/dev/null 2>&1"
            ).ok
            return {
                "state": "folder",
                "folder": str(folder),
                "ok": ok,
                "why": None if ok else f"{folder}: config.json or *.safetensors missing",
            }
        shards = v["gguf_shards"]
        if not shards:
            return {"state": "unknown", "why": "gguf_shards not set in the inventory"}
        checked = validate(ctx, str(shards))
        if checked.get("failed"):
            return {"state": "invalid", "why": checked.get("msg"), "shards_ok": False}
        first = checked["first_shard"]
        merged = v["gguf_merged_path"] or _default_output(first)
        model: dict[str, Any] = {
            "shards": len(checked["shards"]),
            "shards_ok": True,
            "first_shard": first,
            "merged_path": merged,
        }
        request = {
            "mode": "merge",
            "path": first,
            "output": merged,
            "check": True,
            "free_margin_bytes": 0,
        }
        current = cast(MergeReply, ctx.run_helper("gguf_split", request))
        if current.get("skipped"):
            model.update(merged=True, verified=True, why=current.get("msg"))
        else:
            exists = ctx.run(f"test -f {quote(merged)}").ok
            model.update(
                merged=exists,
                verified=False,
                why="merged file does not match the shards" if exists else "not merged",
            )
        return model


def _json(data: bytes | None) -> Any:
    if not data:
        return None
    try:
        return json.loads(data)
    except ValueError:
        return None


def _bound_address(exec_start: str | None) -> str:
    """The address the unit's vLLM listens on (its --host word), where the probe asks it."""
    try:
        return listening_address(shlex.split(exec_start or ""))
    except ValueError:  # unbalanced quotes: not a unit glmops wrote
        return listening_address([])
