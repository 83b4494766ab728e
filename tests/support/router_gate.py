"""The router gate as deployed (its own process, its key from the environment) in front of a
real vllm-router (PyPI wheel, cached outside the repo) or of a recording upstream that keeps the
exact bytes it was sent; and a stand-in worker for the router (not vLLM: /health, /v1/models,
and an SSE /v1/completions that echoes what it saw of the request's headers)."""

from __future__ import annotations

import json
import os
import secrets
import socket
import socketserver
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from glmops.fleet.router import GATE_SOURCE
from glmops.hosthelpers.router_gate import KEY_ENV

ROUTER_VERSION = "0.1.17"
CACHE = Path(os.environ.get("GLMOPS_CACHE", Path.home() / ".cache" / "glmops"))
#: The SSE events the stand-in worker streams, a pause between each.
SSE_EVENTS = [b'data: {"n": 1}\n\n', b'data: {"n": 2}\n\n', b"data: [DONE]\n\n"]


def vllm_router_binary() -> Path:
    """vllm-router from PyPI, installed once into the cache."""
    venv = CACHE / "vllm-router" / ROUTER_VERSION
    binary = venv / "bin" / "vllm-router"
    if not binary.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
        done = subprocess.run(
            [*pip, f"vllm-router=={ROUTER_VERSION}"], capture_output=True, text=True
        )
        assert done.returncode == 0, f"pip install vllm-router: {done.stderr[-800:]}"
    return binary


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, timeout: float = 30) -> None:
    """Until `url` answers at all (any HTTP status counts)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(url, timeout=2).close()
            return
        except urllib.error.HTTPError:
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@contextmanager
def vllm_router(workers: list[str], log: Path) -> Iterator[str]:
    """A real vllm-router on 127.0.0.1 listing `workers`; yields its URL."""
    port = free_port()
    # its own metrics port: the default (29000) is taken by any other router on this machine
    argv = [str(vllm_router_binary()), "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--policy", "round_robin", "--prometheus-port", str(free_port())]
    with log.open("w") as out:
        proc = subprocess.Popen([*argv, "--worker-urls", *workers], stdout=out, stderr=out)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(url + "/liveness", timeout=120)
        yield url
    finally:
        proc.kill()
        proc.wait()


@contextmanager
def gate(
    upstream_port: int, key: str, *, port: int | None = None, client_timeout: float = 2.0
) -> Iterator[str]:
    """The gate's script run as its unit runs it; yields its URL."""
    port = port or free_port()
    argv = [sys.executable, str(GATE_SOURCE), "--listen", "127.0.0.1", "--port", str(port)]
    argv += ["--upstream-port", str(upstream_port), "--client-timeout", str(client_timeout)]
    env = {**os.environ, KEY_ENV: key}
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
                assert time.monotonic() < deadline, "the gate did not start"
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait()


def new_key() -> str:
    return secrets.token_urlsafe(32)


class Recorder(socketserver.ThreadingTCPServer):
    """An upstream that keeps every connection's bytes (what the router would have read) and
    answers 200 with the request line it saw."""

    daemon_threads = True

    def __init__(self) -> None:
        self.received: list[bytes] = []
        super().__init__(("127.0.0.1", 0), _RecordOne)

    @property
    def port(self) -> int:
        return self.server_address[1]


class _RecordOne(socketserver.BaseRequestHandler):
    server: Recorder

    def handle(self) -> None:
        data = b""
        self.request.settimeout(0.5)
        try:
            while chunk := self.request.recv(65536):
                data += chunk
                if _complete(data):
                    break
            self.request.settimeout(0.3)  # anything sent after the one request
            while chunk := self.request.recv(65536):
                data += chunk
        except OSError:
            pass
        self.server.received.append(data)
        body = data.split(b"\r\n", 1)[0]
        self.request.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body
        )


def _complete(data: bytes) -> bool:
    head, found, body = data.partition(b"\r\n\r\n")
    if not found:
        return False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length" and value.strip().isdigit():
            return len(body) >= int(value)
    return True


@contextmanager
def recorder() -> Iterator[Recorder]:
    server = Recorder()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


class _Worker(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def _json(self, doc: object) -> None:
        body = json.dumps(doc).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/health":
            self._json({})
        elif self.path == "/v1/models":
            self._json({"object": "list", "data": [{"id": "stand-in", "object": "model"}]})
        else:
            self.send_error(404)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        seen = {k.lower(): v for k, v in self.headers.items()}
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("X-Seen-Headers", json.dumps(seen))
        self.send_header("Connection", "close")
        self.end_headers()
        for event in SSE_EVENTS:
            self.wfile.write(event)
            self.wfile.flush()
            time.sleep(0.1)
        self.close_connection = True


@contextmanager
def stand_in_worker() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Worker)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def raw_exchange(url: str, data: bytes, *, read_timeout: float = 5.0) -> bytes:
    """Send raw bytes to the gate at `url` and read until it closes the connection."""
    host, port = url.split("//", 1)[1].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=read_timeout) as sock:
        sock.sendall(data)
        reply = b""
        try:
            while chunk := sock.recv(65536):
                reply += chunk
        except (TimeoutError, ConnectionResetError):
            pass
    return reply
