"""Testbed fixtures: real systemd + sshd hosts (systemd-nspawn), shared by the session."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from glmops.testbed import Testbed
from tests.support.testbed import booted

ENGINE_FIRST_INDEX = 11  # tb11..: clear of the CLI's tb1.. and the testbed's own tests (tb101..)


@pytest.fixture(scope="session")
def cpu_wheelhouse() -> Path:
    """vLLM's CPU build, its CPU torch and dependencies (glmops/gpu/wheelcache.py), downloaded from
    PyPI once per machine; skips the tests that need it when it cannot be built here."""
    from glmops.gpu import wheelcache

    try:
        return wheelcache.cpu_wheelhouse()
    except RuntimeError as error:
        pytest.skip(f"no CPU wheelhouse: {error}")


@pytest.fixture(scope="session")
def testbed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    # internet: NAT and forwarding, so hosts reach Debian's mirror (apt tests) and each other
    # (jump-host tests); test traffic itself only ever goes to the test hosts.
    with booted(
        tmp_path_factory.mktemp("engine-testbed"), ENGINE_FIRST_INDEX, 3, internet=True
    ) as bed:
        yield bed


@pytest.fixture(scope="session")
def hosts(testbed: Testbed) -> list[str]:
    return [f"tb{ENGINE_FIRST_INDEX + i}" for i in range(3)]


@pytest.fixture
def inventory(testbed: Testbed, tmp_path: Path) -> Path:
    """A copy of the testbed's inventory that a test may add hosts or variables to."""
    path = tmp_path / "hosts.yml"
    shutil.copy(testbed.inventory_path, path)
    return path
