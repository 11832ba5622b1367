"""The ledger's intake face: what the front ends (the application's threads) do with it, and the
contract the compiled path is handed (``loghandler/_compiled.py``).

- ``gate``: ``[queue, fast_len]``, written by the ledger alone. While ``len(queue) <
  fast_len``, an item of at most ``FAST_ITEM_BYTES`` may be appended to ``queue`` without the
  lock (``offer``; the compiled handle does the same in C, nothing more).
- ``offer(item, size)``: the hot path of every log call; ``put(item, size)``: its locked slow
  path (first event, a full batch, a full queue, a big event, closed). Neither raises.
- ``drop(fate)``: count an event refused at the door (invalid, held); ``suppress()``: count a
  record loghandler's own sending caused (never shipped).
"""

from __future__ import annotations

import time
from itertools import islice
from typing import Any

from ..events import size_of
from ..guard import in_sender_thread
from ..model import FAST_ITEM_BYTES, RECORD, SIZE
from ..stats import Count, Fate
from .state import DROPPED, DROPPED_QUEUE_FULL, OLDEST, SIDE, LedgerState

__all__ = ["Intake"]

_monotonic = time.monotonic


class Intake(LedgerState):
    """The front ends' face of the ledger (see the module docstring)."""

    __slots__ = ()

    def offer(self, item: Any, size: int) -> bool:
        """Queue an item the caller built (events.py "Queue items"; ``size`` is
        ``item[SIZE]``). The caller has checked ``in_sender_thread()``.

        The hot path of every log call, and the one admission test of the lock-free path: below
        the gate's ``fast_len``, one comparison and an append.
        """
        q, fast_len = self.gate
        if len(q) < fast_len and size <= FAST_ITEM_BYTES:
            q.append(item)
            return True
        return self.put(item, size)

    def put(self, item: Any, size: int) -> bool:
        """The slow path of ``offer``: takes the lock. False when the item was dropped."""
        try:
            # _is_owned: threading's RLock has no public "held by this thread" test (Condition
            # asks the same private method); both the C and the Python RLock define it.
            if self._lock._is_owned() and not self._closed:  # type: ignore[attr-defined]  # noqa: SLF001
                # Re-entered on a thread inside one of our own locked steps: a finalizer the
                # cyclic GC ran there logged. The bare append is as safe there as the lock-free
                # fast path is at any time; the next locked step accounts for it.
                self._queue.append(item)
                return True
            side: list[Any] = []
            with self._lock:
                try:
                    ok = self._put_locked(item, size, side)
                except BaseException as exc:
                    self._repair_locked()  # an interrupt: its step made whole
                    if isinstance(exc, Exception) and not any(
                            queued is item for queued in list(self._queue)):
                        # A bug of ours on the way (a size, the accounting): the event is
                        # counted as invalid unless it reached the queue before the error.
                        # (Under the lock the flusher cannot have taken it; a copy, as the
                        # fast path may append.)
                        self._drop_locked(Fate.DROPPED_INVALID)
                    raise
            if side:
                self._spill_side(side[0], side[1])
            if self._late_pending and self._on_late is not None:
                self._late_pending = False
                self._on_late()
            return ok
        except Exception:
            return False

    def _spill_side(self, first: int, items: list[Any]) -> None:
        """Write the events a full queue gave up (``_take_side_locked``) to the spool, on this
        thread and outside the lock (``on_full``). Whatever that did not settle (an error of
        ours, an interrupt) is counted as dropped for the full queue, so none is left
        unaccounted, and the flusher tells it."""
        on_full = self._on_full
        try:
            if on_full is not None:
                on_full(first, items)
        except Exception:
            pass
        finally:
            with self._lock:
                try:
                    self._settle_side_locked(first, len(items), Fate.DROPPED_QUEUE_FULL)
                except BaseException:
                    self._repair_locked()
                    raise

    def drop(self, fate: Fate) -> bool:
        """Count one event refused at the door as ``fate``; False (it was not queued)."""
        with self._lock:
            try:
                return self._drop_locked(fate)
            except BaseException:
                self._repair_locked()
                raise

    def suppress(self) -> bool:
        """Count a record loghandler's own sending caused (urllib3's, on_error's): never
        shipped. False."""
        self.count(Count.SUPPRESSED)
        return False

    # ------------------------------------------------------------------ the locked steps

    def _put_locked(self, item: Any, size: int, side: list[Any]) -> bool:
        # Everything the fast path leaves out: closed, first event (start the flusher), a full
        # batch (wake the flusher), a full queue (overflow policy), big events.
        if self._closed:
            if not self._late_ok or self._abandoned:
                return self._drop_locked(Fate.DROPPED_CLOSED)
            self._queue.append(item)
            self._account_locked()
            self._late_pending = True
            return True
        if size > self._max_batch_bytes and _encoded_floor(item) > self._max_batch_bytes - 2:
            # It could never be sent (not even alone in a request): refuse it now, rather than
            # let it push sendable events out of the queue and be dropped by the flusher later.
            self._refused_too_large += 1
            return self._drop_locked(Fate.DROPPED_TOO_LARGE)
        self._account_locked()
        q = self._queue
        if len(q) >= self._limit_len or self._queue_bytes + size > self._limit_bytes:
            if self._spill_ok and not self._spilling:
                # Full, with a spool: the flusher is busy (a request, a write) while a burst
                # comes faster than it can look. Room for what goes to disk, and wake it.
                self._set_wake_marks_locked(True)
                self._wake_pending = True
                self._wake.set()
            if len(q) >= self._limit_len or self._queue_bytes + size > self._limit_bytes:
                if self._on_full is not None and not self._side_paused and size <= self._max_bytes:
                    # Still full with the room for a spill: the flusher is behind (waiting
                    # out a request, or short of CPU). With a spool nothing is dropped: this
                    # thread takes the oldest batch and writes it to the spool itself (put).
                    self._take_side_locked(size, side)
                elif not self._make_room_locked(size):
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

    def _take_side_locked(self, size: int, side: list[Any]) -> None:
        """Take the oldest events out of a full queue, for the calling thread to write to the
        spool (``_spill_side``): a batch (``batch_size`` events, about ``max_batch_bytes``
        encoded), and more if the new event of ``size`` would not fit otherwise. ``side``
        receives (the first one's sequence number, the items)."""
        q = self._queue
        first = self._taken + 1
        # How many, counted before any is taken (all the fast path's appends since the last
        # step are accounted: _put_locked accounted them).
        length, queue_bytes = len(q), self._queue_bytes
        limit_len, limit_bytes, max_batch = self._limit_len, self._limit_bytes, self._max_batch
        batch_bytes = 2 * self._max_batch_bytes  # estimates: about 3x the encoded JSON
        k = nbytes = 0
        for item in list(islice(q, length)):
            if not ((k < max_batch and nbytes < batch_bytes) or length - k >= limit_len
                    or queue_bytes + size > limit_bytes):
                break
            item_size = size_of(item)
            nbytes += item_size
            queue_bytes -= item_size
            k += 1
        if not k:
            return
        # Journaled (_repair_locked): the events at the front that are to go.
        self._journal = (SIDE, first, list(islice(q, k)))
        pop = self._pop_oldest_locked
        items = [pop() for _ in range(k)]
        if items:
            self._side[first] = len(items)
            side.extend((first, items))
            self._update_fast_path_locked()
        self._journal = None

    def _make_room_locked(self, size: int) -> bool:
        if size > self._max_bytes:
            return self._drop_locked(Fate.DROPPED_TOO_LARGE)
        policy = self._overflow
        if policy == "block" and not in_sender_thread():
            deadline = _monotonic() + self._block_timeout
            self._wake.set()
            while True:
                self._account_locked()
                if (len(self._queue) < self._limit_len
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
            q = self._queue
            while q and (len(q) >= self._limit_len
                         or self._queue_bytes + size > self._limit_bytes):
                self._pop_dropped_locked()
            return True
        return self._drop_locked(Fate.DROPPED_QUEUE_FULL)

    def _pop_dropped_locked(self) -> None:
        """Drop the oldest queued event for room: popped and counted as one step.

        An asynchronous exception (a signal handler's KeyboardInterrupt on the logging thread)
        can land between any two bytecodes on CPython 3.10, and where Python code is called or
        right after a C call returns on 3.11+: the step is journaled (``_repair_locked``), so
        that such an exception finds the event either untouched or popped and counted, never
        half done."""
        q = self._queue
        head = q[0]
        c = self._counts
        self._journal = (OLDEST, head, self._taken, self._accounted, self._queue_bytes,
                         c[DROPPED], c[DROPPED_QUEUE_FULL], self._undelivered)
        if self._accounted > self._taken:
            self._queue_bytes -= size_of(head)
        else:
            self._accounted += 1
        self._taken += 1
        if self._accounted == self._taken:
            self._queue_bytes = 0
        c[DROPPED] += 1
        c[DROPPED_QUEUE_FULL] += 1
        self._undelivered += 1
        q.popleft()
        self._journal = None


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
