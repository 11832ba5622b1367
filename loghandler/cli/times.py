"""Each event's time for ``loghandler ingest``: the common time fields of events that carry no
``_time`` (``timestamp``, ``@timestamp``, ``time``, ``ts``), and the leading time and level of a
plain text line (``2024-05-01T12:00:00Z ERROR payment refused``).

A time without an offset is UTC, as everywhere in the library and the service.
"""

from __future__ import annotations

import math
import re
from typing import Any

from .._output import clip
from .._time import format_micros, parse_micros
from ._common import _err

__all__ = ["TIME_FIELDS", "EventTimes", "text_event", "time_of"]

TIME_FIELDS = ("timestamp", "@timestamp", "time", "ts")
# Epoch numbers by magnitude: seconds, milliseconds, microseconds, nanoseconds, each from 1973
# on (a smaller number is a duration or a count, not a time).
_EPOCH_UNITS = ((1e8, 1e11, 1e6), (1e11, 1e14, 1e3), (1e14, 1e17, 1.0), (1e17, 1e20, 1e-3))
_LEVELS = {"trace": "trace", "debug": "debug", "info": "info", "notice": "notice",
           "warn": "warning", "warning": "warning", "error": "error", "err": "error",
           "critical": "critical", "crit": "critical", "fatal": "fatal"}
_TEXT = re.compile(
    r"\s*\[?(\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:[Zz]|[+-]\d\d:?\d\d)?)\]?"
    r"\s+(?:-\s+)?\[?(" + "|".join(_LEVELS) + r")\]?(?::|\s|$)",
    re.IGNORECASE | re.DOTALL)
_TEXT_TIME = re.compile(
    r"\s*\[?(\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:[Zz]|[+-]\d\d:?\d\d)?)\]?"
    r"(?:\s|$)")


def time_of(value: Any) -> str | None:
    """``value`` as RFC 3339 UTC when it is a time: an RFC 3339 / ISO 8601 string, or epoch
    seconds, milliseconds, microseconds or nanoseconds (a number, or digits); else None."""
    if isinstance(value, str):
        text = value.strip()
        if text.isdigit():
            value = int(text)
        else:
            if len(text) > 10 and text[10] == " ":
                text = text[:10] + "T" + text[11:]
            us = parse_micros(text.replace(",", "."))
            if us is None and text[-5:-4] in "+-" and text[-4:].isdigit():
                us = parse_micros(text[:-2] + ":" + text[-2:])  # +0200
            return None if us is None else _format(us)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if not math.isfinite(value):
        return None
    for low, high, scale in _EPOCH_UNITS:
        if low <= abs(value) < high:
            return _format(round(value * scale))
    return None


def _format(us: int) -> str | None:
    try:
        return format_micros(us)
    except (OverflowError, ValueError, OSError):
        return None


def text_event(text: str) -> dict[str, Any]:
    """The event of a plain text line: ``{"message": line}``, with ``_time`` and ``level``
    when the line starts with a time and a level (``2024-05-01 12:00:00,123 INFO ...``), or
    ``_time`` when with a time only; the message stays the whole line."""
    m = _TEXT.match(text)
    if m is not None:
        stamp = time_of(m.group(1))
        if stamp is not None:
            return {"_time": stamp, "level": _LEVELS[m.group(2).lower()], "message": text}
    m = _TEXT_TIME.match(text)
    if m is not None:
        stamp = time_of(m.group(1))
        if stamp is not None:
            return {"_time": stamp, "message": text}
    return {"message": text}


class EventTimes:
    """Gives each event without ``_time`` the time of its first common time field
    (``TIME_FIELDS``), decided on the first such event and said once on stderr, as is a
    field it did not use; ``finish()`` says how many events had no readable time."""

    def __init__(self, enabled: bool = True) -> None:
        self.field: str | None = None
        self.decided = not enabled
        self.unread = 0

    def stamp(self, event: dict[str, Any]) -> None:
        if "_time" in event:
            return
        if not self.decided:
            self._decide(event)
        field = self.field
        if field is not None:
            stamp = time_of(event.get(field))
            if stamp is None:
                self.unread += 1
            else:
                event["_time"] = stamp

    def _decide(self, event: dict[str, Any]) -> None:
        self.decided = True
        present = [name for name in TIME_FIELDS if name in event]
        for name in present:
            if time_of(event[name]) is not None:
                self.field = name
                others = [n for n in present if n != name]
                also = f" (not {', '.join(repr(n) for n in others)})" if others else ""
                _err(f"each event's time is read from its {name!r} field{also}: the events have "
                     "no _time; --timestamp-field NAME chooses another")
                return
        if present:
            name = present[0]
            _err(f"the events' {name!r} field is not a time ingest reads "
                 f"({clip(repr(event[name]), 40)}), so it is not used: the events are stamped "
                 f"at ingest; give --timestamp-field {name} --timestamp-format LAYOUT")

    def finish(self) -> None:
        if self.unread and self.field is not None:
            n = self.unread
            _err(f"{n} event{'' if n == 1 else 's'} had no readable {self.field!r}: stamped "
                 "at ingest")
