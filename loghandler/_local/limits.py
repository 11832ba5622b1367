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

__all__ = ["DEFAULT_MAX_FIELDS", "FieldLimit", "IngestLimit", "RateLimiter", "field_paths"]

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
    out = []
    for key, value in event.items():
        path = prefix + str(key)
        if isinstance(value, dict) and value and depth < _MAX_DEPTH:
            out += field_paths(value, path + ".", depth + 1)
        else:
            out.append(path)
    return out


class FieldLimit:
    """At most ``limit`` fields a dataset."""

    def __init__(self, limit: int = DEFAULT_MAX_FIELDS) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"max_fields must be a positive number, not {limit!r}")
        self.limit = limit
        self._lock = threading.Lock()
        self._fields: dict[str, set[str]] = {}

    def admit(self, dataset: str, events: list[dict[str, Any]]
              ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(the events kept, those turned down: they would take the dataset past the limit)."""
        kept, refused = [], []
        with self._lock:
            known = self._fields.setdefault(dataset, set())
            for event in events:
                new = set(field_paths(event)) - known
                if len(known) + len(new) > self.limit:
                    refused.append(event)
                else:
                    known |= new
                    kept.append(event)
        return kept, refused

    def forget(self, dataset: str) -> None:
        with self._lock:
            self._fields.pop(dataset, None)


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
