"""The ledger: the queue of a ``Shipper`` and the account of every event that entered it.

One object owns the state that application threads and the flusher thread share: the queue, the
fast-path limit, the sequence numbers, the counters, the lock and its conditions. Everyone else
calls its methods. Nothing here does I/O, so the lock is never held across any.

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
from enum import Enum
from itertools import islice
from typing import Any

from .._config import ShipperOptions
from .events import RECORD, SIZE, item_size
from .guard import in_sender_thread
from .stats import Stats

__all__ = ["FAST_ITEM_BYTES", "Count", "Fate", "Ledger"]

_monotonic = time.monotonic
# The largest event (by estimated size) the lock-free fast path takes; larger ones lock.
FAST_ITEM_BYTES = 8 * 1024


class Count(Enum):
    """The counters of ``Stats`` (but ``queued``, which is computed), one member each."""

    SUBMITTED = "submitted"
    DELIVERED = "delivered"
    DROPPED = "dropped"
    FAILED = "failed"
    SPOOLED = "spooled"
    RETRIED = "retried"
    BATCHES = "batches"
    BYTES_SENT = "bytes_sent"
    DROPPED_QUEUE_FULL = "dropped_queue_full"
    DROPPED_TOO_LARGE = "dropped_too_large"
    DROPPED_CLOSED = "dropped_closed"
    DROPPED_SHUTDOWN = "dropped_shutdown"
    DROPPED_INVALID = "dropped_invalid"
    DROPPED_SAMPLED = "dropped_sampled"
    DROPPED_REPEAT = "dropped_repeat"
    DROPPED_HELD = "dropped_held"
    FAILED_REJECTED = "failed_rejected"
    FAILED_AUTH = "failed_auth"
    FAILED_NOT_FOUND = "failed_not_found"
    FAILED_CLIENT_ERROR = "failed_client_error"
    FAILED_RETRIES_EXHAUSTED = "failed_retries_exhausted"
    FAILED_BY_SERVICE = "failed_by_service"
    REPLAYED = "replayed"
    REPLAY_REJECTED = "replay_rejected"
    SPOOL_DROPPED = "spool_dropped"
    SPOOL_CORRUPT = "spool_corrupt"
    SUPPRESSED = "suppressed"


class Fate(Enum):
    """Where an event ends: its total counter and, for losses, the counter of its reason."""

    DELIVERED = (Count.DELIVERED, None)
    SPOOLED = (Count.SPOOLED, None)
    DROPPED_QUEUE_FULL = (Count.DROPPED, Count.DROPPED_QUEUE_FULL)
    DROPPED_TOO_LARGE = (Count.DROPPED, Count.DROPPED_TOO_LARGE)
    DROPPED_CLOSED = (Count.DROPPED, Count.DROPPED_CLOSED)
    DROPPED_SHUTDOWN = (Count.DROPPED, Count.DROPPED_SHUTDOWN)
    DROPPED_INVALID = (Count.DROPPED, Count.DROPPED_INVALID)
    DROPPED_SAMPLED = (Count.DROPPED, Count.DROPPED_SAMPLED)
    DROPPED_REPEAT = (Count.DROPPED, Count.DROPPED_REPEAT)
    DROPPED_HELD = (Count.DROPPED, Count.DROPPED_HELD)
    FAILED_REJECTED = (Count.FAILED, Count.FAILED_REJECTED)
    FAILED_AUTH = (Count.FAILED, Count.FAILED_AUTH)
    FAILED_NOT_FOUND = (Count.FAILED, Count.FAILED_NOT_FOUND)
    FAILED_CLIENT_ERROR = (Count.FAILED, Count.FAILED_CLIENT_ERROR)
    FAILED_RETRIES_EXHAUSTED = (Count.FAILED, Count.FAILED_RETRIES_EXHAUSTED)
    FAILED_BY_SERVICE = (Count.FAILED, Count.FAILED_BY_SERVICE)

    def __init__(self, total: Count, reason: Count | None) -> None:
        self.total = total
        self.reason = reason


# Dropped by a policy the user configured (sampling, repeats, hold-until-error): chosen, not a
# loss, so flush() still reports success for them and nothing is told on stderr.
_CHOSEN = frozenset({Fate.DELIVERED, Fate.DROPPED_SAMPLED, Fate.DROPPED_REPEAT,
                     Fate.DROPPED_HELD})


class Ledger:
    """The queue and the account of one shipper (see the module docstring).

    ``Ledger(options, on_put)``: ``options`` are the shipper's ``ShipperOptions`` (the bounds,
    the overflow policy); ``on_put`` is called under the lock after each event the slow path
    queues, to start the flusher when there is none (it sets ``flusher_started``).

    Public attributes read without the lock by the fast path: ``queue`` and ``fast_len``.
    Methods named ``*_locked`` require ``lock`` held; the others take it.
    """

    __slots__ = (
        "abandoned", "accounted", "block_timeout", "close_deadline", "closed", "counts",
        "fast_len", "flusher_started", "force", "inflight", "inflight_first", "interrupt",
        "late_ok", "late_pending", "lock", "max_batch", "max_batch_bytes", "max_bytes",
        "max_size", "on_late", "on_put", "overflow", "paused_until", "progress", "queue",
        "queue_bytes", "refused_too_large", "space", "taken", "undelivered", "wake",
        "wake_bytes", "wake_pending",
    )

    def __init__(self, options: ShipperOptions, on_put: Callable[[], None]) -> None:
        self.on_put = on_put
        # Called outside the lock after the slow path queued an event while closed with
        # late_ok (the shipper sends it at once: Shipper._send_late).
        self.on_late: Callable[[], None] | None = None
        self.max_batch = options.batch_size
        self.max_batch_bytes = options.max_batch_bytes
        # Queued sizes are memory estimates, about three times the encoded JSON: wake up for a
        # byte-full batch at twice max_batch_bytes of them (the real cut is on encoded bytes).
        self.wake_bytes = 2 * options.max_batch_bytes
        self.max_size = options.max_queue_size
        self.max_bytes = options.max_queue_bytes
        self.overflow = options.overflow
        self.block_timeout = options.block_timeout
        self.reset()

    def reset(self) -> None:
        """Empty the ledger, with new locks: at construction, and in a forked child (the
        parent's queue belongs to the parent, which delivers it; its lock may have been held
        by another thread at fork). The object stays the same, so cached references hold."""
        self.lock = threading.RLock()
        self.progress = threading.Condition(self.lock)  # events settled
        self.space = threading.Condition(self.lock)  # room in the queue (overflow="block")
        self.wake = threading.Event()  # the flusher: a batch is full, or flush/close
        self.interrupt = threading.Event()  # the flusher: close() came, re-measure waits
        self.queue: deque[dict[Any, Any]] = deque()
        self.queue_bytes = 0  # sizes of the accounted events still queued
        self.taken = 0  # events that left the queue (taken by the flusher, or dropped), ever
        self.accounted = 0  # events, in queue order, whose sizes are in queue_bytes, ever
        self.inflight = 0
        self.inflight_first = 1
        self.wake_pending = False
        self.force = False
        self.closed = False
        self.close_deadline: float | None = None
        self.late_ok = False  # closed, but events are still taken (Shipper.begin_close)
        self.late_pending = False
        self.paused_until = 0.0  # sending paused (Retry-After, a bad token) until then
        self.abandoned = False
        self.flusher_started = False
        self.counts = dict.fromkeys(Count, 0)
        self.undelivered = 0  # events settled other than delivered, ever: flush()'s answer
        # Events refused at submit as too large since the last flush(), which answers False for
        # them as it would had the flusher dropped them.
        self.refused_too_large = 0
        self.fast_len = 0  # see update_fast_path_locked

    # ------------------------------------------------------------------ application side

    def offer(self, item: dict[Any, Any], size: int) -> bool:
        """Queue an item the caller built (see _events.py "Queue items"; ``size`` is
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
            if self.lock._is_owned() and not self.closed:  # type: ignore[attr-defined]
                # Re-entered on a thread inside one of our own locked steps: a finalizer the
                # cyclic GC ran there logged. The bare append is as safe there as the lock-free
                # fast path is at any time; the next locked step accounts for it.
                self.queue.append(item)
                return True
            with self.lock:
                ok = self._put_locked(item, size)
            if self.late_pending and self.on_late is not None:
                self.late_pending = False
                self.on_late()
            return ok
        except Exception:
            return False

    def add_own(self, item: dict[Any, Any], size: int) -> None:
        """Queue an event the shipper itself made (a policy's summary), closed or not: few,
        bounded by the policy, and accounted like any other."""
        with self.lock:
            self.queue.append(item)
            self.account_locked()

    def _put_locked(self, item: dict[Any, Any], size: int) -> bool:
        # Everything the fast path leaves out: closed, first event (start the flusher), a full
        # batch (wake the flusher), a full queue (overflow policy), big events.
        if self.closed:
            if not self.late_ok or self.abandoned:
                return self.drop_locked(Fate.DROPPED_CLOSED)
            self.queue.append(item)
            self.account_locked()
            self.late_pending = True
            return True
        if size > self.max_batch_bytes and _encoded_floor(item) > self.max_batch_bytes - 2:
            # It could never be sent (not even alone in a request): refuse it now, rather than
            # let it push sendable events out of the queue and be dropped by the flusher later.
            self.refused_too_large += 1
            return self.drop_locked(Fate.DROPPED_TOO_LARGE)
        self.account_locked()
        q = self.queue
        if (len(q) >= self.max_size or self.queue_bytes + size > self.max_bytes) and (
            not self._make_room_locked(size)
        ):
            return False
        q.append(item)
        self.account_locked()
        self.on_put()
        # Wake the flusher once per full batch, not per event: setting an Event costs more
        # than everything else here.
        if not self.wake_pending and (
            len(q) >= self.max_batch or self.queue_bytes >= self.wake_bytes
        ):
            self.wake_pending = True
            self.wake.set()
        self.update_fast_path_locked()
        return True

    def _make_room_locked(self, size: int) -> bool:
        if size > self.max_bytes:
            return self.drop_locked(Fate.DROPPED_TOO_LARGE)
        policy = self.overflow
        if policy == "block" and not in_sender_thread():
            deadline = _monotonic() + self.block_timeout
            self.wake.set()
            while True:
                self.account_locked()
                if len(self.queue) < self.max_size and self.queue_bytes + size <= self.max_bytes:
                    break
                remaining = deadline - _monotonic()
                # Sending is paused (Retry-After, a bad token) past our bound: no room will
                # come in time, so do not make the application wait for nothing.
                if remaining <= 0 or self.closed or self.paused_until > deadline:
                    return self.drop_locked(
                        Fate.DROPPED_CLOSED if self.closed else Fate.DROPPED_QUEUE_FULL)
                self.space.wait(remaining)
            return True
        if policy == "drop_oldest":
            q = self.queue
            n = 0
            while q and (len(q) >= self.max_size or self.queue_bytes + size > self.max_bytes):
                self._pop_oldest_locked()
                n += 1
            self._record_locked(n, Fate.DROPPED_QUEUE_FULL)
            return True
        return self.drop_locked(Fate.DROPPED_QUEUE_FULL)

    def drop_locked(self, fate: Fate) -> bool:
        """Refuse one event at the door. It is counted as submitted here, since it never gets a
        sequence number. Returns False (the event was not queued)."""
        self.counts[Count.SUBMITTED] += 1
        self._record_locked(1, fate)
        return False

    def drop(self, fate: Fate) -> bool:
        with self.lock:
            return self.drop_locked(fate)

    def count(self, counter: Count, n: int = 1) -> None:
        """Add to a counter outside the invariant (retried, replayed, suppressed, ...)."""
        with self.lock:
            self.counts[counter] += n

    # ------------------------------------------------------------------ accounting

    def account_locked(self) -> None:
        """Add the sizes of the events the fast path appended since the last call."""
        q = self.queue
        tail: list[dict[Any, Any]] = []
        new = 0
        for _ in range(8):
            new = self.taken + len(q) - self.accounted
            if new <= 0:
                return
            try:
                # C calls only: no other thread runs while the list is copied.
                tail = list(islice(reversed(q), new))
            except RuntimeError:  # appended to while being read (free-threaded builds)
                tail = []
                continue
            if self.taken + len(q) - self.accounted == new:
                break
        if not tail:
            return  # raced every time: the next locked step accounts for them
        # (After eight races in a row, the sizes of the newest events stand in for the ones
        # just before them: the count stays exact, the byte estimate is off by a few events.)
        self.queue_bytes += sum(map(item_size, tail))
        self.accounted += new

    def _pop_oldest_locked(self) -> dict[Any, Any]:
        item = self.queue.popleft()
        if self.accounted > self.taken:
            self.queue_bytes -= item[SIZE]
        else:
            self.accounted += 1
        self.taken += 1
        if self.accounted == self.taken:
            self.queue_bytes = 0  # exact again whenever nothing accounted is left
        return item

    def update_fast_path_locked(self) -> None:
        """Set the queue length under which ``offer`` may skip the lock: room, by count and by
        bytes, for events of up to FAST_ITEM_BYTES each beyond those accounted for."""
        if self.closed or not self.flusher_started:
            self.fast_len = 0
            return
        if self.wake_pending:
            max_n, max_b = self.max_size, self.max_bytes
        else:  # up to the next wake-up of the flusher
            max_n = min(self.max_size, self.max_batch)
            max_b = min(self.max_bytes, self.wake_bytes)
        held = self.accounted - self.taken
        room = min(max_n - held, (max_b - self.queue_bytes) // FAST_ITEM_BYTES)
        self.fast_len = held + room if room > 0 else 0

    # ------------------------------------------------------------------ flusher side

    def take(self, limit: int, partial: bool) -> list[dict[Any, Any]] | None:
        """Take up to ``limit`` accounted events from the front into flight.

        None when there is nothing to take, or (unless ``partial``) less than a full batch.
        """
        with self.lock:
            self.account_locked()
            # Only accounted events are taken: the fast path may append more meanwhile.
            n = self.accounted - self.taken
            if n <= 0 or (not partial and n < self.max_batch
                          and self.queue_bytes < self.wake_bytes):
                return None
            take = min(limit, n)
            if take <= 0:
                return []
            if self.inflight == 0:
                self.inflight_first = self.taken + 1
            popleft = self.queue.popleft
            items = [popleft() for _ in range(take)]
            self.queue_bytes -= sum(map(item_size, items))  # all accounted
            self.taken += take
            if self.accounted == self.taken:
                self.queue_bytes = 0
            self.inflight += take
            self.update_fast_path_locked()
            if self.overflow == "block":
                self.space.notify_all()
            return items

    def drain(self) -> list[dict[Any, Any]]:
        """Take everything queued into flight at once (the close deadline passed)."""
        with self.lock:
            self.account_locked()
            first = self.taken + 1
            pop = self._pop_oldest_locked
            items = [pop() for _ in range(len(self.queue))]
            if items:
                if self.inflight == 0:
                    self.inflight_first = first
                self.inflight += len(items)
            return items

    def count_leftovers(self, fate: Fate) -> int:
        """Settle as ``fate`` whatever is still queued with nothing in flight (a late event no
        sender could take); returns how many."""
        with self.lock:
            if self.inflight:
                return 0
            self.account_locked()
            pop = self._pop_oldest_locked
            n = len([pop() for _ in range(len(self.queue))])
            self._record_locked(n, fate)
            return n

    def settle(self, n: int, fate: Fate) -> None:
        """The oldest ``n`` events in flight have met their fate."""
        with self.lock:
            if self.abandoned:
                return  # the closing thread has accounted for these already
            self._record_locked(n, fate)
            self.inflight -= n
            self.inflight_first += n
            self.progress.notify_all()

    def abandon(self) -> tuple[int, list[dict[Any, Any]]] | None:
        """Take over from a stuck flusher: everything in flight and queued ends with the caller,
        who settles it with ``settle_abandoned``; the flusher's later ``settle`` calls count
        nothing. Returns (how many events, the queued items), or None when already done."""
        with self.lock:
            if self.abandoned:
                return None
            self.abandoned = True
            self.account_locked()
            pop = self._pop_oldest_locked
            queued = [pop() for _ in range(len(self.queue))]
            n = self.inflight + len(queued)
            self.inflight = 0
            self.inflight_first = self.taken + 1
            return n, queued

    def settle_abandoned(self, n: int, fate: Fate) -> None:
        with self.lock:
            self._record_locked(n, fate)
            self.progress.notify_all()

    def _record_locked(self, n: int, fate: Fate) -> None:
        c = self.counts
        c[fate.total] += n
        if fate.reason is not None:
            c[fate.reason] += n
        if fate not in _CHOSEN:
            self.undelivered += n

    def settled_through_locked(self) -> int:
        """The sequence number up to which every event has met its fate."""
        if self.inflight:
            return self.inflight_first - 1
        return self.taken

    def idle_locked(self) -> bool:
        """Nothing queued and nothing in flight."""
        return not self.queue and not self.inflight

    def pause_until(self, until: float) -> None:
        """Pause sending until ``until`` (monotonic) or later; threads blocked for room
        (overflow="block") re-check whether waiting can still help."""
        with self.lock:
            self.paused_until = max(self.paused_until, until)
            self.space.notify_all()

    def set_close_deadline_locked(self, deadline: float) -> None:
        if self.close_deadline is None or deadline < self.close_deadline:
            self.close_deadline = deadline

    def snapshot(self) -> Stats:
        """A consistent snapshot of the counters."""
        with self.lock:
            values = {c.value: n for c, n in self.counts.items()}
            queued = len(self.queue)
            values["submitted"] += self.taken + queued
            values["queued"] = queued + self.inflight
        return Stats(**values)


def _encoded_floor(event: Any) -> int:
    """A lower bound of an event's encoded JSON size, in bytes: each character of a top-level
    key or string encodes to at least one byte, any other value to at least one byte; plus the
    braces, quotes, colons and commas. (The flusher only ever adds to an event.)"""
    n = 1
    for key, value in event.items():
        if key is SIZE or key is RECORD:
            continue  # the queue's own keys (_events.py "Queue items"), never encoded
        n += (len(key) if type(key) is str else 0) + 4
        n += len(value) + 2 if type(value) is str else 1
    return n
