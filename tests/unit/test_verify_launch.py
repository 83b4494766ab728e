"""Host checks launch glmops' host helpers as the engine does: arguments on stdin, never argv.

Run for real on this machine through testinfra's `local://` backend; tests/testbed repeats it
over `ssh://` and `glmops://` against a test host.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tests.support.argv_watch import argv_while, leaks

testinfra = pytest.importorskip("testinfra")
from glmops.cli.verify import run_helper  # noqa: E402
from glmops.errors import InputError  # noqa: E402


def slow_python(folder: Path) -> str:
    """A python3 that waits a second first, so the launch is seen in `ps`."""
    path = folder / "python-slow"
    path.write_text('#!/bin/sh\nsleep 1\nexec python3 "$@"\n')
    path.chmod(0o755)
    return str(path)


def test_a_helper_argument_never_appears_in_any_argv(tmp_path: Path) -> None:
    secret = f"glmops-secret-{uuid.uuid4().hex}"
    missing = f"/nonexistent/{secret}"
    host = testinfra.get_host("local://")
    python = slow_python(tmp_path)
    reply, argv = argv_while(lambda: run_helper(host, "file_digests", {"paths": [missing]}, python))
    assert reply["digests"] == {missing: None}, reply  # the argument did reach the helper
    assert any(python in line and "_envelope" in line for line in argv), "launch not seen"
    assert leaks(secret, argv) == []


def test_a_backend_that_cannot_feed_stdin_is_refused() -> None:
    host = testinfra.get_host("docker://nothing-here")
    with pytest.raises(InputError, match="docker://nothing-here: glmops host helpers need"):
        run_helper(host, "file_digests", {"paths": []})
