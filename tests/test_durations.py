from datetime import timedelta

import pytest

from django_openworkflow.durations import parse_duration


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("250ms", timedelta(milliseconds=250)),
        ("5s", timedelta(seconds=5)),
        ("5m", timedelta(minutes=5)),
        ("1h", timedelta(hours=1)),
        ("1d", timedelta(days=1)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("1h 30m", timedelta(hours=1, minutes=30)),
        ("1.5m", timedelta(seconds=90)),
        ("2 hours", timedelta(hours=2)),
        ("3 days", timedelta(days=3)),
        ("1w", timedelta(weeks=1)),
        ("1y", timedelta(days=365.25)),
        ("1mo", timedelta(days=365.25 / 12)),
        ("1500", timedelta(milliseconds=1500)),
        (1500, timedelta(milliseconds=1500)),
        (0, timedelta(0)),
        (timedelta(seconds=3), timedelta(seconds=3)),
    ],
)
def test_accepted_durations(text, expected):
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    "bad", ["", "abc", "5x", "-5s", "5s garbage", "1h30", "h", None, True, [], float("nan"), -1, timedelta(seconds=-1)]
)
def test_bad_durations_name_the_value(bad):
    with pytest.raises(ValueError) as info:
        parse_duration(bad)
    assert repr(bad) in str(info.value)
