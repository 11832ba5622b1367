"""Building events, cheaply: what the application thread copies, and what the flusher builds.

Values of the plain JSON types are taken as they are; anything else (a dict, a list, an object)
is turned into a JSON-safe copy right away, because the application may change or free it after
the call, and its ``repr`` may not be safe to run on another thread.

Queue items. The shipper's queue holds tuples ``(event, size, ...)``: an event dict and its rough
size (for ``max_queue_bytes``). A third element, ``RECORD``, marks an event from the handler's
fast path, whose ``_time`` is still ``record.created`` and whose ``level`` is still
``record.levelname``: ``item_events`` formats both on the flusher thread, so that the caller's
thread does not (False there: an event already formatted). A fourth element, when present, is
the caller's context snapshot ``(fields, trace_id, span_id)`` (``_context.snapshot``, taken on
the caller's thread only when a ``loghandler.context`` was ever entered or OpenTelemetry is
imported): ``item_events`` adds those the event lacks, then the shipper's ``fields=``.
"""

from __future__ import annotations

import logging
import math
import time
import traceback
from collections.abc import Mapping
from operator import itemgetter
from typing import Any

from ._context import merge as _merge_context
from .encoding import to_jsonable

_PLAIN = frozenset({str, int, bool, type(None)})
RECORD = True  # see "Queue items"
item_size = itemgetter(1)

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
    """RFC 3339 UTC with microseconds, e.g. ``2026-11-21T23:52:40.123456Z``."""
    sec = _floor(created)  # floor, not int(): right before 1970 too
    cached = _time_cache[0]
    if sec != cached[0]:
        cached = (sec, _strftime("%Y-%m-%dT%H:%M:%S", _gmtime(sec)))
        _time_cache[0] = cached
    micros = min(_floor((created - sec) * 1e6), 999_999)  # a hair under 1 s can round up
    return cached[1] + _MILLIS[micros // 1000] + _MICROS_Z[micros % 1000]


def item_events(items: Any, fields: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """The events of queue items (see "Queue items"), on the flusher thread.

    ``fields`` (the shipper's ``fields=``) are added to every event that lacks them, after the
    item's context: the event's own fields win, then the context, then ``fields``.
    """
    out: list[dict[str, Any]] = []
    append = out.append
    levels = LEVELS
    millis, micros_z, floor = _MILLIS, _MICROS_Z, _floor
    seen: int | None = None
    prefix = ""
    static = tuple(fields.items()) if fields else ()
    for item in items:
        event = item[0]
        n = len(item)
        if n == 4:
            _merge_context(event, item[3])
        if n > 2 and item[2]:
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
        if static:
            for key, value in static:
                if key not in event:
                    event[key] = value
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

    A key that is already in ``event`` and in ``reserved`` is renamed ``extra_<key>``: a field
    is never silently lost.
    """
    size = 0
    plain = _PLAIN
    for key, value in items:
        if type(key) is not str:
            key = str(key)
        if key in reserved and key in event:
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


def free_name(event: dict[str, Any], key: str) -> str:
    name = f"extra_{key}"
    while name in event:
        name = f"extra_{name}"
    return name


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
