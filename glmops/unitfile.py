"""Values in systemd unit and environment files, escaped by systemd's own rules.

A unit file is read line by line (systemd.syntax(7)): a newline or CR ends the setting and the
next line may be a new `[Section]` or `Key=`, a trailing backslash joins the next line, `%`
starts a specifier in most settings, and in ExecStart= `$` expands a variable and words are
split at spaces unless double-quoted (C escapes inside). Every value glmops writes into a unit
goes through one of the functions below (as Jinja filters in templates/systemd/), which refuse
what cannot be escaped (control characters, a trailing backslash) and escape the rest.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

#: A word ExecStart= takes as is: no quote, space, backslash, specifier or variable.
PLAIN_WORD = re.compile(r"^[A-Za-z0-9_@+=:,./-]+$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class UnitValueError(ValueError):
    """A value that no escaping makes one setting of a unit file."""


def _checked(value: object, *, quoted: bool = True) -> str:
    """The value as text, refused with a control character; unquoted, also with a trailing
    backslash (in quotes it is escaped, and the line ends with the closing quote)."""
    text = str(value)
    bad = next((c for c in text if ord(c) < 32 or ord(c) == 127), None)
    if bad is not None:
        raise UnitValueError(f"control character {bad!r} in a unit file value: {text!r}")
    if not quoted and text.endswith("\\"):
        raise UnitValueError(f"a unit file value ending in a backslash joins lines: {text!r}")
    return text


def unit_value(value: object) -> str:
    """A setting's whole value (User=, WorkingDirectory=, Description=, a comment): one line,
    specifiers escaped."""
    return _checked(value, quoted=False).replace("%", "%%")


def systemd_quote(word: object) -> str:
    """One argv word for ExecStart=/ExecStop=: specifiers (%) and variables ($) escaped, in
    double quotes (C escapes) unless plain."""
    text = _checked(word)
    escaped = text.replace("%", "%%").replace("$", "$$")
    if PLAIN_WORD.match(text):
        return escaped
    return '"' + escaped.replace("\\", "\\\\").replace('"', '\\"') + '"'


def unit_argv(words: Iterable[object]) -> str:
    """A whole command line for ExecStart=."""
    return " ".join(systemd_quote(word) for word in words)


def unit_environment(variables: Mapping[str, object]) -> list[str]:
    """Environment= values, one `"KEY=value"` word each (quoted, specifiers escaped)."""
    lines = []
    for key, value in variables.items():
        if not ENV_NAME.match(str(key)):
            raise UnitValueError(f"{key!r} is not an environment variable name")
        text = f"{key}={_checked(value)}".replace("%", "%%")
        lines.append('"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"')
    return lines


def env_file_quote(value: object) -> str:
    """A value for an EnvironmentFile= line, double-quoted (no expansion happens there)."""
    text = _checked(value)
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


#: The Jinja filters every unit template uses (registered in glmops.engine.templating).
UNIT_FILTERS = {
    "systemd_value": unit_value,
    "systemd_word": systemd_quote,
    "systemd_argv": unit_argv,
    "systemd_environment": unit_environment,
    "env_file_quote": env_file_quote,
}
