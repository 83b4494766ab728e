"""What hosts say reaches the controller's terminal as text: control characters (an escape
sequence that retitles the window, clears a line or moves the cursor; a carriage return that
overwrites a line) are shown as Python escapes, in task lines, notes, -vv details and the
CLI's error line."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from glmops.cli.options import fail
from glmops.engine.output import Reporter
from glmops.engine.results import Status, TaskResult
from glmops.engine.runlog import Masker
from glmops.errors import GlmopsError
from tests.support.engine import Runner

#: Retitle the window, clear the line, a C1 CSI, a carriage return, a bell.
PAYLOAD = "\x1b]0;owned\x07\x1b[2K\x9b31m\rfake: ok"
RAW = ("\x1b", "\x9b", "\r", "\x07")


def test_host_output_in_a_failed_task_line_is_escaped(
    run_playbook: Runner, local_inventory: Path, hostile
) -> None:
    play = """
- hosts: all
  gather_facts: false
  tasks:
    - name: hostile output
      shell: |
        printf '\\033]0;owned\\007\\033[2K\\r' >&2; printf 'x\\033[2J'; exit 3
"""
    outcome = run_playbook(play, local_inventory)
    shown = outcome.stderr
    hostile.check(
        "control characters in a failed command's output",
        outcome.exit_code != 0 and not any(c in shown for c in RAW) and "\\x1b" in shown,
        repr(shown[-400:]),
    )


def test_reporter_lines_show_control_characters_as_escapes(hostile) -> None:
    out, err = io.StringIO(), io.StringIO()
    reporter = Reporter(Masker(set()), verbosity=2, stdout=out, stderr=err)
    result = TaskResult(
        Status.FAILED, PAYLOAD, data={"cmd": "x", "rc": 1, "stdout": PAYLOAD, "stderr": PAYLOAD}
    )
    reporter.task("h1", "probe", result)
    reporter.note(f"helper said: {PAYLOAD} [bold]markup[/]", "h1")
    text = err.getvalue() + out.getvalue()
    hostile.check(
        "control characters in task, -vv and note lines",
        not any(c in text for c in RAW) and text.count("\\x1b") >= 8 and "[bold]markup[/]" in text,
        repr(text),
    )


def test_the_cli_error_line_is_escaped(capsys: pytest.CaptureFixture[str], hostile) -> None:
    """A helper's refusal ends the command as one error line (options.fail)."""
    with pytest.raises(SystemExit):
        fail(GlmopsError(f"host said: {PAYLOAD}"), 2, as_json=False)
    shown = capsys.readouterr().err
    hostile.check(
        "control characters in the CLI's error line",
        not any(c in shown for c in RAW) and "\\x1b]0;owned" in shown,
        repr(shown),
    )
