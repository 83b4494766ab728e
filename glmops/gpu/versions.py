"""Version strings as glmops compares them: by their first two numbers."""

from __future__ import annotations

import re


def major_minor(text: str | None) -> tuple[int, int] | None:
    """The first two numbers of a version ("12.8.1" -> (12, 8), "0.16.0rc1" -> (0, 16),
    "12" -> (12, 0)), or None where there is none."""
    nums = re.findall(r"\d+", text or "")
    return (int(nums[0]), int(nums[1] if len(nums) > 1 else 0)) if nums else None
