"""One vLLM replica across hosts: the flags and environment of each member of a gang.

vLLM's own multi-node runtime (no Ray): every member runs `vllm serve` with the same model and
parallel sizes plus `--nnodes N --node-rank R --master-addr HEAD --master-port P`; members other
than the head add `--headless` (no API server). With data parallelism instead (`replica_mode:
data_parallel`), each member runs its local ranks (`--data-parallel-size-local`), every one a
whole copy of the model (TP×PP within the host), the followers `--headless` from their first
global rank (`--data-parallel-start-rank`), all reaching the head at `--data-parallel-address`
and `--data-parallel-rpc-port`: vLLM's internal load balancer, one API server on the head.

The network: vLLM guesses its own address from the default route, which private GPU segments
often lack, so `VLLM_HOST_IP` is set to the source address of the route to the peer, and gloo
(CPU and control plane) and NCCL (GPU) are pinned to that route's interface.

Ray (for GPU users who run vLLM on Ray): the head and worker `ray start --block` lines, from the
same facts. vLLM's CPU build refuses Ray, so these are rendered and unit-tested, not run here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from glmops.fleet.topology import Member, Replica, replica_from_data

DEFAULT_MASTER_PORT = 29501  # vLLM's own default for --master-port
RAY_PORT = 6379


@dataclass(frozen=True)
class Route:
    """How a host reaches a peer: the interface and the source address it uses."""

    dev: str
    src: str


def parse_route(text: str, peer: str) -> Route:
    """`ip -j route get PEER` output -> the interface and source address toward PEER."""
    try:
        entries = json.loads(text)
        entry = entries[0]
        return Route(dev=str(entry["dev"]), src=str(entry["prefsrc"]))
    except (ValueError, LookupError, TypeError) as error:
        raise ValueError(
            f"no usable route to {peer}: `ip -j route get` said {text.strip()!r}"
        ) from error


def route_peer(replica: Replica, member: Member) -> Member:
    """The peer whose route picks a member's interface: the head for workers, else rank 1."""
    return replica.members[1] if member.is_head else replica.head


def gang_args(
    replica: Replica, member: Member, *, master_port: int = DEFAULT_MASTER_PORT
) -> list[str]:
    """Tensor/pipeline parallel across hosts: what this member adds to `vllm serve`."""
    if not replica.is_gang:
        return []
    args = [
        "--nnodes",
        str(len(replica.members)),
        "--node-rank",
        str(member.rank),
        "--master-addr",
        replica.head.address,
        "--master-port",
        str(master_port),
    ]
    return args if member.is_head else [*args, "--headless"]


def data_parallel_args(replica: Replica, member: Member) -> list[str]:
    """Data parallel across hosts, vLLM's internal load balancer (one API server: the head)."""
    local = replica.dp_local
    args = [
        "--data-parallel-size",
        str(local * len(replica.members)),
        "--data-parallel-size-local",
        str(local),
        "--data-parallel-address",
        replica.head.address,
        "--data-parallel-rpc-port",
        str(replica.dp_rpc_port),
    ]
    if member.is_head:
        return args
    return [*args, "--headless", "--data-parallel-start-rank", str(local * member.rank)]


def gang_env(route: Route) -> dict[str, str]:
    """The environment every member needs so the ranks find each other on the right network."""
    return {
        "VLLM_HOST_IP": route.src,
        "GLOO_SOCKET_IFNAME": route.dev,
        "NCCL_SOCKET_IFNAME": route.dev,
    }


def ray_start_argv(replica: Replica, member: Member, route: Route, ray: str = "ray") -> list[str]:
    """`ray start ... --block` for this member: the head starts the cluster, workers join it."""
    common = ["--node-ip-address", route.src, "--block"]
    if member.is_head:
        return [ray, "start", "--head", "--port", str(RAY_PORT), *common]
    return [ray, "start", "--address", f"{replica.head.address}:{RAY_PORT}", *common]


def member_plan(replica_data: dict[str, Any], host: str, master_port: int) -> dict[str, Any]:
    """A host's part in its replica (`fleet_replica`): rank, flags, head; the environment
    needs the route (the vllm_gang module adds it), so it is empty here."""
    replica = replica_from_data(replica_data)
    member = replica.member(host)
    data_parallel = replica.mode == "data_parallel"
    return {
        "member": replica.is_gang,
        "replica": replica.name,
        "mode": replica.mode,
        "rank": member.rank,
        "is_head": member.is_head,
        "nodes": len(replica.members),
        # hosts one TP×PP group spans, and such groups (data parallel ranks) on each host
        "span": 1 if data_parallel else len(replica.members),
        "dp_local": replica.dp_local if data_parallel else 1,
        "head_address": replica.head.address,
        "args": data_parallel_args(replica, member)
        if data_parallel and replica.is_gang
        else gang_args(replica, member, master_port=master_port),
        "env": {},
    }


def ray_unit_vars(
    replica: Replica, member: Member, route: Route, *, venv: str, user: str = "vllm"
) -> dict[str, Any]:
    """What templates/systemd/ray.service.j2 renders for this member (`ray` variable)."""
    ray = f"{venv}/bin/ray"
    argv = ray_start_argv(replica, member, route, ray)
    env = {**gang_env(route), "RAY_USAGE_STATS_ENABLED": "0"}
    return {
        "role": "head" if member.is_head else "worker",
        "replica": replica.name,
        "head": f"{replica.head.address}:{RAY_PORT}",
        "user": user,
        "argv": argv,
        "stop_argv": [ray, "stop"],
        "env": env,
    }
