"""Commands glmops starts on the controller never inherit the secrets glmops reads from its
environment: masking goes by exact value, and a child can print one transformed."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from glmops.cli.main import main
from glmops.engine.secretenv import SECRET_ENV

SECRET = "Sup3rSecretBecome-42"


@pytest.mark.parametrize("where", ["connection: local", "delegate_to: localhost"])
def test_local_commands_never_see_glmops_secret_variables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GLMOPS_HOME", str(tmp_path / "home"))
    for name in SECRET_ENV:
        monkeypatch.setenv(name, f"{SECRET}-{name}")
    monkeypatch.setenv("GLMOPS_CANARY", "plain-value-here")  # the rest of the env still passes
    delegate = "\n      delegate_to: localhost" if where.startswith("delegate") else ""
    (tmp_path / "hosts.yml").write_text(
        f"all:\n  vars: {{state_dir: '{tmp_path}/state'}}\n"
        "  hosts:\n    here: {connection: local}\n"
    )
    (tmp_path / "play.yml").write_text(
        f"- hosts: all\n  gather_facts: false\n  tasks:\n    - shell: env | rev{delegate}\n"
    )
    result = CliRunner().invoke(main, ["run", "play.yml", "-i", "hosts.yml", "-vv"])
    assert result.exit_code == 0, result.output
    assert "plain-value-here"[::-1] in result.output
    assert SECRET[::-1] not in result.output
