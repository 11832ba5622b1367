"""The real service's limits, rehearsed by the local service (``serve --rate-limit``,
``--ingest-limit``, ``--max-fields``): what an application sees when it reaches them.

``RateLimiter``: requests per minute; past it, 429 with ``X-RateLimit-*`` headers.
``IngestLimit``: bytes of ingest bodies allowed until the end of the month (UTC), as the
service's plan limit; past it, 430 with ``X-IngestLimit-Limit/-Remaining/-Reset``.
``FieldLimit``: at most so many fields a dataset (nested fields counted by their dotted path,
as the service flattens them); an event that would take a dataset past it is turned down in the
ingest status, the others stored. Fields are counted from the events ingested since the
service started.
"""

from __future__ import annotations

import calendar
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["DEFAULT_MAX_FIELDS", "FieldLimit", "IngestLimit", "RateLimiter", "field_paths",
           "field_types", "merge_type"]

DEFAULT_MAX_FIELDS = 256
_MAX_DEPTH = 16


def _next_month(now: float) -> int:
    t = time.gmtime(now)
    year, month = (t.tm_year + 1, 1) if t.tm_mon == 12 else (t.tm_year, t.tm_mon + 1)
    return calendar.timegm((year, month, 1, 0, 0, 0))


class IngestLimit:
    """``limit`` bytes of ingest a month; ``take(n)`` answers (allowed, headers)."""

    def __init__(self, limit: int, clock: Callable[[], float] = time.time) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"ingest_limit must be a positive number of bytes, not {limit!r}")
        self.limit = limit
        self._clock = clock
        self._lock = threading.Lock()
        self._used = 0
        self._reset = _next_month(clock())

    def take(self, n: int) -> tuple[bool, dict[str, str]]:
        with self._lock:
            now = self._clock()
            if now >= self._reset:
                self._used, self._reset = 0, _next_month(now)
            allowed = self._used < self.limit
            if allowed:
                self._used += n
            headers = {"X-IngestLimit-Limit": str(self.limit),
                       "X-IngestLimit-Remaining": str(max(0, self.limit - self._used)),
                       "X-IngestLimit-Reset": str(self._reset)}
            return allowed, headers


def field_paths(event: dict[str, Any], prefix: str = "", depth: int = 0) -> list[str]:
    """The event's fields as the service counts them: nested objects by their dotted paths."""
    return list(field_types(event, prefix, depth))


# The type names the service gives a field (its fields API and a tabular answer's fields).
_TYPE_NAMES: dict[type, str] = {str: "string", int: "integer", float: "float",
                                bool: "boolean", list: "array", dict: "map"}


def field_types(event: dict[str, Any], prefix: str = "", depth: int = 0) -> dict[str, str]:
    """The event's fields (nested objects by their dotted paths) and each value's type name;
    ``_time`` is a datetime, a null is ``unknown`` (the field exists, its type is not known)."""
    out: dict[str, str] = {}
    for key, value in event.items():
        path = prefix + str(key)
        if isinstance(value, dict) and value and depth < _MAX_DEPTH:
            out.update(field_types(value, path + ".", depth + 1))
        elif value is None:
            out[path] = "unknown"
        else:
            out[path] = "datetime" if path == "_time" else _TYPE_NAMES.get(type(value), "string")
    return out


def merge_type(known: str | None, seen: str) -> str:
    """A field's type once a value of type ``seen`` arrived: each type once, sorted, joined by
    "|" as the service writes a field of mixed types (``integer|string``)."""
    if known is None or known == "unknown":
        return seen
    if seen == "unknown" or seen in known.split("|"):
        return known
    return "|".join(sorted({*known.split("|"), seen}))


class FieldLimit:
    """At most ``limit`` fields a dataset, and the type of each field seen."""

    def __init__(self, limit: int = DEFAULT_MAX_FIELDS) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"max_fields must be a positive number, not {limit!r}")
        self.limit = limit
        self._lock = threading.Lock()
        self._fields: dict[str, dict[str, str]] = {}  # dataset -> field -> type
        # The flat events' shapes (their keys and value types) already taken in: most events
        # of a dataset share a few shapes, and these need no walk.
        self._shapes: dict[str, set[tuple[Any, ...]]] = {}

    def seed(self, dataset: str, types: dict[str, str]) -> None:
        """The fields a dataset holds already (stored by an earlier run)."""
        with self._lock:
            self._fields.setdefault(dataset, {}).update(types)

    def admit(self, dataset: str, events: list[dict[str, Any]]
              ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, str]]:
        """(the events kept, those turned down: they would take the dataset past the limit,
        and the fields whose type is new or changed: field -> its type now)."""
        kept, refused = [], []
        changed: dict[str, str] = {}
        with self._lock:
            known = self._fields.setdefault(dataset, {})
            shapes = self._shapes.setdefault(dataset, set())
            for event in events:
                shape = (*event, *map(type, event.values()))
                if shape in shapes:
                    kept.append(event)
                    continue
                types = field_types(event)
                new = [path for path in types if path not in known]
                if len(known) + len(new) > self.limit:
                    refused.append(event)
                    continue
                for path, kind in types.items():
                    merged = merge_type(known.get(path), kind)
                    if merged != known.get(path):
                        known[path] = changed[path] = merged
                if dict not in shape and len(shapes) < 10_000:
                    shapes.add(shape)
                kept.append(event)
        return kept, refused, changed

    def forget(self, dataset: str) -> None:
        with self._lock:
            self._fields.pop(dataset, None)
            self._shapes.pop(dataset, None)


class RateLimiter:
    """``limit`` requests per minute, in fixed windows, like the real service's limits.

    ``take()`` counts one request and returns ``(allowed, remaining, reset)``, ``reset`` being
    the epoch second the current window ends (the ``X-RateLimit-Reset`` header).
    """

    def __init__(self, limit: int, window: float = 60.0,
                 clock: Callable[[], float] = time.time) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"rate_limit must be a positive number of requests per minute, "
                             f"not {limit!r}")
        self.limit = limit
        self._window = window
        self._clock = clock
        self._lock = threading.Lock()
        self._start = 0.0
        self._used = 0

    def take(self) -> tuple[bool, int, int]:
        with self._lock:
            now = self._clock()
            if now >= self._start + self._window:
                self._start, self._used = now, 0
            allowed = self._used < self.limit
            if allowed:
                self._used += 1
            reset = int(-(-(self._start + self._window) // 1))  # ceil: the window is over then
            return allowed, self.limit - self._used, reset
