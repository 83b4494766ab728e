"""The tier summary at the end of a test run files each test under its folder's tier."""

from __future__ import annotations

from tests.conftest import tier_of


def test_tests_are_filed_under_their_folders_tier() -> None:
    assert tier_of("tests/unit/test_cli.py::test_help") == "unit"
    assert tier_of("tests/testbed/test_deploy.py::test_x[a]") == "testbed"
    assert tier_of("tests/security/test_paths.py::test_y") == "security"
    assert tier_of("tests/support/engine.py::x") == "other"
    assert tier_of("elsewhere/test_z.py::test_z") == "other"
