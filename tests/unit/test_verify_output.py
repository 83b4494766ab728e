"""`glmops verify` on a host whose check fails: the failure says why, with no secret in it
(plain and --json, whose stdout is only `check` events), over the real launcher and the host
checks themselves (local connection)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("testinfra")

from glmops.engine.output import SCHEMA  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TOKEN = "hf_LeakCheck12345678"
PASSWORD = "Become-LeakCheck-9876"


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def verify(tmp_path: Path):
    """Runs `glmops verify here -k health` (nothing listens on the port: the check fails)."""
    (tmp_path / "inv.yml").write_text(
        "all:\n  hosts:\n    here: {connection: local, "
        f"hf_token: {TOKEN}, vllm_port: {closed_port()}}}\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "GLMOPS_HOME": str(tmp_path / "home"),
        "GLMOPS_BECOME_PASSWORD": PASSWORD,
    }

    def run(*extra: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "glmops.cli", "verify", "here", "-i", "inv.yml"]
        return subprocess.run(
            [*argv, "-k", "health", *extra],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip

    return run


def test_a_failed_check_shows_no_secret(verify) -> None:
    done = verify()
    assert done.returncode == 2, done.stdout + done.stderr
    shown = done.stdout + done.stderr
    assert "test_health_200" in shown and "Connection refused" in shown
    assert "'hf_token': '********'" in shown  # the hostvars fixture, as the traceback shows it
    assert TOKEN not in shown and PASSWORD not in shown


def test_json_results_show_no_secret(verify) -> None:
    done = verify("--json")
    assert done.returncode == 2, done.stdout + done.stderr
    assert TOKEN not in done.stdout + done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]  # JSON, and only JSON
    assert {(e["schema"], e["event"], e["host"]) for e in events} == {(SCHEMA, "check", "here")}, (
        events
    )
    failed = [e for e in events if e["outcome"] == "failed" and e["time"] > 0]
    assert failed and "Connection refused" in failed[0]["why"]
