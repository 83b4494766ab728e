"""The router gate under hostile clients: the worker admin API stays closed without the key
however the request is written, and nothing reaches the router that the gate did not check.

In front of a recording upstream (what the router would have read, byte for byte) for the HTTP
framing cases, and of a real vllm-router for the admin API itself (its worker list unchanged).
"""

from __future__ import annotations

import select
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from glmops.fleet.router import RouterClient
from tests.support.router_gate import (
    Recorder,
    gate,
    new_key,
    raw_exchange,
    recorder,
    stand_in_worker,
    vllm_router,
)

KEY = new_key()
VICTIM = b"http://203.0.113.7:8000"
ADD = b"/add_worker?url=" + VICTIM

#: Request targets that name an admin route however they are spelled.
DISGUISED = [
    ADD,
    b"/v1/../add_worker?url=x",
    b"/v1/models/../../add_worker?url=x",
    b"/health/../add_worker?url=x",
    b"/v1/%2e%2e/add_worker?url=x",
    b"/v1/%2E%2E/add_worker?url=x",
    b"/v1/%252e%252e/add_worker?url=x",
    b"/%61dd_worker?url=x",
    b"/v1/models%2f..%2f..%2fadd_worker?url=x",
    b"//add_worker?url=x",
    b"/v1//../add_worker?url=x",
    b"/v1/./../add_worker?url=x",
    b"/v1\\..\\add_worker?url=x",
    b"/add_worker;/v1/models",
    b"/add_worker#/v1/models",
    b"/ADD_WORKER?url=x",
    b"/list_workers",
    b"/remove_worker?url=x",
    b"/workers",
    b"/flush_cache",
    b"/v1/",
]


@pytest.fixture(scope="module")
def framed() -> Iterator[tuple[Recorder, str]]:
    with recorder() as upstream, gate(upstream.port, KEY, client_timeout=1.0) as url:
        yield upstream, url


def request(method: bytes, target: bytes, *headers: bytes, body: bytes = b"") -> bytes:
    lines = [method + b" " + target + b" HTTP/1.1", b"Host: r", *headers]
    if body:
        lines.append(b"Content-Length: %d" % len(body))
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def status(reply: bytes) -> int:
    parts = reply.split(b" ", 2)
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0


def reached(upstream: Recorder, before: int) -> list[bytes]:
    time.sleep(0.05)
    return upstream.received[before:]


@pytest.mark.parametrize("target", DISGUISED, ids=[t.decode() for t in DISGUISED])
def test_an_admin_route_without_the_key_is_refused_however_spelled(
    framed: tuple[Recorder, str], hostile, target: bytes
) -> None:
    upstream, url = framed
    before = len(upstream.received)
    answers = [
        raw_exchange(url, request(b"POST", target)),
        raw_exchange(url, request(b"POST", target, b"X-Glmops-Router-Key: wrong")),
        raw_exchange(url, request(b"GET", target, b"x-glmops-router-key:" + KEY.encode()[:-1])),
    ]
    got = reached(upstream, before)
    hostile.check(
        f"admin route {target.decode()!r} without the key",
        [status(a) for a in answers] in ([403] * 3, [400] * 3) and not got,
        f"answers {[a[:40] for a in answers]}, upstream got {got}",
    )


SMUGGLED = {
    "a second request pipelined after a free one": request(b"GET", b"/health")
    + request(b"POST", ADD),
    "a second request inside a Content-Length body's tail": request(
        b"POST", b"/v1/completions", body=b"{}"
    )
    + request(b"POST", ADD),
    "chunked body hiding a request": request(
        b"POST", b"/v1/completions", b"Transfer-Encoding: chunked"
    )
    + b"0\r\n\r\n"
    + request(b"POST", ADD),
    "chunked and Content-Length together": request(
        b"POST", b"/v1/completions", b"Transfer-Encoding: chunked", b"Content-Length: 5"
    )
    + b"0\r\n\r\n"
    + request(b"POST", ADD),
    "Transfer-Encoding with a space before the colon": request(
        b"POST", b"/v1/completions", b"Transfer-Encoding : chunked"
    )
    + b"0\r\n\r\n"
    + request(b"POST", ADD),
    "two Content-Length headers": request(
        b"POST", b"/v1/completions", b"Content-Length: 0", b"Content-Length: 60"
    )
    + request(b"POST", ADD),
    "Content-Length with a sign": request(b"POST", b"/v1/completions", b"Content-Length: +0")
    + request(b"POST", ADD),
    "a bare LF ending a header line": b"GET /health HTTP/1.1\r\nHost: r\nX: y\r\n\r\n"
    + request(b"POST", ADD),
    "a bare LF ending the request line": b"GET /health HTTP/1.1\nPOST "
    + ADD
    + b" HTTP/1.1\r\n\r\n",
    "an obs-fold header line": b"GET /health HTTP/1.1\r\nHost: r\r\n X-Glmops-Router-Key: a"
    + b"\r\n\r\n",
    "a NUL in the head": b"GET /health\0/../add_worker HTTP/1.1\r\nHost: r\r\n\r\n",
    "absolute-form target": request(b"POST", b"http://r" + ADD),
    "absolute-form target naming a free route": request(b"GET", b"http://r/v1/models"),
    "authority-form CONNECT": request(b"CONNECT", b"127.0.0.1:30001"),
    "asterisk-form OPTIONS": request(b"OPTIONS", b"*"),
    "HTTP/0.9 style request line": b"GET /add_worker\r\n\r\n",
    "HTTP/2 version on HTTP/1 framing": b"POST " + ADD + b" HTTP/2.0\r\nHost: r\r\n\r\n",
    "a space inside the target": b"GET /v1/models /add_worker HTTP/1.1\r\nHost: r\r\n\r\n",
    "a key header in another case on an admin route, twice": request(
        b"POST", ADD, b"X-GLMOPS-ROUTER-KEY: " + KEY.encode(), b"x-glmops-router-key: wrong"
    ),
    "an Upgrade to another protocol": request(
        b"GET", b"/v1/models", b"Connection: Upgrade", b"Upgrade: h2c", b"HTTP2-Settings: AAA"
    )
    + request(b"POST", ADD),
}


@pytest.mark.parametrize("name", list(SMUGGLED))
def test_nothing_slips_past_the_check_in_the_framing(
    framed: tuple[Recorder, str], hostile, name: str
) -> None:
    upstream, url = framed
    before = len(upstream.received)
    reply = raw_exchange(url, SMUGGLED[name])
    got = reached(upstream, before)
    leaked = [g for g in got if b"add_worker" in g or b"Upgrade" in g or b"chunked" in g]
    hostile.check(
        f"router gate framing: {name}",
        not leaked and all(g.count(b" HTTP/1.") == 1 for g in got) and status(reply) > 0,
        f"reply {reply[:60]!r}; upstream got {got}",
    )


def test_refusals_say_why_with_the_right_status(framed: tuple[Recorder, str], hostile) -> None:
    _, url = framed
    cases = {
        411: request(b"POST", b"/v1/completions", b"Transfer-Encoding: chunked") + b"0\r\n\r\n",
        403: request(b"POST", ADD),
        400: request(b"GET", b"http://r/v1/models"),
        431: request(b"GET", b"/v1/models", b"X-Pad: " + b"a" * 40000),
    }
    got = {code: status(raw_exchange(url, data)) for code, data in cases.items()}
    hostile.check("router gate refusal statuses", got == {c: c for c in cases}, str(got))


def test_a_slow_client_is_cut_off(framed: tuple[Recorder, str], hostile) -> None:
    """A head sent a byte at a time (each well within the per-read timeout) is answered 408
    at the head's deadline (1 s here), and the connection closed."""
    upstream, url = framed
    host, port = url.split("//")[1].rsplit(":", 1)
    before = len(upstream.received)
    started = time.monotonic()
    answer = b""
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        for byte in b"GET /health HTTP/1.1\r\nHost: r\r\nX-Slow: " + b"a" * 100:
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                break
            if select.select([sock], [], [], 0.1)[0]:
                answer = sock.recv(1024)
                break
    waited = time.monotonic() - started
    hostile.check(
        "router gate slowloris",
        status(answer) == 408 and waited < 3 and not reached(upstream, before),
        f"answer {answer[:40]!r} after {waited:.1f} s",
    )


def test_the_real_router_keeps_its_workers_against_every_trick(tmp_path: Path, hostile) -> None:
    with (
        stand_in_worker() as worker,
        vllm_router([worker], tmp_path / "router.log") as router,
        gate(int(router.rsplit(":", 1)[1]), KEY, client_timeout=1.0) as url,
    ):
        for target in DISGUISED[:14]:
            raw_exchange(url, request(b"POST", target.replace(b"url=x", b"url=" + VICTIM)))
        for data in SMUGGLED.values():
            raw_exchange(url, data)
        workers = RouterClient(url, admin_key=KEY).workers()
        direct = RouterClient(router, admin_key="").workers()
    hostile.check(
        "vllm-router behind the gate: worker list after every trick",
        workers == direct == [worker],
        f"the router lists {workers}",
    )


def test_a_body_cut_short_does_not_hold_the_router(hostile) -> None:
    """A client that closes before its Content-Length is sent ends the router's side too
    (the router here never answers: without that, the gate would wait for it an hour)."""
    with socket.create_server(("127.0.0.1", 0)) as silent:
        held: list[socket.socket] = []
        threading.Thread(target=lambda: held.append(silent.accept()[0]), daemon=True).start()
        with gate(silent.getsockname()[1], KEY) as url:
            host, port = url.split("//")[1].rsplit(":", 1)
            started = time.monotonic()
            with socket.create_connection((host, int(port)), timeout=5) as sock:
                sock.sendall(request(b"POST", b"/v1/completions", b"Content-Length: 100") + b"x")
                sock.shutdown(socket.SHUT_WR)
                try:
                    ended = sock.recv(1024) == b""
                except TimeoutError:
                    ended = False
            waited = time.monotonic() - started
        for conn in held:
            conn.close()
    hostile.check(
        "router gate, a body cut short",
        ended and waited < 3,
        f"connection still open after {waited:.1f} s",
    )


def test_a_router_that_is_down_is_a_502(hostile) -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        with gate(unused.getsockname()[1], KEY) as url:
            reply = raw_exchange(url, request(b"GET", b"/v1/models"))
    hostile.check("router gate, router down", status(reply) == 502, repr(reply[:80]))
