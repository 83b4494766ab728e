"""Serial batches and the stop rule (glmops/engine/batches.py), case by case.

The expected batch sizes were worked out by hand from Ansible's rules: a percentage is of the
play's whole host count, rounded down, at least 1; the last ramp entry repeats; 0 takes the rest.
"""

from __future__ import annotations

import pytest

from glmops.engine import batches

SPLITS = [
    # (serial as written, host count, batch sizes)
    (None, 5, [5]),
    (None, 0, []),
    (1, 3, [1, 1, 1]),
    (2, 5, [2, 2, 1]),
    (10, 3, [3]),
    (0, 4, [4]),
    ("30%", 10, [3, 3, 3, 1]),
    ("30%", 3, [1, 1, 1]),  # 0.9 rounds down to 0, then at least 1
    ("50%", 5, [2, 2, 1]),  # 2.5 rounds down
    ("100%", 7, [7]),
    ("12.5%", 16, [2] * 8),
    ([1, "25%", "100%"], 8, [1, 2, 5]),
    ([1, "25%", "100%"], 3, [1, 1, 1]),  # 25% of 3 is 0.75: at least 1, and 100% takes the rest
    ([1, 2], 7, [1, 2, 2, 2]),  # the last entry repeats until the hosts run out
    ([1, 0], 5, [1, 4]),
    ([2, "10%"], 4, [2, 1, 1]),
    (["20%", 3], 10, [2, 3, 3, 2]),
]


@pytest.mark.parametrize(("serial", "count", "sizes"), SPLITS)
def test_split(serial: object, count: int, sizes: list[int]) -> None:
    hosts = [f"h{i}" for i in range(count)]
    entries = None if serial is None else batches.serial_entries(serial)
    split = batches.split(hosts, entries)
    assert [len(batch) for batch in split] == sizes
    assert [host for batch in split for host in batch] == hosts, "order or hosts lost"


@pytest.mark.parametrize(
    "serial", ["abc", "30", "0%", "150%", "-5%", -1, True, 1.5, [], [1, "x"], {"a": 1}, None]
)
def test_bad_serial_is_refused(serial: object) -> None:
    with pytest.raises(ValueError, match="serial"):
        batches.serial_entries(serial)


@pytest.mark.parametrize(
    ("value", "expected"), [(0, 0.0), (30, 30.0), (100, 100.0), (12.5, 12.5), ("30%", 30.0)]
)
def test_max_fail_percentage(value: object, expected: float) -> None:
    assert batches.max_fail_percentage(value) == expected


@pytest.mark.parametrize("value", [150, -1, "abc", True, "101%", [30]])
def test_bad_max_fail_percentage(value: object) -> None:
    with pytest.raises(ValueError, match="max_fail_percentage"):
        batches.max_fail_percentage(value)


STOPS = [
    # (batch size, failed, max_fail_percentage, stops)
    (3, 0, None, False),
    (3, 1, None, False),
    (3, 3, None, True),  # every host of the batch failed: Ansible stops without a percentage
    (1, 1, None, True),
    (3, 1, 30, True),  # 33% > 30%
    (3, 1, 34, False),
    (2, 1, 50, False),  # exactly 50%: not strictly more
    (4, 3, 50, True),
    (1, 0, 0, False),
    (5, 1, 0, True),
    (10, 1, 10, False),
    (10, 2, 10, True),
]


@pytest.mark.parametrize(("size", "failed", "limit", "stops"), STOPS)
def test_stop_reason(size: int, failed: int, limit: float | None, stops: bool) -> None:
    reason = batches.stop_reason(size, failed, limit)
    assert (reason is not None) == stops, reason
    if reason:
        assert f"{failed} of {size}" in reason
