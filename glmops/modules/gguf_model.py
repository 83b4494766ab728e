"""gguf_model: the GGUF split set validated, merged when vLLM needs one file, and verified.

Wraps the host helper gguf_split (validate / merge / verify) with plan/apply semantics: check
mode validates and says whether a merge would happen (and that the disk has room), never
writes; a merged file that matches its inputs (sidecar fingerprint) is kept in seconds.
With remove_shards, the shards go once the merged file's sha256 equals the merge recomputed
from them; later runs accept the missing shards while the merged file matches that record.
"""

from __future__ import annotations

import os
from typing import Any, cast

from glmops.engine.context import TaskContext
from glmops.engine.results import Status, TaskResult
from glmops.errors import ModuleError
from glmops.gpu.serving import ServeError, needs_single_file
from glmops.hosthelpers.gguf_split import (
    MergedOnlyReply,
    MergeReply,
    RemoveReply,
    ValidateReply,
    VerifyReply,
)
from glmops.modules.base import Arg, Module, Plan, register


@register
class GgufModel(Module):
    """`gguf_model: {shards: /models/GLM-5/UD-Q4_K_XL}` (first shard or its directory)."""

    name = "gguf_model"
    args = {
        "shards": Arg(str, required=True, doc="the first shard (-00001-of-000NN.gguf) or its dir"),
        "single_file": Arg(
            bool, doc="merge into one file (default: what the host's vLLM profile needs)"
        ),
        "output": Arg(str, doc="merged file (default: <shard prefix>.gguf beside the shards)"),
        "sha256": Arg(bool, default=False, doc="also hash all tensor data when verifying"),
        "timeout": Arg((int, float), default=6 * 3600, doc="seconds the merge may take"),
        "vllm_profile": Arg(str, doc="vLLM layout name (default: the patch manifest's)"),
        "remove_shards": Arg(
            bool, default=False, doc="remove the shards after a merge verified by sha256"
        ),
    }

    def plan(self, ctx: TaskContext) -> Plan:
        checked = validate(ctx, self.params["shards"])
        if checked.get("failed"):  # the shards may have been removed after a verified merge
            kept = self._merged_only(ctx)
            if kept:
                return kept
        if checked.get("failed"):
            errors = checked.get("errors") or [checked.get("msg")]
            raise ModuleError(
                f"GGUF split set {self.params['shards']} is invalid: " + "; ".join(map(str, errors))
            )
        first = checked["first_shard"]
        single, why = self._single_file(ctx)
        data: dict[str, Any] = {
            "first_shard": first,
            "shards": [s["name"] for s in checked["shards"]],
            "shard_count": len(checked["shards"]),
            "tensor_count": checked["tensor_count"],
            "single_file": single,
            "single_file_why": why,
        }
        if not single:
            data.update(serve_path=first, merged=False, fingerprint=_fingerprint(checked))
            return Plan(
                False,
                f"{checked['msg']} valid; no merge: {why}",
                data=data,
            )
        output = self.params["output"] or _default_output(first)
        data.update(output=output, serve_path=output, merged=True)
        merge = cast(
            MergeReply,
            ctx.run_helper(
                "gguf_split", {"mode": "merge", "path": first, "output": output, "check": True}
            ),
        )
        if merge.get("failed"):
            raise ModuleError(f"cannot merge into {output}: {merge.get('msg')}")
        data["fingerprint"] = {"output": output, "size": merge.get("size")}
        data["merge"] = bool(merge.get("changed"))
        removal = self._removal(ctx, first, output, data["merge"])
        data["remove_shards"] = bool(removal)
        if not data["merge"]:
            if removal:
                return Plan(True, f"{merge.get('msg')}; {removal}", data=data)
            return Plan(False, f"{merge.get('msg')}; merge skipped ({why})", data=data)
        diff = (
            f"merge {len(checked['shards'])} shards ({checked['tensor_count']} tensors) of\n"
            f"  {first}\ninto\n  {output} ({merge.get('size')} bytes; "
            f"{merge.get('free_bytes')} bytes free; replaces {merge.get('replaces_bytes', 0)})\n"
            f"because {why}\n" + (f"then {removal}\n" if removal else "")
        )
        return Plan(True, merge.get("msg", "would merge"), diff if ctx.diff else None, data)

    def _merged_only(self, ctx: TaskContext) -> Plan | None:
        """The shards were removed after a verified merge: the merged file, if it still holds."""
        request = {
            "mode": "merged_only",
            "path": self.params["shards"],
            "output": self.params["output"],
            "sha256": self.params["sha256"],
        }
        kept = cast(
            MergedOnlyReply,
            ctx.run_helper("gguf_split", request, timeout=float(self.params["timeout"])),
        )
        if kept.get("failed"):
            if "changed since its verified merge" in kept["msg"]:
                raise ModuleError(kept["msg"])
            return None
        output = kept["output"]
        data = {
            "first_shard": None,
            "shards": kept["shards"],
            "shard_count": len(kept["shards"]),
            "tensor_count": kept["tensor_count"],
            "single_file": True,
            "single_file_why": "its shards were removed after a verified merge",
            "output": output,
            "serve_path": output,
            "merged": True,
            "fingerprint": {"output": output, "size": kept["size"]},
        }
        return Plan(False, f"{kept['msg']}; nothing to merge", data=data)

    def _removal(self, ctx: TaskContext, first: str, output: str, merge: bool) -> str | None:
        """What removing the shards would do (None: not asked, or nothing left to remove)."""
        if not self.params["remove_shards"]:
            return None
        if merge:
            return "remove the shards once the merged file's sha256 is verified"
        request = {"mode": "remove_shards", "path": first, "output": output, "check": True}
        would = cast(RemoveReply, ctx.run_helper("gguf_split", request))
        if would.get("failed"):
            raise ModuleError(f"cannot remove the shards of {first}: {would['msg']}")
        return would["msg"] if would.get("changed") else None

    def apply(self, ctx: TaskContext, plan: Plan) -> TaskResult:
        data = dict(plan.data)
        if not data["merge"]:
            return self._remove(ctx, data, None)
        output = data["output"]
        merged = cast(
            MergeReply,
            ctx.run_helper(
                "gguf_split",
                {"mode": "merge", "path": data["first_shard"], "output": output},
                timeout=float(self.params["timeout"]),
            ),
        )
        if merged.get("failed"):
            errors = "; ".join(map(str, merged.get("errors") or []))
            return TaskResult(Status.FAILED, f"{merged.get('msg')} {errors}".strip(), data=data)
        request = {
            "mode": "verify",
            "path": output,
            "expect_tensor_count": data["tensor_count"],
            "sha256": self.params["sha256"],
        }
        verified = cast(
            VerifyReply,
            ctx.run_helper("gguf_split", request, timeout=float(self.params["timeout"])),
        )
        data.update(
            verify=verified.get("msg"),
            content_sha256=verified.get("content_sha256"),
            elapsed_s=merged.get("elapsed_s"),
            copy_mode=merged.get("copy_mode"),
        )
        if verified.get("failed"):
            return TaskResult(
                Status.FAILED,
                f"merged {output} but it failed verification: {verified['msg']}",
                data=data,
            )
        size = merged.get("size") or 0
        seconds = merged.get("elapsed_s") or 0
        rate = f", {size / seconds / 1e6:.0f} MB/s" if seconds else ""
        data["fingerprint"] = {"output": output, "size": size}
        msg = (
            f"{merged['msg']} in {seconds} s{rate} ({merged.get('copy_mode')}); "
            f"verified: {verified['msg']}"
        )
        return self._remove(ctx, data, TaskResult(Status.CHANGED, msg, plan.diff, data))

    def _remove(
        self, ctx: TaskContext, data: dict[str, Any], merged: TaskResult | None
    ) -> TaskResult:
        """The shards removed after the sha256 check (when asked); the merge's result first."""
        if not data.get("remove_shards"):
            assert merged is not None
            return merged
        args = {"mode": "remove_shards", "path": data["first_shard"], "output": data["output"]}
        removed = cast(
            RemoveReply, ctx.run_helper("gguf_split", args, timeout=float(self.params["timeout"]))
        )
        before = f"{merged.msg}; " if merged else ""
        diff = merged.diff if merged else None
        if removed.get("failed"):
            return TaskResult(Status.FAILED, f"{before}shards kept: {removed['msg']}", diff, data)
        return TaskResult(Status.CHANGED, before + removed["msg"], diff, data)

    def _single_file(self, ctx: TaskContext) -> tuple[bool, str]:
        if self.params["single_file"] is not None:
            return bool(self.params["single_file"]), "task argument single_file"
        try:
            return needs_single_file(ctx.facts, {"vllm_profile": self.params["vllm_profile"]})
        except ServeError as error:
            raise ModuleError(str(error)) from None


def _default_output(first: str) -> str:
    """GLM-5-UD-Q4_K_XL-00001-of-00010.gguf -> GLM-5-UD-Q4_K_XL.gguf in the same folder."""
    folder, name = os.path.split(first)
    stem = name.rsplit("-", 3)[0] if name.count("-of-") else name.removesuffix(".gguf")
    return os.path.join(folder, f"{stem}.gguf")


def validate(ctx: TaskContext, shards: str) -> ValidateReply:
    """gguf_split's verdict on the split set (the first shard or its folder), read through its
    schema (deploy_status asks the same)."""
    request = {"mode": "validate", "path": shards}
    return cast(ValidateReply, ctx.run_helper("gguf_split", request))


def _fingerprint(checked: ValidateReply) -> dict[str, Any]:
    """What identifies the shards vLLM will read (for restart-on-change)."""
    return {"shards": [[s["name"], s["size"]] for s in checked.get("shards", [])]}
