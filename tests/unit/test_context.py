"""The task context on its own: the one helper launcher (helper_command, helper_stdin,
helper_reply), the one sudo wrapper (sudo_wrap), and what a task's commands run as."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from glmops.engine.connection import CommandResult, LocalConnection
from glmops.engine.context import (
    RemoteCommandError,
    RemoteInfo,
    TaskContext,
    helper_command,
    helper_reply,
    helper_stdin,
    run_helper_here,
    sudo_wrap,
)
from glmops.engine.inventory import ConnectionSpec, Host
from glmops.engine.runlog import Masker, RunLog

#: Stands in for sudo where this machine has none (tests only): records its options and the
#: password line it reads with -S, then runs the command as it is.
STANDIN_SUDO = """#!/bin/sh
opts=""
while [ "$1" != "--" ]; do opts="$opts $1"; shift; done
shift
printf '%s\\n' "$opts" > {log}/options
case "$opts" in *-S*) IFS= read -r password; printf '%s\\n' "$password" > {log}/password;; esac
exec "$@"
"""


def context(tmp_path: Path, uid: int = 0, **fields: object) -> TaskContext:
    host = Host("here", ["all"], {}, ConnectionSpec("here", connection="local"))
    masker = Masker({str(fields["sudo_password"])} if fields.get("sudo_password") else set())
    log = RunLog(tmp_path / "runs", masker)
    remote = RemoteInfo(uid, str(tmp_path), None)
    return TaskContext(host, LocalConnection("here"), remote, log, masker, **fields)  # type: ignore[arg-type]


def run_log(tmp_path: Path) -> str:
    return "".join(p.read_text() for p in (tmp_path / "runs").rglob("*") if p.is_file())


# -- the helper launcher ----------------------------------------------------------------------


def test_the_launch_command_carries_no_argument() -> None:
    secret = "s3cret-value-in-args"
    command = helper_command("file_digests")
    assert secret not in command and "paths" not in command
    assert command == helper_command("file_digests")  # whatever the arguments, one command line
    assert secret in helper_stdin("file_digests", {"paths": [secret]}).splitlines()[0]


def test_a_helper_gets_its_arguments_exactly_and_replies_in_json(tmp_path: Path) -> None:
    odd = tmp_path / "a file's name with spaces, $(quotes) and ünïcode"
    odd.write_bytes(b"content\n")
    args = {"paths": [str(odd)]}
    ctx = context(tmp_path)
    reply = ctx.run_helper("file_digests", args)
    assert reply["digests"] == {str(odd): hashlib.sha256(b"content\n").hexdigest()}
    assert run_helper_here("file_digests", args) == reply  # this machine's launch is the same


def test_an_expected_failure_is_a_failed_reply_and_a_crash_raises(tmp_path: Path) -> None:
    conn = LocalConnection("here")
    line = helper_command("file_digests")
    bad_args = conn.run(line, stdin=helper_stdin("file_digests", []))  # type: ignore[arg-type]
    reply = helper_reply("file_digests", bad_args)
    assert reply["failed"] is True and "must be a JSON object" in reply["msg"]
    crash = conn.run(line, stdin=helper_stdin("file_digests", {"paths": 5}))
    with pytest.raises(
        RemoteCommandError, match=r"(?s)host helper file_digests failed \(rc=1\).*TypeError"
    ):
        helper_reply("file_digests", crash)


def test_a_reply_must_be_a_json_object_on_the_last_line() -> None:
    noise = CommandResult("x", 0, 'log line\n{"failed": false, "n": 1}\n', "", 0.0)
    assert helper_reply("h", noise) == {"failed": False, "n": 1}
    for stdout in ("", "not json\n", json.dumps([1, 2]) + "\n"):
        with pytest.raises(RemoteCommandError, match="host helper h failed"):
            helper_reply("h", CommandResult("x", 0, stdout, "why", 0.0))


# -- the sudo wrapper -------------------------------------------------------------------------


def test_sudo_wrap_forms() -> None:
    assert sudo_wrap("id -u", None) == ("sudo -n -H -- /bin/sh -c 'id -u'", None)
    assert sudo_wrap("id -u", "pw", "vllm") == (
        "sudo -S -p '' -H -u vllm -- /bin/sh -c 'id -u'",
        "pw\n",
    )


@pytest.fixture
def standin_sudo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "standin-bin"
    folder.mkdir()
    (folder / "sudo").write_text(STANDIN_SUDO.format(log=folder))
    (folder / "sudo").chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:{os.environ['PATH']}")
    return folder


def test_become_goes_through_sudo_with_the_password_ahead_of_the_commands_stdin(
    tmp_path: Path, standin_sudo: Path
) -> None:
    password = "pw-never-in-the-log"
    ctx = context(tmp_path, uid=1000, become=True, sudo_password=password)
    result = ctx.run("read -r x; printf '%s|%s' \"$x\" 'it''s'", stdin="payload\n")
    assert result.stdout == "payload|its"  # the password went to sudo, not to the command
    assert (standin_sudo / "password").read_text() == password + "\n"
    assert (standin_sudo / "options").read_text().split() == ["-S", "-p", "-H"]
    assert password not in run_log(tmp_path)
    ctx = context(tmp_path, uid=1000, become=True)
    assert ctx.run("echo ok").stdout == "ok\n"
    assert (standin_sudo / "options").read_text().split() == ["-n", "-H"]  # no prompt, ever


def test_root_becomes_another_user_without_sudo_and_without_become_runs_as_is(
    tmp_path: Path, standin_sudo: Path
) -> None:
    ctx = context(tmp_path, uid=0, become=True, become_user="nobody")
    assert ctx.run("id -un").stdout == "nobody\n"
    assert context(tmp_path, uid=1000).run("id -u").stdout == "0\n"  # no become: no sudo
    assert not (standin_sudo / "options").exists()


def test_environment_values_reach_the_command_literally(tmp_path: Path) -> None:
    ctx = context(tmp_path, environment={"GREETING": "it's $HOME `id`"})
    assert ctx.run('printf %s "$GREETING"').stdout == "it's $HOME `id`"


def test_write_file_then_stat_and_read_agree(tmp_path: Path) -> None:
    ctx = context(tmp_path)
    dest = str(tmp_path / "out.bin")
    data = b"\x00\x01binary\n"
    ctx.write_file(dest, data, mode="0640", owner=None, group=None, backup=False)
    state = ctx.stat(dest)
    assert state is not None and (state.kind, state.mode) == ("file", "640")
    assert state.sha256 == hashlib.sha256(data).hexdigest()
    assert ctx.read(dest) == data
    assert ctx.stat(str(tmp_path / "missing")) is None and ctx.read(str(tmp_path / "x")) is None
