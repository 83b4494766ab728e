"""secret_template: a template whose output holds secrets (an EnvironmentFile with an API key).

Unlike `template`, it never reads the file on the host (the engine logs command output, and an
old key would land in the run log), keeps no backup copy of it, defaults to mode 0600, and its
diff shows only the wanted content with every secret masked.
"""

from __future__ import annotations

import hashlib

from glmops.engine.connection import quote
from glmops.engine.context import TaskContext
from glmops.engine.results import Status, TaskResult
from glmops.errors import ModuleError
from glmops.modules.base import Arg, Module, Plan, mode_arg, register
from glmops.modules.copy import Template
from glmops.modules.file import _attribute_fixes


@register
class SecretTemplate(Module):
    """`secret_template: {src: systemd/vllm.env.j2, dest: /etc/glmops/vllm-glm5.env}`."""

    name = "secret_template"
    args = {
        "src": Arg(str, required=True),
        "dest": Arg(str, required=True),
        "mode": mode_arg("0600"),
        "owner": Arg(str, default="root"),
        "group": Arg(str, default="root"),
    }

    def plan(self, ctx: TaskContext) -> Plan:
        wanted = Template({**self.params, "content": None}).content(ctx)
        dest = self.params["dest"]
        sha = hashlib.sha256(wanted).hexdigest()
        current = ctx.stat(dest)
        data = {"content": wanted}
        if current is not None and current.kind != "file":
            raise ModuleError(f"{dest} is a {current.kind}, not a file")
        if current is None or current.sha256 != sha:
            what = "create" if current is None else "update"
            return Plan(
                True,
                f"would {what} {dest} (content not shown: secrets)",
                self._diff(ctx, wanted, current is None),
                data,
            )
        fixes = _attribute_fixes(ctx, current, self.params)
        if fixes:
            return Plan(True, f"would set {', '.join(fixes)} on {dest}", data=data)
        return Plan(False, f"{dest} has the wanted content (sha256 compared), mode and owner")

    def apply(self, ctx: TaskContext, plan: Plan) -> TaskResult:
        dest = self.params["dest"]
        folder = dest.rsplit("/", 1)[0] or "/"
        ctx.run(f"mkdir -p -m 0755 {quote(folder)}", check=True, what="create env folder")
        ctx.write_file(
            dest,
            plan.data["content"],
            mode=self.params["mode"],
            owner=self.params["owner"],
            group=self.params["group"],
            backup=False,  # a backup would be one more copy of the secret on disk
        )
        return TaskResult(
            Status.CHANGED, plan.reason.removeprefix("would "), plan.diff, {"dest": dest}
        )

    def _diff(self, ctx: TaskContext, wanted: bytes, new: bool) -> str | None:
        if not ctx.diff:
            return None
        dest = self.params["dest"]
        old = "/dev/null" if new else f"{dest} (on host; not read: it holds secrets)"
        body = "".join(f"+{line}\n" for line in ctx.masker.mask(wanted.decode()).splitlines())
        return f"--- {old}\n+++ {dest} (wanted, secrets masked)\n{body}"
