"""One request's tries: the body posted through the transport until its outcome is final.

``Poster.post(chunk, retry)`` compresses the body once, hands it to the transport, asks the
policy what the answer means (``policy.classify``) and does what the policy table says: an
``Answer`` that is not a delivery becomes the error it means (``_wire/errors.py``: the words the
client raises), reported once per cause; the service's pauses stop all sending
(``Ledger.pause_until``); a retry waits its backoff (``policy.Retry``). It owns one piece of
state: the pause after a refused token, which doubles until a batch is delivered.
"""

from __future__ import annotations

import importlib
import time
import zlib
from collections.abc import Callable
from typing import Any, cast

from .._config import ShipperOptions
from .._errors import ApiError, Error, PartialIngestError, TransportError
from .._output import shown
from .._status import RATE_LIMIT, is_success
from .._wire.answer import Answer
from .._wire.errors import error_for
from .._wire.settings import said
from . import compiled
from .batches import Chunk
from .bisector import partial_error
from .ledger import Count, Flushing
from .policy import (
    MAX_PAUSE,
    Cause,
    Outcome,
    Pause,
    Retry,
    classify,
    ingest_status,
    next_auth_pause,
)
from .reporter import Reporter, answer_of, plural, refusal
from .transport import HttpTransport, Transport

__all__ = ["GiveUp", "Poster"]

_monotonic = time.monotonic

# Asked after a failed try, with a spool (``Spiller.give_up``): whether to give the batch up to
# the disk now. Arguments: the try's error, the pause of a limit being waited out (else None),
# whether the try spent a retry.
GiveUp = Callable[[Error | None, float | None, bool], bool]

JSON_HEADERS = {"Content-Type": "application/json"}
GZIP_HEADERS = {"Content-Type": "application/json", "Content-Encoding": "gzip"}

# The [fast] extra's gzip: ISA-L's deflate (the ``isal`` package), about five times zlib's speed
# at level 1 on batches of log events, as small or smaller, and the same gzip on the wire
# (docs/performance.md, "Ninth pass"). Gzip is most of the flusher's own work, and on a host
# whose cores are busy that work competes with the application's threads. Imported by the
# flusher's first compression, not by ``import loghandler``; [None] when not installed.
_ISAL: list[Any] = []


def isal_zlib() -> Any:
    """``isal.isal_zlib``, or None when the ``isal`` package is not installed."""
    if not _ISAL:
        module: Any = None
        try:
            module = importlib.import_module("isal.isal_zlib")
        except ImportError:
            pass
        _ISAL.append(module)
    return _ISAL[0]


def isal_level(level: int) -> int:
    """ISA-L's level (0-3) for a gzip level 1-9: 1-3 -> 1, 4-6 -> 2, 7-9 -> 3. ISA-L's level 1
    already compresses these batches as well as zlib's 6 (level 0 is zlib's: stored)."""
    return (level + 2) // 3


def _sent(exc: TransportError) -> TransportError:
    """``exc``, known to have left (a try the deadline cut short)."""
    if exc.sent is None:
        exc.sent = True
    return exc


def _at_deadline(last: Error | None) -> Outcome:
    """The close deadline stops a request's tries: its events are ``UNCONFIRMED`` when the last
    try was sent and got no answer (the service may have stored them), else ``SHUTDOWN``."""
    if isinstance(last, TransportError) and last.sent:
        return Outcome.UNCONFIRMED
    return Outcome.SHUTDOWN


class Poster:
    """Posts one request until its outcome is final (see the module docstring).

    ``Poster(ledger, reporter, transport, path, dataset, options)``: ``path`` is the
    dataset's ingest path (``set_query`` adds query parameters to it). ``post`` returns the
    outcome, which its caller (the worker) settles.
    """

    def __init__(self, ledger: Flushing, reporter: Reporter, transport: Transport, path: str,
                 dataset: str, options: ShipperOptions) -> None:
        self.ledger = ledger
        self.reporter = reporter
        self.transport = transport
        self.path = path
        self.dataset = dataset
        self.options = options
        self.spooled = options.spool_dir is not None
        self.auth_delay = options.auth_retry_delay
        # A request is with the transport (sent, or being sent): at a take-over, its events
        # may be stored already (worker.abandon).
        self.in_request = False

    def reset(self) -> None:
        """Fresh state: in a forked child."""
        self.auth_delay = self.options.auth_retry_delay

    def set_query(self, params: dict[str, str]) -> None:
        """Send these query parameters with every request (the command line's
        ``--timestamp-field`` and ``--timestamp-format``, which the service reads there)."""
        from urllib.parse import urlencode

        base = self.path.split("?", 1)[0]
        self.path = f"{base}?{urlencode(params)}" if params else base

    def delivered(self) -> None:
        """A batch was delivered and the reporter told the outage is over: a refused token's
        pause starts again from ``auth_retry_delay``."""
        self.auth_delay = self.options.auth_retry_delay

    def post(self, chunk: Chunk, retry: Retry, *, patient: bool = True,
             give_up: GiveUp | None = None,
             body: tuple[bytes, dict[str, str]] | None = None,
             after_write: Callable[[], None] | None = None) -> tuple[Outcome, Error | None]:
        """Post one request until it has a final outcome (``classify``), retried as ``retry``
        allows; the service's limits are waited out (the first without spending a retry),
        unless not ``patient`` (then ``LIMITED`` is returned, and sending stays paused).
        ``give_up`` (a delivery, with a spool): asked after each failed try and while a wait
        lets the queue fill; when it says so, the batch is given up at once
        (``RETRIES_EXHAUSTED``: the caller spools it). ``body``: the chunk's body and
        headers, made already (``encode``). ``after_write``: called once a try's request is
        written, before its answer is read, where the transport can (``HttpTransport``)."""
        data, headers = body if body is not None else self.encode(chunk)
        hook = after_write if type(self.transport) is HttpTransport else None
        error: Error | None = None
        while True:
            outcome, pause, error = self._try(chunk, data, headers, give_up, error, patient,
                                              hook)
            if outcome.final or (outcome is Outcome.LIMITED and not patient):
                return outcome, error
            retry = retry.increment(outcome, pause)
            limit = pause if outcome is Outcome.LIMITED else None
            if give_up is not None and give_up(error, limit, outcome.spends):
                return Outcome.RETRIES_EXHAUSTED, error
            if retry.exhausted:
                fate = (("it goes" if len(chunk) == 1 else "they go") + " to the spool"
                        if self.spooled else "set spool_dir to keep such batches for later")
                self.reporter.report_or_defer(
                    Cause.RETRIES_EXHAUSTED, f"gave up on {plural(len(chunk), 'event')} after "
                                             f"{plural(retry.attempts, 'attempt')} "
                                             f"({answer_of(error)}): {fate}",
                    f"last error: {answer_of(error)}")
                return Outcome.RETRIES_EXHAUSTED, error
            self.ledger.count(Count.RETRIED)
            # While the service does not take them, the queue may fill: drops are told now.
            self.reporter.tell_drops(self.ledger, self.options.max_queue_size, self.spooled)
            waited = self._wait_until(_monotonic() + retry.delay(outcome, pause), give_up)
            if waited is None and give_up is not None and give_up(error, None, True):
                return Outcome.RETRIES_EXHAUSTED, error
            if not waited:
                return _at_deadline(error), error

    def encode(self, chunk: Chunk) -> tuple[bytes, dict[str, str]]:
        """``chunk``'s request body (compressed as configured) and its headers."""
        opts = self.options
        if opts.compression != "gzip":
            return chunk.body(), JSON_HEADERS
        isal = isal_zlib() if opts.compression_level > 0 else None
        if isal is not None:
            try:  # without the GIL, like _gzip.c's; the array joined first (one copy)
                return (isal.compress(chunk.joined(), isal_level(opts.compression_level),
                                      wbits=31), GZIP_HEADERS)
            except Exception:
                pass  # (out of memory): zlib's way below
        items, array_gz = chunk.wire_items(), compiled.array_gzip
        if items is not None and array_gz is not None:
            try:  # joined and compressed in the one release (_gzip.c)
                return array_gz(items, opts.compression_level), GZIP_HEADERS
            except Exception:
                pass  # (out of memory): as below
        body = chunk.body()
        gz = compiled.gzip_compress
        if gz is not None:  # one release of the GIL, not one per 32 KiB (_gzip.c)
            try:
                return gz(body, opts.compression_level), GZIP_HEADERS
            except Exception:
                pass  # (out of memory): the zlib module's way
        comp = zlib.compressobj(opts.compression_level, zlib.DEFLATED, 31)
        return comp.compress(body) + comp.flush(), GZIP_HEADERS

    def _wait_until(self, until: float, give_up: GiveUp | None) -> bool | None:
        """Sleep until ``until``. False when close()'s deadline comes first: give up now.
        With ``give_up`` (a delivery, with a spool): None as soon as the queue is half full,
        for the caller to ask it instead of waiting."""
        if give_up is not None:
            return self.ledger.wait_pressed(until)
        return self.ledger.sleep_until(until)

    def _try(self, chunk: Chunk, body: bytes, headers: dict[str, str],
             give_up: GiveUp | None, last: Error | None, patient: bool = True,
             after_write: Callable[[], None] | None = None
             ) -> tuple[Outcome, float | None, Error | None]:
        """One try, once sending is not paused: (outcome, its pause, its error). Not
        ``patient`` (a spool replay): while sending is paused, ``LIMITED`` at once, without
        waiting and without a request (a month-long 430 would hold the flusher for its
        whole pause, while the queue overflows)."""
        paused = self.ledger.paused_until - _monotonic()
        if not patient and paused > 0:
            return Outcome.LIMITED, paused, last
        waited = self._wait_until(self.ledger.paused_until, give_up)
        if waited is None and give_up is not None and give_up(last, None, True):
            return Outcome.RETRIES_EXHAUSTED, None, last  # a long pause while the queue fills
        timeout = self.ledger.time_left()
        if not waited or (timeout is not None and timeout <= 0):
            return _at_deadline(last), None, last
        self.in_request = True
        try:
            if after_write is not None:
                answer = cast("HttpTransport", self.transport).send(
                    "POST", self.path, body, headers=headers, timeout=timeout,
                    after_write=after_write)
            else:
                answer = self.transport.send("POST", self.path, body, headers=headers,
                                             timeout=timeout)
        except TransportError as exc:
            self.in_request = False
            # Kept (for the report, on_error), but without its traceback: the frames it holds
            # hold the batch, a cycle that only a full GC pass would free. During an outage
            # every failed try made one, and RSS grew by whole batches.
            exc = exc.with_traceback(None)
            left = self.ledger.time_left()
            if left is not None and left <= 0 and exc.sent is not False:
                # The close deadline ended the wait for the answer of a request that left
                # (or may have: a transport that cannot tell): the service may have stored it.
                return Outcome.UNCONFIRMED, None, _sent(exc)
            return Outcome.RETRY, None, exc
        finally:
            self.in_request = False
        outcome, pause = classify(answer)
        return outcome, pause, self._act(answer, outcome, pause, len(body), len(chunk))

    def _act(self, answer: Answer, outcome: Outcome, pause: float | None, nbytes: int,
             n: int) -> Error | None:
        """Do what the policy table says of an answer; its error (None when delivered)."""
        if is_success(answer.status):
            self.ledger.record_sent(nbytes)
            if outcome is Outcome.PARTIAL:
                return self._partial(answer.body, n)
            if outcome is Outcome.UNREADABLE:
                return self._unreadable(answer, n)
            return None
        error = error_for(answer, what=f"ingest into dataset {shown(self.dataset)}",
                          dataset=self.dataset)
        assert error is not None  # not a 2xx
        if outcome is Outcome.AUTH:
            self._auth_failed(error)
        elif outcome is Outcome.LIMITED and pause is not None:
            self._report_limit(error, pause)
        elif outcome.final and not outcome.splits and outcome.cause is not None:
            self.reporter.report(outcome.cause, refusal(outcome.cause, error, self.dataset, n))
        if outcome.pause is Pause.ALL and pause is not None:
            # The service asked everyone to wait: pause all sending, not just this batch.
            self.ledger.pause_until(_monotonic() + pause)
        return error

    def _partial(self, body: Any, n: int) -> PartialIngestError:
        status = ingest_status(body)
        assert status is not None
        ingested, failed, failures = status
        # More failures than events sent would break the account: the count is capped.
        return partial_error(ingested, min(failed, n), failures)

    def _unreadable(self, answer: Answer, n: int) -> PartialIngestError:
        why = ("is longer than an ingest status can be" if not answer.complete
               else "is not valid JSON")
        return PartialIngestError(
            f"the service's answer (HTTP {answer.status}) {why}: {plural(n, 'event')} may or "
            "may not be stored, counted failed",
            ingested=0, failed=n, failures=[])

    def _report_limit(self, error: ApiError, pause: float) -> None:
        which = "rate limit" if error.status == RATE_LIMIT else "ingest limit"
        if pause >= MAX_PAUSE:
            what = ("events go to the spool meanwhile" if self.spooled
                    else "set spool_dir to keep the events logged meanwhile")
            self.reporter.report(
                Cause.LONG_LIMIT, f"the service's {which} was reached (HTTP {error.status}) "
                                  f"and resets in over {MAX_PAUSE:g} s: {what}")
            return
        self.reporter.report(
            Cause.RATE_LIMITED, f"the service's {which} was reached (HTTP {error.status}): "
                                f"sending pauses {pause:g} s; new events wait in the queue")

    def _auth_failed(self, error: Error) -> None:
        # on_error is called once, with the batch's outcome (Spiller.fail).
        self.reporter.report(Cause.AUTH, f"the service refused the token ({answer_of(error)}): "
                                         f"check {said('token')} or LOGHANDLER_TOKEN; sending "
                                         f"resumes in {self.auth_delay:g} s")
        # Back off hard instead of hammering the service with a bad token; double each time.
        self.ledger.pause_until(_monotonic() + self.auth_delay)
        self.auth_delay = next_auth_pause(self.auth_delay)
