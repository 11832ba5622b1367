"""The delivery policy as tables: every answer's outcome and pause (``classify``), what each
outcome does (the ``Outcome`` table), the retry state, backoff, the bounds of bisection and of a
2xx read, the spill decision. Pure functions: no I/O, no threads."""

from __future__ import annotations

import email.utils
import math
import random
from typing import Any

import pytest

from loghandler import _status
from loghandler._engine.ledger import Fate
from loghandler._engine.policy import (
    AUTH_PAUSE_CAP,
    LASTING,
    MAX_PAUSE,
    Cause,
    Outcome,
    Pause,
    Retry,
    backoff,
    classify,
    give_up_after,
    ingest_status,
    next_auth_pause,
    replay_backoff,
    spill,
    status_bound,
)
from loghandler._errors import ApiError, AuthenticationError, NotFoundError, RateLimitError
from loghandler._wire.answer import Answer, wait_of
from loghandler._wire.errors import error_for, raise_for_status

NOW = 1_800_000_000.0


@pytest.mark.parametrize(("status", "headers", "body", "expected"), [
    (200, {}, None, (Outcome.DELIVERED, None)),
    (204, {}, "", (Outcome.DELIVERED, None)),
    (200, {}, {"ingested": 5}, (Outcome.DELIVERED, None)),
    (200, {}, {"ingested": 5, "failed": 0, "failures": []}, (Outcome.DELIVERED, None)),
    (200, {}, {"ingested": 3, "failed": 2, "failures": []}, (Outcome.PARTIAL, None)),
    (200, {}, {"failed": "2"}, (Outcome.DELIVERED, None)),  # not the status shape
    (200, {}, {"failed": True}, (Outcome.DELIVERED, None)),
    (200, {}, [1, 2], (Outcome.DELIVERED, None)),
    (200, {}, "OK", (Outcome.DELIVERED, None)),  # a plain-text 2xx is no status
    (200, {}, '{"ingested": 3, "failed": 2, "fail', (Outcome.UNREADABLE, None)),  # broken JSON
    (400, {}, {"code": 400}, (Outcome.REJECTED, None)),
    (413, {}, None, (Outcome.TOO_LARGE, None)),
    (401, {}, None, (Outcome.AUTH, None)),
    (403, {}, None, (Outcome.AUTH, None)),
    (404, {}, None, (Outcome.NOT_FOUND, None)),
    (301, {}, None, (Outcome.REDIRECTED, None)),
    (307, {}, None, (Outcome.REDIRECTED, None)),
    (308, {"Location": "https://x/"}, None, (Outcome.REDIRECTED, None)),
    (405, {}, None, (Outcome.CLIENT_ERROR, None)),
    (409, {}, None, (Outcome.CLIENT_ERROR, None)),
    (422, {}, None, (Outcome.CLIENT_ERROR, None)),
    (451, {}, None, (Outcome.CLIENT_ERROR, None)),
    (408, {}, None, (Outcome.RETRY, None)),
    (408, {"Retry-After": "2"}, None, (Outcome.RETRY, 2.0)),
    (500, {}, None, (Outcome.RETRY, None)),
    (502, {"Retry-After": "3"}, None, (Outcome.RETRY, 3.0)),
    (503, {}, None, (Outcome.RETRY, None)),
    (503, {"Retry-After": "4"}, None, (Outcome.THROTTLED, 4.0)),
    (503, {"X-RateLimit-Reset": str(NOW + 9)}, None, (Outcome.RETRY, None)),
    (429, {}, None, (Outcome.RETRY, None)),
    (429, {"Retry-After": "7"}, None, (Outcome.LIMITED, 7.0)),
    (429, {"retry-after": "7"}, None, (Outcome.LIMITED, 7.0)),  # any case
    (429, {"Retry-After": email.utils.formatdate(NOW + 30, usegmt=True)}, None,
     (Outcome.LIMITED, 30.0)),
    (429, {"X-RateLimit-Reset": str(int(NOW) + 20), "X-RateLimit-Remaining": "0"}, None,
     (Outcome.LIMITED, 20.0)),
    (429, {"x-ratelimit-reset": str(int(NOW) + 20)}, None, (Outcome.LIMITED, 20.0)),
    (429, {"Retry-After": "5", "X-RateLimit-Reset": str(NOW + 20)}, None,
     (Outcome.LIMITED, 5.0)),  # Retry-After first
    # A reset already past is no wait: an ordinary retry, which spends one.
    (429, {"X-RateLimit-Reset": str(NOW - 10)}, None, (Outcome.RETRY, None)),
    (429, {"X-RateLimit-Reset": "soon"}, None, (Outcome.RETRY, None)),
    (429, {"X-RateLimit-Reset": "nan"}, None, (Outcome.RETRY, None)),
    (429, {"X-RateLimit-Reset": str(NOW + 86_400)}, None, (Outcome.LIMITED, MAX_PAUSE)),
    (429, {"Retry-After": "7200"}, None, (Outcome.LIMITED, MAX_PAUSE)),
    (429, {"Retry-After": "999999"}, None, (Outcome.LIMITED, MAX_PAUSE)),
    (429, {"Retry-After": "1e9"}, None, (Outcome.RETRY, None)),  # absurd: as if absent
    (430, {}, None, (Outcome.RETRY, None)),
    (430, {"X-IngestLimit-Reset": str(NOW + 12)}, None, (Outcome.LIMITED, 12.0)),
    (430, {"Retry-After": "3"}, None, (Outcome.LIMITED, 3.0)),
    (599, {}, None, (Outcome.RETRY, None)),
])
def test_classify(status: int, headers: dict[str, str], body: Any,
                  expected: tuple[Outcome, float | None]) -> None:
    """Every status and header combination maps to one outcome and pause."""
    outcome, pause = classify(status, headers, body, now=NOW)
    assert outcome is expected[0]
    if expected[1] is None:
        assert pause is None
    else:
        assert pause is not None and math.isclose(pause, expected[1], abs_tol=1.0)


def test_classify_takes_an_answer_with_its_wait_read_once() -> None:
    """An Answer carries its wait (parsed once, by the transport); classify reads it there, not
    the headers again."""
    answer = Answer(429, {"Retry-After": "999"}, None, True, 7.0)
    assert classify(answer) == (Outcome.LIMITED, 7.0)
    assert Answer.of(430, {"x-ingestlimit-reset": str(NOW + 12)}, now=NOW).wait == 12.0
    assert Answer.of(200, {"Retry-After": "5"}).wait is None  # a 2xx asks for no wait
    assert Answer.of(503, {"X-RateLimit-Reset": str(NOW + 9)}, now=NOW).wait is None


def test_a_cut_2xx_is_never_delivered() -> None:
    """A 2xx body cut at the read bound may be an ingest status we could not read: UNREADABLE,
    whose events end failed (never delivered), never retried, never spooled."""
    for body in (None, "", "OK", {"ingested": 5}):
        assert classify(Answer(200, {}, body, complete=False))[0] is Outcome.UNREADABLE
    assert Outcome.UNREADABLE.fate is Fate.FAILED_BY_SERVICE
    assert not Outcome.UNREADABLE.spoolable and not Outcome.UNREADABLE.spends


OUTCOME_TABLE = {
    #  outcome                    fate                            pause       spool  split  spends
    Outcome.DELIVERED: (Fate.DELIVERED, Pause.NONE, False, False, False),
    Outcome.PARTIAL: (Fate.FAILED_BY_SERVICE, Pause.NONE, False, False, False),
    Outcome.UNREADABLE: (Fate.FAILED_BY_SERVICE, Pause.NONE, False, False, False),
    Outcome.TOO_LARGE: (Fate.DROPPED_TOO_LARGE, Pause.NONE, False, True, False),
    Outcome.REJECTED: (Fate.FAILED_REJECTED, Pause.NONE, False, True, False),
    Outcome.AUTH: (Fate.FAILED_AUTH, Pause.ALL, True, False, False),
    Outcome.NOT_FOUND: (Fate.FAILED_NOT_FOUND, Pause.NONE, True, False, False),
    Outcome.REDIRECTED: (Fate.FAILED_CLIENT_ERROR, Pause.NONE, True, False, False),
    Outcome.CLIENT_ERROR: (Fate.FAILED_CLIENT_ERROR, Pause.NONE, False, False, False),
    Outcome.RETRY: (None, Pause.REQUEST, False, False, True),
    Outcome.THROTTLED: (None, Pause.ALL, False, False, True),
    Outcome.LIMITED: (None, Pause.ALL, False, False, False),
    Outcome.RETRIES_EXHAUSTED: (Fate.FAILED_RETRIES_EXHAUSTED, Pause.NONE, True, False, False),
    Outcome.SHUTDOWN: (Fate.DROPPED_SHUTDOWN, Pause.NONE, True, False, False),
    Outcome.UNCONFIRMED: (Fate.UNCONFIRMED, Pause.NONE, True, False, False),
}


@pytest.mark.parametrize("outcome", list(Outcome))
def test_outcome_table(outcome: Outcome) -> None:
    """Each outcome says where its events end, whom its wait stops, whether it may go to the
    spool, whether it splits, whether it spends a try."""
    fate, pause, spoolable, splits, spends = OUTCOME_TABLE[outcome]
    assert (outcome.fate, outcome.pause, outcome.spoolable, outcome.splits, outcome.spends) == (
        fate, pause, spoolable, splits, spends)
    assert outcome.final is (fate is not None)


def test_every_final_failure_has_a_report_cause() -> None:
    """A final outcome that is not a delivery is told under a cause (the close deadline's is
    told in the exit summary instead)."""
    for outcome in Outcome:
        if outcome.final and outcome not in (Outcome.DELIVERED, Outcome.SHUTDOWN):
            assert isinstance(outcome.cause, Cause), outcome
    assert Outcome.DELIVERED.cause is None
    # Causes about single events or limits are told once for the shipper's life.
    assert {Cause.REJECTED, Cause.TOO_LARGE, Cause.PARTIAL, Cause.RATE_LIMITED} <= LASTING
    assert not {Cause.AUTH, Cause.NOT_FOUND, Cause.RETRIES_EXHAUSTED, Cause.SPILLING} & LASTING


def test_the_configuration_mistakes_are_spooled() -> None:
    """401/403, 404 and 3xx (a wrong token, dataset or base address) go to the spool; other
    4xx are final."""
    for status in (401, 403, 404, 301, 302, 307, 308):
        assert classify(status)[0].spoolable, status
    for status in (405, 409, 422):
        assert not classify(status)[0].spoolable, status


def test_status_sets_are_shared_with_the_client() -> None:
    """The client's errors and the policy read the same status sets."""
    for status in _status.AUTH:
        assert classify(status)[0] is Outcome.AUTH
        with pytest.raises(AuthenticationError):
            raise_for_status(Answer(status), what="x")
    for status in _status.NOT_FOUND:
        assert classify(status)[0] is Outcome.NOT_FOUND
        with pytest.raises(NotFoundError):
            raise_for_status(Answer(status), what="x")
    for status in _status.LIMITS:
        with pytest.raises(RateLimitError):
            raise_for_status(Answer(status), what="x")
    with pytest.raises(ApiError, match="redirected"):
        raise_for_status(Answer(307), what="x")


def test_query_limit_names_the_query_limit() -> None:
    """A 430 on a query is the query limit, read from X-QueryLimit-Reset; on an ingest, the
    ingest limit from X-IngestLimit-Reset."""
    import time

    reset = str(int(time.time()) + 20)
    headers = {"X-QueryLimit-Reset": reset}
    query = Answer.of(430, headers, {"message": "limited"}, limit="query")
    with pytest.raises(RateLimitError, match="query limit") as info:
        raise_for_status(query, what="query", limit="query")
    assert info.value.retry_after is not None and 17 <= info.value.retry_after <= 20
    ingest = Answer.of(430, headers, {"message": "limited"})
    with pytest.raises(RateLimitError, match="ingest limit") as info:
        raise_for_status(ingest, what="ingest")
    assert info.value.retry_after is None  # the query limit's header says nothing of ingest


@pytest.mark.parametrize(("status", "headers", "limit", "expected"), [
    (429, {"Retry-After": "4"}, "ingest", 4.0),
    (429, {"Retry-After": "4", "X-RateLimit-Reset": str(NOW + 9)}, "ingest", 4.0),
    (429, {"x-ratelimit-reset": str(NOW + 9)}, "ingest", 9.0),  # any case
    (429, {"X-IngestLimit-Reset": str(NOW + 9)}, "ingest", None),  # another limit's header
    (430, {"X-IngestLimit-Reset": str(NOW + 9)}, "ingest", 9.0),
    (430, {"X-IngestLimit-Reset": str(NOW + 9)}, "query", None),
    (430, {"X-QueryLimit-Reset": str(NOW + 9)}, "query", 9.0),
    (503, {"Retry-After": "2"}, "ingest", 2.0),
    (503, {"X-RateLimit-Reset": str(NOW + 9)}, "ingest", None),  # not a limit: no reset
    (500, {"Retry-After": email.utils.formatdate(NOW + 30, usegmt=True)}, "ingest", 30.0),
    (204, {"Retry-After": "5"}, "ingest", None),
    # No real wait counts as absent: then a limit's reset header, else nothing.
    (429, {"Retry-After": "-5", "X-RateLimit-Reset": str(NOW + 9)}, "ingest", 9.0),
    (429, {"Retry-After": "0"}, "ingest", None),
    (429, {"Retry-After": "inf"}, "ingest", None),
    (429, {"Retry-After": "1e12"}, "ingest", None),
    (429, {"X-RateLimit-Reset": str(NOW - 1)}, "ingest", None),  # already past
    (429, {"X-RateLimit-Reset": str(NOW)}, "ingest", None),
    (429, {"X-RateLimit-Reset": "1e300"}, "ingest", None),
    (429, {"X-RateLimit-Reset": "inf"}, "ingest", None),
    (430, {"X-IngestLimit-Reset": "-1"}, "ingest", None),
])
def test_the_wait_rule(status: int, headers: dict[str, str], limit: Any,
                       expected: float | None) -> None:
    """One rule for the wait an answer asks, read once (``wait_of``): Retry-After, seconds or
    an HTTP date; else a limit's own reset header; never for a 2xx."""
    wait = wait_of(status, headers, limit, now=NOW)
    assert wait == (None if expected is None else pytest.approx(expected, abs=1.0))
    assert Answer.of(status, headers, limit=limit, now=NOW).wait == wait


def test_the_engine_reports_what_the_client_raises() -> None:
    """The engine's error for an answer (``error_for``, reported and given to on_error) is the
    very error the client raises for it: one wording, from one place."""
    for status in (400, 401, 404, 413, 429, 430, 500, 307):
        answer = Answer.of(status, {"Retry-After": "3"}, {"message": "m"})
        error = error_for(answer, what="ingest into dataset 'ds'", dataset="ds")
        assert error is not None and error.__traceback__ is None
        with pytest.raises(type(error)) as info:
            raise_for_status(answer, what="ingest into dataset 'ds'", dataset="ds")
        assert str(info.value) == str(error) and info.value.status == status
    assert error_for(Answer(200), what="x") is None


def test_backoff() -> None:
    """backoff is capped full jitter."""
    assert backoff(1, 0.5, 30, rand=lambda a, b: b) == 0.5
    assert backoff(4, 0.5, 30, rand=lambda a, b: b) == 4.0
    assert backoff(20, 0.5, 30, rand=lambda a, b: b) == 30
    assert backoff(3, 0.5, 30, rand=lambda a, b: a) == 0
    rng = random.Random(1)
    assert all(0 <= backoff(k, 0.5, 30, rand=rng.uniform) <= 30 for k in range(1, 40))


@pytest.mark.parametrize("n", [2, 3, 100, 256, 1000, 5000, 10_000])
def test_bisection_bound(n: int) -> None:
    """The give-up streak is within 4*ceil(log2 n)+4 (and more than a lone bad event makes)."""
    assert give_up_after(n) <= 4 * math.ceil(math.log2(n)) + 4
    assert give_up_after(n) > max(1, (n - 1).bit_length()) + 1


def test_retry_state_is_immutable() -> None:
    """increment() returns a new state; the first limit spends no try, a repeat does;
    exhausted after total retries."""
    r0 = Retry(2, 0.5, 30)
    r1 = r0.increment(Outcome.RETRY, None)
    assert (r0.attempts, r1.attempts) == (0, 1) and r1 is not r0
    with pytest.raises(AttributeError):
        r1.attempts = 5  # type: ignore[misc]
    limited = r1.increment(Outcome.LIMITED, 10.0)
    assert (limited.attempts, limited.limited) == (1, 1) and not limited.exhausted
    # A limit that comes again spends a retry: a service cannot hold a request for ever.
    again = limited.increment(Outcome.LIMITED, 10.0)
    assert (again.attempts, again.limited) == (2, 2) and again.exhausted is False
    assert again.increment(Outcome.LIMITED, 10.0).exhausted
    # A limit without a time is an ordinary retry.
    assert r1.increment(Outcome.LIMITED, None).attempts == 2
    r3 = r1.increment(Outcome.RETRY, None).increment(Outcome.THROTTLED, 1.0)
    assert r3.attempts == 3 and r3.exhausted
    top = lambda a, b: b  # noqa: E731
    assert limited.delay(Outcome.LIMITED, 10.0, rand=top) == 10.0  # the limit's own time
    assert limited.delay(Outcome.LIMITED, 0.0, rand=top) == 0.5  # the floor for "now"
    assert r1.delay(Outcome.RETRY, None, rand=top) == 0.5
    assert r1.delay(Outcome.RETRY, 3.0, rand=top) == 3.0  # at least what the answer asked


def test_auth_pause_doubles_up_to_its_cap() -> None:
    pauses = [5.0]
    for _ in range(10):
        pauses.append(next_auth_pause(pauses[-1]))
    assert pauses[:4] == [5.0, 10.0, 20.0, 40.0]
    assert max(pauses) == AUTH_PAUSE_CAP == pauses[-1]


@pytest.mark.parametrize(("spool", "outage", "pressed", "expected"), [
    (False, True, True, False),  # no spool: never
    (True, False, False, False),  # a spool, the queue has room, no known outage: wait
    (True, True, False, True),  # an outage is known: to disk
    (True, False, True, True),  # the queue would fill while waiting: to disk
])
def test_spill(spool: bool, outage: bool, pressed: bool, expected: bool) -> None:
    assert spill(spool=spool, outage=outage, pressed=pressed) is expected


def test_status_bound_holds_a_status_for_every_event() -> None:
    """A 2xx is read up to a bound that holds a failure for each event of a full batch."""
    failure = {"timestamp": "2026-01-01T00:00:00.000000Z",
               "error": "invalid _time: 'not a time at all, and quite a long one too, to be "
                        "sure' is not an RFC 3339 time"}
    import json

    for n in (1, 1000, 10_000):
        status = {"ingested": 0, "failed": n, "failures": [failure] * n}
        assert len(json.dumps(status)) < status_bound(n)
    assert status_bound(10_000) <= 16 * 1024 * 1024


def test_ingest_status_shape() -> None:
    assert ingest_status({"ingested": 3, "failed": 2, "failures": [1]}) == (3, 2, [1])
    assert ingest_status({"ingested": -1, "failed": 2, "failures": "x"}) == (0, 2, [])
    assert ingest_status({"failed": 0}) is None
    assert ingest_status([{"failed": 2}]) is None


def test_pause_cap() -> None:
    """Every pause is capped at MAX_PAUSE: a wrong header must not stop us for days; and one
    asking more than a year (MAX_WAIT) is no wait at all."""
    assert classify(429, {"Retry-After": "7200"})[1] == MAX_PAUSE
    assert classify(503, {"Retry-After": "80000"})[1] == MAX_PAUSE
    assert classify(429, {"Retry-After": "1e12"}) == (Outcome.RETRY, None)
    assert classify(503, {"Retry-After": "1e12"}) == (Outcome.RETRY, None)


def test_replay_backoff_doubles_from_one_second_up_to_its_cap() -> None:
    waits = [replay_backoff(0.0)]
    for _ in range(8):
        waits.append(replay_backoff(waits[-1]))
    assert waits[:4] == [1.0, 2.0, 4.0, 8.0] and waits[-1] == 30.0
