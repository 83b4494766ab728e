"""A hostile imitation of the Hub's HTTP API on 127.0.0.1: it lists whatever paths and sizes a
test gives it and serves whatever bodies, as a compromised mirror or Hub account could.

It answers the three calls huggingface_hub and the model_fetch helper make: the model's info
(its commit), the recursive tree listing, and a file's resolve URL.
"""

from __future__ import annotations

import hashlib
import json
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

REPO = "evil/model"
COMMIT = "0" * 40


@dataclass
class Listed:
    """One file the listing names: its path, the size it claims, and the body served."""

    path: str
    body: bytes
    size: int | None = None  # claimed size (default: the body's)
    lfs: bool = True

    def tree_item(self) -> dict:
        size = len(self.body) if self.size is None else self.size
        blob_id = hashlib.sha1(b"blob %d\0" % size + self.body[:size]).hexdigest()  # noqa: S324
        item = {"type": "file", "path": self.path, "size": size, "oid": blob_id}
        if self.lfs:
            sha = hashlib.sha256(self.body[:size]).hexdigest()
            item["lfs"] = {"oid": sha, "size": size, "pointerSize": 130}
        return item


@dataclass
class HostileHub:
    files: list[Listed] = field(default_factory=list)
    endpoint: str = ""

    def url(self, path: str) -> str:
        return f"{self.endpoint}/{REPO}/resolve/{COMMIT}/{urllib.parse.quote(path)}"


@contextmanager
def hostile_hub(files: list[Listed]) -> Iterator[HostileHub]:
    hub = HostileHub(files)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            path = urllib.parse.urlsplit(self.path).path
            if path.startswith(f"/api/models/{REPO}/revision/"):
                return self._json({"id": REPO, "sha": COMMIT, "siblings": []})
            if path.startswith(f"/api/models/{REPO}/tree/"):
                return self._json([f.tree_item() for f in hub.files])
            prefix = f"/{REPO}/resolve/{COMMIT}/"
            if path.startswith(prefix):
                wanted = urllib.parse.unquote(path[len(prefix) :])
                for f in hub.files:
                    if f.path == wanted:
                        return self._body(f.body)
            self.send_error(404)

        def _json(self, doc: object) -> None:
            self._body(json.dumps(doc).encode(), "application/json")

        def _body(self, data: bytes, kind: str = "application/octet-stream") -> None:
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    class Server(ThreadingHTTPServer):
        def handle_error(self, request: object, client_address: object) -> None:
            pass  # a client that hangs up on a body it refuses is the expected outcome

    server = Server(("127.0.0.1", 0), Handler)
    hub.endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield hub
    finally:
        server.shutdown()
        server.server_close()
