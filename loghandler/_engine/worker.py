"""The worker: the flusher thread's loop, read top-down.

Each pass takes a batch from the ledger (``batches.Cutter``, repeats left out by
``batches.Repeats``) and delivers it: the split loop (``bisector.Bisection``) hands out the pieces
to post, the poster (``posting.Poster``: one request's tries through the transport, read by
``policy.py``) returns each piece's outcome, and the worker settles what the split loop says has
reached it; what cannot be delivered goes to ``spilling.Spiller`` (the spool, or a count), which
returns what is left to settle. While a request's answer is awaited, the next batch is taken and
compressed (``_prepare``), and sent once the previous one is settled. Between batches the worker
replays the spool the same way, one try per request (it is the spool's ``ReplayTarget``). The
parts return values; none calls the worker back. It never holds the ledger's lock across any I/O.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from .. import _encoding as encoding
from .._config import ShipperOptions
from .._errors import Error, PartialIngestError
from .._output import clip, printable
from .batches import Chunk, Cutter, Item, Repeats, encode_each
from .bisector import Bisection, conclude
from .events import item_events
from .guard import _FLUSHERS, _get_ident, block_sigterm_in_this_thread
from .ledger import SPILL_BATCHES, Count, Fate, Flushing
from .policy import Cause, Outcome, Retry
from .posting import Poster
from .reporter import Reporter, counted, plural
from .shaping import Selector, make_finisher
from .spilling import SPARE, Settle, Spiller
from .spool import Spool
from .transport import Transport

__all__ = ["Worker"]

_monotonic = time.monotonic


class _Prepared:
    """The next batch, taken, formatted and compressed while the previous request's answer
    was awaited (``Worker._prepare``): in flight with the ledger, not sent. ``settles``: what
    its cut dropped (too large, repeats), settled once the previous batch is."""

    __slots__ = ("body", "chunk", "settles")

    def __init__(self) -> None:
        self.chunk: Chunk | None = None
        self.body: tuple[bytes, dict[str, str]] | None = None
        self.settles: list[tuple[int, Fate]] = []


class Worker:
    """Posts the ledger's events to one dataset (see the module docstring).

    ``Worker(ledger, reporter, transport, path, dataset, options, spool)``. ``run()`` is the
    flusher thread's body; ``drain_on_this_thread()`` does the same work on a closing thread
    when no flusher can run; ``abandon()`` takes over, on a closing thread, what a flusher
    stuck past the close deadline holds. ``poster`` and ``spiller`` are its two parts; it is
    the spool's ``ReplayTarget`` (``send``, ``stopping``, ``count``, ``progress``).
    """

    def __init__(self, ledger: Flushing, reporter: Reporter, transport: Transport, path: str,
                 dataset: str, options: ShipperOptions, spool: Spool | None) -> None:
        self.ledger = ledger
        self.reporter = reporter
        self.options = options
        self.poster = Poster(ledger, reporter, transport, path, dataset, options)
        self.spiller = Spiller(ledger, reporter, options, spool)
        self.spool = spool
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
        self.repeats = (Repeats(Selector(opts.repeat_limit, opts.repeat_window,
                                         opts.field_names), self.ledger)
                        if opts.repeat_limit else None)
        self.cutter = Cutter(self.ledger, opts.batch_size, opts.max_batch_bytes, opts.fields,
                             self.finish, self.repeats)
        # The split loop of the batch being delivered: what the flusher holds while it sends,
        # so abandon() can take it over.
        self.split: Bisection | None = None
        # The settlements of the batch being delivered, applied once its outcomes are told.
        self.deferred: list[tuple[int, Fate]] | None = None
        # The next batch, made while the previous request's answer is awaited (_prepare), and
        # whether a round of batches may make one (its ``partial``; None: not now).
        self.prepared: _Prepared | None = None
        self.prepare_error: BaseException | None = None
        self.round_partial: bool | None = None
        self.after_run: Callable[[], None] | None = None
        self.last_replay = 0.0
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
            if self.spool is not None:
                SPARE.ensure()  # for the take-over at exit (spilling._Spare)
            self.replay()
            while True:
                force, closed = ledger.wait_for_work(interval)
                if self.repeats is not None:
                    self.repeats.summarize(False)
                with self.send_lock:
                    self._send_available(partial=force or closed)
                    if closed and self.repeats is not None:
                        # The open repeat windows end after the last queued events were
                        # selected (before, a window closed early and a new one let N more in).
                        self.repeats.summarize(True)
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
                if not closed and self.replay_due(interval):
                    self.replay()
        except BaseException as exc:  # never let the thread die silently
            # What it held in flight would otherwise stay unaccounted (and flush() waiting for
            # it): counted where a bug of ours counts an event, as the handler's path does.
            lost = ledger.settle_inflight(Fate.DROPPED_INVALID)
            # Told here, with the cause: not again as drops at the door (_tell_drops).
            self.reporter.invalid_told(lost)
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
        """Events dropped at the door since the last look, told on stderr (the caller's
        thread, which drops them, prints nothing)."""
        self.reporter.tell_drops(self.ledger, self.options.max_queue_size,
                                 self.spool is not None)

    def _send_available(self, partial: bool) -> None:
        """Send batches until the queue is drained (or only a partial batch is left)."""
        cutter = self.cutter
        spiller = self.spiller
        try:
            while not self._deadline_passed():
                spill = spiller.step()
                prepared = self._take_prepared()
                body = None
                if prepared is not None:
                    if prepared.chunk is None:  # its cut dropped all it took: settled now
                        continue
                    batch: Chunk | None = prepared.chunk
                    body = prepared.body
                else:
                    batch = cutter.next(partial, spill,
                                        SPILL_BATCHES * self.options.max_batch_bytes)
                if batch is None:
                    break
                if spill:  # taken for the spool
                    self._settle_failed(spiller.fail(batch, Outcome.RETRIES_EXHAUSTED, None,
                                                     spill=True))
                    continue
                self.round_partial = partial
                try:
                    self._deliver(batch, body)
                finally:
                    self.round_partial = None
        finally:
            prepared, self.prepared = self.prepared, None
            error, self.prepare_error = self.prepare_error, None
            if prepared is not None and error is None:
                # The close deadline cut the loop short: the batch made for the next request
                # (older than the carry) is spooled or counted as the rest is.
                for n, fate in prepared.settles:
                    self.ledger.settle(n, fate)
                if prepared.chunk is not None:
                    self._settle_failed(spiller.fail(prepared.chunk, Outcome.SHUTDOWN, None))
            if cutter.carry:  # only when the close deadline cut the loop short
                carry = cutter.carry[:]
                cutter.carry.clear()
                self._settle_failed(spiller.fail(Chunk(parts=carry), Outcome.SHUTDOWN, None))
            if error is not None:
                # Preparing the next batch failed (a bug of ours): as a take that fails, the
                # thread's loop counts what is in flight (Worker.run).
                raise error

    def _prepare(self) -> None:
        """The next batch taken, formatted and compressed while the service works on the
        request just written (``after_write`` of the lean exchange), instead of after its
        answer: the flusher's waits for the interpreter's lock and gzip overlap the round
        trip (docs/performance.md, "Sixth pass"). Requests stay one at a time, in order: the
        batch is sent after the previous one's outcome is settled. What its cut drops is
        settled then too (settling counts the oldest events in flight, the previous batch's
        until then). Never raises into the exchange: an error is kept, and raised where the
        batch would have been taken (``_take_prepared``)."""
        partial = self.round_partial
        if (partial is None or self.prepared is not None or self.prepare_error is not None
                or self.spiller.outage or self._deadline_passed()):
            return
        prepared = _Prepared()
        cutter = self.cutter
        cutter.settle = _append_to(prepared.settles)
        try:
            # Before the take: an abandon() meanwhile finds these events (held, in order).
            self.prepared = prepared
            chunk = prepared.chunk = cutter.next(partial)
            if chunk is not None:
                prepared.body = self.poster.encode(chunk)
            elif not prepared.settles:
                self.prepared = None
        except BaseException as exc:  # raised on this thread's loop (_take_prepared)
            self.prepare_error = exc
        finally:
            cutter.settle = None

    def _take_prepared(self) -> _Prepared | None:
        """The batch ``_prepare`` made, its cut's settlements applied (the previous batch is
        settled now); raises what preparing it raised."""
        error = self.prepare_error
        if error is not None:
            self.prepare_error = None
            raise error
        prepared = self.prepared
        if prepared is None:
            return None
        self.prepared = None
        for n, fate in prepared.settles:
            self.ledger.settle(n, fate)
        return prepared

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
            events: list[Item] = item_events(items, opts.fields, self.finish)
            if self.repeats is not None:
                events = self.repeats.select(events, first)
            parts = encode_each(events)
        limit = opts.max_batch_bytes
        if any(2 + len(p) > limit for p in parts):  # no request could ever carry it
            sendable = [p for p in parts if 2 + len(p) <= limit]
            ledger.settle_side(first, len(parts) - len(sendable), Fate.DROPPED_TOO_LARGE)
            parts = sendable
        if parts:
            self.spiller.write_from_caller(first, parts)

    def _deliver(self, batch: Chunk, body: tuple[bytes, dict[str, str]] | None = None
                 ) -> None:
        """Post ``batch`` until each of its events has a final outcome, halving what the
        service refuses (``Bisection``), and settle them; the settlements wait until the
        batch's outcomes are reported: a flush() waiting for these events returns after
        on_error has been called for them, not before."""
        spiller = self.spiller
        if spiller.to_disk_now():
            self._settle_failed(spiller.fail(batch, Outcome.RETRIES_EXHAUSTED, None))
            return
        opts = self.options
        retry = Retry(opts.max_retries, opts.retry_backoff, opts.max_retry_delay)
        give_up = spiller.give_up_on()
        deferred: list[tuple[int, Fate]] = []
        self.deferred = deferred
        split = self.split = Bisection(batch)
        try:
            while (piece := split.next()) is not None:
                # The body made with the batch is the whole batch's (a piece of a split is
                # encoded anew).
                made = body if piece is batch else None
                outcome, error = self.poster.post(piece, retry, give_up=give_up, body=made,
                                                  after_write=self._prepare)
                for done in split.told(outcome, error):
                    self._settle_delivery(done, outcome, error)
            conclude(self.reporter, split.tally, replay=False)
        finally:
            self.deferred = None
            for n, fate in deferred:
                self.ledger.settle(n, fate)

    def _settle(self, n: int, fate: Fate) -> None:
        # During a delivery, after its outcomes are reported (_deliver); at once otherwise.
        if self.deferred is not None:
            self.deferred.append((n, fate))
        else:
            self.ledger.settle(n, fate)

    def _settle_failed(self, left: Settle) -> None:
        """What ``Spiller.fail`` did not spool: settled with its fate."""
        if left is not None:
            self._settle(*left)

    def _settle_delivery(self, chunk: Chunk, outcome: Outcome, error: Error | None) -> None:
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
            self._settle_failed(self.spiller.fail(chunk, outcome, error))

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
            self._settle_failed(self.spiller.fail(Chunk(self._events(items)), Outcome.SHUTDOWN,
                                                  None))

    def abandon(self) -> None:
        """The flusher is stuck past the deadline (in a request to a service that never answers,
        or in a value's ``__repr__`` while encoding): take its events over on this thread, spool
        them or count them (``Spiller.take_over``), and let the flusher count nothing more."""
        first = self.ledger.oldest_in_flight()  # the spool's order, before abandon() clears it
        taken = self.ledger.abandon()
        if taken is None:
            return
        n, queued = taken
        split = self.split
        # The request under way (sent, no answer yet): its events may be stored already.
        sent = split is not None and split.posting is not None and self.poster.in_request
        held = split.held() if split is not None else []
        # Pieces of the batch already answered, whose settlements wait for the batch's end
        # (_deliver): their fates are known, and count as such.
        deferred = list(self.deferred or ())
        prepared = self.prepared
        if prepared is not None:
            # The next batch, taken (after everything held) but not sent; what its cut
            # dropped has its fate.
            deferred.extend(prepared.settles)
            if prepared.chunk is not None:
                held = [*held, prepared.chunk]
        self.spiller.take_over(n, held, list(self.cutter.carry), queued, self._events,
                               posting=sent, settled=deferred, first=first)

    # ------------------------------------------------------------------ the spool's replay

    def replay_due(self, interval: float) -> bool:
        """Whether a replay round is due: a spool, and ``interval`` seconds since the last.
        Time-based, not on idle wake-ups only: under steady load the flusher is never idle,
        and the spool must still drain, interleaved with new events."""
        return self.spool is not None and _monotonic() - self.last_replay >= interval

    def replay(self) -> None:
        """One round: re-send spooled batches, oldest first, one file at a time, while
        delivery works (``Spool.replay``, which sends through ``send``)."""
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
        retry = Retry(0, opts.retry_backoff, opts.max_retry_delay)
        split = Bisection(Chunk(parts=parts))
        left: list[Chunk] = []
        while not left and (piece := split.next()) is not None:
            outcome, error = self.poster.post(piece, retry, patient=False)
            done = split.told(outcome, error)
            for i, chunk in enumerate(done):
                if not self._settle_replay(chunk, outcome, error):
                    left = [*done[i:], *split.waiting()]
                    break
        conclude(self.reporter, split.tally, replay=True)
        return [part for c in left for part in c.as_parts()]

    def _settle_replay(self, chunk: Chunk, outcome: Outcome, error: Error | None) -> bool:
        """Count a replayed piece's final outcome; False: not delivered, the rest waits."""
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


def _append_to(settles: list[tuple[int, Fate]]) -> Callable[[int, Fate], None]:
    """A ``settle`` that keeps what it is told in ``settles`` (``Cutter.settle``)."""
    def settle(n: int, fate: Fate) -> None:
        settles.append((n, fate))
    return settle

