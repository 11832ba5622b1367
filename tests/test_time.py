"""One time module (``loghandler._time``): the one RFC 3339 form written, and read back."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

import pytest

from loghandler._time import (
    format_datetime,
    format_epoch,
    format_micros,
    format_micros_trimmed,
    parse_micros,
)

UTC = timezone.utc


def test_the_three_writers_agree() -> None:
    """Epoch seconds, epoch microseconds and datetimes give the same text for the same moment."""
    rng = random.Random(7)
    for _ in range(2000):
        us = rng.randrange(-10**15, 4 * 10**15)
        dt = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=us)
        text = format_micros(us)
        assert format_datetime(dt) == text
        assert len(text) == 27 and text.endswith("Z")
        assert parse_micros(text) == us
        # Seconds as a float lose sub-microsecond precision only: within one microsecond.
        assert abs(parse_micros(format_epoch(us / 1e6)) - us) <= 1  # type: ignore[operator]


def test_naive_means_utc_and_offsets_are_converted() -> None:
    assert format_datetime(datetime(2026, 1, 2, 3, 4, 5)) == "2026-01-02T03:04:05.000000Z"
    plus2 = timezone(timedelta(hours=2))
    assert format_datetime(datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=plus2)) == \
        "2026-01-02T01:04:05.000006Z"


@pytest.mark.parametrize(("text", "expected"), [
    ("2026-01-02T03:04:05Z", "2026-01-02T03:04:05.000000Z"),
    ("2026-01-02t03:04:05.123456789z", "2026-01-02T03:04:05.123456Z"),  # nanoseconds cut
    ("2026-01-02T05:04:05.5+02:00", "2026-01-02T03:04:05.500000Z"),
    ("2026-01-02 03:04", "2026-01-02T03:04:00.000000Z"),
    ("2026-01-02", "2026-01-02T00:00:00.000000Z"),
])
def test_parse(text: str, expected: str) -> None:
    us = parse_micros(text)
    assert us is not None and format_micros(us) == expected


@pytest.mark.parametrize("value", ["", "soon", "2026-13-01T00:00:00Z", 12, None])
def test_parse_refuses_what_is_not_a_time(value: object) -> None:
    assert parse_micros(value) is None


@pytest.mark.parametrize("created", [float("nan"), float("inf"), 1e300, "x"])
def test_format_epoch_never_raises(created: object) -> None:
    """A time that is no time stands for now."""
    text = format_epoch(created)  # type: ignore[arg-type]
    us = parse_micros(text)
    now = datetime.now(UTC)
    assert us is not None and abs(us / 1e6 - now.timestamp()) < 60


def test_years_before_1000_have_four_digits() -> None:
    """RFC 3339 has four year digits: the platform's strftime writes fewer on some systems."""
    us = (datetime(999, 12, 31, 23, 59, 59, 5, tzinfo=UTC) - datetime(1970, 1, 1, tzinfo=UTC)
          ) // timedelta(microseconds=1)
    assert format_micros(us) == "0999-12-31T23:59:59.000005Z"
    assert format_epoch(us / 1e6).startswith("0999-12-31T23:59:59.")


def test_trimmed_form_drops_the_fractions_trailing_zeros() -> None:
    assert format_micros_trimmed(1_500_000) == "1970-01-01T00:00:01.5Z"
    assert format_micros_trimmed(2_000_000) == "1970-01-01T00:00:02Z"
    assert format_micros_trimmed(1) == "1970-01-01T00:00:00.000001Z"


def test_a_time_without_an_offset_may_be_refused() -> None:
    """``naive_utc=False``: a local time without its offset is no time (the structlog
    processor then stamps now rather than guess a zone)."""
    assert parse_micros("2026-01-02T03:04:05") == parse_micros("2026-01-02T03:04:05Z")
    assert parse_micros("2026-01-02T03:04:05", naive_utc=False) is None
    assert parse_micros("2026-01-02T03:04:05+01:00", naive_utc=False) == \
        parse_micros("2026-01-02T02:04:05Z")
