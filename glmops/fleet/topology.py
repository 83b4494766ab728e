"""The fleet an inventory describes: replicas (one host, or a gang of hosts) and the router.

Growing from one host to a fleet is an inventory edit only:

- every serving host is a replica of its own, unless hosts share a `replica: NAME` variable:
  those hosts are one gang (one vLLM replica on vLLM's multi-node runtime), ranked by
  `node_rank` (default: inventory order); rank 0 is the head, the others run headless;
  `replica_mode` says how the gang splits the model: `tensor_parallel` (default: TP×PP spans
  the hosts, `--nnodes`) or `data_parallel` (each host runs `vllm_data_parallel_size_local`
  whole copies as data parallel ranks of one engine; the head serves the API);
- `router_host: NAME` runs vllm-router in front of every replica's head: an inventory host, or
  `localhost` for the controller itself (no inventory entry needed; an inventory host with
  `connection: local` is the controller too).

Pure: reads the loaded inventory, touches no host.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from glmops.engine.inventory import Host, Inventory
from glmops.engine.yamlsrc import SourceMap, load_yaml, where
from glmops.errors import InputError
from glmops.hosthelpers._envelope import http_base

DEFAULT_VLLM_PORT = 8000
DEFAULT_ROUTER_PORT = 30000
BACKENDS = ("mp", "ray")
MODES = ("tensor_parallel", "data_parallel")
DEFAULT_DP_RPC_PORT = 29550  # vLLM's own default for --data-parallel-rpc-port


@dataclass(frozen=True)
class Member:
    """One host of a replica, with its rank in the replica's gang."""

    host: str
    address: str
    rank: int

    @property
    def is_head(self) -> bool:
        return self.rank == 0


@dataclass(frozen=True)
class Replica:
    """One vLLM replica: served by its head; a gang when it spans more than one host."""

    name: str
    members: tuple[Member, ...]
    port: int
    backend: str  # "mp" (vLLM's own multi-node runtime) or "ray"
    mode: str = "tensor_parallel"  # or "data_parallel"
    dp_local: int = 1  # data parallel: ranks per host
    dp_rpc_port: int = DEFAULT_DP_RPC_PORT

    @property
    def head(self) -> Member:
        return self.members[0]

    @property
    def is_gang(self) -> bool:
        return len(self.members) > 1

    @property
    def url(self) -> str:
        """What the router sends requests to: the head's API server."""
        return http_base(self.head.address, self.port)

    def member(self, host: str) -> Member:
        return next(m for m in self.members if m.host == host)

    def restart_order(self) -> tuple[Member, ...]:
        """Workers first, then the head: the head waits for every rank at start-up."""
        return tuple(m for m in self.members if not m.is_head) + (self.head,)


@dataclass(frozen=True)
class Router:
    host: str
    address: str
    port: int

    @property
    def url(self) -> str:
        return http_base(self.address, self.port)


@dataclass(frozen=True)
class Fleet:
    replicas: tuple[Replica, ...]
    router: Router | None

    def replica_of(self, host: str) -> Replica:
        return next(r for r in self.replicas if any(m.host == host for m in r.members))

    @property
    def worker_urls(self) -> tuple[str, ...]:
        """The router's worker list: one URL per replica (its head), in inventory order."""
        return tuple(r.url for r in self.replicas)


def fleet_from_inventory(inventory: Inventory, serving: Iterable[Host]) -> Fleet:
    """The fleet of `serving` hosts (e.g. a deploy play's hosts) and the inventory's router."""
    where = str(inventory.path)
    by_name: dict[str, list[Host]] = {}
    for host in serving:
        by_name.setdefault(str(host.vars.get("replica") or host.name), []).append(host)
    replicas = tuple(_replica(name, hosts, where) for name, hosts in by_name.items())
    return Fleet(replicas, _router(inventory, where))


def serving_hosts(inventory: Inventory, pattern: str = "all") -> list[Host]:
    """The hosts `pattern` selects, less the router host: it runs vllm-router, no model."""
    router = _router(inventory, str(inventory.path))
    return [h for h in inventory.select(pattern) if router is None or h.name != router.host]


def add_replica_vars(inventory: Inventory) -> None:
    """Give every host the variable `fleet_replica`: its replica (members, ranks, addresses),
    which a host's tasks cannot see otherwise. `-e fleet_replica=...` is left as given."""
    by_name: dict[str, list[Host]] = {}
    for host in inventory.hosts.values():
        by_name.setdefault(str(host.vars.get("replica") or host.name), []).append(host)
    for name, hosts in by_name.items():
        data = replica_data(_replica(name, hosts, str(inventory.path)))
        for host in hosts:
            host.vars.setdefault("fleet_replica", data)


def _replica(name: str, hosts: list[Host], where: str) -> Replica:
    ranks = _ranks(hosts, where)
    if sorted(ranks) != list(range(len(hosts))):
        listed = ", ".join(f"{h.name}={r}" for h, r in zip(hosts, ranks, strict=True))
        raise InputError(
            f"replica '{name}': node_rank must number its hosts 0..{len(hosts) - 1} once each "
            f"(got {listed})",
            source=where,
        )
    members = sorted(
        (Member(h.name, h.connection.address, r) for h, r in zip(hosts, ranks, strict=True)),
        key=lambda m: m.rank,
    )
    for setting in GANG_SETTINGS:
        _same_everywhere(name, hosts, setting, where)
    head = hosts[ranks.index(0)]
    backend = _choice(name, head, "multinode_backend", BACKENDS, where)
    mode = _choice(name, head, "replica_mode", MODES, where)
    port = _int(hosts[0], "vllm_port", DEFAULT_VLLM_PORT, where)
    if mode == "tensor_parallel":
        return Replica(name, tuple(members), port, backend)
    _data_parallel_fits(name, hosts, backend, where)
    dp_local = _int(head, "vllm_data_parallel_size_local", 1, where)
    rpc_port = _int(head, "vllm_data_parallel_rpc_port", DEFAULT_DP_RPC_PORT, where)
    return Replica(name, tuple(members), port, backend, mode, dp_local, rpc_port)


#: What every member of one gang must agree on (they describe one engine).
GANG_SETTINGS = (
    "vllm_port",
    "multinode_backend",
    "vllm_tensor_parallel_size",
    "vllm_pipeline_parallel_size",
    "replica_mode",
    "vllm_data_parallel_size_local",
    "vllm_data_parallel_rpc_port",
)


def _choice(name: str, host: Host, key: str, choices: tuple[str, ...], where: str) -> str:
    value = str(host.vars.get(key, choices[0]))
    if value not in choices:
        raise InputError(
            f"replica '{name}': {key} must be one of {', '.join(choices)}, got {value!r}",
            source=where,
        )
    return value


def _data_parallel_fits(name: str, hosts: list[Host], backend: str, where: str) -> None:
    """The combinations glmops renders for data parallel across hosts (vLLM's internal load
    balancer: one API server on the head, headless followers), or a clear refusal."""
    why = None
    if len(hosts) < 2:
        why = "needs a replica of two or more hosts (on one host: vllm_extra_args)"
    elif backend != "mp":
        why = "runs on vLLM's own multi-node runtime (multinode_backend: mp), not Ray"
    elif _int(hosts[0], "vllm_data_parallel_size_local", 1, where) < 1:
        why = "needs vllm_data_parallel_size_local of at least 1 (ranks on each host)"
    if why:
        raise InputError(f"replica '{name}': replica_mode data_parallel {why}", source=where)


def _ranks(hosts: list[Host], where: str) -> list[int]:
    """Each host's rank: its `node_rank`, else the lowest rank nobody claimed, in file order."""
    explicit = {h.name: _int(h, "node_rank", -1, where) for h in hosts if "node_rank" in h.vars}
    free = (rank for rank in range(len(hosts)) if rank not in explicit.values())
    return [explicit[h.name] if h.name in explicit else next(free, -1) for h in hosts]


def _router(inventory: Inventory, where: str) -> Router | None:
    names = {
        str(h.vars["router_host"]) for h in inventory.hosts.values() if h.vars.get("router_host")
    }
    if not names:
        return None
    if len(names) > 1:
        raise InputError(
            f"router_host differs between hosts: {', '.join(sorted(names))}", source=where
        )
    name = names.pop()
    host = inventory.host(name)
    if host is None:
        raise InputError(
            f"router_host '{name}' is not a host of this inventory (nor localhost, the controller)",
            **_set_at(inventory, "router_host", name),
        )
    address = "127.0.0.1" if host.connection.connection == "local" else host.connection.address
    return Router(name, address, _int(host, "router_port", DEFAULT_ROUTER_PORT, where))


def _set_at(inventory: Inventory, key: str, value: Any) -> dict[str, Any]:
    """Where `key: value` is written: the inventory file or a group_vars/host_vars file beside
    it (file and line for InputError); the inventory file alone when it came from `-e`."""
    folder = inventory.path.parent
    beside = [
        *sorted(folder.glob("group_vars/**/*.y*ml")),
        *sorted(folder.glob("host_vars/**/*.y*ml")),
    ]
    for path in [inventory.path, *beside]:
        found = _find_key(load_yaml(path), key, value)
        if found:
            return found
    return {"source": str(inventory.path)}


def _find_key(node: Any, key: str, value: Any) -> dict[str, Any]:
    if isinstance(node, SourceMap) and node.get(key) == value:
        return where(node, key)
    children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
    for child in children:
        found = _find_key(child, key, value)
        if found:
            return found
    return {}


def _same_everywhere(name: str, hosts: list[Host], setting: str, where: str) -> None:
    values = {repr(h.vars.get(setting)) for h in hosts}
    if len(values) > 1:
        listed = ", ".join(f"{h.name}={h.vars.get(setting)!r}" for h in hosts)
        raise InputError(
            f"replica '{name}': the hosts of one gang need the same {setting} (got {listed})",
            source=where,
        )


def _int(host: Host, key: str, default: int, where: str) -> int:
    value: Any = host.vars.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(
            f"host '{host.name}': {key} must be an integer, got {value!r}", source=where
        )
    return value


def replica_data(replica: Replica) -> dict[str, Any]:
    """One replica, JSON-able (the `fleet_replica` variable)."""
    return {
        "name": replica.name,
        "url": replica.url,
        "port": replica.port,
        "backend": replica.backend,
        "mode": replica.mode,
        "dp_local": replica.dp_local,
        "dp_rpc_port": replica.dp_rpc_port,
        "members": [
            {"host": m.host, "address": m.address, "rank": m.rank} for m in replica.members
        ],
    }


def replica_from_data(data: Mapping[str, Any]) -> Replica:
    """The `fleet_replica` variable back as a Replica."""
    members = tuple(Member(m["host"], m["address"], int(m["rank"])) for m in data["members"])
    return Replica(
        str(data["name"]),
        members,
        int(data["port"]),
        str(data["backend"]),
        str(data.get("mode", "tensor_parallel")),
        int(data.get("dp_local", 1)),
        int(data.get("dp_rpc_port", DEFAULT_DP_RPC_PORT)),
    )


def as_data(fleet: Fleet) -> Mapping[str, Any]:
    """JSON-able view for templates, `register:` and `glmops status --json`."""
    return {
        "router": None
        if fleet.router is None
        else {"host": fleet.router.host, "url": fleet.router.url},
        "replicas": [replica_data(r) for r in fleet.replicas],
    }
