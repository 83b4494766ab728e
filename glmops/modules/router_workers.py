"""router_workers: make a running vllm-router's worker list equal the wanted replicas.

Talks to the router's admin API from the controller (the router serves clients on its port, so
the controller reaches it too). Adding a worker returns once the router found it healthy, so a
replica that never comes up fails this task instead of silently staying out of rotation.
"""

from __future__ import annotations

from glmops.engine.context import TaskContext
from glmops.engine.results import Status, TaskResult
from glmops.errors import ModuleError
from glmops.fleet.router import RouterClient, RouterError, worker_changes
from glmops.modules.base import Arg, Module, Plan, register


@register
class RouterWorkers(Module):
    """`router_workers: {router: http://10.0.0.1:30000, workers: [http://10.0.0.11:8000]}`.

    `state: present` adds only, `absent` removes only the listed workers (a rolling redeploy
    takes one replica out and back); `exact` (default) also removes workers not listed."""

    name = "router_workers"
    args = {
        "router": Arg(str, required=True, doc="the router's base URL, as the controller sees it"),
        "workers": Arg(list, required=True, doc="worker URLs (each replica's head API server)"),
        "state": Arg(str, default="exact", choices=("exact", "present", "absent")),
        "timeout": Arg((int, float), default=1800, doc="seconds to wait for an added worker"),
    }

    def plan(self, ctx: TaskContext) -> Plan:
        client = RouterClient(self.params["router"])
        try:
            current = client.workers()
        except RouterError as error:
            raise ModuleError(f"router_workers: {error}") from error
        wanted = [str(url) for url in self.params["workers"]]
        state = self.params["state"]
        if state == "absent":
            changes = worker_changes(current, [u for u in current if u not in wanted])
        else:
            changes = worker_changes(current, wanted if state == "exact" else [*current, *wanted])
            if state == "present":
                changes = type(changes)(add=changes.add, remove=())
        data = {"workers": current, "add": list(changes.add), "remove": list(changes.remove)}
        if changes.empty:
            return Plan(False, f"router lists {len(current)} worker(s), as wanted", data=data)
        diff = "".join(f"- {u}\n" for u in changes.remove) + "".join(
            f"+ {u}\n" for u in changes.add
        )
        parts = [f"add {', '.join(changes.add)}"] if changes.add else []
        parts += [f"remove {', '.join(changes.remove)}"] if changes.remove else []
        return Plan(True, "; ".join(parts), diff, data)

    def apply(self, ctx: TaskContext, plan: Plan) -> TaskResult:
        client = RouterClient(self.params["router"])
        try:
            for url in plan.data["remove"]:
                client.remove(url)
            for url in plan.data["add"]:
                ctx.progress(f"router: adding {url} (waits until it answers /health)")
                client.add(url, timeout=float(self.params["timeout"]))
            after = client.workers()
        except RouterError as error:
            return TaskResult(Status.FAILED, str(error), data=plan.data)
        return TaskResult(Status.CHANGED, plan.reason, plan.diff, {**plan.data, "workers": after})
