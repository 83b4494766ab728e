"""Testbed helpers: boot test hosts of one's own, read their files without SSH."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from glmops.testbed import Testbed


def require_testbed() -> None:
    """Skip, saying why, where test hosts cannot be booted."""
    if os.geteuid() != 0:
        pytest.skip("testbed tests need root (network namespaces, systemd-nspawn)")
    if shutil.which("systemd-nspawn") is None or shutil.which("debootstrap") is None:
        pytest.skip("testbed tools missing: apt-get install debootstrap systemd-container")


@contextmanager
def booted(
    state_dir: Path,
    first_index: int,
    n: int = 1,
    gpu_profile: str | None = None,
    *,
    internet: bool = False,
) -> Iterator[Testbed]:
    """A testbed of its own (tb<first_index>.. in state_dir), always taken down afterwards.

    Each test module picks its own first_index so that modules never share a host name.
    """
    require_testbed()
    bed = Testbed(state_dir, first_index=first_index)
    try:
        bed.up(n, gpu_profile, internet=internet)
        yield bed
    finally:
        bed.down()


def host_read(testbed: Testbed, host: str, path: str) -> str | None:
    """Read a file on a test host without SSH (nsenter), to check glmops' work independently."""
    result = testbed.exec(host, ["cat", path])
    return result.stdout if result.returncode == 0 else None
