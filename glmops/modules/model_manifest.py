"""model_manifest: the host's model files against the manifest the controller holds, unhashed.

A rolling redeploy's preflight must not read 400 GB per host, so this checks what is cheap and
still honest: every file of the controller's manifest (`glmops model` wrote it) is on the host
with the manifest's size, and unchanged (size and mtime) since the host's state file recorded
its sha256 verification against this same manifest. A shard held by its verified merge counts
as present, as in the model phase. Anything else (missing, another size, another manifest,
touched since its verification) fails, naming the host and the files. Observes only.
"""

from __future__ import annotations

from glmops.context import TaskContext
from glmops.errors import ModuleError
from glmops.model.fetch import ModelCache, default_cache_root
from glmops.model.manifest import load_manifest
from glmops.model.source import model_dir, parse_source
from glmops.modules.base import Arg, Module, Plan, register
from glmops.results import TaskResult

SHOWN = 5  # files named in a failure; the rest are counted


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
        source = parse_source(p["source"], f"host '{ctx.host.name}'")
        cache = ModelCache(default_cache_root(), source)  # where `glmops model` keeps it
        if not cache.manifest_path.is_file():
            raise ModuleError(
                f"no model manifest on the controller at {cache.manifest_path}: "
                "run `glmops model` first"
            )
        manifest = load_manifest(cache.manifest_path)
        root = model_dir({"model_dir": p["model_dir"]})
        reply = ctx.run_helper("model_files", manifest.stat_request(root))
        problems = reply["problems"]
        if problems:
            listed = "; ".join(f"{path}: {why}" for path, why in problems[:SHOWN])
            more = f" (and {len(problems) - SHOWN} more)" if len(problems) > SHOWN else ""
            other = reply.get("verified_digest")
            last = (
                f"; the host last verified manifest {other[:12]}"
                if other and other != manifest.digest
                else ""
            )
            raise ModuleError(
                f"{ctx.host.name}: model files in {root} do not match the controller's manifest "
                f"{manifest.digest[:12]}{last}: {listed}{more}"
            )
        return Plan(
            False,
            f"{len(manifest.files)} files in {root} as verified against manifest "
            f"{manifest.digest[:12]} (sizes and mtimes; nothing hashed)",
        )

    def apply(self, ctx: TaskContext, plan: Plan) -> TaskResult:  # pragma: no cover
        raise AssertionError("model_manifest never plans a change")
