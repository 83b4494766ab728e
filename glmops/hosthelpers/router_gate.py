"""Host helper: an HTTP gate in front of vllm-router that keeps its admin API for key holders.

vllm-router serves its worker admin API (/add_worker, /remove_worker, /list_workers, ...) on its
one client port with no credential. glmops then runs the router on 127.0.0.1 and this gate on
the router's public address: client routes (the OpenAI API under /v1/, health, metrics) pass
freely, with the client's Authorization header unchanged; every other path needs the admin key
in the X-Glmops-Router-Key header (compared in constant time, never forwarded).

Written so that what the gate checks is what the router sees: one request per connection
(`Connection: close` upstream, nothing read past the body), Content-Length bodies only,
origin-form targets whose path is already canonical, bounded headers, and timeouts on the
client. Responses, SSE streams included, are piped back byte for byte.

Stdlib only. The key comes from the environment (an EnvironmentFile, 0600), never from argv:
    GLMOPS_ROUTER_ADMIN_KEY=... router_gate.py --listen 10.0.0.9 --port 30000 --upstream-port 30001
"""

from __future__ import annotations

import argparse
import contextlib
import hmac
import os
import posixpath
import re
import socket
import socketserver
import sys
import threading
import time
import urllib.parse
from typing import TYPE_CHECKING

KEY_ENV = "GLMOPS_ROUTER_ADMIN_KEY"
KEY_HEADER_NAME = "X-Glmops-Router-Key"
KEY_HEADER = KEY_HEADER_NAME.lower().encode()
MAX_HEADER_BYTES = 32 * 1024
MAX_CONNECTIONS = 512
#: How long a client may take to send its head, and may stall while sending or reading.
CLIENT_TIMEOUT_S = 30.0
#: Client routes: the OpenAI API, generation, health and metrics (vllm-router 0.1.17).
FREE_PREFIXES = ("/v1/",)
FREE_PATHS = frozenset(
    {
        "/health",
        "/health_generate",
        "/liveness",
        "/readiness",
        "/metrics",
        "/generate",
        "/rerank",
        "/get_model_info",
        "/get_server_info",
        "/version",
    }
)
#: Headers about this one hop: the gate sets its own Connection, and no upgrade passes.
HOP_HEADERS = frozenset(
    {b"connection", b"keep-alive", b"proxy-connection", b"upgrade", b"te", b"trailer"}
)
TOKEN = re.compile(rb"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
CANONICAL_PATH = re.compile(r"^(/[A-Za-z0-9_.~-]+)+/?$|^/$")


class Refusal(Exception):
    """A request the gate answers itself (status, short reason) without forwarding it."""

    def __init__(self, status: int, reason: str, body: str):
        super().__init__(body)
        self.status, self.reason, self.body = status, reason, body


def path_is_free(target: str) -> bool:
    """Whether a request target (origin-form) names a client route. The path must be in its
    canonical form (no percent-escapes, no `.`/`..`/empty segments, no backslash) and stay the
    same once decoded and normalized, so that the router cannot route it elsewhere."""
    path = target.split("?", 1)[0]
    if not CANONICAL_PATH.match(path):
        return False
    decoded = urllib.parse.unquote(path)
    if decoded != path or posixpath.normpath(decoded) != path.rstrip("/") or "//" in path:
        return False
    return path in FREE_PATHS or path.startswith(FREE_PREFIXES) and path not in FREE_PREFIXES


if TYPE_CHECKING:  # the gate may run on an older python: no subscripted builtins at run time
    Head = tuple[bytes, bytes, bytes, list[tuple[bytes, bytes]]]


def parse_head(head: bytes) -> Head:
    """The method, target, version and headers of a request head (without its blank line),
    refusing what two HTTP parsers could read differently."""
    lines = head.split(b"\r\n")
    if any(b"\n" in line or b"\r" in line or b"\0" in line for line in lines):
        raise Refusal(400, "Bad Request", "bare CR, LF or NUL in the request head")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not TOKEN.match(parts[0]) or parts[2] not in (b"HTTP/1.1", b"HTTP/1.0"):
        raise Refusal(400, "Bad Request", "malformed request line")
    method, target, version = parts
    if not target.startswith(b"/") or not all(0x21 <= c < 0x7F for c in target):
        raise Refusal(400, "Bad Request", "the request target must be a path (origin-form)")
    headers = []
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not TOKEN.match(name):
            raise Refusal(400, "Bad Request", "malformed header line")
        headers.append((name, value.strip(b" \t")))
    return method, target, version, headers


def values(headers: list[tuple[bytes, bytes]], name: bytes) -> list[bytes]:
    """The values of every header called `name` (lower case), in any case."""
    return [value for key, value in headers if key.lower() == name]


def body_length(headers: list[tuple[bytes, bytes]]) -> int:
    """The request body's length: Content-Length only, one value, digits only."""
    if values(headers, b"transfer-encoding"):
        raise Refusal(411, "Length Required", "send the body with Content-Length, not chunked")
    lengths = values(headers, b"content-length")
    if not lengths:
        return 0
    if len(lengths) > 1 or not lengths[0].isdigit():
        raise Refusal(400, "Bad Request", "one Content-Length of digits only")
    return int(lengths[0])


def authorized(headers: list[tuple[bytes, bytes]], key: bytes) -> bool:
    """Whether the request carries exactly one admin key header, equal to `key`."""
    given = values(headers, KEY_HEADER)
    return len(given) == 1 and hmac.compare_digest(given[0], key)


def upstream_head(request: Head) -> bytes:
    """The head sent to the router: the key and hop headers dropped, one request only."""
    method, target, version, headers = request
    kept = [(n, v) for n, v in headers if n.lower() != KEY_HEADER and n.lower() not in HOP_HEADERS]
    lines = [b" ".join((method, target, version))]
    lines += [n + b": " + v for n, v in kept]
    lines.append(b"Connection: close")
    return b"\r\n".join(lines) + b"\r\n\r\n"


def refusal_bytes(refusal: Refusal) -> bytes:
    body = (refusal.body + "\n").encode()
    return (
        f"HTTP/1.1 {refusal.status} {refusal.reason}\r\nContent-Type: text/plain\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode() + body


class Gate(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self,
        listen: str,
        port: int,
        upstream_port: int,
        key: bytes,
        *,
        upstream_timeout: float = 3600.0,
        client_timeout: float = CLIENT_TIMEOUT_S,
    ):
        self.address_family = socket.AF_INET6 if ":" in listen else socket.AF_INET
        self.upstream = ("127.0.0.1", upstream_port)
        self.key = key
        self.upstream_timeout = upstream_timeout
        self.client_timeout = client_timeout
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__((listen, port), GateHandler)


class GateHandler(socketserver.BaseRequestHandler):
    server: Gate

    def handle(self) -> None:
        client: socket.socket = self.request
        client.settimeout(self.server.client_timeout)
        if not self.server.slots.acquire(blocking=False):
            self._refuse(Refusal(503, "Service Unavailable", "too many connections"))
            return
        try:
            self._serve(client)
        except Refusal as refusal:
            self._refuse(refusal)
        except OSError:
            pass
        finally:
            self.server.slots.release()

    def _serve(self, client: socket.socket) -> None:
        head, rest = read_head(client, self.server.client_timeout)
        request = parse_head(head)
        _, target, _, headers = request
        length = body_length(headers)
        if not path_is_free(target.decode("ascii")) and not authorized(headers, self.server.key):
            raise Refusal(403, "Forbidden", "this path needs the router's admin key")
        client.settimeout(self.server.client_timeout)
        try:
            upstream = socket.create_connection(self.server.upstream, timeout=10)
        except OSError:
            raise Refusal(502, "Bad Gateway", "the router does not answer") from None
        with upstream:
            upstream.settimeout(self.server.upstream_timeout)
            upstream.sendall(upstream_head(request))
            pump = threading.Thread(target=send_body, args=(client, upstream, rest, length))
            pump.daemon = True
            pump.start()
            while chunk := upstream.recv(65536):
                client.sendall(chunk)

    def _refuse(self, refusal: Refusal) -> None:
        print(f"router_gate: {refusal.status} {refusal.body}", file=sys.stderr, flush=True)
        with contextlib.suppress(OSError):
            self.request.sendall(refusal_bytes(refusal))
            linger(self.request)


def linger(client: socket.socket, seconds: float = 1.0, limit: int = 1 << 20) -> None:
    """Close the way HTTP servers do: stop sending, then read what the client still sends for
    a moment (bounded in time and bytes), so that closing with unread bytes does not reset the
    connection before the client read the refusal."""
    client.shutdown(socket.SHUT_WR)
    deadline = time.monotonic() + seconds
    drained = 0
    while drained < limit and (left := deadline - time.monotonic()) > 0:
        client.settimeout(left)
        chunk = client.recv(65536)
        if not chunk:
            return
        drained += len(chunk)


def read_head(client: socket.socket, timeout: float) -> tuple[bytes, bytes]:
    """The request head and whatever body bytes came with it; bounded in size and in time
    (a client trickling its head a byte at a time is cut off after `timeout` seconds)."""
    data = b""
    deadline = time.monotonic() + timeout
    while b"\r\n\r\n" not in data:
        if len(data) > MAX_HEADER_BYTES:
            raise Refusal(431, "Request Header Fields Too Large", "request head too large")
        left = deadline - time.monotonic()
        if left <= 0:
            raise Refusal(408, "Request Timeout", "request head not sent in time")
        client.settimeout(left)
        try:
            chunk = client.recv(8192)
        except socket.timeout:  # noqa: UP041 - TimeoutError only from python 3.10
            raise Refusal(408, "Request Timeout", "request head not sent in time") from None
        if not chunk:
            raise OSError("client closed before its request head ended")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    if len(head) > MAX_HEADER_BYTES:
        raise Refusal(431, "Request Header Fields Too Large", "request head too large")
    return head, rest


def send_body(client: socket.socket, upstream: socket.socket, first: bytes, length: int) -> None:
    """Exactly `length` body bytes to the router; anything after them is never read on. A
    client that stops short of its Content-Length ends the router's side too, so the request
    does not hold a connection until the router's timeout."""
    left = length
    try:
        sent = first[:length]
        upstream.sendall(sent)
        left -= len(sent)
        while left > 0:
            chunk = client.recv(min(left, 65536))
            if not chunk:
                break
            upstream.sendall(chunk)
            left -= len(chunk)
    except OSError:
        pass
    if left > 0:
        with contextlib.suppress(OSError):
            upstream.shutdown(socket.SHUT_RDWR)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", required=True, help="the router's public address")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream-port", type=int, required=True, help="vllm-router, 127.0.0.1")
    parser.add_argument(
        "--upstream-timeout", type=float, default=3600.0, help="seconds of router silence"
    )
    parser.add_argument(
        "--client-timeout", type=float, default=CLIENT_TIMEOUT_S, help="seconds a client may stall"
    )
    args = parser.parse_args(argv)
    key = os.environ.get(KEY_ENV, "").encode()
    if len(key) < 16:
        print(f"router_gate: {KEY_ENV} is not set (or shorter than 16 bytes)", file=sys.stderr)
        return 2
    gate = Gate(
        args.listen,
        args.port,
        args.upstream_port,
        key,
        upstream_timeout=args.upstream_timeout,
        client_timeout=args.client_timeout,
    )
    print(f"router_gate: {args.listen}:{args.port} -> 127.0.0.1:{args.upstream_port}", flush=True)
    gate.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
