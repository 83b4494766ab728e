"""The one exception the testbed raises, so callers (CLI, fixtures) can report it cleanly."""


class TestbedError(RuntimeError):
    """A testbed operation failed; the message says what and where to look."""

    __test__ = False  # not a pytest test class despite the name
