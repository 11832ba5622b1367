"""The delivery policy: what each answer of the service means, as data and pure functions.

Nothing here does I/O or keeps state; the worker asks and acts (``posting.py``, ``worker.py``):

- ``classify(answer)`` turns one ``Answer`` (``_wire/answer.py``, the one answer type, with the
  wait it asks already read) into an ``Outcome`` and a pause;
- each ``Outcome`` carries, in one table, what it does: where its events end (``fate``), the
  stderr line it is told under (``cause``), whom its pause stops (``pause``), whether with a
  spool its events go to disk (``spoolable``), whether a batch is halved (``splits``), whether
  a try is spent (``spends``);
- ``Retry`` is the state of one request's tries, immutable in the spirit of urllib3's ``Retry``:
  ``increment()`` returns the next state, ``delay()`` the wait before the next try;
- ``backoff()``, ``give_up_after()``, ``next_auth_pause()``, ``replay_backoff()`` and
  ``spill()`` are the numbers and the decisions around them.

What the service's answers mean (``docs/answers.md`` tells it from the user's side):

- 2xx: delivered; but when its body is the service's ingest status with ``failed`` > 0, that
  many events were turned down (``PARTIAL``: counted ``failed_by_service``, never retried). A
  2xx body that could not be read whole (cut at the size bound, or broken JSON where a status
  should be) is ``UNREADABLE``: the service may have stored none of it, so nothing is counted
  delivered; the events are counted ``failed_by_service`` (not retried: the service may have
  stored them all, and a retry would store them twice).
- 429 / 430 (rate and ingest limits) with ``Retry-After`` or a reset header: all sending pauses
  until then (``LIMITED``), the first time without spending a try (a limit that comes again
  spends one); without either (or with one that is no real wait: ``_wire/answer.py``), an
  ordinary retry.
- 408, 5xx, no answer: retried with backoff (``RETRY``); 503 with ``Retry-After`` pauses all
  sending (``THROTTLED``).
- 413 / 400: the request is halved to isolate the events refused (``TOO_LARGE``, ``REJECTED``).
- 401 / 403, 404 and 3xx (a wrong token, dataset or base address: configuration mistakes, which
  a spool keeps for when they are fixed); other 4xx: final for the request.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from .. import _status as status_codes
from .._wire.answer import Answer
from .ledger import Fate

__all__ = ["AUTH_PAUSE_CAP", "MAX_PAUSE", "MAX_REPLAY_BACKOFF", "Cause", "Outcome",
           "Pause", "Retry", "backoff", "classify", "give_up_after", "ingest_status",
           "next_auth_pause", "replay_backoff", "spill", "status_bound"]

# No wait the service asks for is honoured beyond this: a wrong header must not stop us for days.
MAX_PAUSE = 3600.0
# A refused token pauses all sending, doubling each time up to this.
AUTH_PAUSE_CAP = 600.0
# After a spool replay round that could not deliver, the next waits, doubling up to this (unless
# the shipper delivered new events meanwhile: then the service is back, and replay resumes).
MAX_REPLAY_BACKOFF = 30.0
# What an ingest status may take per event of the request (one failure each: a timestamp and
# the service's error), beyond a floor for the rest of the answer: the bound of a 2xx read.
STATUS_BYTES_PER_EVENT = 1024
STATUS_BYTES_FLOOR = 1024 * 1024


class Cause(Enum):
    """What a stderr line is about: each is told once (until delivery recovers, for the
    causes that are about the service being reachable; see ``LASTING``)."""

    AUTH = "auth"
    NOT_FOUND = "not_found"
    REDIRECTED = "redirected"
    CLIENT_ERROR = "client_error"
    RETRIES_EXHAUSTED = "retries_exhausted"
    RATE_LIMITED = "rate_limited"
    LONG_LIMIT = "long_limit"
    REJECTED = "rejected"
    REFUSED_WHOLE = "refused_whole"
    TOO_LARGE = "too_large"
    TOO_LARGE_WHOLE = "too_large_whole"
    PARTIAL = "partial"
    UNREADABLE = "unreadable"
    SPILLING = "spilling"
    SPOOL_WRITE = "spool_write"
    SPOOL_REPLAY = "spool_replay"
    INTERNAL = "internal"
    ENCODE_HANG = "encode_hang"
    LATE = "late"
    ON_ERROR = "on_error"
    CLOSED_LOSING = "closed_losing"
    CLOSED_UNCONFIRMED = "closed_unconfirmed"
    QUEUE_FULL = "queue_full"
    DROPPED_INVALID = "dropped_invalid"
    NO_THREAD = "no_thread"


# Causes about single events or the service's limits rather than about the service being
# reachable: told once for the shipper's life, never "over" when a batch is delivered.
LASTING = frozenset({Cause.REJECTED, Cause.REFUSED_WHOLE, Cause.TOO_LARGE,
                     Cause.TOO_LARGE_WHOLE, Cause.PARTIAL, Cause.UNREADABLE,
                     Cause.RATE_LIMITED, Cause.LONG_LIMIT, Cause.ON_ERROR,
                     Cause.CLOSED_LOSING, Cause.CLOSED_UNCONFIRMED,
                     Cause.NO_THREAD})


class Pause(Enum):
    """Whom an outcome's wait stops."""

    NONE = "none"  # nobody: the outcome is final, or the retry waits its backoff only
    REQUEST = "request"  # this request's next try waits at least the pause asked for
    ALL = "all"  # all sending pauses (the service asked everyone to wait, or a bad token)


class Outcome(Enum):
    """What one answer (or its absence) means for the events of a request: the policy table.

    Columns: ``fate`` (where the events end when the outcome is final; None when it is not),
    ``cause`` (the report it is told under, None for none), ``pause`` (whom its wait stops),
    ``spoolable`` (with a spool, the events go to disk instead), ``splits`` (a batch of more
    than one event is halved and each half sent again), ``spends`` (a try of ``max_retries``
    is used up).
    """

    DELIVERED = (Fate.DELIVERED, None, Pause.NONE, False, False, False)  # 2xx
    PARTIAL = (Fate.FAILED_BY_SERVICE, Cause.PARTIAL, Pause.NONE, False, False, False)
    UNREADABLE = (Fate.FAILED_BY_SERVICE, Cause.UNREADABLE, Pause.NONE, False, False, False)
    TOO_LARGE = (Fate.DROPPED_TOO_LARGE, Cause.TOO_LARGE, Pause.NONE, False, True, False)
    REJECTED = (Fate.FAILED_REJECTED, Cause.REJECTED, Pause.NONE, False, True, False)
    AUTH = (Fate.FAILED_AUTH, Cause.AUTH, Pause.ALL, True, False, False)  # 401, 403
    NOT_FOUND = (Fate.FAILED_NOT_FOUND, Cause.NOT_FOUND, Pause.NONE, True, False, False)
    REDIRECTED = (Fate.FAILED_CLIENT_ERROR, Cause.REDIRECTED, Pause.NONE, True, False, False)
    CLIENT_ERROR = (Fate.FAILED_CLIENT_ERROR, Cause.CLIENT_ERROR, Pause.NONE, False, False,
                    False)  # other 4xx
    RETRY = (None, None, Pause.REQUEST, False, False, True)  # 408, 5xx, no answer
    THROTTLED = (None, None, Pause.ALL, False, False, True)  # 503 with Retry-After
    LIMITED = (None, Cause.RATE_LIMITED, Pause.ALL, False, False, False)  # 429/430 with a time
    RETRIES_EXHAUSTED = (Fate.FAILED_RETRIES_EXHAUSTED, Cause.RETRIES_EXHAUSTED, Pause.NONE,
                         True, False, False)
    SHUTDOWN = (Fate.DROPPED_SHUTDOWN, None, Pause.NONE, True, False, False)  # close deadline
    # Sent, and the close deadline ended the wait for the answer: the service may have it.
    UNCONFIRMED = (Fate.UNCONFIRMED, Cause.CLOSED_UNCONFIRMED, Pause.NONE, True, False, False)

    def __init__(self, fate: Fate | None, cause: Cause | None, pause: Pause, spoolable: bool,
                 splits: bool, spends: bool) -> None:
        self.fate = fate
        self.cause = cause
        self.pause = pause
        self.spoolable = spoolable
        self.splits = splits
        self.spends = spends

    @property
    def final(self) -> bool:
        return self.fate is not None


def ingest_status(body: Any) -> tuple[int, int, list[Any]] | None:
    """(ingested, failed, failures) from a 2xx body that is the service's ingest status and
    reports failed events; None for any other body (then the whole request was delivered)."""
    if not isinstance(body, dict):
        return None
    failed = body.get("failed")
    if type(failed) is not int or failed <= 0:
        return None
    ingested = body.get("ingested")
    failures = body.get("failures")
    return (ingested if type(ingested) is int and ingested >= 0 else 0, failed,
            failures if isinstance(failures, list) else [])


def status_bound(batch_size: int) -> int:
    """How much of a 2xx answer is read: enough for an ingest status that lists a failure for
    each of ``batch_size`` events."""
    return STATUS_BYTES_FLOOR + STATUS_BYTES_PER_EVENT * max(1, batch_size)


def _unreadable(answer: Answer) -> bool:
    # Cut at the bound, or text that starts as a JSON object but is not one: a status we could
    # not read (a plain-text or empty 2xx is no status: delivered).
    if not answer.complete:
        return True
    body = answer.body
    return isinstance(body, str) and body.lstrip().startswith("{")


def classify(answer: Answer | int, headers: Mapping[str, str] | None = None, body: Any = None,
             *, now: float | None = None) -> tuple[Outcome, float | None]:
    """The outcome of one answer, and the pause it asks for (seconds, or None).

    Takes an ``Answer``, or (for tables) its status, headers and body (``now``: the wall clock
    for HTTP dates and reset times). The pause of an outcome whose ``pause`` is ``Pause.ALL``
    stops all sending; that of a ``RETRY`` is the least wait before this request's next try.
    Every pause is capped at ``MAX_PAUSE``.
    """
    if not isinstance(answer, Answer):
        answer = Answer.of(answer, headers, body, now=now)
    status = answer.status
    if status_codes.is_success(status):
        if _unreadable(answer):
            return Outcome.UNREADABLE, None
        return (Outcome.DELIVERED if ingest_status(answer.body) is None
                else Outcome.PARTIAL), None
    final = _FINAL.get(status)
    if final is not None:
        return final, None
    if status_codes.is_redirect(status):
        return Outcome.REDIRECTED, None
    if not status_codes.is_retryable(status):
        return Outcome.CLIENT_ERROR, None
    wait = answer.wait
    if wait is None:
        return Outcome.RETRY, None  # a limit without a time is an ordinary retry
    if status in status_codes.LIMITS:
        return Outcome.LIMITED, min(wait, MAX_PAUSE)
    return (Outcome.THROTTLED if status == status_codes.THROTTLED else Outcome.RETRY), min(
        wait, MAX_PAUSE)


# The statuses whose outcome is final whatever the answer says besides.
_FINAL = {
    **dict.fromkeys(status_codes.TOO_LARGE, Outcome.TOO_LARGE),
    **dict.fromkeys(status_codes.REJECTED, Outcome.REJECTED),
    **dict.fromkeys(status_codes.AUTH, Outcome.AUTH),
    **dict.fromkeys(status_codes.NOT_FOUND, Outcome.NOT_FOUND),
}


def backoff(attempt: int, base: float, cap: float, *,
            rand: Callable[[float, float], float] = random.uniform) -> float:
    """The wait before retry number ``attempt`` (1 for the first): exponential, capped, with
    full jitter (a uniform draw up to the exponential step)."""
    return rand(0, min(cap, base * (2 ** (attempt - 1))))


def give_up_after(n: int) -> int:
    """How many 400 (or 413) answers in a row, with nothing accepted between, mean that a batch
    of ``n`` events is refused as a whole: twice the depth of its bisection, plus two."""
    return 2 * max(1, (n - 1).bit_length()) + 2


def next_auth_pause(pause: float) -> float:
    """The pause after the next refused token: doubled, up to ``AUTH_PAUSE_CAP``."""
    return min(pause * 2, AUTH_PAUSE_CAP)


def replay_backoff(previous: float) -> float:
    """The wait before the next spool replay round after one that could not deliver: from one
    second, doubling, up to ``MAX_REPLAY_BACKOFF``."""
    return min(MAX_REPLAY_BACKOFF, max(1.0, previous * 2))


def spill(*, spool: bool, outage: bool, pressed: bool) -> bool:
    """With a spool, after a failed try or while sending is paused: give up on the batch now
    (it goes to disk, oldest first, so replay keeps the order) when an outage is known already,
    or when the queue would fill while we wait (``pressed``: half full). A limit window the
    queue cannot hold is an outage too: the caller asks while it waits one out."""
    return spool and (outage or pressed)


@dataclass(frozen=True)
class Retry:
    """The tries of one request so far; immutable: ``increment()`` returns the next state.

    ``total``: the retries allowed (``max_retries``); ``base`` and ``cap``: the backoff's
    (``retry_backoff``, ``max_retry_delay``); ``attempts``: tries failed that spend a retry;
    ``limited``: waits for a limit the service announced (the first spends none).
    """

    total: int
    base: float
    cap: float
    attempts: int = 0
    limited: int = 0

    def increment(self, outcome: Outcome, pause: float | None) -> Retry:
        """The state after a try that ended in ``outcome`` (with its ``pause``). The first
        limit waited out spends no retry (the service said when to come back); a limit that
        comes again spends one, as any failed try: a service that keeps asking to wait cannot
        hold one request, and every batch behind it, for ever."""
        if outcome is Outcome.LIMITED and pause is not None:
            spent = self.attempts + (1 if self.limited else 0)
            return replace(self, attempts=spent, limited=self.limited + 1)
        return replace(self, attempts=self.attempts + 1)

    @property
    def exhausted(self) -> bool:
        return self.attempts > self.total

    def delay(self, outcome: Outcome, pause: float | None, *,
              rand: Callable[[float, float], float] = random.uniform) -> float:
        """The wait before the next try, after ``increment(outcome, pause)``. An announced
        limit is waited out (the backoff floor only guards against a reset that is always
        "now"); any other wait is the backoff, at least the pause the answer asked for."""
        if outcome is Outcome.LIMITED and pause is not None:
            return max(pause, backoff(self.limited, self.base, self.cap, rand=rand))
        delay = backoff(self.attempts, self.base, self.cap, rand=rand)
        return delay if pause is None else max(delay, pause)
