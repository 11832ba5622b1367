"""The worker: the flusher thread's loop. It takes batches from the ledger (``batches.Cutter``),
posts each (``posting.Poster``: one request's tries through the transport, read by
``policy.py``), splits what the service refuses (``bisector.py``) and settles the events; what
cannot be delivered goes to ``spilling.Spiller`` (the spool, or a count), which also replays the
spool between batches. It never holds the ledger's lock across any I/O.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, cast

from .. import _encoding as encoding
from .._config import ShipperOptions
from .._errors import Error, PartialIngestError
from .._output import clip, printable
from .batches import Chunk, Cutter, Item, encode_each
from .bisector import bisect, conclude
from .events import SIZE, item_events, rfc3339
from .guard import _FLUSHERS, _get_ident, block_sigterm_in_this_thread
from .ledger import SPILL_BATCHES, Fate, Flushing
from .policy import Cause, Outcome, Retry
from .posting import Poster
from .reporter import Reporter, counted, plural
from .shaping import Selector, make_finisher
from .spilling import SPARE, Spiller
from .spool import Spool
from .transport import Transport

__all__ = ["Worker"]

_monotonic = time.monotonic


class Worker:
    """Posts the ledger's events to one dataset (see the module docstring).

    ``Worker(ledger, reporter, transport, path, dataset, options, spool)``. ``run()`` is the
    flusher thread's body; ``drain_on_this_thread()`` does the same work on a closing thread
    when no flusher can run; ``abandon()`` takes over, on a closing thread, what a flusher
    stuck past the close deadline holds. ``poster`` and ``spiller`` are its two parts.
    """

    def __init__(self, ledger: Flushing, reporter: Reporter, transport: Transport, path: str,
                 dataset: str, options: ShipperOptions, spool: Spool | None) -> None:
        self.ledger = ledger
        self.reporter = reporter
        self.options = options
        self.poster = Poster(ledger, reporter, transport, path, dataset, options,
                             self._tell_drops)
        self.spiller = Spiller(ledger, reporter, options, spool, self.poster, self._settle,
                               self._recovered)
        self.reset()

    def reset(self) -> None:
        """Fresh state: at construction and in a forked child."""
        self.send_lock = threading.Lock()
        opts = self.options
        # What ships (shaping.py): None when not configured, so the flusher pays one test.
        self.finish = make_finisher(opts.exclude_fields, opts.scrub, opts.scrub_keys,
                                    opts.scrub_patterns, opts.field_names)
        # Repeats (shaping.Selector) are decided here, per batch; sampling on the callers'
        # threads (sampling.py), before an event is queued.
        self.selector = (Selector(opts.repeat_limit, opts.repeat_window, opts.field_names)
                         if opts.repeat_limit else None)
        # The selector's state (repeat windows) is shared with application threads that spill
        # a full queue (spill_from_caller): held only for its CPU work, never across I/O.
        self.select_lock = threading.Lock()
        self.cutter = Cutter(self.ledger, opts.batch_size, opts.max_batch_bytes, opts.fields,
                             self.finish, self._select if self.selector is not None else None)
        # What the flusher holds while it sends, so abandon() can take it over.
        self.posting: Chunk | None = None
        self.stack: list[Chunk] = []
        # The settlements of the batch being delivered, applied once its outcomes are told.
        self.deferred: list[tuple[int, Fate]] | None = None
        self.after_run: Callable[[], None] | None = None
        # Drops at the door the stderr has told of (_tell_drops): (queue full, invalid).
        self.told_drops = (0, 0)
        self.poster.reset()
        self.spiller.reset()

    # ------------------------------------------------------------------ the flusher thread

    def run(self) -> None:
        """The flusher thread: wait for a full batch, flush() or close(), or the interval."""
        ledger = self.ledger
        spiller = self.spiller
        block_sigterm_in_this_thread()
        _FLUSHERS.add(_get_ident())
        if self.options.json_default is not None:
            encoding.set_thread_default(self.options.json_default)
        try:
            interval = self.options.flush_interval
            if spiller.spool is not None:
                SPARE.ensure()  # for the take-over at exit (spilling._Spare)
            spiller.replay()
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
                    spiller.make_durable()
                    if closed:
                        if self._deadline_passed():
                            self._settle_leftovers_at_deadline()
                        # An application thread's spool write (Spiller.spill_from_caller) is
                        # waited for until the deadline: its events then count as spooled.
                        if ledger.idle() and (not ledger.side_pending()
                                              or self._deadline_passed()):
                            spiller.make_durable()  # a last write of the application's
                            return
                if not closed and spiller.replay_due(interval):
                    spiller.replay()
        except BaseException as exc:  # never let the thread die silently
            # What it held in flight would otherwise stay unaccounted (and flush() waiting for
            # it): counted where a bug of ours counts an event, as the handler's path does.
            lost = ledger.settle_inflight(Fate.DROPPED_INVALID)
            # Told here, with the cause: not again as drops at the door (_tell_drops).
            full, invalid = self.told_drops
            self.told_drops = (full, invalid + lost)
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
            self.spiller.make_durable()
        finally:
            _FLUSHERS.discard(ident)
            self.send_lock.release()

    def _deadline_passed(self) -> bool:
        d = self.ledger.close_deadline
        return d is not None and (self.spiller.gave_up or _monotonic() >= d)

    def _tell_drops(self) -> None:
        """Events dropped at the door since the last look are told on stderr, once per cause
        until delivery recovers: the caller's thread, which drops them, prints nothing."""
        if self.reporter.exiting:
            return  # the exit hook's summary line counts them
        st = self.ledger.snapshot()
        full, invalid = st.dropped_queue_full, st.dropped_invalid
        told_full, told_invalid = self.told_drops
        if full > told_full:
            what = ("raise max_queue_size / max_queue_bytes"
                    if self.options.spool_dir is not None
                    else "raise max_queue_size or set spool_dir")
            self.reporter.report(
                Cause.QUEUE_FULL,
                f"the queue is full (max_queue_size={self.options.max_queue_size:,}): "
                f"{plural(full, 'event')} dropped{counted('dropped_queue_full')}: {what}")
        if invalid > told_invalid:
            self.reporter.report(
                Cause.DROPPED_INVALID,
                f"an internal error of loghandler lost {plural(invalid, 'event')}"
                f"{counted('dropped_invalid')}: please report it")
        self.told_drops = (full, invalid)

    def _send_available(self, partial: bool) -> None:
        """Send batches until the queue is drained (or only a partial batch is left)."""
        cutter = self.cutter
        spiller = self.spiller
        try:
            while not self._deadline_passed():
                spill = spiller.step()
                batch = cutter.next(partial, spill, SPILL_BATCHES * self.options.max_batch_bytes)
                if batch is None:
                    break
                if spill:  # taken for the spool
                    spiller.fail(batch, Outcome.RETRIES_EXHAUSTED, None, spill=True)
                    continue
                self._deliver(batch)
        finally:
            if cutter.carry:  # only when the close deadline cut the loop short
                carry = cutter.carry[:]
                cutter.carry.clear()
                spiller.fail(Chunk(parts=carry), Outcome.SHUTDOWN, None)

    def _select(self, events: list[Item]) -> list[Item]:
        # Repeats (shaping.Selector; wire items too): what it drops is settled at once, with
        # its reason; a repeat window's summary is queued as an event of its own.
        assert self.selector is not None
        with self.select_lock:
            kept, repeats, summaries = self.selector.select(cast("list[dict[str, Any]]", events))
        if repeats:
            self.ledger.settle(repeats, Fate.DROPPED_REPEAT)
        self._queue_summaries(summaries)
        return cast("list[Item]", kept)

    def _summarize(self, closed: bool) -> None:
        assert self.selector is not None
        with self.select_lock:
            summaries = (self.selector.flush_all() if closed
                         else self.selector.expired(_monotonic()))
        self._queue_summaries(summaries)

    def spill_from_caller(self, first: int, items: list[Any]) -> None:
        """On an application thread, outside the ledger's lock: the oldest events of a full
        queue, taken for the spool because the flusher is behind (``Intake.put``; with a
        spool only). They get what the flusher would give them (fields, exclusions and
        scrubbing, sampling and repeats, the user's ``json_default``), then go to the spool
        in one write (``Spiller.write_from_caller``). The cost: one batch encoded and one
        file written, once per batch of events the flusher could not take in time
        (docs/reliability.md)."""
        ledger = self.ledger
        opts = self.options
        with encoding.using_default(opts.json_default):
            events = item_events(items, opts.fields, self.finish)
            if self.selector is not None:
                with self.select_lock:
                    kept, repeats, summaries = self.selector.select(events)
                if repeats:
                    ledger.settle_side(first, repeats, Fate.DROPPED_REPEAT)
                self._queue_summaries(summaries)
                events = kept
            parts = encode_each(events)
        limit = opts.max_batch_bytes
        if any(2 + len(p) > limit for p in parts):  # no request could ever carry it
            sendable = [p for p in parts if 2 + len(p) <= limit]
            ledger.settle_side(first, len(parts) - len(sendable), Fate.DROPPED_TOO_LARGE)
            parts = sendable
        if parts:
            self.spiller.write_from_caller(first, parts)

    def _queue_summaries(self, summaries: list[dict[str, Any]]) -> None:
        for event in summaries:
            event["_time"] = rfc3339(time.time())
            event[SIZE] = size = 600
            self.ledger.add_own(event, size)

    def _deliver(self, batch: Chunk) -> None:
        spiller = self.spiller
        if spiller.to_disk_now():
            spiller.fail(batch, Outcome.RETRIES_EXHAUSTED, None)
            return
        opts = self.options
        give_up = spiller.give_up_on()

        def post(chunk: Chunk) -> tuple[Outcome, Error | None]:
            return self.poster.post(chunk, Retry(opts.max_retries, opts.retry_backoff,
                                                 opts.max_retry_delay), give_up=give_up)

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
            self.spiller.fail(chunk, outcome, error)
        return True

    def _recovered(self) -> None:
        self.spiller.recovered()
        if self.reporter.recovered():
            self.poster.delivered()

    def _events(self, items: list[Any]) -> list[Item]:
        return item_events(items, self.options.fields, self.finish)

    def _settle_leftovers_at_deadline(self) -> None:
        """The close deadline passed: spool or drop everything still queued, at once."""
        items = self.ledger.drain()
        if items:
            self.spiller.fail(Chunk(self._events(items)), Outcome.SHUTDOWN, None)

    def abandon(self) -> None:
        """The flusher is stuck past the deadline (in a request to a service that never answers,
        or in a value's ``__repr__`` while encoding): take its events over on this thread, spool
        them or count them (``Spiller.take_over``), and let the flusher count nothing more."""
        first = self.ledger.oldest_in_flight()  # the spool's order, before abandon() clears it
        taken = self.ledger.abandon()
        if taken is None:
            return
        n, queued = taken
        posting = self.posting
        # The request under way (sent, no answer yet): its events may be stored already.
        sent = posting is not None and self.poster.in_request
        held = [c for c in (posting, *reversed(self.stack)) if c is not None]
        # Pieces of the batch already answered, whose settlements wait for the batch's end
        # (_deliver): their fates are known, and count as such.
        deferred = list(self.deferred or ())
        self.spiller.take_over(n, held, list(self.cutter.carry), queued, self._events,
                               posting=sent, settled=deferred, first=first)
