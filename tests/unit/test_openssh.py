"""Where shared SSH connections keep their sockets: a folder of the user's alone."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from glmops.engine import openssh
from glmops.errors import HostUnreachable


@pytest.fixture
def short(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A runtime folder with a name short enough for sockets under it."""
    runtime = Path(tempfile.mkdtemp(prefix="rt-", dir="/tmp"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    yield runtime
    shutil.rmtree(runtime)


def test_sockets_live_in_a_folder_only_the_user_can_enter(short: Path) -> None:
    runtime = short
    (runtime / "glmops" / "ssh").mkdir(parents=True, mode=0o755)  # too open: tightened
    folder = openssh.control_dir()
    assert folder == runtime / "glmops" / "ssh"
    assert folder.stat().st_mode & 0o777 == 0o700


def test_a_path_too_long_for_a_socket_name_falls_back_to_tmp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    deep = tmp_path / ("d" * 80)
    deep.mkdir()
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(deep))
    folder = openssh.control_dir()
    assert folder == Path(f"/tmp/glmops-ssh-{os.getuid()}")
    assert folder.stat().st_mode & 0o777 == 0o700


@pytest.mark.skipif(os.geteuid() != 0, reason="makes a folder another user owns")
def test_a_folder_of_another_user_is_refused(short: Path) -> None:
    (short / "glmops" / "ssh").mkdir(parents=True)
    os.chown(short / "glmops" / "ssh", 65534, 65534)
    with pytest.raises(HostUnreachable, match="not a folder of this user's"):
        openssh.control_dir()
