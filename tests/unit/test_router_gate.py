"""The router gate (hosthelpers/router_gate.py) in front of a real vllm-router: the controller
keeps the worker list with its key, clients reach the OpenAI API, health and SSE streams without
it; and, in front of a recording upstream, what the router is sent byte for byte. Hostile
requests: tests/security/test_router_gate.py; deployed on a fleet:
tests/testbed/test_fleet_api_key.py.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from glmops.fleet.router import RouterClient, RouterError
from glmops.fleet.router_key import ensure_key
from tests.support.router_gate import (
    SSE_EVENTS,
    free_port,
    gate,
    raw_exchange,
    recorder,
    stand_in_worker,
    vllm_router,
)


@pytest.fixture
def routed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, list[str]]]:
    """A gate, with the key glmops made for its URL (as a deploy makes it), in front of a real
    vllm-router listing the first of two stand-in workers; yields the gate's URL and both."""
    monkeypatch.setenv("GLMOPS_HOME", str(tmp_path / "home"))
    port = free_port()
    key = ensure_key(f"http://127.0.0.1:{port}")
    with (
        stand_in_worker() as first,
        stand_in_worker() as second,
        vllm_router([first], tmp_path / "router.log") as router,
        gate(int(router.rsplit(":", 1)[1]), key, port=port, client_timeout=5) as url,
    ):
        yield url, [first, second]


def test_the_controller_keeps_the_worker_list_through_the_gate(
    routed: tuple[str, list[str]],
) -> None:
    url, (first, second) = routed
    client = RouterClient(url)  # the key glmops holds for this router
    assert client.admin_key and client.workers() == [first]
    client.add(second, timeout=30)
    assert sorted(client.workers()) == sorted([first, second])
    client.remove(first)
    assert client.workers() == [second]
    for key in ("", "wrong-" + client.admin_key):
        with pytest.raises(RouterError, match="HTTP 403"):
            RouterClient(url, admin_key=key).workers()
    assert client.workers() == [second]


def test_clients_reach_the_api_and_streams_without_the_admin_key(
    routed: tuple[str, list[str]],
) -> None:
    url, _ = routed
    with urllib.request.urlopen(url + "/liveness", timeout=10) as response:
        assert response.status == 200
    with urllib.request.urlopen(url + "/v1/models", timeout=10) as response:
        assert json.load(response)["data"][0]["id"] == "stand-in"
    body = json.dumps({"model": "stand-in", "prompt": "hi", "stream": True}).encode()
    request = urllib.request.Request(
        url + "/v1/completions",
        data=body,
        headers={
            "Content-Type": "application/json",
            "Authorization": "Bearer client-1",
            "X-Glmops-Router-Key": RouterClient(url).admin_key or "",
        },
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        stream = response.read()
        seen = json.loads(response.headers["X-Seen-Headers"])
    assert stream == b"".join(SSE_EVENTS), stream
    assert seen.get("authorization") == "Bearer client-1", seen
    assert "x-glmops-router-key" not in seen, "the admin key reached a worker"


def test_the_router_is_sent_one_request_as_the_client_wrote_it_less_the_key() -> None:
    key = "k" * 32
    big = bytes(range(256)) * 4096  # 1 MiB, every byte value
    with recorder() as upstream, gate(upstream.port, key) as url:
        head = (
            b"POST /v1/completions?x=1 HTTP/1.1\r\nHost: r\r\nAuthorization: Bearer c\r\n"
            b"Connection: keep-alive\r\nKeep-Alive: timeout=5\r\n"
            b"X-Glmops-Router-Key: " + key.encode() + b"\r\n"
            b"Content-Length: %d\r\n\r\n" % len(big)
        )
        reply = raw_exchange(url, head + big)
        old = raw_exchange(url, b"GET /health HTTP/1.0\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 200 OK") and reply.endswith(
        b"POST /v1/completions?x=1 HTTP/1.1"
    )
    sent_head, _, sent_body = upstream.received[0].partition(b"\r\n\r\n")
    assert sent_body == big
    lines = sent_head.split(b"\r\n")
    assert lines[0] == b"POST /v1/completions?x=1 HTTP/1.1"
    assert lines[1:] == [
        b"Host: r",
        b"Authorization: Bearer c",
        b"Content-Length: %d" % len(big),
        b"Connection: close",
    ]
    assert old.endswith(b"GET /health HTTP/1.0"), "an HTTP/1.0 client keeps its version"
