"""The sender: the flusher thread's work. It cuts batches from the ledger, posts them, and applies
the delivery policy; it spools what cannot be delivered and replays the spool.

The policy is data and pure functions, in the style of urllib3's ``Retry``: ``classify()`` turns
one answer into an ``Outcome`` (and a pause), ``backoff()`` computes the wait before a retry, and
each ``Outcome`` carries where its events end (a ``Fate``), its report cause and whether it may
be spooled. ``Sender`` does the I/O around them, never holding the ledger's lock across any.

What the service's answers mean:

- 2xx: delivered; but when its body is the service's ingest status with ``failed`` > 0, that
  many events of the request were turned down (``PARTIAL``): counted ``failed_by_service``,
  never retried (the service has answered for good). The status carries no index: which
  events failed is unknown, only how many and why.
- 429 / 430 (rate and ingest limits) with ``Retry-After`` or a reset header (epoch seconds):
  all sending pauses until then (``LIMITED``), without spending ``max_retries``; without either,
  an ordinary retry.
- 408, 5xx, no answer: retried with backoff, at most ``max_retries`` times.
- 413 / 400: the request is halved (``splits``) to isolate the events refused; 401 / 403, 404,
  other 4xx: final for the request.

One split loop (``_bisect``) serves delivery and spool replay alike, and it is bounded: a batch
of n events answered 400 to every request costs at most ``2 * ceil(log2 n) + 2`` requests, since
that many 400s in a row (with nothing accepted between) mean the batch is refused as a whole.
One or two bad events never make such a streak: each refused request on the way down to a bad
event is followed by its first half, which holds no bad event unless the streak goes on down.
"""

from __future__ import annotations

import random
import threading
import time
import zlib
from collections.abc import Callable, Mapping
from enum import Enum
from typing import Any

from .. import _encoding as encoding
from .._client import Client, parse_reset, parse_retry_after, raise_for_status
from .._config import ShipperOptions
from .._errors import ApiError, Error, PartialIngestError, TransportError
from .._output import body_detail, shown
from .events import SIZE, item_events, rfc3339
from .guard import _FLUSHERS, HTTP, _get_ident, block_sigterm_in_this_thread, sending
from .ledger import Count, Fate, Ledger
from .reporter import Reporter
from .shaping import Selector, make_finisher
from .spool import Spool, SpoolWriteError

__all__ = ["MAX_PAUSE", "Chunk", "Outcome", "Sender", "backoff", "classify", "give_up_after",
           "ingest_status"]

_monotonic = time.monotonic
# No wait the service asks for is honoured beyond this: a wrong header must not stop us for days.
MAX_PAUSE = 3600.0
# With a spool, during an outage: how often one batch is tried against the service, while the
# others go straight to disk (see Sender._spilling).
OUTAGE_PROBE = 1.0
# How long, past the close deadline, the closing thread waits for what a stuck flusher held to be
# encoded for the spool (see Sender.abandon).
ABANDON_GRACE = 0.5


class Outcome(Enum):
    """What one answer (or its absence) means for the events of a request.

    Each carries ``fate`` (where the events end when this outcome is final; None for outcomes
    that are not), ``cause`` (its report cause), ``spoolable`` (whether, with a spool, the
    events go to disk instead) and ``splits`` (whether a batch of more than one event is halved
    and each half sent again).
    """

    DELIVERED = (Fate.DELIVERED, "delivered", False, False)  # 2xx
    PARTIAL = (Fate.FAILED_BY_SERVICE, "partial", False, False)  # 2xx, ingest status failed > 0
    TOO_LARGE = (Fate.DROPPED_TOO_LARGE, "too_large", False, True)  # 413
    REJECTED = (Fate.FAILED_REJECTED, "rejected", False, True)  # 400
    AUTH = (Fate.FAILED_AUTH, "auth", True, False)  # 401, 403
    NOT_FOUND = (Fate.FAILED_NOT_FOUND, "not_found", True, False)  # 404
    CLIENT_ERROR = (Fate.FAILED_CLIENT_ERROR, "client_error", False, False)  # other 3xx/4xx
    RETRY = (None, "retry", False, False)  # 408, 5xx, no answer, 429/430 without a time
    THROTTLED = (None, "throttled", False, False)  # 503 with Retry-After: pause all, a retry
    LIMITED = (None, "rate_limited", False, False)  # 429/430 with a time: pause all, no retry
    RETRIES_EXHAUSTED = (Fate.FAILED_RETRIES_EXHAUSTED, "retries_exhausted", True, False)
    SHUTDOWN = (Fate.DROPPED_SHUTDOWN, "shutdown", True, False)  # the close deadline came

    def __init__(self, fate: Fate | None, cause: str, spoolable: bool, splits: bool) -> None:
        self.fate = fate
        self.cause = cause
        self.spoolable = spoolable
        self.splits = splits


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


def classify(status: int, headers: Mapping[str, str] | None = None, body: Any = None, *,
             now: float | None = None) -> tuple[Outcome, float | None]:
    """The outcome of one HTTP answer, and the pause it asks for (seconds, or None).

    ``headers`` are the answer's (any case); ``body`` its parsed JSON; ``now`` the wall clock
    for HTTP dates and reset times (default: ``time.time()``). The pause of ``LIMITED`` and
    ``THROTTLED`` stops all sending; that of a ``RETRY`` is the least wait before this request's
    next try. Every pause is capped at ``MAX_PAUSE``.
    """
    if 200 <= status < 300:
        return (Outcome.DELIVERED if ingest_status(body) is None else Outcome.PARTIAL), None
    if status == 413:
        return Outcome.TOO_LARGE, None
    if status == 400:
        return Outcome.REJECTED, None
    if status in (401, 403):
        return Outcome.AUTH, None
    if status == 404:
        return Outcome.NOT_FOUND, None
    if not (status in (408, 429, 430) or status >= 500):
        return Outcome.CLIENT_ERROR, None
    # Imported here, not with the module: `import loghandler` must not pay for urllib3.
    import urllib3

    if headers is None:
        headers = {}
    elif not isinstance(headers, urllib3.HTTPHeaderDict):
        headers = urllib3.HTTPHeaderDict(headers)
    wait = parse_retry_after(headers.get("Retry-After"), now)
    if status in (429, 430):
        if wait is None:
            wait = parse_reset(headers, now)
        if wait is None:
            return Outcome.RETRY, None
        return Outcome.LIMITED, min(wait, MAX_PAUSE)
    if wait is None:
        return Outcome.RETRY, None
    return (Outcome.THROTTLED if status == 503 else Outcome.RETRY), min(wait, MAX_PAUSE)


def backoff(attempt: int, base: float, cap: float, *,
            rand: Callable[[float, float], float] = random.uniform) -> float:
    """The wait before retry number ``attempt`` (1 for the first): exponential, capped, with
    full jitter (a uniform draw up to the exponential step)."""
    return rand(0, min(cap, base * (2 ** (attempt - 1))))


def give_up_after(n: int) -> int:
    """How many 400 answers in a row, with nothing accepted between, mean that a batch of ``n``
    events is refused as a whole: twice the depth of its bisection, plus two."""
    return 2 * max(1, (n - 1).bit_length()) + 2


class Chunk:
    """Events on their way: dicts encoded as one body (the fast path), or encoded one by one.

    Encoding a whole batch in one call is several times cheaper than event by event; the
    per-event form is needed only to cut by bytes, to split (413 / 400) and to spool.
    """

    __slots__ = ("_body", "events", "parts")

    def __init__(self, events: list[dict[str, Any]] | None = None,
                 parts: list[bytes] | None = None, body: bytes | None = None) -> None:
        self.events = events
        self.parts = parts
        self._body = body

    def __len__(self) -> int:
        return len(self.parts) if self.parts is not None else len(self.events or ())

    def body(self) -> bytes:
        if self._body is None:
            self._body = b"[" + b",".join(self.as_parts()) + b"]"
        return self._body

    def as_parts(self) -> list[bytes]:
        if self.parts is None:
            encode = encoding.encode
            self.parts = [encode(e) for e in self.events or ()]
        return self.parts

    def halves(self) -> tuple[Chunk, Chunk]:
        if self.events is not None:
            mid = len(self.events) // 2
            return Chunk(self.events[:mid]), Chunk(self.events[mid:])
        parts = self.as_parts()
        mid = len(parts) // 2
        return Chunk(parts=parts[:mid]), Chunk(parts=parts[mid:])


# What _bisect does with a piece that reached a final outcome: True to go on with the rest.
_Settle = Callable[[Chunk, Outcome, "Error | None"], bool]


class _Tally:
    """What became of one batch's events through its split loop, for one report of it."""

    __slots__ = ("delivered", "failures", "gave_up", "ingested", "partial_failed", "rejected",
                 "rejected_error", "requests", "size", "streak", "too_large", "too_large_error")

    def __init__(self, size: int) -> None:
        self.size = size
        self.requests = self.delivered = self.gave_up = self.streak = 0
        self.rejected = self.too_large = 0
        self.rejected_error: Error | None = None
        self.too_large_error: Error | None = None
        self.ingested = self.partial_failed = 0
        self.failures: list[Any] = []

    def add(self, chunk: Chunk, outcome: Outcome, error: Error | None) -> None:
        n = len(chunk)
        if outcome is Outcome.DELIVERED:
            self.delivered += n
        elif outcome is Outcome.PARTIAL and isinstance(error, PartialIngestError):
            self.delivered += n - error.failed
            self.ingested += error.ingested
            self.partial_failed += error.failed
            self.failures.extend(error.failures[:100 - len(self.failures)])
        elif outcome is Outcome.TOO_LARGE:
            self.too_large += n
            self.too_large_error = self.too_large_error or error
        elif outcome is Outcome.REJECTED:
            self.rejected += n
            self.rejected_error = self.rejected_error or error

    def partial(self) -> PartialIngestError | None:
        """The batch's events turned down inside 2xx answers, as one error (or None)."""
        if not self.partial_failed:
            return None
        return partial_error(self.ingested, self.partial_failed, self.failures,
                             self.size if self.size > 1 else None)


def partial_error(ingested: int, failed: int, failures: list[Any],
                  of: int | None = None) -> PartialIngestError:
    """The error for ``failed`` events turned down in a 2xx ingest status."""
    batch = f" of a batch of {of}" if of else ""
    return PartialIngestError(
        f"the service turned down {_events(failed)}{batch} in its ingest status "
        f"(ingested {ingested}, failed {failed}){_first_failure(failures)}",
        ingested=ingested, failed=failed, failures=failures)


def _events(n: int) -> str:
    return "1 event" if n == 1 else f"{n} events"


def _first_failure(failures: list[Any]) -> str:
    for failure in failures:
        if isinstance(failure, dict) and isinstance(failure.get("error"), str):
            return f": {failure['error'][:300]}"
    return ""


class Sender:
    """Posts the ledger's events to one dataset (see the module docstring).

    ``Sender(ledger, reporter, client, dataset, path, options, spool)``. ``run()`` is the
    flusher thread's body; ``drain_on_this_thread()`` does the same work on a closing thread
    when no flusher can run. As the spool's replay target it offers ``send``, ``stopping``,
    ``count`` and ``progress``.
    """

    def __init__(self, ledger: Ledger, reporter: Reporter, client: Client, dataset: str,
                 path: str, options: ShipperOptions, spool: Spool | None) -> None:
        self.ledger = ledger
        self.reporter = reporter
        self.client = client
        self.dataset = dataset
        self.path = path
        self.options = options
        self.spool = spool
        self.reset()

    def reset(self) -> None:
        """Fresh state: at construction and in a forked child."""
        self.send_lock = threading.Lock()
        # What the flusher holds while it sends, so abandon() can take it over.
        self.posting: Chunk | None = None
        self.stack: list[Chunk] = []
        self.carry: list[bytes] = []
        self.last_replay = 0.0
        self.gave_up = False
        # With a spool: an outage is known (a batch was spilled), so batches go to disk at once
        # but one try every OUTAGE_PROBE seconds, until a batch is delivered.
        self.outage = False
        self.next_probe = 0.0
        self.auth_delay = self.options.auth_retry_delay
        o = self.options
        # What ships (shaping.py): None when not configured, so the flusher pays one test.
        self.finish = make_finisher(o.exclude_fields, o.scrub, o.scrub_keys, o.scrub_patterns)
        self.selector = (Selector(o.sample_levels, o.sample_loggers, o.repeat_limit,
                                  o.repeat_window)
                         if o.sample_levels or o.sample_loggers or o.repeat_limit else None)

    # ------------------------------------------------------------------ the flusher thread

    def run(self) -> None:
        """The flusher thread: wait for a full batch, flush() or close(), or the interval."""
        ledger = self.ledger
        block_sigterm_in_this_thread()
        _FLUSHERS.add(_get_ident())
        if self.options.json_default is not None:
            encoding.set_thread_default(self.options.json_default)
        try:
            interval = self.options.flush_interval
            if self.spool is not None:
                self._replay_spool()
            while True:
                timed_out = False
                if not ledger.closed:
                    timed_out = not ledger.wake.wait(interval)
                with ledger.lock:
                    ledger.wake.clear()
                    ledger.wake_pending = False
                    ledger.update_fast_path_locked()
                    force, ledger.force = ledger.force or timed_out, False
                    closed = ledger.closed
                if self.selector is not None:
                    self._summarize(closed)
                with self.send_lock:
                    self._send_available(partial=force or closed)
                    if closed:
                        if self._deadline_passed():
                            self._settle_leftovers_at_deadline()
                        with ledger.lock:
                            if ledger.idle_locked():
                                return
                if self.spool is not None and not closed and (
                    _monotonic() - self.last_replay >= interval
                ):
                    # Time-based, not on idle wake-ups only: under steady load the flusher is
                    # never idle, and the spool must still drain, interleaved with new events.
                    self._replay_spool()
        except BaseException as exc:  # never let the thread die silently
            self.reporter.report("internal", f"the flusher thread stopped on an internal error: "
                                             f"{type(exc).__name__}: {exc}")
            self.reporter.error(exc)
        finally:
            _FLUSHERS.discard(_get_ident())
            with ledger.lock:
                ledger.progress.notify_all()

    def drain_on_this_thread(self, deadline: float) -> None:
        """Send on the calling thread: used when no flusher thread can run (interpreter exit)."""
        if not self.send_lock.acquire(timeout=max(0.0, deadline - _monotonic())):
            return
        ident = _get_ident()
        _FLUSHERS.add(ident)
        try:
            with self.ledger.lock:
                self.ledger.set_close_deadline_locked(deadline)
            self._send_available(partial=True)
            if self._deadline_passed():
                self._settle_leftovers_at_deadline()
        finally:
            _FLUSHERS.discard(ident)
            self.send_lock.release()

    def _deadline_passed(self) -> bool:
        d = self.ledger.close_deadline
        return d is not None and (self.gave_up or _monotonic() >= d)

    def _send_available(self, partial: bool) -> None:
        """Send batches until the queue is drained (or only a partial batch is left)."""
        carry: list[bytes] = []
        self.carry = carry
        try:
            while not self._deadline_passed():
                batch = self._take_batch(carry, partial)
                if batch is None:
                    break
                self._deliver(batch)
        finally:
            if carry:  # only when the close deadline cut the loop short
                self._fail(Chunk(parts=carry), Outcome.SHUTDOWN, None)

    def _take_batch(self, carry: list[bytes], partial: bool) -> Chunk | None:
        """Cut the next batch: up to ``batch_size`` events and ``max_batch_bytes`` encoded bytes.

        ``carry`` holds encoded events already taken from the queue (in flight) that did not fit
        in the previous batch; they go first.
        """
        ledger = self.ledger
        max_n = ledger.max_batch
        limit = ledger.max_batch_bytes
        while True:
            if carry:
                items = ledger.take(max_n - len(carry), partial=True) or []
            else:
                taken = ledger.take(max_n, partial)
                if taken is None:
                    return None
                items = taken
            events = item_events(items, self.options.fields, self.finish)
            if self.selector is not None and events:
                events = self._select(events)
                if not events and not carry:
                    continue
            if not carry:
                body = encoding.encode_many(events)
                if body is not None and len(body) <= limit:
                    return Chunk(events, body=body)
            # Too big for one request, or a value the fast path refused: event by event.
            parts = carry[:]
            carry.clear()
            encode = encoding.encode
            parts.extend(encode(event) for event in events)
            batch: list[bytes] = []
            total = 2  # the brackets
            for i, part in enumerate(parts):
                size = len(part) + (1 if batch else 0)
                if total + size > limit:
                    if not batch:
                        # One event bigger than a whole batch: the service could never take it.
                        # It is the oldest event in flight, so settling it now keeps the order.
                        ledger.settle(1, Fate.DROPPED_TOO_LARGE)
                        continue
                    carry.extend(parts[i:])
                    break
                batch.append(part)
                total += size
            if batch:
                return Chunk(parts=batch)

    def _select(self, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        # Sampling and repeats (shaping.Selector): what they drop is settled at once, with its
        # reason; a repeat window's summary is queued as an event of its own.
        assert self.selector is not None
        kept, sampled, repeats, summaries = self.selector.select(events)
        if sampled:
            self.ledger.settle(sampled, Fate.DROPPED_SAMPLED)
        if repeats:
            self.ledger.settle(repeats, Fate.DROPPED_REPEAT)
        self._queue_summaries(summaries)
        return kept

    def _summarize(self, closed: bool) -> None:
        assert self.selector is not None
        self._queue_summaries(self.selector.flush_all() if closed
                              else self.selector.expired(_monotonic()))

    def _queue_summaries(self, summaries: list[dict[str, Any]]) -> None:
        for event in summaries:
            event["_time"] = rfc3339(time.time())
            event[SIZE] = size = 600
            self.ledger.add_own(event, size)

    def _deliver(self, batch: Chunk) -> None:
        if self.outage and self.spool is not None and _monotonic() < self.next_probe:
            # The service is known to be down: to disk at once, at the rate events come, so
            # the queue never fills (and drops) while the disk has room.
            self._fail(batch, Outcome.RETRIES_EXHAUSTED, None)
            return
        _, tally = self._bisect(batch, self.options.max_retries, self._settle_delivery,
                                track=True)
        self._conclude(tally, replay=False)

    def _pressed(self) -> bool:
        """The queue is half full (by count or by bytes): waiting longer would soon drop."""
        ledger = self.ledger
        return (len(ledger.queue) * 2 >= ledger.max_size
                or ledger.queue_bytes * 2 >= ledger.max_bytes)

    def _spilling(self, chunk: Chunk, error: Error | None) -> bool:
        """After a failed try of a delivery, with a spool: give up on the batch now (it goes to
        disk, oldest first, so replay keeps the order) when an outage is known already, or
        when the queue would fill while we wait to retry. True when it does."""
        if self.spool is None or not (self.outage or self._pressed()):
            return False
        if not self.outage:
            self.outage = True
            why = f"the service is unreachable ({error})" if error is not None else \
                "sending is paused (the service asked to wait)"
            self.reporter.report("spilling", f"{why} and events keep coming: they go to the "
                                 "spool until it takes them again, then are delivered from "
                                 "there in order")
        self.next_probe = _monotonic() + OUTAGE_PROBE
        return True

    def _settle_delivery(self, chunk: Chunk, outcome: Outcome, error: Error | None) -> bool:
        ledger = self.ledger
        if outcome is Outcome.DELIVERED:
            ledger.settle(len(chunk), Fate.DELIVERED)
            self._recovered()
        elif outcome is Outcome.PARTIAL:
            failed = error.failed if isinstance(error, PartialIngestError) else 0
            ledger.settle(len(chunk) - failed, Fate.DELIVERED)
            ledger.settle(failed, Fate.FAILED_BY_SERVICE)
            self._recovered()
        elif outcome.splits:  # one event, or a batch refused as a whole
            assert outcome.fate is not None
            ledger.settle(len(chunk), outcome.fate)
        else:
            self._fail(chunk, outcome, error)
        return True

    def _bisect(self, batch: Chunk, max_retries: int, settle: _Settle, *,
                track: bool = False, patient: bool = True) -> tuple[list[Chunk], _Tally]:
        """Post ``batch``; halve what the service refuses by halves (``Outcome.splits``), first
        half first, down to single events, until ``give_up_after(len(batch))`` 400s in a row
        say the batch is refused as a whole. ``settle`` is told each piece's final outcome and
        says whether to go on; the pieces not sent when it says no are returned, in order,
        with the tally of the batch for ``_conclude``.

        ``track``: keep the pieces where ``abandon`` can take them over. ``patient``: wait out
        the service's limits (429 / 430) instead of returning them as not final.
        """
        tally = _Tally(len(batch))
        limit = give_up_after(len(batch))
        streak = 0
        stack = [batch]
        if track:
            self.stack = stack
        while stack:
            chunk = stack.pop()
            if track:
                self.posting = chunk
            outcome, error = self._post(chunk, max_retries, patient, spill=track)
            if track:
                self.posting = None
            tally.requests += 1
            streak = streak + 1 if outcome is Outcome.REJECTED else 0
            if outcome is Outcome.REJECTED and streak >= limit and len(stack) + len(chunk) > 1:
                # Refused as a whole: fail this piece and the rest untried, splitting no more.
                rest = [chunk, *reversed(stack)]
                stack.clear()
                tally.gave_up = sum(map(len, rest))
                tally.streak = streak
                for piece in rest:
                    tally.add(piece, outcome, error)
                    settle(piece, outcome, error)
                break
            if outcome.splits and len(chunk) > 1:
                first, second = chunk.halves()
                stack.append(second)
                stack.append(first)
                continue
            tally.add(chunk, outcome, error)
            if not settle(chunk, outcome, error):
                return [chunk, *reversed(stack)], tally
        return [], tally

    def _conclude(self, tally: _Tally, *, replay: bool) -> None:
        """Report what the service refused of one batch: one line per cause (the reporter
        prints each once), one ``on_error`` call per kind of refusal."""
        report = self.reporter.report
        n = tally.size
        counted = "stats().replay_rejected" if replay else "stats().failed_rejected"
        if tally.too_large:
            report("too_large", f"the service refused {_events(tally.too_large)} as too large "
                                f"(HTTP 413); dropped and counted in stats().dropped_too_large")
        if tally.gave_up:
            report("refused_whole", f"the service answered HTTP 400{_said(tally.rejected_error)} "
                                    f"to {tally.streak} requests in a row for a batch of {n} "
                                    f"events ({tally.requests} requests in all), halving it "
                                    f"each time: the batch looks refused as "
                                    f"a whole (a proxy, or a body the service cannot read), so "
                                    f"it was not split further. {tally.delivered} of its {n} "
                                    f"events were delivered; {tally.rejected} are counted in "
                                    f"{counted}")
        elif tally.rejected:
            report("rejected", f"the service rejected {_events(tally.rejected)} of a batch of "
                               f"{n} (HTTP 400){_said(tally.rejected_error)}; {tally.delivered} "
                               f"of the batch were delivered. Rejected events are counted in "
                               f"{counted}")
        partial = tally.partial()
        if partial is not None:
            report("partial", f"{partial}; counted in "
                              + ("stats().replay_rejected" if replay
                                 else "stats().failed_by_service"))
        for error in (tally.too_large_error, tally.rejected_error, partial):
            if error is not None:
                self.reporter.error(error)

    def _fail(self, chunk: Chunk, outcome: Outcome, error: Error | None) -> None:
        """``chunk`` is undeliverable: spool it when the outcome allows, else count it."""
        if self.ledger.abandoned:
            return
        fate = outcome.fate
        assert fate is not None
        spooled = False
        if self.spool is not None and outcome.spoolable:
            try:
                dropped = self.spool.write(chunk.as_parts())
            except Exception as exc:
                self.reporter.report("spool_write", f"could not write to the spool: {exc}")
                self.reporter.error(exc)
                stored, dropped = _spool_failure(exc)
                if dropped:
                    self.ledger.count(Count.SPOOL_DROPPED, dropped)
                if stored:  # on disk all the same: a later replay delivers them
                    self.ledger.settle(stored, Fate.SPOOLED)
                    chunk = Chunk(parts=chunk.as_parts()[stored:])
                    if not len(chunk):
                        return
            else:
                spooled = True
                self.ledger.settle(len(chunk), Fate.SPOOLED)
                if dropped:
                    self.ledger.count(Count.SPOOL_DROPPED, dropped)
        if outcome is Outcome.SHUTDOWN:
            self.gave_up = True  # the deadline is (about to be) reached: stop trying the rest
            if error is not None:
                self.reporter.note_shutdown_error(error)
            if not spooled:
                self.ledger.settle(len(chunk), fate)
            return
        if not spooled:
            self.ledger.settle(len(chunk), fate)
        # Once per batch outcome: a spooled batch is no failure yet, but a refused token is
        # worth telling at once (it will not heal by itself).
        if error is not None and (not spooled or outcome is Outcome.AUTH):
            self.reporter.error(error)

    def _settle_leftovers_at_deadline(self) -> None:
        """The close deadline passed: spool or drop everything still queued, at once."""
        items = self.ledger.drain()
        if items:
            events = item_events(items, self.options.fields, self.finish)
            self._fail(Chunk(events), Outcome.SHUTDOWN, None)

    def abandon(self) -> None:
        """The flusher is stuck past the deadline (in a request to a service that never answers,
        or in a value's ``__repr__`` while encoding): take its events over on this thread, spool
        them or count them, and let the flusher count nothing more. The batch in flight may then
        arrive twice: the request might still succeed (at-least-once).

        Only what reaches the disk counts as spooled: events the flusher held where they cannot
        be taken over (being encoded, being written), and events whose encoding does not finish
        within ``ABANDON_GRACE``, count as ``dropped_shutdown``.
        """
        ledger = self.ledger
        with ledger.lock:
            taken = ledger.abandon()
            if taken is None:
                return
            n, queued = taken
            chunks = [c for c in (self.posting, *reversed(self.stack)) if c is not None]
            carry = list(self.carry)
        if n and self.spool is not None:
            parts = self._encode_in_time(chunks, carry, queued)[:n]
            written = 0
            if parts:
                try:
                    ledger.count(Count.SPOOL_DROPPED, self.spool.write(parts))
                    written = len(parts)
                except Exception as exc:
                    self.reporter.report("spool_write", f"could not write to the spool: {exc}")
                    written, dropped = _spool_failure(exc)
                    ledger.count(Count.SPOOL_DROPPED, dropped)
            if written:
                ledger.settle_abandoned(written, Fate.SPOOLED)
                n -= written
        ledger.settle_abandoned(n, Fate.DROPPED_SHUTDOWN)

    def _encode_in_time(self, chunks: list[Chunk], carry: list[bytes],
                        queued: list[dict[Any, Any]]) -> list[bytes]:
        """The encoded events of what ``abandon`` took over, in order, as far as encoding got
        within ``ABANDON_GRACE``. Encoding calls into the application (a value's ``__repr__``,
        which may hang), so it runs on a helper thread, and the exiting thread waits for it no
        longer than that."""
        parts: list[bytes] = []

        def work() -> None:
            block_sigterm_in_this_thread()
            encode = encoding.encode
            append = parts.append
            try:
                for c in chunks:
                    if c.parts is not None:
                        parts.extend(c.parts)
                    else:
                        for e in c.events or ():
                            append(encode(e))
                parts.extend(carry)
                for e in item_events(queued, self.options.fields, self.finish):
                    append(encode(e))
            except Exception:
                pass  # encode never raises; item_events on an odd record: stop there

        helper = threading.Thread(target=work, name="loghandler-encode-at-exit", daemon=True)
        try:
            helper.start()
        except RuntimeError:  # interpreter shutdown: no new thread; what is encoded is none
            return []
        helper.join(ABANDON_GRACE)
        done = list(parts)  # a snapshot: what the helper appends later is counted as dropped
        if helper.is_alive():
            self.reporter.report(
                "encode_hang", f"encoding the events left at exit did not finish within "
                               f"{ABANDON_GRACE:g} s (a value whose __repr__ hangs?); "
                               f"{len(done)} were spooled, the rest counted as dropped_shutdown")
        return done

    # ------------------------------------------------------------------ one request, retried

    def _post(self, chunk: Chunk, max_retries: int,
              patient: bool = True, spill: bool = False) -> tuple[Outcome, Error | None]:
        """Post one request until it has a final outcome (see ``classify``): retried at most
        ``max_retries`` times; the service's limits waited out without spending a retry, unless
        not ``patient`` (then ``LIMITED`` is returned, and sending stays paused). With ``spill``
        (a delivery, with a spool) a failed try gives up on the batch at once when the service
        is known to be down or the queue would fill while waiting (``_spilling``): the caller
        spools it."""
        opts = self.options
        ledger = self.ledger
        body = chunk.body()
        headers = None
        if opts.compression == "gzip":
            comp = zlib.compressobj(opts.compression_level, zlib.DEFLATED, 31)
            body = comp.compress(body) + comp.flush()
            headers = {"Content-Encoding": "gzip"}
        attempt = limited = 0
        while True:
            waited = self._wait_until(ledger.paused_until, spill=spill)
            if waited is None and self._spilling(chunk, None):
                return Outcome.RETRIES_EXHAUSTED, None  # a long pause while the queue fills
            if not waited:
                return Outcome.SHUTDOWN, None
            timeout = None
            if ledger.close_deadline is not None:
                timeout = ledger.close_deadline - _monotonic()
                if timeout <= 0:
                    return Outcome.SHUTDOWN, None
            pause = None
            try:
                with sending(HTTP):
                    resp = self.client.send("POST", self.path, body, headers=headers,
                                            timeout=timeout)
            except TransportError as exc:
                error: Error = exc
                outcome = Outcome.RETRY
            else:
                outcome, pause = classify(resp.status, resp.headers, resp.body)
                if outcome is Outcome.DELIVERED or outcome is Outcome.PARTIAL:
                    with ledger.lock:
                        ledger.counts[Count.BYTES_SENT] += len(body)
                        ledger.counts[Count.BATCHES] += 1
                    if outcome is Outcome.DELIVERED:
                        return outcome, None
                    return outcome, self._partial(resp.body, len(chunk))
                try:
                    raise_for_status(resp, what=f"ingest into dataset {shown(self.dataset)}",
                                     dataset=self.dataset)
                except ApiError as exc:
                    error = exc
                if outcome is Outcome.AUTH:
                    self._auth_failed(error)
                    return outcome, error
                if outcome is Outcome.NOT_FOUND:
                    self.reporter.report("not_found", str(error))
                    return outcome, error
                if outcome is Outcome.CLIENT_ERROR:
                    self.reporter.report(f"http_{resp.status}", str(error))
                    return outcome, error
                if outcome.fate is not None:  # TOO_LARGE, REJECTED: split by the caller
                    return outcome, error
                if pause is not None and outcome is not Outcome.RETRY:
                    # The service asked everyone to wait: pause all sending, not just this batch.
                    ledger.pause_until(_monotonic() + pause)
            if outcome is Outcome.LIMITED and pause is not None:
                # An announced wait is the service's schedule, not a failure: no retry spent.
                # The backoff floor only guards against a reset that is always "now".
                limited += 1
                self._report_limit(error, pause)
                if not patient:
                    return outcome, error
                delay = max(pause, backoff(limited, opts.retry_backoff, opts.max_retry_delay))
            else:
                attempt += 1
                if spill and self._spilling(chunk, error):
                    return Outcome.RETRIES_EXHAUSTED, error
                if attempt > max_retries:
                    self.reporter.report_or_defer(
                        "retries_exhausted", f"could not deliver a batch of {len(chunk)} "
                                             f"events after {attempt} attempts: {error}")
                    return Outcome.RETRIES_EXHAUSTED, error
                delay = backoff(attempt, opts.retry_backoff, opts.max_retry_delay)
                if pause is not None:
                    delay = max(delay, pause)
            ledger.count(Count.RETRIED)
            # A limit's window is the service's schedule, not an outage: no spilling during it.
            waited = self._wait_until(_monotonic() + delay,
                                      spill=spill and outcome is not Outcome.LIMITED)
            if waited is None and self._spilling(chunk, error):
                return Outcome.RETRIES_EXHAUSTED, error
            if not waited:
                return Outcome.SHUTDOWN, error

    def _partial(self, body: Any, n: int) -> PartialIngestError:
        status = ingest_status(body)
        assert status is not None
        ingested, failed, failures = status
        # More failures than events sent would break the account: the count is capped.
        return partial_error(ingested, min(failed, n), failures)

    def _report_limit(self, error: Error, pause: float) -> None:
        status = error.status if isinstance(error, ApiError) else 429
        which = "rate limit" if status == 429 else "ingest limit"
        self.reporter.report(
            "rate_limited", f"the service's {which} was reached (HTTP {status}): all sending "
                            f"pauses until it resets ({pause:g} s), without spending "
                            "max_retries; new events keep queueing (bounded)")

    def _auth_failed(self, error: Error) -> None:
        # on_error is called once, with the batch's outcome (_fail).
        where = "spooled" if self.spool is not None else "counted in stats().failed_auth"
        self.reporter.report("auth", f"{error}. The batch was {where}; new events stay queued "
                             f"(bounded) and sending pauses {self.auth_delay:g} s before the "
                             "next try")
        # Back off hard instead of hammering the service with a bad token; double each time.
        self.ledger.pause_until(_monotonic() + self.auth_delay)
        self.auth_delay = min(self.auth_delay * 2, 600.0)

    def _wait_until(self, until: float, spill: bool = False) -> bool | None:
        """Sleep until ``until``. False when close()'s deadline comes first: give up now.

        ``spill`` (a delivery's backoff, with a spool): None as soon as the queue is half full,
        for the caller to spill instead of waiting (``_spilling``).
        """
        spill = spill and self.spool is not None
        while True:
            now = _monotonic()
            if now >= until:
                return True
            if spill:
                if self._pressed():
                    return None
                until_step = min(until, now + 0.05)
                if not self._wait_until(until_step):
                    return False
                continue
            deadline = self.ledger.close_deadline
            if deadline is not None:
                if until > deadline:
                    return False
                time.sleep(until - now)
                return True
            # close() sets the interrupt so that a long backoff is re-measured against its
            # deadline at once.
            self.ledger.interrupt.wait(until - now)

    def _recovered(self) -> None:
        self.outage = False
        if self.reporter.recovered():
            self.auth_delay = self.options.auth_retry_delay

    # ------------------------------------------------------------------ the spool

    def _replay_spool(self) -> None:
        """Re-send spooled batches, oldest first, one file at a time, while delivery works."""
        spool = self.spool
        self.last_replay = _monotonic()
        if spool is None or self.ledger.closed:
            return
        try:
            spool.replay(self)
        except Exception as exc:
            self.reporter.report("spool_replay", f"spool replay failed: {exc}")
            self.reporter.error(exc)

    def send(self, parts: list[bytes]) -> list[bytes]:
        """Send encoded events read back from the spool, one attempt per request.

        Returns what is still undelivered (empty when done). Events the service refuses for
        good (400 / 413 down to one event, other client errors, turned down in a 2xx ingest
        status) are counted in ``replay_rejected`` and not returned.
        """
        left, tally = self._bisect(Chunk(parts=parts), 0, self._settle_replay, patient=False)
        self._conclude(tally, replay=True)
        return [part for c in left for part in c.as_parts()]

    def _settle_replay(self, chunk: Chunk, outcome: Outcome, error: Error | None) -> bool:
        ledger = self.ledger
        if outcome is Outcome.DELIVERED:
            ledger.count(Count.REPLAYED, len(chunk))
            self._recovered()
            return True
        if outcome is Outcome.PARTIAL:
            failed = error.failed if isinstance(error, PartialIngestError) else 0
            ledger.count(Count.REPLAYED, len(chunk) - failed)
            ledger.count(Count.REPLAY_REJECTED, failed)
            self._recovered()
            return True
        if outcome.splits or outcome is Outcome.CLIENT_ERROR:
            ledger.count(Count.REPLAY_REJECTED, len(chunk))
            if outcome is Outcome.CLIENT_ERROR and error is not None:
                self.reporter.error(error)
            return True
        return False

    def stopping(self) -> bool:
        """Whether the shipper is closing (replay stops between files)."""
        return self.ledger.closed

    def count(self, counter: Count, n: int = 1) -> None:
        self.ledger.count(counter, n)

    def progress(self) -> int:
        """Events delivered so far: grows when the service takes events again."""
        with self.ledger.lock:
            return self.ledger.counts[Count.DELIVERED]


def _spool_failure(exc: BaseException) -> tuple[int, int]:
    """(events stored, spooled events deleted) of a failed spool write."""
    if isinstance(exc, SpoolWriteError):
        return exc.stored, exc.dropped
    return 0, 0


def _said(error: BaseException | None) -> str:
    if isinstance(error, ApiError):
        return body_detail(error.body)
    return ""
