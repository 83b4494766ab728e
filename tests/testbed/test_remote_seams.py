"""The remote seams against one real test host (tb241), over real SSH.

Host checks launch helpers as the engine does: nothing of a helper's arguments (nor the sudo
password) in any process's argv, on the controller or on the host, through testinfra's `ssh://`
backend (as root, and as a sudo user with --sudo) and glmops' own `glmops://` backend. The SSH
connection keeps the contract tests/unit/test_connection.py checks on the local one.
"""

from __future__ import annotations

import hashlib
import os
import stat
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from glmops.engine.connect import open_connection
from glmops.engine.connection import ConnectionSettings, SSHConnection
from glmops.engine.inventory import ConnectionSpec
from glmops.errors import CommandTimeout
from glmops.testbed import Testbed
from glmops.testbed.inventory import host_address
from glmops.testbed.rootfs import DEPLOY_PASSWORD, DEPLOY_USER
from tests.support.argv_watch import argv_while, leaks
from tests.support.testbed import booted

testinfra = pytest.importorskip("testinfra")
from glmops.cli.verify import INVENTORY_ENV, run_helper  # noqa: E402

pytestmark = pytest.mark.testbed
FIRST = 241
HOST = f"tb{FIRST}"
SLOW_PYTHON = "/usr/local/bin/python-slow"  # waits a second, so the launch is seen in `ps`
ROOT_ONLY = "/root/.ssh/authorized_keys"  # a digest of it proves the helper ran as root
SSH_OPTIONS = "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR"


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    with booted(tmp_path_factory.mktemp("checks-launch"), FIRST) as testbed:
        script = f"printf '#!/bin/sh\\nsleep 1\\nexec python3 \"$@\"\\n' > {SLOW_PYTHON}"
        testbed.exec(HOST, ["sh", "-c", f"{script} && chmod 755 {SLOW_PYTHON}"])
        yield testbed


def launch(host: object, secret: str) -> tuple[dict, set[str]]:
    missing = f"/nonexistent/{secret}"
    args = {"paths": [missing, ROOT_ONLY]}
    reply, argv = argv_while(lambda: run_helper(host, "file_digests", args, SLOW_PYTHON))
    assert reply["digests"][missing] is None, reply  # the argument did reach the helper
    assert reply["digests"][ROOT_ONLY], f"helper did not run as root: {reply}"
    assert any(SLOW_PYTHON in line and "_envelope" in line for line in argv), "launch not seen"
    return reply, argv


@pytest.mark.parametrize("user", ["root", DEPLOY_USER])
def test_ssh_backend_keeps_arguments_and_password_out_of_argv(
    bed: Testbed, user: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GLMOPS_BECOME_PASSWORD", DEPLOY_PASSWORD)
    host = testinfra.get_host(
        f"ssh://{user}@{host_address(FIRST)}",
        ssh_identity_file=str(bed.key_path),
        ssh_extra_args=SSH_OPTIONS,
        sudo=user != "root",
    )
    secret = f"glmops-secret-{uuid.uuid4().hex}"
    _, argv = launch(host, secret)
    assert leaks(secret, argv) == []
    assert leaks(DEPLOY_PASSWORD, argv) == []


def test_glmops_backend_keeps_arguments_and_password_out_of_argv(
    bed: Testbed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inventory = tmp_path / "hosts.yml"
    key = bed.key_path
    inventory.write_text(
        f"all:\n  hosts:\n    {HOST}: {{address: {host_address(FIRST)}, user: {DEPLOY_USER}, "
        f"key_file: {key}, become: true}}\n"
    )
    monkeypatch.setenv(INVENTORY_ENV, str(inventory))
    monkeypatch.setenv("GLMOPS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("GLMOPS_BECOME_PASSWORD", DEPLOY_PASSWORD)
    host = testinfra.get_host(f"glmops://{HOST}")
    secret = f"glmops-secret-{uuid.uuid4().hex}"
    _, argv = launch(host, secret)
    assert leaks(secret, argv) == []
    assert leaks(DEPLOY_PASSWORD, argv) == []


@pytest.fixture
def ssh(bed: Testbed, tmp_path: Path) -> Iterator[SSHConnection]:
    spec = ConnectionSpec(host_address(FIRST), user="root", key_file=str(bed.key_path))
    conn = open_connection(HOST, spec, ConnectionSettings(known_hosts=tmp_path / "known_hosts"))
    assert isinstance(conn, SSHConnection)
    yield conn
    conn.close()


def test_ssh_run_returns_rc_and_both_streams_and_feeds_stdin(ssh: SSHConnection) -> None:
    result = ssh.run("read -r line; echo out:$line; echo err >&2; exit 3", stdin="hello\n")
    assert (result.rc, result.stdout, result.stderr) == (3, "out:hello\n", "err\n")
    assert ssh.run("cat", timeout=30).stdout == ""  # no stdin given: an empty one


def test_ssh_timeout_ends_the_whole_process_group_on_the_host(
    bed: Testbed, ssh: SSHConnection
) -> None:
    with pytest.raises(CommandTimeout):
        ssh.run("sleep 60 & echo $! > /tmp/seams-child; wait", timeout=2)
    child = bed.exec(HOST, ["cat", "/tmp/seams-child"]).stdout.strip()
    assert child, "the command never started"
    alive = bed.exec(HOST, ["sh", "-c", f"sleep 1; kill -0 {child}"]).returncode == 0
    assert not alive, "the command's child outlived its timeout"


def test_ssh_put_writes_the_bytes_with_the_mode(bed: Testbed, ssh: SSHConnection) -> None:
    ssh.put(b"\x00secret\n", "/tmp/seams-upload", 0o600)
    mode = bed.exec(HOST, ["stat", "-c", "%a", "/tmp/seams-upload"]).stdout.strip()
    assert mode == f"{stat.S_IMODE(0o600):o}"
    assert bed.exec(HOST, ["cat", "/tmp/seams-upload"], input=b"").stdout == b"\x00secret\n"


def test_ssh_puts_from_many_threads_at_once_all_land(bed: Testbed, ssh: SSHConnection) -> None:
    """Tasks delegated to one host share its connection, and so its one SFTP session: uploads
    from several threads at once must each land whole (unserialised, they fail or hang)."""
    payloads = {f"/tmp/seams-many-{i}": bytes([i]) * (1000 + 4099 * i) for i in range(24)}
    errors: list[BaseException] = []

    def put(path: str, data: bytes) -> None:
        try:
            ssh.put(data, path, 0o640)
        except BaseException as error:  # noqa: BLE001 - every failure is the test's finding
            errors.append(error)

    threads = [threading.Thread(target=put, args=item, daemon=True) for item in payloads.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads), "an upload hung"
    assert errors == []
    for path, data in payloads.items():
        assert bed.exec(HOST, ["cat", path], input=b"").stdout == data, path


def test_ssh_put_of_many_writes_lands_whole_and_a_failed_write_raises(
    bed: Testbed, ssh: SSHConnection
) -> None:
    """A put goes as pipelined 32 KiB writes: all of them land in order, and a write the host
    refuses (/dev/full: no space left) still fails the put, though its reply comes later."""
    data = os.urandom(5 << 20)
    ssh.put(data, "/tmp/seams-large", 0o600)
    there = bed.exec(HOST, ["sha256sum", "/tmp/seams-large"]).stdout.split()[0]
    assert there == hashlib.sha256(data).hexdigest()
    with pytest.raises(OSError):
        ssh.put(os.urandom(1 << 20), "/dev/full", 0o666)  # the guest's own /dev
