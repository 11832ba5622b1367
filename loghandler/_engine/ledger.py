"""The ledger: the queue of a ``Shipper`` and the account of every event that entered it.

One object owns the state that application threads and the flusher thread share: the queue, the
fast-path limit, the sequence numbers, the counters, the lock and its conditions. Its state is
private: everyone else asks for an operation (queue an event, take a batch, settle, begin a
flush and wait for it, begin the close, wait for work, pause, record what was sent, say whether
the queue is under pressure). The lock never leaves this module: the ``*_locked`` methods are
its own. Nothing here does I/O, so the lock is never held across any. (The one exception to
"private": the fast path reads ``queue`` and ``fast_len`` without the lock; see below.)

Accounting invariant, true of every ``snapshot()``::

    submitted == delivered + dropped + failed + spooled + queued

Every event ends in exactly one ``Fate`` (delivered, spooled, or dropped / failed with a reason),
and until then it is queued (in the deque, or in flight: taken by the flusher, not yet settled).

Sequence numbers: the events that entered the queue are numbered in queue order. Events leave
it only from the front, under the lock (``taken`` have left so far), so the queue holds the
numbers ``taken + 1 .. taken + len(queue)``, and the events in flight (taken by the flusher,
not yet settled) are the contiguous range that starts at ``inflight_first``. So "everything up
to N is settled" is a comparison (``settled_through_locked() >= N``), with no per-event
bookkeeping.

The application's fast path takes no lock: ``deque.append`` and ``len`` are atomic, and while
the queue is shorter than ``fast_len`` one comparison decides (``offer``, and the handler's
inlined copy of it). Sizes (for ``max_queue_bytes``) are added up later, under the lock, by
whoever next needs them (``account_locked``): the fast path admits only events of at most
``FAST_ITEM_BYTES``, and ``fast_len`` leaves room for that many of them, so the bounds hold.
(Threads racing past the same check at the same instant may each add one event over
``max_queue_size``; the next locked step corrects it.)

After ``os.fork()`` the child calls ``reset()``: the same object, emptied, with new locks. A
front end that cached the ledger keeps a valid reference and appends to the child's queue.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from itertools import islice
from typing import Any

from .._config import ShipperOptions
from . import events as _events
from .events import RECORD, SIZE, size_of
from .guard import in_sender_thread
from .stats import Count, Fate, Stats

__all__ = ["FAST_ITEM_BYTES", "SPILL_BATCHES", "Count", "Fate", "FlushTicket", "Ledger"]

_monotonic = time.monotonic
# The largest event (by estimated size) the lock-free fast path takes; larger ones lock.
FAST_ITEM_BYTES = 8 * 1024
# While spilling to the spool: batches (batch_size events, max_batch_bytes of estimated sizes)
# the queue may hold beyond its bounds, and the sender takes in one step.
SPILL_BATCHES = 2


class FlushTicket:
    """What one flush() waits for: the events up to ``target`` settled, and the undelivered
    count it started from. ``done``: nothing to wait for; ``flusher``: a flusher thread runs."""

    __slots__ = ("done", "flusher", "refused", "target", "undelivered")

    def __init__(self, target: int, undelivered: int, refused: int) -> None:
        self.target = target
        self.undelivered = undelivered
        self.refused = refused
        self.done = False
        self.flusher = True


# Module globals: read without a call (see _pop_dropped_locked).
_SUBMITTED, _DROPPED, _DROPPED_QUEUE_FULL = (Count.SUBMITTED, Count.DROPPED,
                                             Count.DROPPED_QUEUE_FULL)


class Ledger:
    """The queue and the account of one shipper (see the module docstring).

    ``Ledger(options, on_put, on_late=None)``: ``options`` are the shipper's
    ``ShipperOptions`` (the bounds, the overflow policy); ``on_put`` is called under the lock
    after each event the slow path queues, to start the flusher when there is none; ``on_late``
    outside the lock after an event queued late (closed with ``late_ok``: the shipper sends it
    at once).

    Public attributes, read without the lock by the fast path only: ``queue`` and ``fast_len``.
    Read-only views: ``closed``, ``close_deadline``, ``paused_until``, ``abandoned``.
    """

    __slots__ = (
        "_abandoned",
        "_accounted",
        "_block_timeout",
        "_close_deadline",
        "_closed",
        "_counts",
        "_flusher_started",
        "_force",
        "_half_bytes",
        "_half_len",
        "_inflight",
        "_inflight_first",
        "_interrupt",
        "_late_ok",
        "_late_pending",
        "_limit_bytes",
        "_limit_len",
        "_lock",
        "_max_batch",
        "_max_batch_bytes",
        "_max_bytes",
        "_max_size",
        "_on_late",
        "_on_put",
        "_overflow",
        "_paused_until",
        "_pressure",
        "_progress",
        "_queue_bytes",
        "_refused_too_large",
        "_space",
        "_spill_ok",
        "_spilling",
        "_taken",
        "_undelivered",
        "_wake",
        "_wake_bytes",
        "_wake_len",
        "_wake_pending",
        "_watching",
        "fast_len",
        "queue",
    )

    def __init__(self, options: ShipperOptions, on_put: Callable[[], None],
                 on_late: Callable[[], None] | None = None) -> None:
        self._on_put = on_put
        self._on_late = on_late
        self._max_batch = options.batch_size
        self._max_batch_bytes = options.max_batch_bytes
        self._max_size = options.max_queue_size
        self._max_bytes = options.max_queue_bytes
        self._spill_ok = options.spool_dir is not None
        self._half_len = max(1, self._max_size // 2)  # "pressed": see pressed()
        self._half_bytes = max(1, self._max_bytes // 2)
        self._overflow = options.overflow
        self._block_timeout = options.block_timeout
        self.reset()

    def reset(self) -> None:
        """Empty the ledger, with new locks: at construction, and in a forked child (the
        parent's queue belongs to the parent, which delivers it; its lock may have been held
        by another thread at fork). The object stays the same, so cached references hold."""
        self._lock = threading.RLock()
        self._progress = threading.Condition(self._lock)  # events settled
        self._space = threading.Condition(self._lock)  # room in the queue (overflow="block")
        self._wake = threading.Event()  # the flusher: a batch is full, or flush/close
        self._interrupt = threading.Event()  # the flusher: close() came, re-measure waits
        # The flusher waiting out a retry with a spool (wait_pressed): the queue is half full,
        # spill now. Set by the slow path while _watching, and by close().
        self._pressure = threading.Event()
        self._watching = False
        self.queue: deque[dict[Any, Any]] = deque()
        self._queue_bytes = 0  # sizes of the accounted events still queued
        self._taken = 0  # events that left the queue (taken by the flusher, or dropped), ever
        self._accounted = 0  # events, in queue order, whose sizes are in queue_bytes, ever
        self._inflight = 0
        self._inflight_first = 1
        self._wake_pending = False
        self._force = False
        self._closed = False
        self._close_deadline: float | None = None
        self._late_ok = False  # closed, but events are still taken (Shipper.begin_close)
        self._late_pending = False
        self._paused_until = 0.0  # sending paused (Retry-After, a bad token) until then
        self._abandoned = False
        self._flusher_started = False
        self._set_wake_marks_locked(False)
        self._counts = dict.fromkeys(Count, 0)
        self._undelivered = 0  # events settled other than delivered, ever: flush()'s answer
        # Events refused at submit as too large since the last flush(), which answers False for
        # them as it would had the flusher dropped them.
        self._refused_too_large = 0
        self.fast_len = 0  # see _update_fast_path_locked

    # ------------------------------------------------------------------ read-only views

    @property
    def closed(self) -> bool:
        """close() began: events are refused (but late ones, with ``late_ok``)."""
        return self._closed

    @property
    def close_deadline(self) -> float | None:
        """When close() must be done (monotonic), or None before close()."""
        return self._close_deadline

    @property
    def paused_until(self) -> float:
        """Sending is paused until then (monotonic): a limit, a bad token."""
        return self._paused_until

    @property
    def abandoned(self) -> bool:
        """A closing thread took over from a stuck flusher (``abandon``)."""
        return self._abandoned

    # ------------------------------------------------------------------ application side

    def offer(self, item: dict[Any, Any], size: int) -> bool:
        """Queue an item the caller built (see events.py "Queue items"; ``size`` is
        ``item[SIZE]``).

        The caller has checked ``in_sender_thread()``. This is the hot path of every log call
        (the handler inlines it): below ``fast_len``, one comparison and an append.
        """
        q = self.queue
        if len(q) < self.fast_len and size <= FAST_ITEM_BYTES:
            q.append(item)
            return True
        return self.put(item, size)

    def put(self, item: dict[Any, Any], size: int) -> bool:
        """The slow path of ``offer``: takes the lock. False when the item was dropped."""
        try:
            if self._lock._is_owned() and not self._closed:  # type: ignore[attr-defined]
                # Re-entered on a thread inside one of our own locked steps: a finalizer the
                # cyclic GC ran there logged. The bare append is as safe there as the lock-free
                # fast path is at any time; the next locked step accounts for it.
                self.queue.append(item)
                return True
            with self._lock:
                try:
                    ok = self._put_locked(item, size)
                except Exception:
                    # A bug of ours on the way (a size, the accounting): the event is counted
                    # as invalid unless it reached the queue before the error. (Under the lock
                    # the flusher cannot have taken it; a copy, as the fast path may append.)
                    if not any(queued is item for queued in list(self.queue)):
                        self._drop_locked(Fate.DROPPED_INVALID)
                    raise
            if self._late_pending and self._on_late is not None:
                self._late_pending = False
                self._on_late()
            return ok
        except Exception:
            return False

    def add_own(self, item: dict[Any, Any], size: int) -> None:
        """Queue an event the shipper itself made (a policy's summary), closed or not: few,
        bounded by the policy, and accounted like any other."""
        with self._lock:
            self.queue.append(item)
            self._account_locked()

    def _put_locked(self, item: dict[Any, Any], size: int) -> bool:
        # Everything the fast path leaves out: closed, first event (start the flusher), a full
        # batch (wake the flusher), a full queue (overflow policy), big events.
        if self._closed:
            if not self._late_ok or self._abandoned:
                return self._drop_locked(Fate.DROPPED_CLOSED)
            self.queue.append(item)
            self._account_locked()
            self._late_pending = True
            return True
        if size > self._max_batch_bytes and _encoded_floor(item) > self._max_batch_bytes - 2:
            # It could never be sent (not even alone in a request): refuse it now, rather than
            # let it push sendable events out of the queue and be dropped by the flusher later.
            self._refused_too_large += 1
            return self._drop_locked(Fate.DROPPED_TOO_LARGE)
        self._account_locked()
        q = self.queue
        if len(q) >= self._limit_len or self._queue_bytes + size > self._limit_bytes:
            if self._spill_ok and not self._spilling:
                # Full, with a spool: the flusher is busy (a request, a write) while a burst
                # comes faster than it can look. Room for what goes to disk, and wake it.
                self._set_wake_marks_locked(True)
                self._wake_pending = True
                self._wake.set()
            if (len(q) >= self._limit_len or self._queue_bytes + size > self._limit_bytes) and (
                not self._make_room_locked(size)
            ):
                return False
        q.append(item)
        self._account_locked()
        self._on_put()
        self._flusher_started = True
        # Wake the flusher once per full batch, not per event: setting an Event costs more
        # than everything else here.
        if not self._wake_pending and (
            len(q) >= self._wake_len or self._queue_bytes >= self._wake_bytes
        ):
            self._wake_pending = True
            self._wake.set()
        if self._watching and (len(q) >= self._half_len or self._queue_bytes >= self._half_bytes):
            self._pressure.set()
        self._update_fast_path_locked()
        return True

    def _make_room_locked(self, size: int) -> bool:
        if size > self._max_bytes:
            return self._drop_locked(Fate.DROPPED_TOO_LARGE)
        policy = self._overflow
        if policy == "block" and not in_sender_thread():
            deadline = _monotonic() + self._block_timeout
            self._wake.set()
            while True:
                self._account_locked()
                if (len(self.queue) < self._limit_len
                        and self._queue_bytes + size <= self._limit_bytes):
                    break
                remaining = deadline - _monotonic()
                # Sending is paused (Retry-After, a bad token) past our bound: no room will
                # come in time, so do not make the application wait for nothing.
                if remaining <= 0 or self._closed or self._paused_until > deadline:
                    return self._drop_locked(
                        Fate.DROPPED_CLOSED if self._closed else Fate.DROPPED_QUEUE_FULL)
                self._space.wait(remaining)
            return True
        if policy == "drop_oldest":
            q = self.queue
            while q and (len(q) >= self._limit_len
                         or self._queue_bytes + size > self._limit_bytes):
                self._pop_dropped_locked()
            return True
        return self._drop_locked(Fate.DROPPED_QUEUE_FULL)

    def _pop_dropped_locked(self) -> None:
        """Drop the oldest queued event for room: popped and counted as one step.

        An asynchronous exception (a signal handler's KeyboardInterrupt on the logging thread)
        can land only where Python code is called, or right after a C call returns. Here the
        counting calls nothing (``Count`` hashes in C) and the pop is the last step, so such an
        exception finds the event either untouched or popped and counted, never half done."""
        q = self.queue
        head = q[0]
        if self._accounted > self._taken:
            self._queue_bytes -= size_of(head)
        else:
            self._accounted += 1
        self._taken += 1
        if self._accounted == self._taken:
            self._queue_bytes = 0
        c = self._counts
        c[_DROPPED] += 1
        c[_DROPPED_QUEUE_FULL] += 1
        self._undelivered += 1
        q.popleft()

    def _drop_locked(self, fate: Fate) -> bool:
        """Refuse one event at the door. It is counted as submitted here, since it never gets a
        sequence number. Returns False (the event was not queued). Calls nothing, for the
        reason ``_pop_dropped_locked`` gives."""
        c = self._counts
        c[_SUBMITTED] += 1
        c[fate.total] += 1
        reason = fate.reason
        if reason is not None:
            c[reason] += 1
        if not fate.chosen:
            self._undelivered += 1
        return False

    def drop(self, fate: Fate) -> bool:
        with self._lock:
            return self._drop_locked(fate)

    def count(self, counter: Count, n: int = 1) -> None:
        """Add to a counter outside the invariant (retried, replayed, suppressed, ...)."""
        with self._lock:
            self._counts[counter] += n

    # ------------------------------------------------------------------ accounting

    def _account_locked(self) -> None:
        """Add the sizes of the events the fast path appended since the last call."""
        q = self.queue
        tail: list[dict[Any, Any]] = []
        new = 0
        for _ in range(8):
            new = self._taken + len(q) - self._accounted
            if new <= 0:
                return
            try:
                # C calls only: no other thread runs while the list is copied.
                tail = list(islice(reversed(q), new))
            except RuntimeError:  # appended to while being read (free-threaded builds)
                tail = []
                continue
            if self._taken + len(q) - self._accounted == new:
                break
        if not tail:
            return  # raced every time: the next locked step accounts for them
        # (After eight races in a row, the sizes of the newest events stand in for the ones
        # just before them: the count stays exact, the byte estimate is off by a few events.)
        self._queue_bytes += _events.items_size(tail)
        self._accounted += new

    def _pop_oldest_locked(self) -> dict[Any, Any]:
        item = self.queue.popleft()
        if self._accounted > self._taken:
            self._queue_bytes -= size_of(item)
        else:
            self._accounted += 1
        self._taken += 1
        if self._accounted == self._taken:
            self._queue_bytes = 0  # exact again whenever nothing accounted is left
        return item

    def _set_wake_marks_locked(self, spilling: bool) -> None:
        """When the flusher is woken: a full batch. Queued sizes are memory estimates, about
        three times the encoded JSON: a byte-full batch is twice max_batch_bytes of them (the
        real cut is on encoded bytes). With a spool, at a quarter of the queue when that comes
        first: a queue smaller than a batch would otherwise wait for the interval while it
        overflows (at full speed a queue of 1,000 fills in 10 ms, and one request or spool
        write of the flusher takes a few of those)."""
        self._spilling = spilling
        self._wake_len, self._wake_bytes = self._max_batch, 2 * self._max_batch_bytes
        if self._spill_ok:
            self._wake_len = max(1, min(self._wake_len, self._max_size // 4))
            self._wake_bytes = max(1, min(self._wake_bytes, self._max_bytes // 4))
        # The bounds at which the queue is full. While spilling, the events on their way to
        # disk may wait in the queue too, up to SPILL_BATCHES batches more: every system call
        # of a spool write hands the GIL to the application, and at full speed the flusher
        # gets it back a switch interval (5 ms, some 500 events) later; a small queue would
        # overflow in one write while the disk has room.
        extra = SPILL_BATCHES if spilling else 0
        self._limit_len = self._max_size + extra * self._max_batch
        self._limit_bytes = self._max_bytes + extra * self._max_batch_bytes

    def set_spilling(self, spilling: bool) -> None:
        """The sender spills to the spool (an outage is known, or a burst filled the queue),
        or no longer does. The raised bounds stay while the queue is nearly full (the caller
        asks again), so that no event is dropped for the change."""
        if spilling is self._spilling:
            return
        with self._lock:
            if not spilling and self.nearly_full():
                return
            self._set_wake_marks_locked(spilling)
            self._update_fast_path_locked()

    def _update_fast_path_locked(self) -> None:
        """Set the queue length under which ``offer`` may skip the lock: room, by count and by
        bytes, for events of up to FAST_ITEM_BYTES each beyond those accounted for."""
        if self._closed or not self._flusher_started:
            self.fast_len = 0
            return
        if self._wake_pending:
            max_n, max_b = self._limit_len, self._limit_bytes
        else:  # up to the next wake-up of the flusher
            max_n = min(self._limit_len, self._wake_len)
            max_b = min(self._limit_bytes, self._wake_bytes)
        if self._watching:  # the slow path tells the waiting flusher when the queue is half full
            max_n, max_b = min(max_n, self._half_len), min(max_b, self._half_bytes)
        held = self._accounted - self._taken
        room = min(max_n - held, (max_b - self._queue_bytes) // FAST_ITEM_BYTES)
        self.fast_len = held + room if room > 0 else 0

    # ------------------------------------------------------------------ flusher side

    def take(self, limit: int, partial: bool,
             max_bytes: int | None = None) -> list[dict[Any, Any]] | None:
        """Take up to ``limit`` accounted events from the front into flight, and (when given)
        up to ``max_bytes`` of their estimated sizes (at least one event).

        None when there is nothing to take, or (unless ``partial``) less than a full batch.
        """
        with self._lock:
            self._account_locked()
            # Only accounted events are taken: the fast path may append more meanwhile.
            n = self._accounted - self._taken
            if n <= 0 or (not partial and n < self._wake_len
                          and self._queue_bytes < self._wake_bytes):
                return None
            take = min(limit, n)
            if take <= 0:
                return []
            if self._inflight == 0:
                self._inflight_first = self._taken + 1
            popleft = self.queue.popleft
            if max_bytes is None:
                items = [popleft() for _ in range(take)]
                self._queue_bytes -= _events.items_size(items)  # all accounted
            else:
                q, items, nbytes = self.queue, [], 0
                while len(items) < take:
                    size = size_of(q[0])
                    if items and nbytes + size > max_bytes:
                        break
                    items.append(popleft())
                    nbytes += size
                take = len(items)
                self._queue_bytes -= nbytes
            self._taken += take
            if self._accounted == self._taken:
                self._queue_bytes = 0
            self._inflight += take
            self._update_fast_path_locked()
            if self._overflow == "block":
                self._space.notify_all()
            return items

    def drain(self) -> list[dict[Any, Any]]:
        """Take everything queued into flight at once (the close deadline passed)."""
        with self._lock:
            self._account_locked()
            first = self._taken + 1
            pop = self._pop_oldest_locked
            items = [pop() for _ in range(len(self.queue))]
            if items:
                if self._inflight == 0:
                    self._inflight_first = first
                self._inflight += len(items)
            return items

    def count_leftovers(self, fate: Fate) -> int:
        """Settle as ``fate`` whatever is still queued with nothing in flight (a late event no
        sender could take); returns how many."""
        with self._lock:
            if self._inflight:
                return 0
            self._account_locked()
            pop = self._pop_oldest_locked
            n = len([pop() for _ in range(len(self.queue))])
            self._record_locked(n, fate)
            return n

    def settle_inflight(self, fate: Fate) -> int:
        """Settle as ``fate`` every event in flight (a send that stopped on an error it could
        not count, late in interpreter shutdown); returns how many."""
        with self._lock:
            n = self._inflight
            if n and not self._abandoned:
                self._record_locked(n, fate)
                self._inflight = 0
                self._inflight_first += n
                self._progress.notify_all()
            return n

    def settle(self, n: int, fate: Fate) -> None:
        """The oldest ``n`` events in flight have met their fate."""
        with self._lock:
            if self._abandoned:
                return  # the closing thread has accounted for these already
            self._record_locked(n, fate)
            self._inflight -= n
            self._inflight_first += n
            self._progress.notify_all()

    def abandon(self) -> tuple[int, list[dict[Any, Any]]] | None:
        """Take over from a stuck flusher: everything in flight and queued ends with the caller,
        who settles it with ``settle_abandoned``; the flusher's later ``settle`` calls count
        nothing. Returns (how many events, the queued items), or None when already done."""
        with self._lock:
            if self._abandoned:
                return None
            self._abandoned = True
            self._account_locked()
            pop = self._pop_oldest_locked
            queued = [pop() for _ in range(len(self.queue))]
            n = self._inflight + len(queued)
            self._inflight = 0
            self._inflight_first = self._taken + 1
            return n, queued

    def settle_abandoned(self, n: int, fate: Fate) -> None:
        with self._lock:
            self._record_locked(n, fate)
            self._progress.notify_all()

    def _record_locked(self, n: int, fate: Fate) -> None:
        c = self._counts
        c[fate.total] += n
        if fate.reason is not None:
            c[fate.reason] += n
        if not fate.chosen:
            self._undelivered += n

    def _settled_through_locked(self) -> int:
        """The sequence number up to which every event has met its fate."""
        if self._inflight:
            return self._inflight_first - 1
        return self._taken

    def _idle_locked(self) -> bool:
        """Nothing queued and nothing in flight."""
        return not self.queue and not self._inflight

    def pause_until(self, until: float) -> None:
        """Pause sending until ``until`` (monotonic) or later; threads blocked for room
        (overflow="block") re-check whether waiting can still help."""
        with self._lock:
            self._paused_until = max(self._paused_until, until)
            self._space.notify_all()

    def _set_close_deadline_locked(self, deadline: float) -> None:
        if self._close_deadline is None or deadline < self._close_deadline:
            self._close_deadline = deadline

    # ------------------------------------------------------------------ the flusher's waits

    def wait_for_work(self, interval: float) -> tuple[bool, bool]:
        """The flusher's wait: until a batch is full, flush() or close() call, or ``interval``
        passes. Returns (force: send a partial batch too, closed)."""
        timed_out = False
        if not self._closed:
            timed_out = not self._wake.wait(interval)
        with self._lock:
            self._wake.clear()
            self._wake_pending = False
            self._update_fast_path_locked()
            force, self._force = self._force or timed_out, False
            return force, self._closed

    def flusher_gone(self) -> None:
        """The flusher thread ends: whoever waits for progress re-checks."""
        with self._lock:
            self._progress.notify_all()

    def idle(self) -> bool:
        """Nothing queued and nothing in flight."""
        with self._lock:
            return self._idle_locked()

    def time_left(self) -> float | None:
        """Seconds until the close deadline (None before close())."""
        deadline = self._close_deadline
        return None if deadline is None else deadline - _monotonic()

    def sleep_until(self, until: float) -> bool:
        """Sleep until ``until`` (monotonic); False, at once, when the close deadline comes
        first. close() interrupts the sleep, so a long backoff is re-measured against its
        deadline."""
        while True:
            now = _monotonic()
            if now >= until:
                return True
            deadline = self._close_deadline
            if deadline is not None:
                if until > deadline:
                    return False
                time.sleep(until - now)
                return True
            self._interrupt.wait(until - now)

    def pressed(self) -> bool:
        """The queue is half full (by count or by bytes): waiting longer would soon drop."""
        return len(self.queue) >= self._half_len or self._queue_bytes >= self._half_bytes

    def nearly_full(self) -> bool:
        """Three quarters full (by count or by bytes): the next moments will drop."""
        return (len(self.queue) * 4 >= 3 * self._max_size
                or self._queue_bytes * 4 >= 3 * self._max_bytes)

    def wait_pressed(self, until: float) -> bool | None:
        """``sleep_until``, but None as soon as the queue is half full (``pressed``). At full
        speed a queue fills in milliseconds: the application's slow path wakes this wait the
        moment it crosses the mark, rather than a poll noticing it too late."""
        with self._lock:
            self._watching = True
            self._pressure.clear()
            self._update_fast_path_locked()
        try:
            while True:
                if self.pressed():
                    return None
                now = _monotonic()
                if now >= until:
                    return True
                deadline = self._close_deadline
                if deadline is not None:
                    return self.sleep_until(until)
                self._pressure.wait(until - now)
                self._pressure.clear()
        finally:
            with self._lock:
                self._watching = False
                self._update_fast_path_locked()

    def record_sent(self, nbytes: int) -> None:
        """A request of ``nbytes`` was answered 2xx."""
        with self._lock:
            self._counts[Count.BYTES_SENT] += nbytes
            self._counts[Count.BATCHES] += 1

    def delivered(self) -> int:
        """Events delivered so far."""
        with self._lock:
            return self._counts[Count.DELIVERED]

    def set_close_deadline(self, deadline: float) -> None:
        with self._lock:
            self._set_close_deadline_locked(deadline)

    # ------------------------------------------------------------------ the front's operations

    def start_flusher(self) -> None:
        """Start the flusher now (``on_put``), before any event: a spool waits to be replayed."""
        with self._lock:
            self._on_put()
            self._flusher_started = True
            self._update_fast_path_locked()

    def begin_flush(self, ensure_flusher: Callable[[], bool]) -> FlushTicket:
        """Ask the flusher to send what is queued now, partial batches too. The ticket says up to
        which event to wait for (``wait_flushed``), or that all is settled already.
        ``ensure_flusher`` is called under the lock (as ``on_put``) and says whether a flusher
        runs; when none does, the caller sends on its own thread."""
        with self._lock:
            ticket = FlushTicket(self._taken + len(self.queue), self._undelivered,
                                 self._refused_too_large)
            self._refused_too_large = 0
            if self._settled_through_locked() >= ticket.target:
                ticket.done = True
                return ticket
            self._force = True
            ticket.flusher = ensure_flusher()
            self._flusher_started = True
        self._wake.set()
        return ticket

    def wait_flushed(self, ticket: FlushTicket, deadline: float) -> bool:
        """Wait until every event of ``ticket`` is settled, or ``deadline`` (monotonic). True
        when all of them were delivered (and none was refused at submit since the last flush)."""
        with self._lock:
            while self._settled_through_locked() < ticket.target:
                remaining = deadline - _monotonic()
                if remaining <= 0:
                    return False
                self._progress.wait(min(remaining, 0.25))
            return self._undelivered == ticket.undelivered and not ticket.refused

    def begin_close(self, deadline: float, late_ok: bool) -> None:
        """Refuse events from now on (but, with ``late_ok``, take late ones: ``on_late``), and
        tell the flusher to finish by ``deadline`` (monotonic)."""
        with self._lock:
            self._set_close_deadline_locked(deadline)
            # A permission for late events (the exit hook's) outlives a later close() of the
            # same shipper: logging.shutdown() closes the handlers right after the exit hook,
            # and atexit hooks registered before `import logging` still log after that.
            self._late_ok = late_ok or (self._closed and self._late_ok)
            self._closed = True
            self._force = True
            self._update_fast_path_locked()
            self._space.notify_all()
        self._interrupt.set()
        self._pressure.set()
        self._wake.set()

    def undelivered(self) -> int:
        """Events settled other than delivered, ever."""
        with self._lock:
            return self._undelivered

    def queued_bytes(self) -> int:
        """The estimated size of what is queued (for ``max_queue_bytes``)."""
        with self._lock:
            self._account_locked()
            return self._queue_bytes

    def settled_through(self) -> int:
        """The sequence number up to which every event has met its fate."""
        with self._lock:
            return self._settled_through_locked()

    def snapshot(self) -> Stats:
        """A consistent snapshot of the counters."""
        with self._lock:
            values = {c.value: n for c, n in self._counts.items()}
            queued = len(self.queue)
            values["submitted"] += self._taken + queued
            values["queued"] = queued + self._inflight
        return Stats(**values)


def _encoded_floor(event: Any) -> int:
    """A lower bound of an event's encoded JSON size, in bytes: each character of a top-level
    key or string encodes to at least one byte, any other value to at least one byte; plus the
    braces, quotes, colons and commas. (The flusher only ever adds to an event.) A wire item
    is its encoded JSON."""
    if type(event) is bytes:
        return len(event)
    n = 1
    for key, value in event.items():
        if key is SIZE or key is RECORD:
            continue  # the queue's own keys (events.py "Queue items"), never encoded
        n += (len(key) if type(key) is str else 0) + 4
        n += len(value) + 2 if type(value) is str else 1
    return n
