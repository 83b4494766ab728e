"""The command line: exit codes, input errors in one line, the retry file, --help."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from glmops.cli.main import main
from glmops.engine.output import SCHEMA


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GLMOPS_HOME", str(tmp_path / "home"))
    (tmp_path / "hosts.yml").write_text(
        f"all:\n  vars: {{state_dir: '{tmp_path}/state'}}\n"
        "  hosts:\n    good: {connection: local}\n    bad: {connection: local}\n"
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
    assert invoke("run", "play.yml", "-i", "hosts.yml", "-C", "-D").exit_code == 0


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


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "nope.yml", "-i", "hosts.yml"], "does not exist"),
        (["run", "play.yml", "--bogus"], "No such option"),
        (["testbed", "up", "-n", "0"], "Invalid value"),
        (["nosuchverb"], "No such command"),
    ],
)
def test_usage_errors_the_cli_library_catches_exit_5(
    workdir: Path, args: list[str], message: str
) -> None:
    result = invoke(*args)
    assert result.exit_code == 5, result.output
    assert message in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "nope.yml", "-i", "hosts.yml", "--json"], "does not exist"),
        (["run", "play.yml", "--json", "--bogus"], "No such option"),
        (["facts", "--json", "-i", "hosts.yml", "--bogus"], "No such option"),
    ],
)
def test_usage_errors_the_cli_library_catches_are_json_events_too(
    workdir: Path, args: list[str], message: str
) -> None:
    result = invoke(*args)
    assert result.exit_code == 5, result.output
    assert message in result.stderr and result.stderr.startswith("error: ")
    [error] = [json.loads(line) for line in result.stdout.splitlines()]
    assert (error["schema"], error["event"], error["exit_code"]) == (SCHEMA, "error", 5)
    assert message in error["msg"]


@pytest.mark.parametrize(
    "args",
    [["doc", "--json"], ["run", "play.yml", "--bogus", "--", "--json"]],
)
def test_a_json_flag_the_command_does_not_take_gives_no_json(
    workdir: Path, args: list[str]
) -> None:
    result = invoke(*args)
    assert result.exit_code == 5, result.output
    assert result.stdout == "" and "Usage:" in result.stderr


def test_a_play_whose_hosts_match_nothing_is_an_error(workdir: Path) -> None:
    (workdir / "play.yml").write_text(
        "- hosts: all\n  gather_facts: false\n  tasks: [{command: 'true'}]\n"
        "- hosts: goood\n  gather_facts: false\n  tasks: [{command: 'true'}]\n"
    )
    result = invoke("run", "play.yml", "-i", "hosts.yml", "--json")
    assert result.exit_code == 5
    assert "play.yml:4: play 'goood': hosts 'goood' matches no host" in result.stderr
    assert '"event": "task"' not in result.stdout, "a play ran before the error"
    [error] = [json.loads(line) for line in result.stdout.splitlines()]
    assert (error["schema"], error["event"], error["exit_code"]) == (SCHEMA, "error", 5)
    assert "matches no host" in error["msg"] and error["time"] > 0


@pytest.mark.parametrize(
    ("task", "message"),
    [
        ("{command: 'true', when: 'flag =='}", "play.yml:4: 'when': template syntax error"),
        ("{command: 'true', when: 'x | bogus_filter'}", "unknown filter 'bogus_filter'"),
        ("{command: 'echo {{ x | nope }}'}", "play.yml:4: arguments of 'command': unknown filter"),
        ("{command: 'true', failed_when: 'x is wobbly'}", "unknown test 'wobbly'"),
    ],
)
def test_expressions_are_checked_when_the_playbook_loads(
    workdir: Path, task: str, message: str
) -> None:
    (workdir / "play.yml").write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n"
        f"    - {{name: first, shell: 'touch {workdir}/ran'}}\n    - {task}\n".replace(
            "    - {name", "    - {name"
        )
    )
    lines = (workdir / "play.yml").read_text().splitlines()
    (workdir / "play.yml").write_text("\n".join([*lines[:3], lines[4], lines[3]]) + "\n")
    result = invoke("run", "play.yml", "-i", "hosts.yml")
    assert result.exit_code == 5, result.output
    assert message in result.stderr
    assert not (workdir / "ran").exists()


def test_syntax_check_list_tasks_and_list_hosts_run_nothing(workdir: Path) -> None:
    (workdir / "play.yml").write_text(
        "- hosts: good\n  gather_facts: false\n  tasks:\n"
        f"    - {{name: make it, shell: 'touch {workdir}/ran', tags: [x]}}\n"
    )
    checked = invoke("run", "play.yml", "--syntax-check", "-i", "missing.yml")
    assert checked.exit_code == 0 and "syntax ok" in checked.stdout
    listed = invoke("run", "play.yml", "--list-tasks")
    assert listed.exit_code == 0 and "make it  (shell, line 4)  TAGS: [x]" in listed.stdout
    hosts = invoke("run", "play.yml", "--list-hosts", "-i", "hosts.yml")
    assert hosts.exit_code == 0 and "  good" in hosts.stdout and "bad" not in hosts.stdout
    assert not (workdir / "ran").exists()


def test_extra_vars_from_a_file_and_from_json(workdir: Path) -> None:
    (workdir / "vars.yml").write_text("word: from-file\n")
    (workdir / "play.yml").write_text(
        "- hosts: good\n  gather_facts: false\n  tasks:\n"
        "    - shell: test {{ word }} = from-file && test {{ nums | sum }} = 3\n"
    )
    result = invoke(
        "run", "play.yml", "-i", "hosts.yml", "-e", "@vars.yml", "-e", '{"nums": [1, 2]}'
    )
    assert result.exit_code == 0, result.output
    bad = invoke("run", "play.yml", "-i", "hosts.yml", "-e", "@nofile.yml")
    assert bad.exit_code == 5 and "nofile.yml: cannot read" in bad.stderr


def test_doc_prints_a_modules_arguments_from_its_table() -> None:
    from glmops.modules import REGISTRY

    result = invoke("doc", "copy")
    assert result.exit_code == 0
    for key, arg in REGISTRY["copy"].args.items():
        assert f"  {key} (" in result.stdout
        if arg.doc:
            assert arg.doc in result.stdout
    assert invoke("doc").stdout.count("\n") == len(REGISTRY)
    missing = invoke("doc", "nosuch")
    assert missing.exit_code == 5 and "no module 'nosuch'" in missing.stderr


HOST_VERBS = ("run", "provision", "deploy", "patch", "unpatch", "up", "preflight", "facts")
HOST_VERBS += ("status", "model")


@pytest.mark.parametrize("verb", [*HOST_VERBS, "verify"])
def test_every_verb_that_reaches_hosts_shares_the_selection_options(verb: str) -> None:
    text = invoke(verb, "--help").output
    inventory = next(line for line in text.splitlines() if "-i, --inventory PATH" in line)
    assert "inventory file (default:" in inventory, text
    assert "-l, --limit TEXT" in text
    if verb != "verify":  # pytest's host checks read the inventory as it is, as root or env
        for option in ("-e, --extra-vars", "-v, --verbose", "-K, --ask-become-pass", "--json"):
            assert option in text, (verb, option)
    if verb in ("run", "provision", "deploy", "patch", "unpatch", "up", "model"):
        assert "-C, --check" in text


def test_facts_take_limit_and_extra_vars(workdir: Path) -> None:
    (workdir / "hosts.yml").write_text(
        f"all:\n  vars: {{state_dir: '{workdir}/state'}}\n"
        "  hosts:\n    a: {address: 192.0.2.1}\n    b: {connection: local}\n"
    )
    result = invoke("facts", "-i", "hosts.yml", "--limit", "a", "-e", "connection=local", "--json")
    assert result.exit_code == 0, result.output
    assert [json.loads(line)["host"] for line in result.stdout.splitlines()] == ["a"]
    assert invoke("status", "-K", "--help").exit_code == 0
    both = invoke("facts", "a", "--limit", "b", "-i", "hosts.yml")
    assert both.exit_code == 5 and "give hosts or --limit, not both" in both.output


def test_python_m_glmops_is_the_cli() -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "glmops", "--help"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and "Usage: glmops [OPTIONS] COMMAND" in done.stdout
