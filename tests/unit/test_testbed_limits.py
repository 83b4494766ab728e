"""`glmops testbed up` at fleet size: the inotify limits it raises (or the sysctl it asks for),
and testbed/CLI errors as one clean line with exit 5."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from glmops.cli.main import main
from glmops.testbed.core import INOTIFY, ensure_inotify, inotify_needs, raise_limits
from glmops.testbed.errors import TestbedError

INSTANCES, WATCHES = "fs/inotify/max_user_instances", "fs/inotify/max_user_watches"


def _sysctl_tree(tmp_path: Path, instances: int, watches: int) -> Path:
    (tmp_path / "fs" / "inotify").mkdir(parents=True)
    (tmp_path / INSTANCES).write_text(f"{instances}\n")
    (tmp_path / WATCHES).write_text(f"{watches}\n")
    return tmp_path


def test_stock_limits_are_too_low_for_64_hosts_and_grow_with_the_count() -> None:
    stock = {INSTANCES: 128, WATCHES: 8192}
    needs = inotify_needs(64, stock)
    assert needs[INSTANCES] >= 128 + 64 * 8 and needs[WATCHES] > 8192
    assert inotify_needs(64, needs) == {}, "raised limits must be enough"
    assert inotify_needs(128, needs)[INSTANCES] > needs[INSTANCES]
    generous = {name: 10**7 for name in INOTIFY}
    assert inotify_needs(200, generous) == {}, "never lowers a limit"


def test_up_raises_the_limits_it_needs(tmp_path: Path) -> None:
    root = _sysctl_tree(tmp_path, 128, 8192)
    ensure_inotify(64, root)
    assert int((root / INSTANCES).read_text()) == inotify_needs(64, {})[INSTANCES]
    assert int((root / WATCHES).read_text()) == inotify_needs(64, {})[WATCHES]


def _refuse(name: str, value: int) -> None:
    raise PermissionError(30, "Read-only file system", name)  # as a container's /proc/sys


def test_up_refuses_with_the_sysctl_when_it_cannot_set_them() -> None:
    stock = {INSTANCES: 128, WATCHES: 10**7}
    failed = raise_limits(64, stock, _refuse)
    assert failed == [f"fs.inotify.max_user_instances={inotify_needs(64, stock)[INSTANCES]}"]
    assert raise_limits(3, stock, _refuse) == [], "a few hosts fit the stock limit"


def test_the_refusal_names_the_sysctl(tmp_path: Path) -> None:
    root = _sysctl_tree(tmp_path, 128, 10**7)
    (root / INSTANCES).unlink()
    (root / INSTANCES).mkdir()  # neither readable as a number nor writable
    with pytest.raises(TestbedError, match=r"sysctl -w fs\.inotify\.max_user_instances=\d+$"):
        ensure_inotify(64, root)


def test_testbed_errors_are_one_line_with_exit_5() -> None:
    result = CliRunner().invoke(main, ["testbed", "up", "--gpu-profile", "no-such-gpu"])
    assert result.exit_code == 5
    assert "unknown GPU profile 'no-such-gpu'" in result.stderr
    assert "Traceback" not in result.output


def test_os_errors_from_the_machine_are_one_line_with_exit_5(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from glmops.testbed import Testbed

    def refuse(self) -> None:
        raise PermissionError(13, "Permission denied", "/var/lib/glmops-testbed")

    monkeypatch.setattr(Testbed, "down", refuse)
    result = CliRunner().invoke(main, ["testbed", "down"])
    assert result.exit_code == 5
    assert "Permission denied" in result.stderr and "Traceback" not in result.output
