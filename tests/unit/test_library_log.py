"""A host whose port accepts but never speaks SSH: stderr carries glmops' one `unreachable`
line, and paramiko's own tracebacks of the failed handshake go to the run log."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def silent_listener() -> tuple[socket.socket, threading.Event]:
    """A local TCP port that accepts connections and sends nothing."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    stop = threading.Event()
    held: list[socket.socket] = []

    def accept() -> None:
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue
        for conn in held:
            conn.close()

    threading.Thread(target=accept, daemon=True).start()
    return server, stop


def test_a_mute_ssh_port_prints_one_line_and_logs_the_handshake(tmp_path: Path) -> None:
    server, stop = silent_listener()
    port = server.getsockname()[1]
    (tmp_path / "hosts.yml").write_text(
        f"all:\n  hosts:\n    mute: {{address: 127.0.0.1, port: {port}, connect_timeout: 1}}\n"
    )
    (tmp_path / "play.yml").write_text(
        "- hosts: all\n  gather_facts: false\n  tasks: [{command: 'true'}]\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "GLMOPS_HOME": str(tmp_path / "home")}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "glmops.cli", "run", "play.yml", "-i", "hosts.yml"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        stop.set()
        server.close()
    assert done.returncode == 4, done.stderr
    assert "unreachable mute" in done.stderr
    assert "Traceback" not in done.stderr and "SSHException" not in done.stderr, done.stderr
    logged = "".join(p.read_text() for p in (tmp_path / ".glmops" / "runs").glob("*/paramiko.log"))
    assert "SSH protocol banner" in logged
