"""Errors the user can act on, and the exit codes a run ends with.

Every error raised for bad input names where the input came from (file and line, host, task),
so the message alone is enough to fix it.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Process exit codes, as an Ansible or pyinfra user expects them."""

    OK = 0
    HOST_FAILED = 2
    CHECK_FOUND_CHANGES = 3
    HOST_UNREACHABLE = 4
    USAGE = 5


class GlmopsError(Exception):
    """Base for errors glmops reports to the user without a traceback."""

    exit_code = ExitCode.USAGE


class InputError(GlmopsError):
    """Bad inventory, playbook or command-line input; `where` says which file and line."""

    def __init__(self, message: str, *, source: str | None = None, line: int | None = None):
        self.source = source
        self.line = line
        super().__init__(message)

    def __str__(self) -> str:
        message = super().__str__()
        if self.source is None:
            return message
        where = self.source if self.line is None else f"{self.source}:{self.line}"
        return f"{where}: {message}"


class TemplateError(GlmopsError):
    """A template or `when` expression failed for one host; names the playbook, task and host."""


class ModuleError(GlmopsError):
    """An expected failure a module reports (a missing file, a refused plan): the task fails
    with this message and no traceback. Any other exception from a module is a bug: the task
    fails with its traceback in the run log (and on stderr under -vv)."""


class HostUnreachable(GlmopsError):
    """The host could not be connected to or authenticated against."""

    exit_code = ExitCode.HOST_UNREACHABLE


class HostKeyChanged(HostUnreachable):
    """The host presented a key other than the recorded one: refuse, and say how to fix it."""

    def __init__(self, host: str, address: str, known_hosts: str, fingerprint: str):
        super().__init__(
            f"REMOTE HOST KEY CHANGED for {host} ({address}): the host presented key "
            f"{fingerprint}, which differs from the key recorded in {known_hosts}. Someone may be "
            "intercepting the connection (man-in-the-middle), or the host was reinstalled. "
            "If you know the host was rebuilt, remove its old key with: "
            f"ssh-keygen -f {known_hosts} -R '{address}' and run again."
        )


class CommandTimeout(GlmopsError):
    """A command on a host ran longer than its timeout."""


class CommandInterrupted(GlmopsError):
    """The run was interrupted (SIGINT, SIGTERM) while a command ran; the command was ended."""
