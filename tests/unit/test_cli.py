"""The command line: exit codes, input errors in one line, the retry file, --help."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from glmops.cli import main


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GLMOPS_HOME", str(tmp_path / "home"))
    (tmp_path / "hosts.yml").write_text(
        "all:\n  hosts:\n    good: {connection: local}\n    bad: {connection: local}\n"
    )
    (tmp_path / "play.yml").write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - shell: \"{{ 'exit 1' if inventory_hostname == 'bad' else 'true' }}\"\n"
    )
    return tmp_path


def invoke(*args: str):
    return CliRunner().invoke(main, list(args))


def test_help_lists_the_verbs() -> None:
    result = invoke("--help")
    for verb in (
        "run",
        "provision",
        "deploy",
        "status",
        "verify",
        "facts",
        "patch",
        "unpatch",
        "testbed",
    ):
        assert verb in result.output


def test_failed_host_exit_2_and_retry_file(workdir: Path) -> None:
    result = invoke("run", "play.yml", "-i", "hosts.yml")
    assert result.exit_code == 2
    assert "RECAP" in result.stdout
    assert (workdir / ".glmops" / "last-failed").read_text() == "bad\n"
    retry = invoke("run", "play.yml", "-i", "hosts.yml", "--limit", "@last-failed", "--json")
    assert retry.exit_code == 2
    assert '"host": "good"' not in retry.stdout and '"host": "bad"' in retry.stdout


def test_check_mode_exit_3(workdir: Path) -> None:
    (workdir / "play.yml").write_text(
        "- hosts: good\n  gather_facts: false\n  tasks:\n"
        "    - copy: {dest: '" + str(workdir / "out") + "', content: x}\n"
    )
    assert invoke("run", "play.yml", "-i", "hosts.yml", "--check").exit_code == 3
    assert invoke("run", "play.yml", "-i", "hosts.yml").exit_code == 0
    assert invoke("run", "play.yml", "-i", "hosts.yml", "--check").exit_code == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "play.yml", "-i", "hosts.yml", "--limit", "nobody"], "matches no host"),
        (["run", "play.yml", "-i", "missing.yml"], "missing.yml: cannot read"),
        (["run", "play.yml", "-i", "hosts.yml", "-e", "novalue"], "KEY=VALUE"),
    ],
)
def test_input_errors_exit_5_with_one_line(workdir: Path, args: list[str], message: str) -> None:
    result = invoke(*args)
    assert result.exit_code == 5
    assert message in result.stderr and "Traceback" not in result.stderr
