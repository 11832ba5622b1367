"""``Answer``: one answer of the service to one request, and the one rule for the wait it asks.

Every part that talks to the service hands answers over in this one type: the client
(``Client.send``), the shippers' transports (``_engine/transport.py``, and
``loghandler.testing.MemoryTransport``), the client's errors (``errors.py``) and the engine's
delivery policy (``_engine/policy.py``).

The wait rule, written here only: an answer that is not a 2xx asks to wait ``Retry-After``
(delta-seconds or an HTTP date); a limit's answer (429, 430) without one asks to wait until the
epoch-seconds reset header of its own limit (``X-RateLimit-Reset`` for 429; for 430 the
request's limit: ``X-IngestLimit-Reset`` on an ingest, ``X-QueryLimit-Reset`` on a query).
A wait must be a real one: a value that is not a finite number of seconds more than 0 and at
most ``MAX_WAIT`` away (negative, zero, a date or a reset already past, ``inf``, ``nan``,
``1e12``) counts as absent, so the answer is an ordinary retry that spends the retry budget
(a hostile or broken header cannot hold sending for ever, nor re-send in a tight loop). The
engine caps a valid wait at its own pause bound (``policy.MAX_PAUSE``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .._status import LIMITS, RATE_LIMIT, RESET_HEADERS, is_success

__all__ = ["MAX_WAIT", "Answer", "Limit", "header", "parse_reset", "parse_retry_after", "wait_of"]

# Which of the service's limits a 430 means: it depends on the request (status.INGEST_LIMIT).
Limit = Literal["ingest", "query"]
# The longest wait an answer may ask (a year): beyond, the header is taken as broken, not as a
# pause (the service's longest limit is a monthly ingest quota, whose reset may be weeks away).
MAX_WAIT = 366 * 86400.0


@dataclass(frozen=True)
class Answer:
    """One answer of the service to one request.

    ``status`` and ``headers`` (looked up in any case: ``header()``) as sent; ``body`` parsed
    (JSON, else text, None when empty); ``complete`` False when the body was cut at the read
    bound; ``wait``: the seconds the answer asks to wait (``wait_of``), read once, when the
    answer arrives. ``Answer.of(...)`` reads it from the headers.
    """

    status: int
    headers: Mapping[str, str] = field(default_factory=dict)
    body: Any = None
    complete: bool = True
    wait: float | None = None

    @classmethod
    def of(cls, status: int, headers: Mapping[str, str] | None = None, body: Any = None, *,
           complete: bool = True, limit: Limit = "ingest", now: float | None = None) -> Answer:
        """An answer with its wait read from ``headers`` (``limit``: what a 430 means for
        this request; ``now``: the wall clock for dates and reset times, default
        ``time.time()``)."""
        headers = {} if headers is None else headers
        return cls(status, headers, body, complete, wait_of(status, headers, limit, now))


def header(headers: Mapping[str, str], name: str) -> str | None:
    """The value of header ``name`` in any case (the wire's mapping is case-insensitive
    already; one built by hand, in a test or a transport, may not be)."""
    value = headers.get(name)
    if value is None:
        lower = name.lower()
        for key, found in headers.items():
            if key.lower() == lower:
                return found
    return value


def wait_of(status: int, headers: Mapping[str, str], limit: Limit = "ingest",
            now: float | None = None) -> float | None:
    """The seconds an answer asks to wait, or None (the module docstring gives the rule)."""
    if is_success(status):
        return None
    wait = parse_retry_after(header(headers, "Retry-After"), now)
    if wait is None and status in LIMITS:
        which = "rate" if status == RATE_LIMIT else limit
        wait = parse_reset(header(headers, RESET_HEADERS[which]), now)
    return wait


def _valid(seconds: float) -> float | None:
    """``seconds`` as a wait, or None when it is no real one (the module docstring)."""
    # NaN fails both comparisons; inf fails the second.
    return seconds if 0.0 < seconds <= MAX_WAIT else None


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header: delta-seconds or an HTTP date; None when
    absent or no real wait (``_valid``)."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            import email.utils  # only for an HTTP date: rare, and 7 ms to import

            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None:
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    return _valid(seconds)


def parse_reset(value: str | None, now: float | None = None) -> float | None:
    """Seconds until a limit resets, from its reset header (epoch seconds); None when absent
    or no real wait (``_valid``: a reset already past among them)."""
    if not value:
        return None
    try:
        when = float(value.strip())
    except ValueError:
        return None
    return _valid(when - (time.time() if now is None else now))
