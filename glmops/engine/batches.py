"""Serial batches of a play, and when a failed batch stops the play: Ansible's rules.

`serial` is a number, a percentage ("30%") or a ramp list ([1, "25%", "100%"]); each entry is
one batch's size, the last entry repeating until the hosts run out. A percentage is of the
play's host count, rounded down, and at least 1; 0 means every host that is left. After each
batch the play stops when every host of the batch failed, or when more of them failed than
`max_fail_percentage` allows (strictly more, as in Ansible).
"""

from __future__ import annotations

import re
from typing import TypeVar

T = TypeVar("T")

#: One `serial` entry: a host count, or a percentage of the play's hosts ("30%").
SerialEntry = int | str

_PERCENT = re.compile(r"\s*(\d+(?:\.\d+)?)\s*%\s*")


def serial_entries(value: object) -> list[SerialEntry]:
    """`serial:` as a list of entries; ValueError says what is wrong with it."""
    entries = value if isinstance(value, list) else [value]
    if not entries:
        raise ValueError("'serial' must not be an empty list")
    for entry in entries:
        if isinstance(entry, bool) or not isinstance(entry, int | str):
            raise ValueError(_serial_problem(entry))
        if isinstance(entry, int) and entry < 0:
            raise ValueError(_serial_problem(entry))
        if isinstance(entry, str) and not _percent_ok(entry):
            raise ValueError(_serial_problem(entry))
    return list(entries)


def _percent_ok(text: str) -> bool:
    match = _PERCENT.fullmatch(text)
    return match is not None and 0 < float(match.group(1)) <= 100


def _serial_problem(entry: object) -> str:
    return (
        f"'serial' entry {entry!r} is not a host count (0 or more) or a percentage "
        'above 0% and up to 100% (like "30%")'
    )


def batch_size(entry: SerialEntry, host_count: int) -> int:
    """How many hosts one entry takes: a percentage of the play's host count, rounded down
    but at least 1; 0 takes every host that is left."""
    if isinstance(entry, str):
        match = _PERCENT.fullmatch(entry)
        assert match is not None, entry
        return max(int(float(match.group(1)) / 100 * host_count), 1)
    return entry


def split(hosts: list[T], serial: list[SerialEntry] | None) -> list[list[T]]:
    """The play's hosts in batches, in order; one batch of all of them without `serial`."""
    if not serial:
        return [list(hosts)] if hosts else []
    left, batches, index = list(hosts), [], 0
    while left:
        size = batch_size(serial[index], len(hosts))
        size = len(left) if size <= 0 else size
        batches.append(left[:size])
        left = left[size:]
        index = min(index + 1, len(serial) - 1)
    return batches


def max_fail_percentage(value: object) -> float:
    """`max_fail_percentage:` as a number from 0 to 100 (a "30%" string is accepted too)."""
    if isinstance(value, str) and (match := _PERCENT.fullmatch(value)):
        value = float(match.group(1))
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 100:
        raise ValueError(f"'max_fail_percentage' must be a number from 0 to 100, not {value!r}")
    return float(value)


def stop_reason(batch_size: int, failed: int, max_fail: float | None) -> str | None:
    """Why the play stops after a batch with `failed` of `batch_size` hosts failed, or None."""
    if max_fail is not None and failed * 100 > max_fail * batch_size:
        share = 100 * failed / batch_size
        return (
            f"{failed} of {batch_size} host(s) failed ({share:.0f}%), "
            f"more than max_fail_percentage {max_fail:g}"
        )
    if batch_size and failed == batch_size:
        return f"every host of the batch failed ({failed} of {batch_size})"
    return None
