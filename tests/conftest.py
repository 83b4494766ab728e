"""Shared fixtures: run playbooks through the real engine and read back what happened."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.engine import Runner, playbook_runner


@pytest.fixture
def run_playbook(tmp_path: Path) -> Runner:
    """Run playbook text against an inventory file; returns exit code, events and stderr."""
    return playbook_runner(tmp_path)


@pytest.fixture
def local_inventory(tmp_path: Path) -> Path:
    path = tmp_path / "hosts.yml"
    path.write_text(
        f"all:\n  vars: {{root: '{tmp_path}/root', state_dir: '{tmp_path}/state'}}\n"
        "  hosts:\n    here: {connection: local}\n"
    )
    (tmp_path / "root").mkdir()
    return path
