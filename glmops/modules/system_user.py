"""system_user: a system account (no login shell) for a service, with its home folder."""

from __future__ import annotations

from glmops.engine.connection import quote
from glmops.engine.context import TaskContext
from glmops.engine.results import Status, TaskResult
from glmops.modules.base import Arg, Module, Plan, register


@register
class SystemUser(Module):
    """`system_user: {name: vllm, home: /var/lib/vllm}`; existing accounts are left as they are."""

    name = "system_user"
    free_form = "name"
    args = {
        "name": Arg(str, required=True),
        "home": Arg(str, doc="home folder, created if missing (default /var/lib/<name>)"),
        "groups": Arg(list, default=[], doc="extra groups that exist on the host (e.g. video)"),
    }

    def plan(self, ctx: TaskContext) -> Plan:
        name = self.params["name"]
        home = self.params["home"] or f"/var/lib/{name}"
        entry = ctx.run(f"getent passwd {quote(name)}")
        if not entry.ok:
            return Plan(True, f"would create system user {name} (home {home})", data={"new": True})
        missing = self._missing_groups(ctx, name)
        if missing:
            return Plan(True, f"would add {name} to {', '.join(missing)}", data={"groups": missing})
        return Plan(False, f"user {name} exists ({entry.stdout.strip().split(':')[5]})")

    def apply(self, ctx: TaskContext, plan: Plan) -> TaskResult:
        name = self.params["name"]
        home = self.params["home"] or f"/var/lib/{name}"
        if plan.data.get("new"):
            ctx.run(
                f"useradd --system --user-group --create-home --home-dir {quote(home)} "
                f"--shell /usr/sbin/nologin {quote(name)}",
                check=True,
                what=f"create user {name}",
            )
        groups = self._missing_groups(ctx, name)
        if groups:
            ctx.run(
                f"usermod -aG {quote(','.join(groups))} {quote(name)}",
                check=True,
                what=f"add {name} to groups",
            )
        return TaskResult(Status.CHANGED, plan.reason.removeprefix("would "))

    def _missing_groups(self, ctx: TaskContext, name: str) -> list[str]:
        wanted = [g for g in self.params["groups"] if ctx.run(f"getent group {quote(g)}").ok]
        have = set(ctx.run(f"id -nG {quote(name)}").stdout.split())
        return [g for g in wanted if g not in have]
