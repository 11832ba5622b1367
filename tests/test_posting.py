"""posting.py: one request's tries, through a ``MemoryTransport``: the body and its headers,
retries and their bound, the service's waits, a refused token's pause, an ingest status that
turns events down, and the error each answer means."""

from __future__ import annotations

import gzip
import json
import threading
import time
import zlib
from typing import Any

import pytest

from loghandler import (
    AuthenticationError,
    PartialIngestError,
    RateLimitError,
    Shipper,
    TransportError,
)
from loghandler._engine import posting
from loghandler._engine.batches import Chunk
from loghandler.testing import MemoryTransport, SentRequest

FAST = {"flush_interval": 60, "retry_backoff": 0.001, "max_retry_delay": 0.002}


class Clock:
    """Answers from a list (then 200), noting when each request came."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.times: list[float] = []
        self.lock = threading.Lock()

    def __call__(self, request: SentRequest) -> Any:
        with self.lock:
            self.times.append(time.monotonic())
            answer = self.answers.pop(0) if self.answers else 200
        if isinstance(answer, BaseException):
            raise answer
        return answer


def shipper(transport: MemoryTransport, **options: Any) -> Shipper:
    return Shipper(dataset="ds", transport=transport, **{**FAST, **options})


@pytest.mark.parametrize(("compression", "encoding"), [("gzip", "gzip"), (None, None)])
def test_the_body_and_its_headers(compression: Any, encoding: Any) -> None:
    """A JSON array, gzip-compressed unless compression=None, and headers saying which."""
    t = MemoryTransport()
    s = shipper(t, compression=compression)
    s.submit({"a": 1})
    assert s.flush(5)
    s.close()
    (request,) = t.requests
    assert request.headers["Content-Type"] == "application/json"
    assert request.headers.get("Content-Encoding") == encoding
    assert request.events == [{"a": 1}] and request.path == "/v1/datasets/ds/ingest"


@pytest.mark.parametrize("level", [1, 5, 9])
@pytest.mark.parametrize("wire", [False, True])
def test_gzip_is_isal_when_installed_and_zlib_otherwise(
        level: int, wire: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the [fast] extra's ``isal`` installed, a batch is compressed by ISA-L, at its level
    for the gzip level asked (1-3 -> 1, 4-6 -> 2, 7-9 -> 3); without it, by zlib, byte for byte
    what zlib writes (the compiled path's _gzip.c, or the zlib module). Either way, a gzip
    stream of the same JSON array. Events as dicts and as wire items (the compiled path's
    pre-encoded events, which _gzip.c joins as it compresses)."""
    from isal import isal_zlib

    s = shipper(MemoryTransport(), compression_level=level)
    poster = s._flusher.worker.poster  # noqa: SLF001 - the one request's encoder
    events: list[Any] = [{"i": i, "message": f"user {i} logged in"} for i in range(500)]
    if wire:
        events = [json.dumps(e, separators=(",", ":")).encode() for e in events]
    chunk = Chunk(events, wire=wire)
    body, headers = poster.encode(chunk)
    plain = Chunk(list(events), wire=wire).body()
    assert headers["Content-Encoding"] == "gzip" and gzip.decompress(body) == plain
    assert json.loads(plain)[499] == {"i": 499, "message": "user 499 logged in"}
    assert body == isal_zlib.compress(plain, posting.isal_level(level), wbits=31)
    monkeypatch.setattr(posting, "_ISAL", [None])  # as where isal is not installed
    body, headers = poster.encode(Chunk(list(events), wire=wire))
    comp = zlib.compressobj(level, zlib.DEFLATED, 31)
    assert headers["Content-Encoding"] == "gzip" and body == comp.compress(plain) + comp.flush()
    s.close()


def test_level_0_is_stored_even_with_isal() -> None:
    """compression_level=0 keeps its meaning, a gzip stream that stores the array as it is
    (ISA-L's level 0 compresses)."""
    s = shipper(MemoryTransport(), compression_level=0)
    poster = s._flusher.worker.poster  # noqa: SLF001
    body, _ = poster.encode(Chunk([{"message": "x" * 1000}]))
    assert len(body) > 1000 and gzip.decompress(body) == b'[{"message":"' + b"x" * 1000 + b'"}]'
    s.close()


def test_retries_end_at_max_retries(capfd: pytest.CaptureFixture[str]) -> None:
    """max_retries=2: three requests at most, then the batch is failed and told."""
    errors: list[BaseException] = []
    t = MemoryTransport(lambda request: 500)
    s = shipper(t, max_retries=2, on_error=errors.append)
    for i in range(3):
        s.submit({"i": i})
    assert s.flush(5) is False
    st = s.stats()
    s.close()
    assert len(t.requests) == 3
    assert (st.retried, st.failed_retries_exhausted, st.delivered) == (2, 3, 0)
    assert "after 3 attempts" in capfd.readouterr().err
    assert len(errors) == 1 and "HTTP 500" in str(errors[0])


def test_no_answer_is_retried() -> None:
    clock = Clock(TransportError("connection reset (scripted)"))
    s = shipper(MemoryTransport(clock), max_retries=1)
    s.submit({"a": 1})
    assert s.flush(5)
    st = s.stats()
    s.close()
    assert (st.delivered, st.retried, len(clock.times)) == (1, 1, 2)


def test_a_limit_is_waited_out_without_spending_a_retry() -> None:
    """429 with Retry-After: the next try waits that long, and max_retries=0 does not stop
    it (the service said when to come back)."""
    clock = Clock((429, {"Retry-After": "0.3"}))
    errors: list[BaseException] = []
    s = shipper(MemoryTransport(clock), max_retries=0, on_error=errors.append)
    s.submit({"a": 1})
    assert s.flush(5)
    s.close()
    assert len(clock.times) == 2 and clock.times[1] - clock.times[0] >= 0.3
    assert errors == []  # a limit waited out is no failure


def test_a_limit_without_a_time_is_an_ordinary_retry() -> None:
    errors: list[BaseException] = []
    s = shipper(MemoryTransport(lambda request: 429), max_retries=1, on_error=errors.append)
    s.submit({"a": 1})
    assert s.flush(5) is False
    st = s.stats()
    s.close()
    assert st.failed_retries_exhausted == 1
    assert len(errors) == 1 and isinstance(errors[0], RateLimitError)
    assert errors[0].retry_after is None


def test_a_refused_token_pauses_all_sending_doubling(capfd: pytest.CaptureFixture[str]) -> None:
    """401: the batch fails (failed_auth), and sending pauses auth_retry_delay, then twice
    that after the next refusal; the error names the token, once."""
    clock = Clock(401, 401)
    errors: list[BaseException] = []
    s = shipper(MemoryTransport(clock), auth_retry_delay=0.2, on_error=errors.append)
    for i in range(3):
        s.submit({"i": i})
        s.flush(5)
    st = s.stats()
    s.close()
    first, second, third = clock.times
    assert second - first >= 0.2 and third - second >= 0.4
    assert (st.failed_auth, st.delivered) == (2, 1)
    assert all(isinstance(e, AuthenticationError) for e in errors) and len(errors) == 2
    assert "refused the token (HTTP 401" in str(errors[0])
    assert capfd.readouterr().err.count("refused the token") == 1


def test_an_ingest_status_that_turns_events_down() -> None:
    """A 2xx whose status reports failed events: those are failed_by_service (never retried),
    the rest delivered; on_error gets a PartialIngestError naming the first failure."""
    status = {"ingested": 3, "failed": 2, "failures": [{"timestamp": "t", "error": "bad _time"}]}
    errors: list[BaseException] = []
    t = MemoryTransport([(200, {}, status)])
    s = shipper(t, on_error=errors.append)
    for i in range(5):
        s.submit({"i": i})
    assert s.flush(5) is False
    st = s.stats()
    s.close()
    assert (st.delivered, st.failed_by_service, len(t.requests)) == (3, 2, 1)
    (error,) = errors
    assert isinstance(error, PartialIngestError) and error.failed == 2
    assert "bad _time" in str(error)


HOSTILE_WAITS = ("-5", "0", "-0", "inf", "-inf", "1e12", "nan", "abc",
                 "Wed, 21 Oct 2015 07:28:00 GMT")


@pytest.mark.parametrize("status", [429, 503])
@pytest.mark.parametrize("value", HOSTILE_WAITS)
def test_a_hostile_retry_after_is_no_wait(httpserver: Any, status: int, value: str) -> None:
    """A real service over loopback answers every request ``status`` with a Retry-After that
    is no real wait (negative, zero, non-finite, absurd, past, garbage): it counts as absent,
    so each try spends a retry with the backoff, and the batch is given up after
    max_retries+1 requests (before: "wait 0 s" spent nothing and re-sent for ever; ``inf`` or
    1e12 paused all sending for the hour's cap)."""
    from helpers import TOKEN

    from loghandler import Client

    httpserver.expect_request("/v1/datasets/ds/ingest").respond_with_json(
        {"code": status, "message": "hostile"}, status=status, headers={"Retry-After": value})
    errors: list[BaseException] = []
    s = Shipper(Client(TOKEN, url=httpserver.url_for("").rstrip("/")), "ds",
                max_retries=2, on_error=errors.append, **FAST)
    s.submit({"a": 1})
    started = time.monotonic()
    assert s.flush(20) is False
    took = time.monotonic() - started
    st = s.stats()
    s.close(1)
    # Every try was answered with the hostile wait (a try that met no answer, a reset or a
    # time-out, would be named here): the last error is the service's.
    assert [getattr(e, "status", e) for e in errors] == [status], (errors, st, round(took, 2))
    assert (st.failed_retries_exhausted, st.retried, st.delivered) == (1, 2, 0)
    assert len(httpserver.log) == 3  # the first try and max_retries=2 retries, no more
    assert took < 15  # not paused for the hour a huge value used to ask


def test_a_limit_that_comes_again_spends_the_retry_budget(httpserver: Any) -> None:
    """429 with a valid Retry-After on every answer: the first wait is free, each further one
    spends a retry, so with max_retries=1 the batch is given up after three requests, each
    after the wait asked (before: waited out for ever, holding every batch behind it)."""
    from helpers import TOKEN

    from loghandler import Client

    httpserver.expect_request("/v1/datasets/ds/ingest").respond_with_json(
        {"code": 429, "message": "limit"}, status=429, headers={"Retry-After": "0.2"})
    s = Shipper(Client(TOKEN, url=httpserver.url_for("").rstrip("/")), "ds",
                max_retries=1, **FAST)
    s.submit({"a": 1})
    assert s.flush(20) is False
    st = s.stats()
    s.close(1)
    log = httpserver.log
    assert len(log) == 3 and st.failed_retries_exhausted == 1 and st.delivered == 0
