"""The local connection on its own: the same contract an SSH connection keeps (run with stdin
and a timeout that ends the whole process group, cancel, put, hold), on this machine."""

from __future__ import annotations

import base64
import os
import stat
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from glmops.engine.connect import open_connection
from glmops.engine.connection import (
    ConnectionSettings,
    LocalConnection,
    announce_group,
    quote,
)
from glmops.engine.inventory import ConnectionSpec
from glmops.errors import CommandInterrupted, CommandTimeout


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    return status != "Z"


def test_run_returns_rc_and_both_streams_and_feeds_stdin() -> None:
    conn = LocalConnection("here")
    result = conn.run("read -r line; echo out:$line; echo err >&2; exit 3", stdin="hello\n")
    assert (result.rc, result.stdout, result.stderr, result.ok) == (
        3,
        "out:hello\n",
        "err\n",
        False,
    )
    assert conn.run("cat").stdout == ""  # no stdin given: an empty one, never the terminal


def test_a_timeout_ends_the_whole_process_group(tmp_path: Path) -> None:
    conn = LocalConnection("here")
    pidfile = tmp_path / "child"
    started = time.monotonic()
    with pytest.raises(CommandTimeout):
        conn.run(f"sleep 60 & echo $! > {pidfile}; wait", timeout=1)
    assert time.monotonic() - started < 10
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(child), "the command's child outlived its timeout"


def test_cancel_interrupts_running_and_later_commands_but_not_essential_ones() -> None:
    conn = LocalConnection("here")
    errors: list[BaseException] = []

    def long() -> None:
        try:
            conn.run("sleep 60")
        except BaseException as error:  # noqa: BLE001 - the test inspects it
            errors.append(error)

    worker = threading.Thread(target=long)
    worker.start()
    time.sleep(0.5)
    conn.cancel(grace=1)
    worker.join(10)
    assert not worker.is_alive() and isinstance(errors[0], CommandInterrupted)
    with pytest.raises(CommandInterrupted):
        conn.run("true")
    assert conn.run("echo bookkeeping", essential=True).stdout == "bookkeeping\n"


def test_the_process_group_announcement_is_taken_out_of_stderr() -> None:
    result = LocalConnection("here").run(announce_group("echo visible >&2"))
    assert result.stderr == "visible\n"


def test_put_writes_the_bytes_with_the_mode(tmp_path: Path) -> None:
    target = tmp_path / "uploaded"
    LocalConnection("here").put(b"\x00secret\n", str(target), 0o600)
    assert target.read_bytes() == b"\x00secret\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


def test_hold_returns_the_first_line_and_release_ends_the_command(tmp_path: Path) -> None:
    done = tmp_path / "released"
    line, release = LocalConnection("here").hold(
        f"read -r word; echo held:$word; cat >/dev/null; touch {done}", stdin="it\n"
    )
    assert line == "held:it" and release is not None and not done.exists()
    release()
    assert done.exists()
    refused, none = LocalConnection("here").hold("echo -n no newline; exit 1")
    assert (refused, none) == ("no newline", None)


def test_open_connection_gives_a_local_host_a_local_connection() -> None:
    conn = open_connection("here", ConnectionSpec("here", connection="local"), ConnectionSettings())
    assert isinstance(conn, LocalConnection)
    assert conn.run("echo $((6 * 7))").stdout == "42\n"


@pytest.mark.parametrize("value", ["a b", "it's", "$(touch /tmp/x)", "`id`", "; rm -rf /", "\n"])
def test_quote_makes_any_value_one_inert_word(value: str) -> None:
    result = LocalConnection("here").run(f"printf %s {quote(value)}")
    assert result.stdout == value


def test_known_keys_agree_with_paramiko_and_skip_odd_lines(tmp_path: Path) -> None:
    """The index finds what paramiko's HostKeys finds (plain and hashed names, several names on
    a line, the first key of a type); comments, markers, unknown types and bad lines, on which
    paramiko's loader would raise, are skipped, as OpenSSH skips them."""
    import paramiko

    from glmops.engine import connection

    ecdsa, ed, other = paramiko.ECDSAKey.generate(), _ed25519(), paramiko.ECDSAKey.generate()
    hashed = paramiko.HostKeys.hash_host("10.0.0.9")
    known = tmp_path / "known_hosts"
    known.write_text(
        f"10.0.0.1,alias {ecdsa.get_name()} {ecdsa.get_base64()} a comment\n"
        f"10.0.0.1 {ed.get_name()} {ed.get_base64()}\n"
        f"10.0.0.1 {other.get_name()} {other.get_base64()}\n"
        f"{hashed} {ed.get_name()} {ed.get_base64()}\n"
    )
    names = ("10.0.0.1", "alias", "10.0.0.9", "10.0.0.2")
    theirs = paramiko.HostKeys(str(known))
    ours = {name: connection.known_keys(known, name) for name in names}
    assert ours == {name: dict(theirs.lookup(name) or {}) for name in names}
    assert ours["10.0.0.1"][ecdsa.get_name()] == ecdsa  # the first of its type
    with known.open("a") as more:
        more.write(
            "# a comment\n"
            f"@cert-authority *.example {ecdsa.get_name()} {ecdsa.get_base64()}\n"
            "10.0.0.2 ssh-unknown AAAA\n"
            "10.0.0.2 ssh-ed25519 not-base64!\n"
            "|1|bad|hash ssh-ed25519 AAAA\n"
            "half-a-line\n"
        )
    assert {name: connection.known_keys(known, name) for name in names} == ours


def _ed25519() -> Any:
    """An ed25519 public key for a known_hosts line (paramiko cannot generate one)."""
    import paramiko
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    raw = (
        Ed25519PrivateKey.generate()
        .public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    )
    keytype, text = raw.decode().split()[:2]
    return paramiko.PKey.from_type_string(keytype, base64.b64decode(text))


def test_known_keys_reads_the_file_once_per_version_and_finds_a_host_by_port(
    tmp_path: Path,
) -> None:
    import paramiko

    from glmops.engine import connection

    key = paramiko.ECDSAKey.generate()
    known = tmp_path / "known_hosts"
    known.write_text(
        f"10.0.0.1 {key.get_name()} {key.get_base64()}\n"
        f"[10.0.0.2]:2222 {key.get_name()} {key.get_base64()}\n"
    )
    assert connection.known_keys(known, "10.0.0.1")[key.get_name()] == key
    assert connection.known_keys(known, "[10.0.0.2]:2222")[key.get_name()] == key
    assert connection.known_keys(known, "10.0.0.2") == {}
    parsed = connection._parsed_known_hosts.cache_info().misses
    connection.known_keys(known, "10.0.0.1")
    assert connection._parsed_known_hosts.cache_info().misses == parsed  # not parsed again
    with known.open("a") as more:  # a key recorded: the next lookup reads the new version
        more.write(f"10.0.0.3 {key.get_name()} {key.get_base64()}\n")
    assert connection.known_keys(known, "10.0.0.3")[key.get_name()] == key
    assert connection.known_keys(tmp_path / "missing", "10.0.0.1") == {}
