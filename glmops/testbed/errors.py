"""The one exception the testbed raises, so callers (CLI, fixtures) can report it cleanly."""

from glmops.errors import GlmopsError


class TestbedError(GlmopsError, RuntimeError):
    """A testbed operation failed; the message says what and where to look."""

    __test__ = False  # not a pytest test class despite the name
