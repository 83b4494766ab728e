"""vllm-router: its command line, and its admin API for keeping the worker list in step.

vllm-router (PyPI `vllm-router`) sends OpenAI-API requests to a list of vLLM servers, retries
on failure and checks their health. Its admin endpoints: `GET /list_workers`,
`POST /add_worker?url=U` (which returns only once U answers `/health`, up to the router's
`--worker-startup-timeout-secs`) and `POST /remove_worker?url=U`. vllm-router 0.1.17 serves
them on its one client port and asks no credentials for them, even with `--api-key` (that key
only goes to workers for data-parallel-aware routing; a client's `Authorization` header is passed
on to the worker unchanged, so replicas with an API key check the clients' keys themselves).
So a router that other machines reach runs on 127.0.0.1 behind glmops' gate
(hosthelpers/router_gate.py), which listens on the router's address and lets the admin API
through only with the controller's key (fleet/router_key.py); the router listens on one address
only (`listen_address`), never on every interface unless told so.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from glmops.errors import GlmopsError, InputError
from glmops.fleet.router_key import KEY_HEADER_NAME, read_key
from glmops.gpu.serving.flags import LOOPBACK_PREFIXES
from glmops.hosthelpers import router_gate

#: Where the gate's script goes on the router host, in the router's venv (its python runs it).
GATE_SCRIPT = "glmops_router_gate.py"
#: The gate's environment file on the router host (0600, root): its one copy of the key.
GATE_ENV = "/etc/glmops/vllm-router-gate.env"
#: The gate's script on the controller, copied there.
GATE_SOURCE = Path(router_gate.__file__)


class RouterError(GlmopsError):
    """The router did not answer as expected (down, refused, or an unexpected reply)."""


def listen_address(router_address: str, configured: object, *, host: str, source: str) -> str:
    """The router's bind address: `router_listen` if set, else the address the controller
    reaches the router at (127.0.0.1 on the controller itself; the inventory address of a
    router host), so it answers on that one interface and not on every other. A loopback
    address on a router host that is not the controller is refused: neither the controller
    (which keeps the worker list through the admin API) nor any client could reach it."""
    listen = str(configured).strip() if configured not in (None, "") else router_address
    if listen.startswith(LOOPBACK_PREFIXES) and not router_address.startswith(LOOPBACK_PREFIXES):
        raise InputError(
            f"router_listen {listen} on {host}: the controller reaches the router at "
            f"{router_address} and could not keep its worker list; set router_listen to an "
            "address the controller and the clients reach (or leave it unset: that address)",
            source=source,
        )
    return listen


def needs_gate(listen: str, configured: object = True) -> bool:
    """Whether the router goes behind the admin-key gate: whenever it listens where other
    machines reach it, unless the inventory says `router_gate: false`."""
    return configured is not False and not listen.startswith(LOOPBACK_PREFIXES)


def admin_exposure_warning(listen: str, *, gated: bool) -> str | None:
    """vllm-router serves /add_worker and /remove_worker on its client port without
    credentials (its CLI has no admin key; --api-key only goes to workers), so on an address
    other machines reach and without the gate, every client can change the worker list: said
    at each deploy."""
    if gated or listen.startswith(LOOPBACK_PREFIXES):
        return None
    return (
        f"the router's admin API (/add_worker, /remove_worker) answers every client that "
        f"reaches {listen}: router_gate is off, and vllm-router has no credentials for it; keep "
        "that address on a network only trusted clients reach (or leave router_gate on)"
    )


def gate_argv(python: str, script: str, *, listen: str, port: int, upstream_port: int) -> list[str]:
    """The gate's ExecStart argv (its key comes from its EnvironmentFile, never from here)."""
    return [
        python,
        script,
        "--listen",
        listen,
        "--port",
        str(port),
        "--upstream-port",
        str(upstream_port),
    ]


def router_argv(
    executable: str,
    *,
    host: str,
    port: int,
    workers: Sequence[str],
    policy: str = "round_robin",
    health_interval_s: int = 5,
    startup_timeout_s: int = 1800,
    extra: Sequence[str] = (),
) -> list[str]:
    """The router's ExecStart argv. Health checks every few seconds (the router's default is
    60 s, too slow to take a dead replica out of rotation); a long start-up wait, because an
    added replica may still be loading its model."""
    argv = [
        executable,
        "--host",
        host,
        "--port",
        str(port),
        "--policy",
        policy,
        "--health-check-interval-secs",
        str(health_interval_s),
        "--worker-startup-timeout-secs",
        str(startup_timeout_s),
    ]
    if workers:
        argv += ["--worker-urls", *workers]
    return [*argv, *extra]


@dataclass(frozen=True)
class WorkerChanges:
    """What makes the router's list equal the wanted one."""

    add: tuple[str, ...]
    remove: tuple[str, ...]

    @property
    def empty(self) -> bool:
        return not self.add and not self.remove


def worker_changes(current: Sequence[str], wanted: Sequence[str]) -> WorkerChanges:
    norm_current = {_norm(u): u for u in current}
    norm_wanted = {_norm(u): u for u in wanted}
    return WorkerChanges(
        add=tuple(u for n, u in norm_wanted.items() if n not in norm_current),
        remove=tuple(u for n, u in norm_current.items() if n not in norm_wanted),
    )


def _norm(url: str) -> str:
    return url.rstrip("/")


class RouterClient:
    """The admin API of one running vllm-router, with the controller's key for its gate
    (none for a router glmops made no key for: one without a gate)."""

    def __init__(self, base_url: str, *, timeout: float = 10.0, admin_key: str | None = None):
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.admin_key = admin_key if admin_key is not None else read_key(self.base_url)

    def workers(self) -> list[str]:
        reply = self._call("GET", "/list_workers")
        urls = reply.get("urls") if isinstance(reply, dict) else None
        if not isinstance(urls, list):
            raise RouterError(f"{self.base_url}/list_workers: unexpected reply {reply!r}")
        return [str(u) for u in urls]

    def add(self, url: str, *, timeout: float | None = None) -> None:
        """Add a worker; returns once the router has found it healthy (bounded by `timeout`)."""
        self._call("POST", "/add_worker?" + urllib.parse.urlencode({"url": url}), timeout)

    def remove(self, url: str) -> None:
        self._call("POST", "/remove_worker?" + urllib.parse.urlencode({"url": url}))

    def _call(self, method: str, path: str, timeout: float | None = None) -> object:
        import urllib.request  # HTTP's client: only a run that talks to the router loads it

        request = urllib.request.Request(self.base_url + path, method=method)
        if self.admin_key:
            request.add_header(KEY_HEADER_NAME, self.admin_key)
        try:
            with urllib.request.urlopen(request, timeout=timeout or self.timeout) as response:
                body = response.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as error:
            detail = error.read().decode("utf-8", "replace")[:300]
            raise RouterError(
                f"{method} {self.base_url}{path}: HTTP {error.code}: {detail}"
            ) from error
        except OSError as error:
            raise RouterError(f"{method} {self.base_url}{path}: {error}") from error
        try:
            return json.loads(body) if body.strip() else {}
        except ValueError:
            return {"text": body}
