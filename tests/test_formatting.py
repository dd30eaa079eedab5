"""The texts every surface shares (formatting.py): durations."""

from __future__ import annotations

from datetime import timedelta

import pytest

from django_openworkflow.formatting import format_duration


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.35, "350 ms"),
        (4.2, "4.2 s"),
        (42, "42 s"),
        (252, "4 m 12 s"),
        (3600, "1 h"),
        (7500, "2 h 5 m"),
        (90000, "1 d 1 h"),
    ],
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(timedelta(seconds=seconds)) == text
