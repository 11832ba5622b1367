"""What cannot be delivered: to the spool, or counted; and the spool's replay.

The ``Spiller`` owns the flusher's side of the disk spool (``spool.py`` owns the files):

- an undeliverable batch (``fail``) goes to the spool when its outcome allows (the policy
  table's ``spoolable``), else it is counted with its fate; at the close deadline it is counted
  ``dropped_shutdown`` and told;
- during an outage it spills: batches go straight to disk, in large steps, so a full queue never
  drops what the disk has room for (``step``, ``give_up``), while one batch every
  ``OUTAGE_PROBE`` seconds still tries the service;
- at exit, what a stuck flusher held is taken over on the closing thread (``take_over``).

It posts nothing: the worker posts (delivery and the spool's replay) and settles what ``fail``
returns. It never holds the ledger's lock across I/O.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from .. import _encoding as encoding
from .._config import ShipperOptions
from .._errors import Error
from .._output import clip, printable
from .batches import Chunk, Item
from .guard import block_sigterm_in_this_thread
from .ledger import SPILL_BATCHES, Count, Fate, Flushing
from .policy import MAX_PAUSE, Cause, Outcome, spill
from .reporter import Reporter, answer_of, plural
from .spool import Spool, SpoolWriteError

__all__ = ["ABANDON_GRACE", "OUTAGE_PROBE", "Settle", "Spiller"]

_monotonic = time.monotonic
# With a spool, during an outage: how often one batch is tried against the service, while the
# others go straight to disk.
OUTAGE_PROBE = 1.0
# How long, past the close deadline, the closing thread waits for what a stuck flusher held to be
# encoded for the spool (see Spiller.take_over).
ABANDON_GRACE = 0.5

# What ``Spiller.fail`` leaves to its caller to settle: (events, their fate), or None.
Settle = tuple[int, Fate] | None


class _Spare:
    """One parked daemon thread per process, started with the first flusher that has a spool:
    it encodes what a stuck flusher held at exit (``Spiller._encode_in_time``) when no new
    thread can start (CPython 3.12 refuses one in an atexit hook). It runs one job at a time;
    a job stuck in an application's ``__repr__`` keeps it busy, and later jobs are refused."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None
        self.jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self.busy = False
        self.pid = 0

    def ensure(self) -> None:
        """Start the thread if this process has none (the first flusher, or after fork)."""
        if self.pid == os.getpid() and self.thread is not None:
            return
        with self.lock:
            if self.pid == os.getpid() and self.thread is not None:
                return
            self.jobs = queue.SimpleQueue()  # a parent's, after fork: its thread is gone
            self.busy = False
            try:  # Thread() too: a sub-interpreter may refuse daemon threads there
                thread = threading.Thread(target=self._run, args=(self.jobs,),
                                          name="loghandler-spare", daemon=True)
                thread.start()
            except RuntimeError:
                return
            self.thread, self.pid = thread, os.getpid()

    def _run(self, jobs: queue.SimpleQueue[Callable[[], None] | None]) -> None:
        block_sigterm_in_this_thread()
        while True:
            job = jobs.get()
            if job is None:  # stop(): no shipper with a spool is left
                return
            self.busy = True
            try:
                job()
            except Exception:
                pass
            finally:
                self.busy = False

    def stop(self, wait: float = 0.5) -> None:
        """End the thread (the last shipper closed: no thread of ours outlives ``close()``);
        the next flusher with a spool starts it again. A job under way finishes first."""
        if sys.is_finalizing() or not self.lock.acquire(timeout=0.1):
            return  # (at exit a daemon thread may have ended holding it)
        try:
            thread = self.thread
            if self.pid != os.getpid() or thread is None:
                return
            self.thread = None
            self.jobs.put(None)
        finally:
            self.lock.release()
        if thread is not threading.current_thread():
            thread.join(wait)

    def submit(self, job: Callable[[], None]) -> bool:
        """Run ``job`` on the spare thread; False when there is none, or it is busy."""
        thread = self.thread
        if self.pid != os.getpid() or thread is None or not thread.is_alive() or self.busy:
            return False
        self.busy = True
        self.jobs.put(job)
        return True


SPARE = _Spare()


class _Write:
    """The flusher's spool write under way (``Spiller.fail``): what the closing thread waits
    for when it takes over at the deadline (``take_over``), so that events that reach the disk
    count as spooled, not lost."""

    __slots__ = ("chunk", "done", "stored")

    def __init__(self, chunk: Chunk) -> None:
        self.chunk = chunk
        self.done = threading.Event()
        self.stored = 0


class Spiller:
    """Spools or counts what cannot be delivered (module docstring).

    ``Spiller(ledger, reporter, options, spool)``: ``spool`` is None without ``spool_dir``
    (then everything undeliverable is counted).
    """

    def __init__(self, ledger: Flushing, reporter: Reporter, options: ShipperOptions,
                 spool: Spool | None) -> None:
        self.ledger = ledger
        self.reporter = reporter
        self.options = options
        self.spool = spool
        self.reset()

    def reset(self) -> None:
        """Fresh state: at construction and in a forked child."""
        # An outage is known (a batch was spilled): batches go to disk at once but one try
        # every OUTAGE_PROBE seconds, until a batch is delivered.
        self.outage = False
        self.next_probe = 0.0
        self.spill_until = 0.0  # a burst filled the queue: spill until then (step)
        # The close deadline was met while sending: stop trying the rest.
        self.gave_up = False
        self.writing: _Write | None = None  # the flusher's spool write under way
        # A spool write of an application thread failed: its full queue drops again (the
        # overflow policy) until a write of the flusher succeeds.
        self.side_paused = False

    # ------------------------------------------------------------------ spilling

    def step(self) -> int:
        """While an outage is known, with a spool: how many events to take in one step,
        straight to disk (0: batch by batch, to the service). Large steps, so the spool keeps
        up with an application logging at full speed; bounded, since they are in flight on top
        of the queue."""
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

    def to_disk_now(self) -> bool:
        """The service is known to be down, with a spool: a batch goes to disk at once, at the
        rate events come, so the queue never fills (and drops) while the disk has room."""
        return self.outage and self.spool is not None and _monotonic() < self.next_probe

    def give_up_on(self) -> Callable[[Error | None, float | None, bool], bool] | None:
        """What a delivery asks after a failed try (``Poster.post``'s ``give_up``): None
        without a spool (a batch is then tried until its retries are spent)."""
        return self.give_up if self.spool is not None else None

    def give_up(self, error: Error | None, limit: float | None, tried: bool) -> bool:
        """With a spool: give up on the batch now (``policy.spill``), and say so once. True
        when it does. ``limit``: the pause of a limit being waited out; a limit that lasts
        longer than we wait is an outage. ``tried``: the try spent a retry."""
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

    def recovered(self) -> None:
        """A batch was delivered: the outage is over."""
        if self.outage:
            self.outage = False
            self.ledger.set_spilling(False)

    # ------------------------------------------------------------------ undeliverable

    def fail(self, chunk: Chunk, outcome: Outcome, error: Error | None, *,
             spill: bool = False) -> Settle:
        """``chunk`` is undeliverable: spool it when the outcome allows, else count it. What
        reaches the disk is settled ``spooled`` here; the rest is returned, with its fate, for
        the caller to settle (the worker defers a delivery's settlements until it is told).
        ``spill``: a spill step (``step``), written in files of several batches."""
        if self.ledger.abandoned:
            return None
        fate = outcome.fate
        assert fate is not None
        spooled = False
        if self.spool is not None and outcome.spoolable:
            write = self.writing = _Write(chunk)
            try:
                stored = write.stored = self._write(chunk.as_parts(),
                                                    SPILL_BATCHES if spill else 1)
            finally:
                self.writing = None
                write.done.set()
            spooled = stored == len(chunk)
            if stored and not spooled:  # on disk all the same: a later replay delivers them
                chunk = Chunk(parts=chunk.as_parts()[stored:])
        if outcome is Outcome.SHUTDOWN or outcome is Outcome.UNCONFIRMED:
            return self._shutdown(len(chunk), fate, error, spooled)
        # Once per batch outcome: a spooled batch is no failure yet, but a refused token is
        # worth telling at once (it will not heal by itself). Told before the events settle,
        # so that on_error has run by the time a flush() waiting for them returns.
        if error is not None and (not spooled or outcome is Outcome.AUTH):
            self.reporter.error(error)
        return None if spooled else (len(chunk), fate)

    def _shutdown(self, n: int, fate: Fate, error: Error | None, spooled: bool) -> Settle:
        self.gave_up = True  # the deadline is (about to be) reached: stop trying the rest
        bound = self.ledger.close_what  # the bound in force: shutdown_timeout, close()'s
        self.reporter.note_shutdown_error(
            error if error is not None else f"{bound} ran out")
        if spooled:
            return None
        self._tell_closed(n, fate, error)
        return n, fate

    def _tell_closed(self, n: int, fate: Fate, error: Error | None) -> None:
        """Outside the exit hook (its summary line tells), a close that loses events says so
        when it happens: a handler closed by logging.config.dictConfig() has nobody left to
        ask its stats(). Events sent and not answered are told apart (``unconfirmed``)."""
        bound = self.ledger.close_what
        advice = ("raise shutdown_timeout" if bound.startswith("shutdown_timeout")
                  else "give close() more time")
        if fate is Fate.UNCONFIRMED:
            self.reporter.report_or_defer(
                Cause.CLOSED_UNCONFIRMED, f"closed with {plural(n, 'event')} not answered "
                                          f"within {bound}: maybe stored "
                                          f"(stats().unconfirmed): {advice}")
            return
        self.reporter.report_or_defer(
            Cause.CLOSED_LOSING, f"closed (close() or a logging reload) with "
                                 f"{plural(n, 'event')} undelivered after {bound}: {advice}",
            f"last error: {answer_of(error)}" if error is not None else None)

    def _write(self, parts: list[bytes], batches: int = 1) -> int:
        """Write in-flight events to the spool and settle them ``spooled``: how many are on
        disk (the rest are the caller's to count). ``batches``: per file (a spill step)."""
        assert self.spool is not None
        try:
            # Named by the first event's submission number: the flusher's batch, written after
            # newer events an application thread spilled meanwhile, still replays first.
            dropped = self.spool.write(parts, batches, seq=self.ledger.oldest_in_flight())
        except Exception as exc:
            self.reporter.report(Cause.SPOOL_WRITE, f"could not write to the spool "
                                                    f"({clip(printable(str(exc)), 80)}): check "
                                                    "spool_dir's disk space and permissions")
            self.reporter.error(exc)
            stored, dropped = _spool_failure(exc)
        else:
            stored = len(parts)
            if self.side_paused:
                self.side_paused = False
                self.ledger.pause_side(False)
        if dropped:
            self.ledger.count(Count.SPOOL_DROPPED, dropped)
        if stored:
            self.ledger.settle(stored, Fate.SPOOLED)
        return stored

    def write_from_caller(self, first: int, parts: list[bytes]) -> None:
        """On an application thread whose event found the queue full (``Intake.put``): write
        the encoded events it took from the queue's front (the run that starts at ``first``)
        to the spool, and settle those stored as spooled; the ledger counts the rest as
        dropped for the full queue. A failure is told once on stderr (``on_error`` is called
        by the flusher's own writes, not on the application's thread), and such writes stop
        until one of the flusher's succeeds."""
        assert self.spool is not None
        ledger = self.ledger
        try:
            # Not synced here: a logging call costs CPU, not the disk's sync (a median of
            # 10-14 ms on ext4, over a second in a burst on a busy disk). The file is in place
            # for any crash of the process; the flusher makes it durable (make_durable).
            dropped = self.spool.write(parts, seq=first, durable=False)
        except Exception as exc:
            self.reporter.report(Cause.SPOOL_WRITE, f"could not write to the spool "
                                                    f"({clip(printable(str(exc)), 80)}): check "
                                                    "spool_dir's disk space and permissions")
            stored, dropped = _spool_failure(exc)
            self.side_paused = True
            ledger.pause_side(True)
        else:
            stored = len(parts)
        if dropped:
            ledger.count(Count.SPOOL_DROPPED, dropped)
        ledger.count(Count.SPOOLED_BY_CALLER, stored)
        ledger.settle_side(first, stored, Fate.SPOOLED)

    def make_durable(self) -> None:
        """On the flusher (between batches, and before it ends): sync what application
        threads wrote to the spool without waiting on the disk (``write_from_caller``)."""
        spool = self.spool
        if spool is None or not spool.unsynced:
            return
        try:
            spool.sync()
        except Exception as exc:
            self.reporter.report(Cause.SPOOL_WRITE, f"could not sync the spool "
                                                    f"({clip(printable(str(exc)), 80)}): check "
                                                    "spool_dir's disk")

    # ------------------------------------------------------------------ at exit

    def take_over(self, n: int, held: list[Chunk], carry: list[bytes], queued: list[Any],
                  to_events: Callable[[list[Any]], list[Item]], posting: bool,
                  settled: list[tuple[int, Fate]] | None = None,
                  first: int | None = None) -> None:
        """The flusher is stuck past the deadline and the ledger gave its ``n`` events to the
        closing thread (``Ledger.abandon``): ``settled`` (pieces of the batch already answered:
        their fates), ``held`` (what it was posting, then what waited to be posted),
        ``carry`` (encoded, taken from the queue) and ``queued`` (the queue's items;
        ``to_events`` makes them events). Spool them, or count them: only what reaches the
        disk counts as spooled; events whose encoding does not finish within
        ``ABANDON_GRACE`` count as ``dropped_shutdown``. ``posting``: ``held[0]`` was sent and
        its answer did not come: with a spool it is spooled (it may then arrive twice:
        at-least-once), else counted ``unconfirmed`` (the service may have stored it).
        ``first``: the submission number of the oldest of them (the spool's order)."""
        ledger = self.ledger
        grace_end = _monotonic() + ABANDON_GRACE
        for k, fate in settled or ():
            k = min(k, n)
            ledger.settle_abandoned(k, fate)
            n -= k
        lost_in_write = 0
        write = self.writing
        if write is not None:
            # The flusher is writing a batch to the spool (a slow disk): what reaches the disk
            # is spooled (the next process delivers it), so wait for the write, within the
            # grace; its events are not written again (held may name its chunk).
            finished = write.done.wait(ABANDON_GRACE)
            stored = min(write.stored if finished else 0, n)
            ledger.settle_abandoned(stored, Fate.SPOOLED)
            k = min(len(write.chunk), n)
            n -= k
            lost_in_write = k - stored
            held = [c for c in held if c is not write.chunk]
            posting = False  # writing, not waiting for an answer
        unanswered = len(held[0]) if posting and held else 0
        if posting:
            self.reporter.note_shutdown_error(f"no answer within {ledger.close_what}")
        if n and self.spool is not None:
            parts = self._encode_in_time(held, carry, queued, to_events,
                                         max(0.0, grace_end - _monotonic()))[:n]
            written = 0
            if parts:
                try:
                    ledger.count(Count.SPOOL_DROPPED, self.spool.write(parts, seq=first))
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
                unanswered = max(0, unanswered - written)
        unanswered = min(unanswered, n)
        if unanswered:
            ledger.settle_abandoned(unanswered, Fate.UNCONFIRMED)
        dropped = n - unanswered + lost_in_write
        ledger.settle_abandoned(dropped, Fate.DROPPED_SHUTDOWN)
        # Told as a close at the deadline tells them (outside the exit hook: its line does).
        if unanswered:
            self._tell_closed(unanswered, Fate.UNCONFIRMED, None)
        if dropped:
            self._tell_closed(dropped, Fate.DROPPED_SHUTDOWN, None)

    def _encode_in_time(self, held: list[Chunk], carry: list[bytes], queued: list[Any],
                        to_events: Callable[[list[Any]], list[Item]],
                        grace: float = ABANDON_GRACE) -> list[bytes]:
        """The encoded events of what ``take_over`` took, in order, as far as encoding got
        within ``ABANDON_GRACE``. Encoding calls into the application (a value's ``__repr__``,
        which may hang), so it runs on a helper thread, and the exiting thread waits for it no
        longer than that."""
        parts: list[bytes] = []

        def work() -> None:
            block_sigterm_in_this_thread()
            encode = encoding.encode
            append = parts.append
            try:
                for c in held:
                    if c.parts is not None:
                        parts.extend(c.parts)
                    else:
                        for e in c.events or ():
                            append(e if type(e) is bytes else encode(e))
                parts.extend(carry)
                for e in to_events(queued):
                    append(e if type(e) is bytes else encode(e))
            except Exception:
                pass  # encode never raises; item_events on an odd record: stop there

        if sys.is_finalizing():  # no thread can run any more: what is encoded is none
            return []
        finished = threading.Event()

        def job() -> None:
            try:
                work()
            finally:
                finished.set()

        try:  # Thread() too: a sub-interpreter may refuse daemon threads there
            helper = threading.Thread(target=job, name="loghandler-encode-at-exit",
                                      daemon=True)
            helper.start()
        except RuntimeError:
            # Interpreter shutdown: CPython 3.12 starts no thread from an atexit hook. The
            # spare started with the flusher (SPARE) does the work instead.
            if not SPARE.submit(job):
                return []
        finished.wait(grace)
        done = list(parts)  # a snapshot: what the helper appends later is counted as dropped
        if not finished.is_set():
            self.reporter.report(
                Cause.ENCODE_HANG, f"encoding the events left at exit took over "
                                   f"{ABANDON_GRACE:g} s ({plural(len(done), 'event')} spooled, "
                                   "the rest dropped): look for a __repr__ that hangs")
        return done


def _spool_failure(exc: BaseException) -> tuple[int, int]:
    """(events stored, spooled events deleted) of a failed spool write."""
    if isinstance(exc, SpoolWriteError):
        return exc.stored, exc.dropped
    return 0, 0
