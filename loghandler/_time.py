"""Times as text: RFC 3339, UTC, six fraction digits, ``Z`` (``2026-11-21T23:52:40.123456Z``).

One module for the one form every part of the package writes times in (the engine's ``_time``,
the structlog processor's ``timestamp``, the client's query bounds, the local service's stored
times, the command line's ``tail``) and for reading them back. Every writer here ends in
``_second`` (the date and time of day of an epoch second) and the fraction tables; the compiled
hot path has one twin of it (``format_epoch`` in ``_speedups.c``), proved equal by
tests/test_speedups.py. It imports nothing of the package.
"""

from __future__ import annotations

import math
import re
import time
from datetime import datetime, timedelta, timezone
from typing import Any

__all__ = ["format_datetime", "format_epoch", "format_micros", "format_micros_trimmed",
           "parse_micros"]

_UTC = timezone.utc
_EPOCH = datetime(1970, 1, 1, tzinfo=_UTC)
_ONE_US = timedelta(microseconds=1)
# A date, or a date and a time (seconds optional), an optional fraction and an optional zone.
_RFC3339 = re.compile(r"(\d{4}-\d\d-\d\d(?:[Tt ]\d\d:\d\d(?::\d\d)?)?)(?:\.(\d+))?"
                      r"([Zz]|[+-]\d\d:?\d\d)?")

# The fraction of a second as two table lookups, and the second by math.floor: the flusher's
# item_events runs 30 % faster than with "%06d" and int() (measured, 5,000-event batches).
MILLIS = tuple(".%03d" % i for i in range(1000))
MICROS_Z = tuple("%03dZ" % i for i in range(1000))
# (second, its "YYYY-MM-DDTHH:MM:SS") of the last second written: most times in a burst share
# it. One tuple, replaced whole, so a racing thread never pairs one second with another's text.
_LAST: tuple[int | None, str] = (None, "")
_floor = math.floor
_gmtime = time.gmtime


def _second(sec: int) -> tuple[int, str]:
    """``(sec, "YYYY-MM-DDTHH:MM:SS")`` of an epoch second, kept as the cached one (four year
    digits on every platform: strftime's ``%Y`` writes fewer on some). The writers below read
    the cache first, inline, and call this only for a new second. Raises for a second the
    platform's calendar cannot hold."""
    global _LAST
    cached = _LAST = (sec, "%04d-%02d-%02dT%02d:%02d:%02d" % _gmtime(sec)[:6])
    return cached


def format_micros(us: int) -> str:
    """Epoch microseconds as RFC 3339 UTC with microseconds (sorts as text). Raises
    ``OverflowError`` / ``ValueError`` / ``OSError`` beyond the platform's calendar."""
    seconds, frac = divmod(us, 1_000_000)
    cached = _LAST
    if seconds != cached[0]:
        cached = _second(seconds)
    return cached[1] + MILLIS[frac // 1000] + MICROS_Z[frac % 1000]


def format_epoch(created: float) -> str:
    """Epoch seconds (``record.created``) as RFC 3339 UTC, the microseconds truncated.

    Never raises: a time that is no time (NaN, infinite, beyond the platform's calendar, not a
    number) stands for now, as on the handler's fast path (the engine's ``item_events``, which
    calls this per event: its steps are few on purpose).
    """
    try:
        sec = _floor(created)  # floor, not int(): right before 1970 too
        cached = _LAST
        prefix = cached[1] if sec == cached[0] else _second(sec)[1]
        micros = _floor((created - sec) * 1e6)
        return prefix + MILLIS[micros // 1000] + MICROS_Z[micros % 1000]
    except IndexError:  # a hair under a second, rounded up to 1,000,000 microseconds
        return prefix + ".999999Z"
    except Exception:
        return format_epoch(time.time())


def format_datetime(dt: datetime) -> str:
    """A datetime (naive meaning UTC) as RFC 3339 UTC with microseconds. Raises
    ``OverflowError`` / ``ValueError`` for a moment UTC cannot hold."""
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=_UTC)
    return format_micros((dt.astimezone(_UTC) - _EPOCH) // _ONE_US)


def format_micros_trimmed(us: int) -> str:
    """Epoch microseconds as RFC 3339 UTC with the fraction's trailing zeros cut (none at all
    on a whole second), as the service writes times in its answers."""
    text = format_micros(us)
    fraction = text[19:26].rstrip("0")
    return text[:19] + (fraction + "Z" if fraction != "." else "Z")


def parse_micros(value: Any, *, naive_utc: bool = True) -> int | None:
    """An RFC 3339 string as epoch microseconds; None when it is not one. Takes "Z" and up to
    nine fraction digits (nanoseconds, cut to microseconds). A time without an offset is UTC,
    or (``naive_utc=False``) not a time at all: None."""
    if not isinstance(value, str):
        return None
    try:
        dt = datetime.fromisoformat(value)
    except ValueError:
        # Python 3.10 takes neither "Z" nor more than six fraction digits (nanoseconds).
        m = _RFC3339.fullmatch(value.strip())
        if m is None:
            return None
        frac = (m.group(2) or "")[:6]
        zone = m.group(3) or ""
        zone = "+00:00" if zone in ("Z", "z") else zone
        try:
            dt = datetime.fromisoformat(m.group(1).replace("t", "T") + (
                "." + frac.ljust(6, "0") if frac else "") + zone)
        except ValueError:
            return None
    try:
        if dt.utcoffset() is None:
            if not naive_utc:
                return None
            dt = dt.replace(tzinfo=_UTC)
    except Exception:  # a tzinfo of the application's that raises
        return None
    return (dt - _EPOCH) // _ONE_US
