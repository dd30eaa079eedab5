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


@pytest.mark.parametrize("huge", ["99999y", "9999999999y", 1e300, "1" * 400 + "ms", timedelta(days=400_000)])
def test_durations_past_a_thousand_years_are_a_clear_error_not_an_overflow(huge):
    with pytest.raises(ValueError, match="longer than 1000 years"):
        parse_duration(huge)


def test_a_thousand_years_is_still_accepted():
    assert parse_duration("1000y") == timedelta(days=365250)
