"""The remote side's one mechanism: the helper envelope, the launcher and the sudo wrapper."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

from glmops.engine.context import helper_command, helper_stdin, sudo_wrap

#: Host services: run by a systemd unit of their own for as long as it runs, not one request
#: through the envelope (the router gate, templates/systemd/vllm-router-gate.service.j2).
SERVICES = {"router_gate"}
HELPERS = sorted(
    p.name[:-3]
    for p in resources.files("glmops.hosthelpers").iterdir()
    if p.name.endswith(".py") and not p.name.startswith("_") and p.name[:-3] not in SERVICES
)
ENVELOPE = Path(str(resources.files("glmops.hosthelpers").joinpath("_envelope.py")))


def launch(name: str, stdin: str) -> subprocess.CompletedProcess[str]:
    """Run a helper with the engine's launcher, here instead of on a host."""
    return subprocess.run(
        ["sh", "-c", helper_command(name, sys.executable)],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_helpers_are_found() -> None:
    assert {"facts_probe", "gguf_split", "vllm_patch", "vllm_preflight"} <= set(HELPERS)


def test_every_helper_is_launched_through_the_envelope() -> None:
    """Each helper hands its handler to the envelope's main, which reads the arguments."""
    for name in HELPERS:
        source = ENVELOPE.with_name(f"{name}.py").read_text()
        assert "from _envelope import" in source and "main(" in source, name


@pytest.mark.parametrize("name", HELPERS)
def test_every_helper_answers_through_the_envelope(name: str) -> None:
    """Arguments that are not JSON get the envelope's own failed reply from every helper."""
    good = helper_stdin(name, {})
    done = launch(name, "not json" + good[good.index("\n") :])
    assert done.returncode == 0, done.stderr
    (line,) = done.stdout.splitlines()
    assert json.loads(line) == {
        "failed": True,
        "changed": False,
        "msg": "bad JSON args: Expecting value: line 1 column 1 (char 0)",
    }


@pytest.mark.parametrize("mode", ["split", ["merge"], None])
@pytest.mark.parametrize("name", ["gguf_split", "model_files", "vllm_patch"])
def test_an_unknown_mode_is_a_failed_reply_not_a_crash(name: str, mode: object) -> None:
    """A mode that is not a string (a JSON list does not hash) is refused like a wrong name."""
    done = launch(name, helper_stdin(name, {"mode": mode, "path": "unused"}))
    assert done.returncode == 0, done.stderr
    reply = json.loads(done.stdout)
    assert reply == {"failed": True, "changed": False, "msg": f"unknown mode {mode!r}"}


def test_arguments_travel_on_stdin_and_never_in_the_command() -> None:
    secret = "s3cr3t-value"
    command = helper_command("file_digests")
    stdin = helper_stdin("file_digests", {"paths": [f"/nonexistent/{secret}"]})
    assert secret not in command and secret in stdin.splitlines()[0]
    done = launch("file_digests", stdin)
    reply = json.loads(done.stdout)
    assert reply["digests"] == {f"/nonexistent/{secret}": None} and reply["failed"] is False


def write_helper(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "probe_helper.py"
    script.write_text("from _envelope import main\n" + body)
    return script


def run_local(script: Path, args: object) -> subprocess.CompletedProcess[str]:
    """A helper run from a checkout: the envelope importable beside it, arguments on stdin."""
    return subprocess.run(
        [sys.executable, str(script)],
        input=json.dumps(args),
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(ENVELOPE.parent)},
    )


def test_stdout_is_the_reply_alone(tmp_path: Path) -> None:
    script = write_helper(
        tmp_path,
        "import os, sys\n"
        "def h(args):\n"
        "    print('library noise'); sys.stdout.flush(); os.system('echo child noise')\n"
        "    return {'failed': False, 'changed': False, 'msg': 'ok', 'got': args}\n"
        "main(h)\n",
    )
    done = run_local(script, {"a": 1})
    assert json.loads(done.stdout) == {
        "failed": False,
        "changed": False,
        "msg": "ok",
        "got": {"a": 1},
    }
    assert "library noise" in done.stderr and "child noise" in done.stderr


def test_expected_errors_fail_the_reply_and_others_crash(tmp_path: Path) -> None:
    script = write_helper(
        tmp_path,
        "def h(args):\n"
        "    raise (OSError if args['kind'] == 'os' else KeyError)('boom')\n"
        "main(h, expected=(OSError,))\n",
    )
    failed = run_local(script, {"kind": "os"})
    assert failed.returncode == 0
    assert json.loads(failed.stdout) == {"failed": True, "changed": False, "msg": "OSError: boom"}
    crashed = run_local(script, {"kind": "key"})
    assert crashed.returncode == 1 and crashed.stdout == ""
    assert "Traceback" in crashed.stderr and "KeyError: 'boom'" in crashed.stderr


def test_arguments_must_be_an_object(tmp_path: Path) -> None:
    script = write_helper(tmp_path, "main(lambda args: {'failed': False})\n")
    reply = json.loads(run_local(script, [1, 2]).stdout)
    assert reply["failed"] and "must be a JSON object" in reply["msg"]


def test_sudo_wrapper_never_prompts_and_reads_a_password_from_stdin() -> None:
    assert sudo_wrap("id -u", None) == ("sudo -n -H -- /bin/sh -c 'id -u'", None)
    line, stdin = sudo_wrap("echo 'a b'", "pw")
    assert line == "sudo -S -p '' -H -- /bin/sh -c 'echo '\"'\"'a b'\"'\"''" and stdin == "pw\n"
