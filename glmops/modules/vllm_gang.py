"""vllm_gang: this host's part in a replica across hosts (observes; writes nothing).

`vllm_gang` decides a member's multi-node flags (`--nnodes/--node-rank/--master-addr/
--master-port`, `--headless` on workers; with `replica_mode: data_parallel` the
`--data-parallel-*` flags instead) and environment (`VLLM_HOST_IP`, `GLOO_SOCKET_IFNAME`,
`NCCL_SOCKET_IFNAME` from the route to its peer, asked from the host). A host alone is a
replica of one: no flags, no environment.
The gang's restarts: vllm_gang_state and vllm_gang_restart.
"""

from __future__ import annotations

from glmops.engine.connection import quote
from glmops.engine.context import TaskContext
from glmops.engine.results import TaskResult
from glmops.errors import ModuleError
from glmops.fleet.multinode import (
    DEFAULT_MASTER_PORT,
    gang_env,
    member_plan,
    parse_route,
    route_peer,
)
from glmops.fleet.topology import replica_from_data
from glmops.modules.base import Arg, Module, Plan, register

REPLICA = Arg(dict, required=True, doc="the host's replica (the inventory's `fleet_replica`)")


@register
class VllmGang(Module):
    """`vllm_gang: {replica: "{{ fleet_replica }}"}`; registers `args`, `env`, `is_head`, ..."""

    name = "vllm_gang"
    args = {
        "replica": REPLICA,
        "master_port": Arg(int, default=DEFAULT_MASTER_PORT, doc="--master-port of the gang"),
    }

    def plan(self, ctx: TaskContext) -> Plan:
        port = self.params["master_port"] or DEFAULT_MASTER_PORT  # None: the inventory sets none
        data = member_plan(self.params["replica"], ctx.host.name, port)
        if not data["member"]:
            return Plan(False, "a replica of one host: no multi-node flags", data=data)
        replica = replica_from_data(self.params["replica"])
        peer = route_peer(replica, replica.member(ctx.host.name))
        result = ctx.run(f"ip -j route get {quote(peer.address)}")
        try:
            route = parse_route(result.stdout if result.ok else result.stderr, peer.address)
        except ValueError as error:
            raise ModuleError(f"gang {replica.name}: {error}") from None
        data["route"] = {"dev": route.dev, "src": route.src, "peer": peer.host}
        data["env"] = gang_env(route)
        role = "head" if data["is_head"] else "worker (headless)"
        return Plan(
            False,
            f"gang {replica.name} ({replica.mode}): rank {data['rank']} of {data['nodes']}, "
            f"{role}; reaches "
            f"{peer.host} ({peer.address}) over {route.dev} from {route.src}",
            data=data,
        )

    def apply(self, ctx: TaskContext, plan: Plan) -> TaskResult:  # pragma: no cover
        raise AssertionError("vllm_gang never plans a change")
