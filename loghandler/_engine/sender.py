"""The sender: the flusher thread's work. It takes batches from the ledger (``batches.Cutter``),
hands each body to the transport (``transport.py``), and settles what the answer means
(``policy.py``), splitting what the service refuses (``bisector.py``); with a spool, it spools
what cannot be delivered and replays the spool (``spool.py``). It never holds the ledger's lock
across any I/O.
"""

from __future__ import annotations

import sys
import threading
import time
import zlib
from collections.abc import Callable
from typing import Any

from .. import _compiled
from .. import _encoding as encoding
from .._client import Response, raise_for_status
from .._config import ShipperOptions, said
from .._errors import ApiError, Error, PartialIngestError, TransportError
from .._output import clip, printable, shown
from .batches import Chunk, Cutter
from .bisector import bisect, conclude, partial_error
from .events import FAST_HEAD, PLAIN, SIZE, item_events, known_clean, rfc3339
from .guard import _FLUSHERS, _get_ident, block_sigterm_in_this_thread
from .ledger import SPILL_BATCHES, Count, Fate, Ledger
from .policy import (
    MAX_PAUSE,
    Answer,
    Cause,
    Outcome,
    Pause,
    Retry,
    classify,
    ingest_status,
    next_auth_pause,
    spill,
)
from .reporter import Reporter, answer_of, counted, plural, refusal
from .shaping import Selector, make_finisher
from .spool import Spool, SpoolWriteError
from .transport import Transport

__all__ = ["Sender"]

_monotonic = time.monotonic
# With a spool, during an outage: how often one batch is tried against the service, while the
# others go straight to disk (see Sender._spilling).
OUTAGE_PROBE = 1.0
# How long, past the close deadline, the closing thread waits for what a stuck flusher held to be
# encoded for the spool (see Sender.abandon).
ABANDON_GRACE = 0.5


class Sender:
    """Posts the ledger's events to one dataset (see the module docstring).

    ``Sender(ledger, reporter, transport, dataset, options, spool)``. ``run()`` is the flusher
    thread's body; ``drain_on_this_thread()`` does the same work on a closing thread when no
    flusher can run. As the spool's replay target it offers ``send``, ``stopping``, ``count``
    and ``progress``.
    """

    def __init__(self, ledger: Ledger, reporter: Reporter, transport: Transport, dataset: str,
                 options: ShipperOptions, spool: Spool | None) -> None:
        self.ledger = ledger
        self.reporter = reporter
        self.transport = transport
        self.dataset = dataset
        self.options = options
        self.spool = spool
        self.reset()

    def reset(self) -> None:
        """Fresh state: at construction and in a forked child."""
        self.send_lock = threading.Lock()
        opts = self.options
        # What ships (shaping.py): None when not configured, so the flusher pays one test.
        self.finish = make_finisher(opts.exclude_fields, opts.scrub, opts.scrub_keys,
                                    opts.scrub_patterns, opts.field_names)
        self.selector = (Selector(opts.sample_levels, opts.sample_loggers, opts.repeat_limit,
                                  opts.repeat_window, keep_level=opts.keep_level,
                                  field_names=opts.field_names)
                         if opts.sample_levels or opts.sample_loggers or opts.repeat_limit
                         else None)
        self.cutter = Cutter(self.ledger, opts.batch_size, opts.max_batch_bytes, opts.fields,
                             self.finish, self._select if self.selector is not None else None)
        # What the flusher holds while it sends, so abandon() can take it over.
        self.posting: Chunk | None = None
        self.stack: list[Chunk] = []
        # The settlements of the batch being delivered, applied once its outcomes are told.
        self.deferred: list[tuple[int, Fate]] | None = None
        self.after_run: Callable[[], None] | None = None
        self.last_replay = 0.0
        self.gave_up = False
        # With a spool: an outage is known (a batch was spilled), so batches go to disk at once
        # but one try every OUTAGE_PROBE seconds, until a batch is delivered.
        self.outage = False
        self.next_probe = 0.0
        self.spill_until = 0.0  # a burst filled the queue: spill until then (_spill_step)
        # Drops at the door the stderr has told of (_tell_drops): (queue full, invalid).
        self.told_drops = (0, 0)
        self.auth_delay = opts.auth_retry_delay

    def wire(self) -> tuple[bytes, frozenset[str], set[Any] | None, Any] | None:
        """What the handler's compiled fast path needs to queue its events as their final
        JSON (events.py "Wire items"): ``fields=`` as JSON text to append, their names, the
        scrubber's set of keys it has nothing to do for and its ``learn`` (None, None: no
        scrubber). None when the flusher has work to do per event: a sampling or repeat
        policy, exclusions, scanning text for secrets, a ``fields=`` value that is not plain or
        whose name is a secret's."""
        if self.selector is not None or self.options.json_default is not None:
            return None
        if self.options.field_names:  # renamed by the flusher (the C writer knows no names)
            return None
        static = dict(self.options.fields or {})
        if any(type(v) not in PLAIN for v in static.values()):
            return None
        clean: set[Any] | None = None
        learn = None
        finish = self.finish
        if finish is not None:
            clean = known_clean(finish, tuple(static.items()), True)
            if clean is None or not clean.issuperset(FAST_HEAD):
                return None
            learn = getattr(finish, "learn", None)
        # The event's own fields win over fields= (item_events): the head's always do.
        fragment = b"".join(b"," + encoding.encode(key) + b":" + encoding.encode(value)
                            for key, value in static.items() if key not in FAST_HEAD)
        return fragment, frozenset(static), clean, learn

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
                force, closed = ledger.wait_for_work(interval)
                if self.selector is not None:
                    self._summarize(False)
                with self.send_lock:
                    self._send_available(partial=force or closed)
                    if closed and self.selector is not None:
                        # The open repeat windows end after the last queued events were
                        # selected (before, a window closed early and a new one let N more in).
                        self._summarize(True)
                        self._send_available(partial=True)
                    self._tell_drops()
                    if closed:
                        if self._deadline_passed():
                            self._settle_leftovers_at_deadline()
                        if ledger.idle():
                            return
                if self.spool is not None and not closed and (
                    _monotonic() - self.last_replay >= interval
                ):
                    # Time-based, not on idle wake-ups only: under steady load the flusher is
                    # never idle, and the spool must still drain, interleaved with new events.
                    self._replay_spool()
        except BaseException as exc:  # never let the thread die silently
            # What it held in flight would otherwise stay unaccounted (and flush() waiting for
            # it): counted where a bug of ours counts an event, as the handler's path does.
            lost = ledger.settle_inflight(Fate.DROPPED_INVALID)
            self.reporter.report(Cause.INTERNAL, f"the background thread stopped on an internal "
                                                 f"error ({type(exc).__name__}: "
                                                 f"{clip(printable(str(exc)), 60)})"
                                 + (f", losing {plural(lost, 'event')}"
                                    f"{counted('dropped_invalid')}" if lost else "")
                                 + ": please report it")
            self.reporter.error(exc)
        finally:
            _FLUSHERS.discard(_get_ident())
            ledger.flusher_gone()
            after, self.after_run = self.after_run, None
            if after is not None:  # an abandoned shipper's last chore (lifecycle.Orphan)
                try:
                    after()
                except Exception:
                    pass

    def drain_on_this_thread(self, deadline: float) -> None:
        """Send on the calling thread: used when no flusher thread can run (interpreter exit)."""
        if not self.send_lock.acquire(timeout=max(0.0, deadline - _monotonic())):
            return
        ident = _get_ident()
        _FLUSHERS.add(ident)
        try:
            self.ledger.set_close_deadline(deadline)
            self._send_available(partial=True)
            if self._deadline_passed():
                self._settle_leftovers_at_deadline()
        finally:
            _FLUSHERS.discard(ident)
            self.send_lock.release()

    def _deadline_passed(self) -> bool:
        d = self.ledger.close_deadline
        return d is not None and (self.gave_up or _monotonic() >= d)

    def _tell_drops(self) -> None:
        """Events dropped at the door since the last look are told on stderr, once per cause
        until delivery recovers: the caller's thread, which drops them, prints nothing."""
        if self.reporter.exiting:
            return  # the exit hook's summary line counts them
        st = self.ledger.snapshot()
        full, invalid = st.dropped_queue_full, st.dropped_invalid
        told_full, told_invalid = self.told_drops
        if full > told_full:
            what = ("raise max_queue_size / max_queue_bytes" if self.spool is not None
                    else "raise max_queue_size or set spool_dir")
            self.reporter.report(
                Cause.QUEUE_FULL,
                f"the queue is full: {plural(full, 'event')} dropped so far"
                f"{counted('dropped_queue_full')}: {what}")
        if invalid > told_invalid:
            self.reporter.report(
                Cause.DROPPED_INVALID,
                f"an internal error of loghandler lost {plural(invalid, 'event')}"
                f"{counted('dropped_invalid')}: please report it")
        self.told_drops = (full, invalid)

    def _send_available(self, partial: bool) -> None:
        """Send batches until the queue is drained (or only a partial batch is left)."""
        cutter = self.cutter
        try:
            while not self._deadline_passed():
                spill = self._spill_step()
                batch = cutter.next(partial, spill, SPILL_BATCHES * self.options.max_batch_bytes)
                if batch is None:
                    break
                if spill:  # taken for the spool
                    self._fail(batch, Outcome.RETRIES_EXHAUSTED, None, spill=True)
                    continue
                self._deliver(batch)
        finally:
            if cutter.carry:  # only when the close deadline cut the loop short
                carry = cutter.carry[:]
                cutter.carry.clear()
                self._fail(Chunk(parts=carry), Outcome.SHUTDOWN, None)

    def _spill_step(self) -> int:
        """While an outage is known, with a spool (``_deliver``): how many events to take in one
        step, straight to disk (0: batch by batch, to the service). Large steps, so the spool
        keeps up with an application logging at full speed; bounded, since they are in flight
        on top of the queue."""
        if self.spool is None:
            return 0
        now = _monotonic()
        if self.ledger.nearly_full():
            # A burst faster than the service can be tried (a request, even one refused at
            # once, lets the queue fill meanwhile): to disk for a while, to the service after.
            self.spill_until = now + OUTAGE_PROBE
        spilling = now < self.spill_until or (self.outage and now < self.next_probe)
        self.ledger.set_spilling(spilling or self.outage)
        return SPILL_BATCHES * self.options.batch_size if spilling else 0

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
        opts = self.options

        def post(chunk: Chunk) -> tuple[Outcome, Error | None]:
            return self._post(chunk, Retry(opts.max_retries, opts.retry_backoff,
                                           opts.max_retry_delay), spill=True)

        # The batch's settlements wait until its outcomes are reported: a flush() waiting for
        # these events returns after on_error has been called for them, not before.
        deferred: list[tuple[int, Fate]] = []
        self.deferred = deferred
        try:
            _, tally = bisect(batch, post, self._settle_delivery, track=self._track)
            conclude(self.reporter, tally, replay=False)
        finally:
            self.deferred = None
            for n, fate in deferred:
                self.ledger.settle(n, fate)

    def _track(self, stack: list[Chunk], posting: Chunk | None) -> None:
        self.stack = stack
        self.posting = posting

    def _settle(self, n: int, fate: Fate) -> None:
        # During a delivery, after its outcomes are reported (_deliver); at once otherwise.
        if self.deferred is not None:
            self.deferred.append((n, fate))
        else:
            self.ledger.settle(n, fate)

    def _settle_delivery(self, chunk: Chunk, outcome: Outcome, error: Error | None) -> bool:
        if outcome is Outcome.DELIVERED or outcome is Outcome.PARTIAL:
            failed = error.failed if isinstance(error, PartialIngestError) else 0
            self._settle(len(chunk) - failed, Fate.DELIVERED)
            if failed:
                self._settle(failed, Fate.FAILED_BY_SERVICE)
            self._recovered()
        elif outcome.splits or outcome is Outcome.UNREADABLE:  # reported by conclude()
            assert outcome.fate is not None
            self._settle(len(chunk), outcome.fate)
        else:
            self._fail(chunk, outcome, error)
        return True

    # ------------------------------------------------------------------ one request, retried

    def _post(self, chunk: Chunk, retry: Retry, *, patient: bool = True,
              spill: bool = False) -> tuple[Outcome, Error | None]:
        """Post one request until it has a final outcome (``classify``), retried as ``retry``
        allows; the service's limits are waited out without spending a retry, unless not
        ``patient`` (then ``LIMITED`` is returned, and sending stays paused). With ``spill`` (a
        delivery, with a spool) the batch is given up at once when waiting would let the queue
        fill (``_spilling``): the caller spools it."""
        body, headers = self._body(chunk)
        error: Error | None = None
        while True:
            outcome, pause, error = self._try(chunk, body, headers, spill, error)
            if outcome.final or (outcome is Outcome.LIMITED and not patient):
                return outcome, error
            retry = retry.increment(outcome, pause)
            if spill and self._spilling(error, limit=pause if outcome is Outcome.LIMITED
                                        else None, tried=outcome.spends):
                return Outcome.RETRIES_EXHAUSTED, error
            if retry.exhausted:
                fate = (("it goes" if len(chunk) == 1 else "they go") + " to the spool"
                        if self.spool is not None
                        else "set spool_dir to keep such batches for later")
                self.reporter.report_or_defer(
                    Cause.RETRIES_EXHAUSTED, f"gave up on {plural(len(chunk), 'event')} after "
                                             f"{plural(retry.attempts, 'attempt')} "
                                             f"({answer_of(error)}): {fate}",
                    f"last error: {answer_of(error)}")
                return Outcome.RETRIES_EXHAUSTED, error
            self.ledger.count(Count.RETRIED)
            self._tell_drops()  # while the service does not take them, the queue may fill
            waited = self._wait_until(_monotonic() + retry.delay(outcome, pause), spill=spill)
            if waited is None and self._spilling(error):
                return Outcome.RETRIES_EXHAUSTED, error
            if not waited:
                return Outcome.SHUTDOWN, error

    def _body(self, chunk: Chunk) -> tuple[bytes, dict[str, str] | None]:
        opts = self.options
        body = chunk.body()
        if opts.compression != "gzip":
            return body, None
        gz = _compiled.gzip_compress
        if gz is not None:  # one release of the GIL, not one per 32 KiB (_gzip.c)
            try:
                return gz(body, opts.compression_level), {"Content-Encoding": "gzip"}
            except Exception:
                pass  # (out of memory): the zlib module's way
        comp = zlib.compressobj(opts.compression_level, zlib.DEFLATED, 31)
        return comp.compress(body) + comp.flush(), {"Content-Encoding": "gzip"}

    def _try(self, chunk: Chunk, body: bytes, headers: dict[str, str] | None, spill: bool,
             last: Error | None) -> tuple[Outcome, float | None, Error | None]:
        """One try, once sending is not paused: (outcome, its pause, its error)."""
        waited = self._wait_until(self.ledger.paused_until, spill=spill)
        if waited is None and self._spilling(last):
            return Outcome.RETRIES_EXHAUSTED, None, last  # a long pause while the queue fills
        timeout = self.ledger.time_left()
        if not waited or (timeout is not None and timeout <= 0):
            return Outcome.SHUTDOWN, None, last
        try:
            answer = self.transport.post(body, headers, timeout)
        except TransportError as exc:
            # Kept (for the report, on_error), but without its traceback: the frames it holds
            # hold the batch, a cycle that only a full GC pass would free. During an outage
            # every failed try made one, and RSS grew by whole batches.
            return Outcome.RETRY, None, exc.with_traceback(None)
        outcome, pause = classify(answer)
        return outcome, pause, self._act(answer, outcome, pause, len(body), len(chunk))

    def _act(self, answer: Answer, outcome: Outcome, pause: float | None, nbytes: int,
             n: int) -> Error | None:
        """Do what the policy table says of an answer; its error (None when delivered)."""
        if 200 <= answer.status < 300:
            self.ledger.record_sent(nbytes)
            if outcome is Outcome.PARTIAL:
                return self._partial(answer.body, n)
            if outcome is Outcome.UNREADABLE:
                return self._unreadable(answer, n)
            return None
        error = self._api_error(answer)
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

    def _api_error(self, answer: Answer) -> Error:
        resp = Response(answer.status, answer.body, answer.wait, answer.headers)
        try:
            raise_for_status(resp, what=f"ingest into dataset {shown(self.dataset)}",
                             dataset=self.dataset)
        except ApiError as exc:
            return exc.with_traceback(None)  # no frames kept alive (see _try)
        return ApiError(answer.status, answer.body, f"HTTP {answer.status}")  # not reached

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

    def _report_limit(self, error: Error, pause: float) -> None:
        status = error.status if isinstance(error, ApiError) else 429
        which = "rate limit" if status == 429 else "ingest limit"
        if pause >= MAX_PAUSE:
            what = ("events go to the spool meanwhile" if self.spool is not None
                    else "set spool_dir to keep the events logged meanwhile")
            self.reporter.report(
                Cause.LONG_LIMIT, f"the service's {which} was reached (HTTP {status}) and "
                                  f"resets in over {MAX_PAUSE:g} s: {what}")
            return
        self.reporter.report(
            Cause.RATE_LIMITED, f"the service's {which} was reached (HTTP {status}): sending "
                                f"pauses {pause:g} s; new events wait in the queue")

    def _auth_failed(self, error: Error) -> None:
        # on_error is called once, with the batch's outcome (_fail).
        self.reporter.report(Cause.AUTH, f"the service refused the token ({answer_of(error)}): "
                                         f"check {said('token')} or LOGHANDLER_TOKEN; sending "
                                         f"resumes in {self.auth_delay:g} s")
        # Back off hard instead of hammering the service with a bad token; double each time.
        self.ledger.pause_until(_monotonic() + self.auth_delay)
        self.auth_delay = next_auth_pause(self.auth_delay)

    def _wait_until(self, until: float, spill: bool = False) -> bool | None:
        """Sleep until ``until``. False when close()'s deadline comes first: give up now.

        ``spill`` (a delivery, with a spool): None as soon as the queue is half full, for the
        caller to spill instead of waiting (``_spilling``).
        """
        if spill and self.spool is not None:
            return self.ledger.wait_pressed(until)
        return self.ledger.sleep_until(until)

    def _spilling(self, error: Error | None, *, limit: float | None = None,
                  tried: bool = True) -> bool:
        """With a spool: give up on the batch now (``policy.spill``), and say so once. True
        when it does. ``limit``: the pause of a limit being waited out; a limit that lasts
        longer than we wait is an outage."""
        long_limit = limit is not None and limit >= MAX_PAUSE
        if not spill(spool=self.spool is not None, outage=self.outage or long_limit,
                     pressed=(tried or long_limit) and self.ledger.pressed()):
            return False
        if not self.outage:
            self.outage = True
            self.ledger.set_spilling(True)
            why = (f"the service cannot be reached ({answer_of(error)})"
                   if error is not None and not long_limit
                   else "the service asked to wait")
            self.reporter.report(Cause.SPILLING, f"{why}: events go to the spool until it "
                                 "answers again")
        self.next_probe = _monotonic() + OUTAGE_PROBE
        return True

    def _recovered(self) -> None:
        if self.outage:
            self.outage = False
            self.ledger.set_spilling(False)
        if self.reporter.recovered():
            self.auth_delay = self.options.auth_retry_delay

    # ------------------------------------------------------------------ undeliverable

    def _fail(self, chunk: Chunk, outcome: Outcome, error: Error | None, *,
              spill: bool = False) -> None:
        """``chunk`` is undeliverable: spool it when the outcome allows, else count it.
        ``spill``: a spill step (``_spill_step``), written in files of several batches."""
        if self.ledger.abandoned:
            return
        fate = outcome.fate
        assert fate is not None
        spooled = False
        if self.spool is not None and outcome.spoolable:
            stored = self._spool_write(chunk.as_parts(), SPILL_BATCHES if spill else 1)
            spooled = stored == len(chunk)
            if stored and not spooled:  # on disk all the same: a later replay delivers them
                chunk = Chunk(parts=chunk.as_parts()[stored:])
        if outcome is Outcome.SHUTDOWN:
            self.gave_up = True  # the deadline is (about to be) reached: stop trying the rest
            if error is not None:
                self.reporter.note_shutdown_error(error)
            else:
                self.reporter.note_shutdown_error(
                    f"shutdown_timeout ({self.options.shutdown_timeout:g} s) ran out")
            if not spooled:
                self._settle(len(chunk), fate)
                # Outside the exit hook (its summary line tells), a close that loses events
                # says so when it happens: a handler closed by logging.config.dictConfig() has
                # nobody left to ask its stats().
                self.reporter.report_or_defer(
                    Cause.CLOSED_LOSING, f"closed (close() or a logging reload) with "
                                         f"{plural(len(chunk), 'event')} undelivered after "
                                         f"shutdown_timeout ({self.options.shutdown_timeout:g} "
                                         "s): raise shutdown_timeout",
                    f"last error: {answer_of(error)}" if error is not None else None)
            return
        # Once per batch outcome: a spooled batch is no failure yet, but a refused token is
        # worth telling at once (it will not heal by itself). Told before the events settle,
        # so that on_error has run by the time a flush() waiting for them returns.
        if error is not None and (not spooled or outcome is Outcome.AUTH):
            self.reporter.error(error)
        if not spooled:
            self._settle(len(chunk), fate)

    def _spool_write(self, parts: list[bytes], batches: int = 1) -> int:
        """Write in-flight events to the spool and settle them ``spooled``: how many are on
        disk (the rest are the caller's to count). ``batches``: per file (a spill step)."""
        assert self.spool is not None
        try:
            dropped = self.spool.write(parts, batches)
        except Exception as exc:
            self.reporter.report(Cause.SPOOL_WRITE, f"could not write to the spool "
                                                    f"({clip(printable(str(exc)), 80)}): check "
                                                    "spool_dir's disk space and permissions")
            self.reporter.error(exc)
            stored, dropped = _spool_failure(exc)
        else:
            stored = len(parts)
        if dropped:
            self.ledger.count(Count.SPOOL_DROPPED, dropped)
        if stored:
            self.ledger.settle(stored, Fate.SPOOLED)
        return stored

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
        taken = ledger.abandon()
        if taken is None:
            return
        n, queued = taken
        chunks = [c for c in (self.posting, *reversed(self.stack)) if c is not None]
        carry = list(self.cutter.carry)
        if self.posting is not None:
            self.reporter.note_shutdown_error(
                f"no answer within shutdown_timeout ({self.options.shutdown_timeout:g} s)")
        if n and self.spool is not None:
            parts = self._encode_in_time(chunks, carry, queued)[:n]
            written = 0
            if parts:
                try:
                    ledger.count(Count.SPOOL_DROPPED, self.spool.write(parts))
                    written = len(parts)
                except Exception as exc:
                    self.reporter.report(
                        Cause.SPOOL_WRITE, f"could not write to the spool "
                                           f"({clip(printable(str(exc)), 80)}): check "
                                           "spool_dir's disk space and permissions")
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
                            append(e if type(e) is bytes else encode(e))
                parts.extend(carry)
                for e in item_events(queued, self.options.fields, self.finish):
                    append(e if type(e) is bytes else encode(e))
            except Exception:
                pass  # encode never raises; item_events on an odd record: stop there

        if sys.is_finalizing():  # no thread can run any more: what is encoded is none
            return []
        helper = threading.Thread(target=work, name="loghandler-encode-at-exit", daemon=True)
        try:
            helper.start()
        except RuntimeError:  # interpreter shutdown: no new thread; what is encoded is none
            return []
        helper.join(ABANDON_GRACE)
        done = list(parts)  # a snapshot: what the helper appends later is counted as dropped
        if helper.is_alive():
            self.reporter.report(
                Cause.ENCODE_HANG, f"encoding the events left at exit took over "
                                   f"{ABANDON_GRACE:g} s ({plural(len(done), 'event')} spooled, "
                                   "the rest dropped): look for a __repr__ that hangs")
        return done

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
            self.reporter.report(Cause.SPOOL_REPLAY, f"could not replay the spool "
                                                     f"({clip(printable(str(exc)), 80)}): check "
                                                     "spool_dir's files and permissions")
            self.reporter.error(exc)

    def send(self, parts: list[bytes]) -> list[bytes]:
        """Send encoded events read back from the spool, one attempt per request.

        Returns what is still undelivered (empty when done). Events the service refuses for
        good (400 / 413 down to one event, other client errors, turned down in a 2xx ingest
        status or in one that cannot be read) are counted in ``replay_rejected`` and not
        returned.
        """
        opts = self.options

        def post(chunk: Chunk) -> tuple[Outcome, Error | None]:
            return self._post(chunk, Retry(0, opts.retry_backoff, opts.max_retry_delay),
                              patient=False)

        left, tally = bisect(Chunk(parts=parts), post, self._settle_replay)
        conclude(self.reporter, tally, replay=True)
        return [part for c in left for part in c.as_parts()]

    def _settle_replay(self, chunk: Chunk, outcome: Outcome, error: Error | None) -> bool:
        ledger = self.ledger
        if outcome is Outcome.DELIVERED or outcome is Outcome.PARTIAL:
            failed = error.failed if isinstance(error, PartialIngestError) else 0
            ledger.count(Count.REPLAYED, len(chunk) - failed)
            ledger.count(Count.REPLAY_REJECTED, failed)
            self._recovered()
            return True
        if outcome.splits or outcome in (Outcome.CLIENT_ERROR, Outcome.UNREADABLE):
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
        return self.ledger.delivered()


def _spool_failure(exc: BaseException) -> tuple[int, int]:
    """(events stored, spooled events deleted) of a failed spool write."""
    if isinstance(exc, SpoolWriteError):
        return exc.stored, exc.dropped
    return 0, 0
