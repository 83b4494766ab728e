"""vllm_ready and vllm_soak look at a served model with the same probe (helper vllm_probe):
the unit, /health, /v1/models listing the served name with the API key read from the env file
on the host, one token. Against the vLLM stand-in of tests/support (NOT vLLM: http.server that
answers like vLLM and checks the key) on this machine, through the real helper."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from glmops.engine.context import run_helper_here
from glmops.modules._serving import serving_probe_args
from tests.support.engine import Runner
from tests.support.local_hosts import local_hosts

STANDIN = Path(__file__).parents[1] / "support" / "vllm_standin.py"
KEY = "probe-test-key-0123456789"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[dict[str, object]]:
    """The stand-in serving `tiny` with an API key; the env file holding the key."""
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF" + bytes(60))
    env_file = tmp_path / "vllm.env"
    env_file.write_text(f"VLLM_API_KEY={KEY}\n")
    env_file.chmod(0o600)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [sys.executable, str(STANDIN), "serve", str(model), "--port", str(port)]
    env = {**os.environ, "VLLM_API_KEY": KEY, "GLMOPS_STANDIN_LOAD_S": "0"}
    proc = subprocess.Popen(
        [*argv, "--served-model-name", "tiny"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the stand-in did not come up"
                time.sleep(0.2)
        yield {"port": port, "env_file": str(env_file), "served_model_name": "tiny"}
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.parametrize("completion_timeout", [30, 300])
def test_the_probe_arguments_reach_the_model_with_the_key(
    served: dict[str, object], completion_timeout: int
) -> None:
    params = {"unit": "vllm-probe-test", **served}
    args = serving_probe_args(params, completion=True, completion_timeout=completion_timeout)
    reply = run_helper_here("vllm_probe", args)
    assert reply["health"]["status"] == 200, reply
    assert "tiny" in reply["models"]["ids"], reply
    assert reply["completion"]["status"] == 200, reply


def test_vllm_ready_passes_through_the_engine_and_a_wrong_key_is_refused(
    run_playbook: Runner, served: dict[str, object], tmp_path: Path
) -> None:
    inventory = local_hosts(tmp_path, {"all": ["h"]})
    play = """
    - hosts: all
      gather_facts: false
      tasks:
        - name: ready
          vllm_ready:
            unit: vllm-probe-test
            port: {port}
            served_model_name: tiny
            env_file: {env_file}
            timeout: 60
            interval: 0.2
    """
    ready = run_playbook(play.format(**served), inventory)
    assert ready.exit_code == 0, ready.stderr
    assert "1 token" in ready.results()[-1]["msg"]
    wrong = tmp_path / "wrong.env"
    wrong.write_text("VLLM_API_KEY=not-the-key\n")
    refused = run_playbook(play.format(**{**served, "env_file": wrong}), inventory)
    assert refused.exit_code == 2
    assert "refused the API key" in refused.results()[-1]["msg"]
