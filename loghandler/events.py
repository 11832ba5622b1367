"""Building events, cheaply: what the application thread copies, and what the flusher builds.

Values of the plain JSON types are taken as they are; anything else (a dict, a list, an object)
is turned into a JSON-safe copy right away, because the application may change or free it after
the call, and its ``repr`` may not be safe to run on another thread.

Queue items. The shipper's queue holds the event dicts themselves, each with private keys that no
field can be (unique objects, not strings): ``SIZE``, its rough size (for ``max_queue_bytes``),
and, on an event from the handler's fast path, ``RECORD``: its ``_time`` is still
``record.created`` and its ``level`` still ``record.levelname``, and ``item_events`` formats both
on the flusher thread, so that the caller's thread does not.

Why dicts and not tuples: a dict holding only strings, numbers and None (and these keys) holds no
reference the cyclic GC must follow, so CPython leaves it untracked, and a full GC pass over a
queue of 100,000 events costs one visit per item. A tuple holding a dict is never untracked:
every full pass walked every queued tuple, and a logging call that triggered one during an
outage stalled for 20-35 ms.
"""

from __future__ import annotations

import logging
import math
import time
import traceback
from operator import itemgetter
from typing import Any

from .encoding import free_name, key_to_str, to_jsonable

_PLAIN = frozenset({str, int, bool, type(None)})
# Plain object() instances: equal only to themselves, so no field name can be them, and not a GC
# type, so a dict using them as keys can stay untracked (an instance of any class of ours is).
SIZE: Any = object()  # see "Queue items"
RECORD: Any = object()
item_size = itemgetter(SIZE)

# Attributes every LogRecord has; anything else in record.__dict__ came from extra=.
INIT_KEYS = list(logging.LogRecord("", 0, "", 0, "", (), None).__dict__)
STANDARD = frozenset(INIT_KEYS) | {
    "message", "asctime", "taskName",
    # set by structlog's ProcessorFormatter.wrap_for_formatter / by formatters
    "_logger", "_name", "_from_structlog", "_record",
}
# Keys of the event itself: an extra with one of these names is renamed, not lost.
RESERVED = frozenset({
    "_time", "level", "message", "logger", "module", "function", "line", "file", "process",
    "thread", "exception", "stack",
})
LEVELS = {name: name.lower() for name in logging._nameToLevel}

# (second, its "YYYY-MM-DDTHH:MM:SS" prefix) of the last timestamp formatted: most records in a
# burst share it. One tuple, replaced whole, so a racing thread never pairs one second with
# another's prefix.
_time_cache: list[tuple[int | None, str]] = [(None, "")]
_strftime = time.strftime
_floor = math.floor
_gmtime = time.gmtime


# The fraction of a second as two table lookups, and the second by math.floor: item_events runs
# 30 % faster than with "%06d" and int() (measured, 5,000-event batches).
_MILLIS = tuple(".%03d" % i for i in range(1000))
_MICROS_Z = tuple("%03dZ" % i for i in range(1000))


def rfc3339(created: float) -> str:
    """RFC 3339 UTC with microseconds, e.g. ``2026-11-21T23:52:40.123456Z``.

    Never raises: a time that is no time (NaN, infinite, beyond the platform's calendar, not a
    number) stands for now, as on the handler's fast path (``item_events``).
    """
    try:
        sec = _floor(created)  # floor, not int(): right before 1970 too
        cached = _time_cache[0]
        if sec != cached[0]:
            cached = (sec, _strftime("%Y-%m-%dT%H:%M:%S", _gmtime(sec)))
            _time_cache[0] = cached
        micros = min(_floor((created - sec) * 1e6), 999_999)  # a hair under 1 s can round up
        return cached[1] + _MILLIS[micros // 1000] + _MICROS_Z[micros % 1000]
    except Exception:
        return rfc3339(time.time())


def item_events(items: Any) -> list[dict[str, Any]]:
    """The events of queue items (see "Queue items"), on the flusher thread."""
    out: list[dict[str, Any]] = []
    append = out.append
    levels = LEVELS
    millis, micros_z, floor = _MILLIS, _MICROS_Z, _floor
    seen: int | None = None
    prefix = ""
    pop = dict.pop
    for event in items:
        pop(event, SIZE, None)
        if pop(event, RECORD, None) is not None:
            try:
                created = event["_time"]
                sec = floor(created)
                if sec != seen:
                    prefix = _strftime("%Y-%m-%dT%H:%M:%S", _gmtime(sec))
                    seen = sec
                micros = floor((created - sec) * 1e6)
                # 1,000,000 (a hair under a second, rounded up) fails the lookup: rfc3339 clamps
                ts = prefix + millis[micros // 1000] + micros_z[micros % 1000]
                level = event["level"]
                event["level"] = levels.get(level) or str(level).lower()
                event["_time"] = ts
            except Exception:
                _fix_record_event(event)
        append(event)
    return out


def _fix_record_event(event: dict[str, Any]) -> None:
    # item_events' careful path (neither field converted yet): a record whose values a filter
    # or a record factory made odd.
    try:
        event["_time"] = rfc3339(event["_time"])
    except Exception:
        event["_time"] = rfc3339(time.time())
    level = event["level"]
    try:
        event["level"] = LEVELS.get(level) or str(level).lower()
    except Exception:
        event["level"] = to_jsonable(level)


def add_fields(event: dict[str, Any], items: Any, reserved: frozenset[str] = frozenset()) -> int:
    """Copy (key, value) pairs into ``event``, JSON-safe. Returns a rough size of what was added.

    A key that is already in ``event`` is renamed ``extra_<key>``: a field is never silently
    lost, whether it clashes with one of the event's own keys (``reserved``, kept for the
    callers that name them) or with another key once converted to a string (``1`` and ``"1"``,
    ``None`` and ``"null"``).
    """
    size = 0
    plain = _PLAIN
    for key, value in items:
        if type(key) is not str:
            key = key_to_str(key)
        if key in event:
            key = free_name(event, key)
        t = type(value)
        if t in plain:
            if t is str:
                size += len(value)
        elif t is float:
            if value != value or value in (float("inf"), float("-inf")):
                value = None
        else:
            value = to_jsonable(value)
            size += 64
        event[key] = value
        size += 48  # its dict entry and a number's object (measured: tracemalloc)
    return size


def exception_fields(exc_info: Any, text: str | None = None) -> dict[str, Any] | None:
    """``{type, message, stacktrace}`` for an exc_info tuple, an exception, or True."""
    try:
        if exc_info is True:
            import sys

            exc_info = sys.exc_info()
        if isinstance(exc_info, BaseException):
            exc_info = (type(exc_info), exc_info, exc_info.__traceback__)
        if not isinstance(exc_info, tuple) or len(exc_info) != 3 or exc_info[0] is None:
            return None
        etype, value, tb = exc_info
        name = getattr(etype, "__qualname__", None) or getattr(etype, "__name__", "Exception")
        module = getattr(etype, "__module__", "builtins")
        if module not in ("builtins", "__main__", None):
            name = f"{module}.{name}"
        try:
            message = str(value)
        except Exception:
            message = f"<unprintable {name}>"
        if text is None:
            text = "".join(traceback.format_exception(etype, value, tb))
        return {"type": name, "message": message, "stacktrace": text.rstrip("\n")}
    except Exception:
        return None


def add_exception(event: dict[str, Any], exc: Any) -> int:
    """Add ``exception`` for a structlog-style ``exc_info`` value; returns the size added.

    ``exc`` may be True (the exception being handled: resolved here, on the thread that
    logged), an exc_info tuple or an exception. An ``exception`` already rendered by
    ``format_exc_info`` / ``dict_tracebacks`` is kept as it is; a value we do not understand is
    shipped as ``exc_info`` rather than lost.
    """
    info = exception_fields(exc) if "exception" not in event else None
    if info:
        event["exception"] = info
        return len(info["stacktrace"])
    if exc is not True and not isinstance(exc, (tuple, BaseException)):
        return add_fields(event, (("exc_info", exc),))
    return 0
