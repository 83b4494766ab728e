"""model_manifest: the host's model files against the manifest the controller holds, unhashed.

A rolling redeploy's preflight must not read 400 GB per host, so this checks what is cheap and
still honest: every file of the controller's manifest (`glmops model` wrote it) is on the host
with the manifest's size, and unchanged (size and mtime) since the host's state file recorded
its sha256 verification against this same manifest. A shard held by its verified merge counts
as present, as in the model phase. Anything else (missing, another size, another manifest,
touched since its verification) fails, naming the host and the files. Observes only.
"""

from __future__ import annotations

from glmops.engine.context import TaskContext
from glmops.engine.results import TaskResult
from glmops.errors import ModuleError
from glmops.model import held
from glmops.model.source import model_dir
from glmops.modules.base import Arg, Module, Plan, register


@register
class ModelManifest(Module):
    """`model_manifest: {source: "{{ model_source }}"}`: the host's model files match the
    manifest `glmops model` keeps on the controller (present, same size, unchanged since
    verified; nothing hashed)."""

    name = "model_manifest"
    args = {
        "source": Arg(dict, required=True, doc="the inventory's model_source"),
        "model_dir": Arg(str, doc="the host's model folder (default: glmops model's)"),
    }

    def plan(self, ctx: TaskContext) -> Plan:
        p = self.params
        variables = {"model_source": p["source"], "model_dir": p["model_dir"]}
        manifest = held.cached_manifest(ctx.host.name, variables)
        if isinstance(manifest, str):
            raise ModuleError(manifest)
        root = model_dir(variables)
        reply = held.stat(ctx, manifest, variables)
        found = held.findings(reply)
        if found:
            other = reply.get("verified_digest")
            last = (
                f"; the host last verified manifest {other[:12]}"
                if other and other != manifest.digest
                else ""
            )
            raise ModuleError(
                f"{ctx.host.name}: model files in {root} do not match the controller's manifest "
                f"{manifest.digest[:12]}{last}: {found}"
            )
        return Plan(
            False,
            f"{len(manifest.files)} files in {root} as verified against manifest "
            f"{manifest.digest[:12]} (sizes and mtimes; nothing hashed)",
        )

    def apply(self, ctx: TaskContext, plan: Plan) -> TaskResult:  # pragma: no cover
        raise AssertionError("model_manifest never plans a change")
