#!/usr/bin/python3
"""TEST STAND-IN for `vllm serve` on testbed hosts. THIS IS NOT vLLM.

Testbed hosts have no GPU and no vLLM, so tests/testbed/test_deploy.py installs this script as
`<vllm_venv>/bin/vllm` to exercise the deploy for real: the unit starts it, restarts it only on
change, and the backend check and readiness wait read what it prints and serves. It prints the
journal lines vLLM 0.16 prints, checks that the model file is a GGUF file,
and serves /health, /v1/models and /v1/completions (one fake token) with http.server, requiring
`Authorization: Bearer $VLLM_API_KEY` on /v1/* like vLLM.

Behaviour switches (environment, set through the deploy's `vllm_env`):
  GLMOPS_STANDIN_BACKEND     the backend name it claims vLLM selected (default TRITON_MLA_SPARSE)
  GLMOPS_STANDIN_NO_BACKEND  "1": print vLLM's "No valid attention backend found" error, exit 1
  GLMOPS_STANDIN_LOAD_S      seconds of pretend loading before HTTP comes up (default 2)
"""

import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

STAMP = time.strftime("%m-%d %H:%M:%S")
REASONS = (
    "{FLASH_ATTN_MLA: [sparse not supported, compute capability not supported], "
    "FLASHMLA: [sparse not supported, compute capability not supported], "
    "FLASHINFER_MLA: [sparse not supported, compute capability not supported], "
    "TRITON_MLA: [sparse not supported], FLASHMLA_SPARSE: [compute capability not supported]}"
)


def log(msg: str, where: str = "api_server.py:1", prefix: str = "") -> None:
    print(f"{prefix}INFO {STAMP} [{where}] {msg}", flush=True)


def main(argv: list) -> int:
    if len(argv) < 2 or argv[0] != "serve":
        print("glmops test stand-in: only `vllm serve MODEL ...` is supported", file=sys.stderr)
        return 2
    model, opts = argv[1], {}
    rest = argv[2:]
    for i, word in enumerate(rest):
        if word.startswith("--"):
            opts[word[2:]] = rest[i + 1] if i + 1 < len(rest) else ""
    log("vLLM API server version 0.16.0 (glmops TEST STAND-IN, not vLLM)")
    log(f"non-default args: {json.dumps({'model': model, **opts}, sort_keys=True)}")
    with open(model, "rb") as f:
        if f.read(4) != b"GGUF":
            print(f"ERROR {STAMP} [gguf.py:1] {model} is not a GGUF file", flush=True)
            return 1
    worker = f"(Worker_TP0 pid={os.getpid()}) "
    if os.environ.get("GLMOPS_STANDIN_NO_BACKEND") == "1":
        print(
            f"{worker}ERROR {STAMP} [core.py:1] ValueError: No valid attention backend found for "
            "cuda with AttentionSelectorConfig(head_size=576, dtype=torch.float16, "
            "kv_cache_dtype=auto, block_size=None, use_mla=True, has_sink=False, use_sparse=True)"
            f". Reasons: {REASONS}.",
            flush=True,
        )
        return 1
    backend = os.environ.get("GLMOPS_STANDIN_BACKEND", "TRITON_MLA_SPARSE")
    log(
        f"Using {backend} attention backend out of potential backends: ['{backend}'].",
        "cuda.py:368",
        worker,
    )
    log("Starting to load model " + model, "gpu_model_runner.py:1", worker)
    time.sleep(float(os.environ.get("GLMOPS_STANDIN_LOAD_S", "2")))
    log("Loading weights took 0.01 seconds", "default_loader.py:1", worker)
    log("Available KV cache memory: 1.00 GiB", "gpu_worker.py:1", worker)
    name = opts.get("served-model-name", model)
    key = os.environ.get("VLLM_API_KEY")

    class Handler(BaseHTTPRequestHandler):
        def _send(self, code: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _authorized(self) -> bool:
            if key and self.headers.get("Authorization") != f"Bearer {key}":
                self._send(401, {"error": "Unauthorized"})
                return False
            return True

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path == "/health":
                self._send(200, {})
            elif self.path == "/v1/models" and self._authorized():
                self._send(200, {"object": "list", "data": [{"id": name, "object": "model"}]})
            elif not self.path.startswith("/v1/"):
                self._send(404, {"error": "not found"})

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            if self.path == "/v1/completions" and self._authorized():
                if body.get("model") != name:
                    self._send(404, {"error": f"model {body.get('model')} not served"})
                else:
                    self._send(200, {"choices": [{"text": " Hello", "index": 0}]})

        def log_message(self, fmt: str, *args) -> None:
            log(f"{self.address_string()} - {fmt % args}", "launcher.py:1")

    server = HTTPServer((opts.get("host", "127.0.0.1"), int(opts.get("port", "8000"))), Handler)
    log(
        "Starting vLLM API server 0 on http://{}:{}".format(*server.server_address[:2]),
        "launcher.py:1",
    )
    log("Application startup complete.", "on.py:1")
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
