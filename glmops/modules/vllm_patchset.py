"""vllm_patchset: the GLM-5 sparse MLA patch set, applied to (or removed from) a host's vLLM.

Three steps, so all the thinking happens on the controller: READ the anchor files from the
venv (host helper `vllm_patch`), PLAN with `glmops.gpu.patchset` (layout profile by features, one
FileChange per item, each already-applied or already-upstream item ok with its reason), then
APPLY: the helper writes each file atomically, backs the originals up once and keeps a manifest
(profile, sha256 before/after, template version). `state: absent` restores the originals byte
for byte. An unknown layout fails the task naming the missing anchor, and nothing is written.
"""

from __future__ import annotations

import json
from typing import Any

from glmops.engine.connection import quote
from glmops.engine.context import TaskContext
from glmops.engine.results import Status, TaskResult
from glmops.errors import ModuleError
from glmops.gpu.patchset import (
    ANCHOR_FILES,
    PatchError,
    UnsupportedLayout,
    detect_profile,
    payload,
    plan_patchset,
)
from glmops.modules.base import Arg, Module, Plan, register

HELPER = "vllm_patch"


@register
class VllmPatchset(Module):
    """`vllm_patchset: {venv: /opt/vllm}`; `state: absent` restores vLLM's own files."""

    name = "vllm_patchset"
    changes_facts = True  # the facts report the patch manifest
    args = {
        "venv": Arg(str, required=True, doc="the venv vLLM is installed in"),
        "state": Arg(str, default="present", choices=("present", "absent")),
        "kernel": Arg(
            str,
            default="sparse_mla",
            choices=("sparse_mla", "dense_reuse"),
            doc="backend/'s kernel, or vLLM's dense Triton MLA decode fed a page_size=1 table",
        ),
        "items": Arg(list, doc="only these items (backend, registry, priorities, gguf, ...)"),
        "max_scratch_bytes": Arg(int, doc="bound on the backend's per-launch scratch memory"),
    }

    def _python(self) -> str:
        return f"{self.params['venv'].rstrip('/')}/bin/python"

    def plan(self, ctx: TaskContext) -> Plan:
        read = ctx.run_helper(
            HELPER, {"mode": "read", "files": list(ANCHOR_FILES)}, python=self._python()
        )
        if read.get("failed"):
            raise ModuleError(f"cannot read vLLM in {self.params['venv']}: {read.get('msg')}")
        if self.params["state"] == "absent":
            return self._plan_restore(read)
        try:
            profile = detect_profile(read["files"])
            options = {k: self.params[k] for k in ("kernel", "items", "max_scratch_bytes")}
            changes = plan_patchset(
                profile, read["files"], {k: v for k, v in options.items() if v is not None}
            )
        except (UnsupportedLayout, PatchError) as error:
            raise ModuleError(f"{self.params['venv']}: {error}; nothing was changed") from None
        explain = [f"profile {profile.name}: {profile.description}"] + [
            f"{c.item} {c.path}: {'apply' if c.changed else 'ok'} ({c.reason})" for c in changes
        ]
        pending = [c for c in changes if c.changed]
        if not pending:
            return Plan(
                False,
                f"profile {profile.name}: all {len(changes)} items in place",
                data={"explain": explain, "profile": profile.name},
            )
        diff = "".join(c.diff() for c in pending) if ctx.diff else None
        body = payload(profile, changes, read["site_packages"])
        items = ", ".join(sorted({c.item for c in pending}))
        return Plan(
            True,
            f"would patch {len(pending)} file(s) of vLLM ({profile.name}): {items}",
            diff,
            {"explain": explain, "profile": profile.name, "payload": json.dumps(body).encode()},
        )

    def _plan_restore(self, read: dict[str, Any]) -> Plan:
        manifest = read.get("manifest")
        if not manifest:
            return Plan(False, "vLLM is not patched (no glmops manifest)")
        files = sorted(manifest.get("files") or {})
        return Plan(
            True,
            f"would restore {len(files)} file(s): {', '.join(files)}",
            data={"site_packages": read["site_packages"]},
        )

    def apply(self, ctx: TaskContext, plan: Plan) -> TaskResult:
        if self.params["state"] == "absent":
            reply = ctx.run_helper(
                HELPER,
                {"mode": "restore", "site_packages": plan.data["site_packages"]},
                python=self._python(),
            )
        else:
            staged = ctx.upload_temp(plan.data["payload"])
            try:
                reply = ctx.run_helper(
                    HELPER, {"mode": "apply", "payload_file": staged}, python=self._python()
                )
            finally:
                ctx.run(f"rm -f {quote(staged)}")
        data = {k: v for k, v in reply.items() if k not in ("failed", "changed", "msg")}
        data["explain"] = plan.data.get("explain", [])
        if reply.get("failed"):
            return TaskResult(Status.FAILED, reply.get("msg", "vllm_patch failed"), data=data)
        status = Status.CHANGED if reply.get("changed") else Status.OK
        return TaskResult(status, reply.get("msg", ""), plan.diff, data)
