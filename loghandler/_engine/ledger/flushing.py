"""The ledger's flusher face: what the sender (the flusher thread, or a closing thread sending
in its place) does with it.

- take a batch into flight (``take``, ``drain`` at the deadline), settle it (``settle``,
  ``settle_inflight``), take over from a stuck flusher (``abandon``, ``settle_abandoned``);
- wait for work (``wait_for_work``), sleep within the close deadline (``sleep_until``,
  ``wait_pressed``, ``time_left``), pause all sending (``pause_until``);
- ask how full the queue is (``pressed``, ``nearly_full``, ``idle``), spill with a spool
  (``set_spilling``), queue a policy's own summary (``add_own``), record a request that was
  answered (``record_sent``).
"""

from __future__ import annotations

import time
from itertools import repeat as _repeat
from itertools import starmap as _starmap
from typing import Any

from .. import events as _events
from ..events import size_of
from ..stats import Count, Fate
from .state import LedgerState

__all__ = ["Flushing"]

_monotonic = time.monotonic


class Flushing(LedgerState):
    """The flusher's face of the ledger (see the module docstring)."""

    __slots__ = ()

    # ------------------------------------------------------------------ batches

    def take(self, limit: int, partial: bool, max_bytes: int | None = None) -> list[Any] | None:
        """Take up to ``limit`` accounted events from the front into flight, and (when given)
        up to ``max_bytes`` of their estimated sizes (at least one event).

        None when there is nothing to take, or less than a full batch unless ``partial`` and
        such a batch is owed (``_partial_owed_locked``).
        """
        with self._lock:
            self._account_locked()
            # Only accounted events are taken: the fast path may append more meanwhile.
            n = self._accounted - self._taken
            if n <= 0 or ((not partial or not self._partial_owed_locked())
                          and n < self._wake_len and self._queue_bytes < self._wake_bytes):
                return None
            take = min(limit, n)
            if take <= 0:
                return []
            first = self._taken + 1
            popleft = self._queue.popleft
            if max_bytes is None:
                # Popped in one C loop: a comprehension's bytecode cost the flusher (and, with
                # the interpreter's lock, the application) about 200 instructions an event.
                items = list(_starmap(popleft, _repeat((), take)))
                self._queue_bytes -= _events.items_size(items)  # all accounted
            else:
                q, items, nbytes = self._queue, [], 0
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
            self._fly_locked(first, take)
            self._update_fast_path_locked()
            if self._overflow == "block":
                self._space.notify_all()
            return items

    def drain(self) -> list[Any]:
        """Take everything queued into flight at once (the close deadline passed)."""
        with self._lock:
            self._account_locked()
            first = self._taken + 1
            pop = self._pop_oldest_locked
            items = [pop() for _ in range(len(self._queue))]
            self._fly_locked(first, len(items))
            return items

    def settle(self, n: int, fate: Fate) -> None:
        """The oldest ``n`` events in flight have met their fate."""
        with self._lock:
            if self._abandoned:
                return  # the closing thread has accounted for these already
            self._record_locked(n, fate)
            self._land_locked(n)
            self._progress.notify_all()

    def settle_inflight(self, fate: Fate) -> int:
        """Settle as ``fate`` every event in flight (a send that stopped on an error it could
        not count, late in interpreter shutdown); returns how many."""
        with self._lock:
            n = self._inflight
            if n and not self._abandoned:
                self._record_locked(n, fate)
                self._land_locked(n)
                self._progress.notify_all()
            return n

    def abandon(self) -> tuple[int, list[Any]] | None:
        """Take over from a stuck flusher: everything in flight and queued ends with the caller,
        who settles it with ``settle_abandoned``; the flusher's later ``settle`` calls count
        nothing. Returns (how many events, the queued items), or None when already done."""
        with self._lock:
            if self._abandoned:
                return None
            self._abandoned = True
            self._account_locked()
            pop = self._pop_oldest_locked
            queued = [pop() for _ in range(len(self._queue))]
            n = self._inflight + len(queued)
            self._inflight = 0
            self._flight.clear()
            return n, queued

    def settle_abandoned(self, n: int, fate: Fate) -> None:
        """``n`` events the closing thread took over (``abandon``) have met their fate."""
        with self._lock:
            self._record_locked(n, fate)
            self._progress.notify_all()

    def settle_side(self, first: int, n: int, fate: Fate) -> None:
        """``n`` of the events an application thread took to the spool (``Intake.put``: the
        run that starts at ``first``) have met their fate. Counted also after a take-over:
        those events were never the flusher's."""
        with self._lock:
            try:
                self._settle_side_locked(first, n, fate)
            except BaseException:  # an interrupt on an application thread: made whole
                self._repair_locked()
                raise

    def pause_side(self, paused: bool) -> None:
        """Whether a full queue may be spilled to the spool by the application's threads
        (``Intake.put``): not while the spool fails (then the overflow policy applies)."""
        with self._lock:
            self._side_paused = paused

    def add_own(self, item: Any, size: int) -> None:
        """Queue an event the shipper itself made (a policy's summary), closed or not: few,
        bounded by the policy, and accounted like any other."""
        with self._lock:
            self._queue.append(item)
            self._account_locked()

    def record_sent(self, nbytes: int) -> None:
        """A request of ``nbytes`` was answered 2xx. Not after a take-over (``abandon``): its
        events were counted by the closing thread, and the counters agree with them."""
        with self._lock:
            if self._abandoned:
                return
            self._counts[Count.BYTES_SENT] += nbytes
            self._counts[Count.BATCHES] += 1

    def oldest_in_flight(self) -> int:
        """The sequence number of the oldest event in flight with the flusher (of the next to
        be taken, when none is): a spool file of the flusher's batch is named by it, so that
        replay keeps the order of submission (spool.py, "Order")."""
        with self._lock:
            return self._flight[0][0] if self._flight else self._taken + 1

    def delivered(self) -> int:
        """Events delivered so far."""
        with self._lock:
            return self._counts[Count.DELIVERED]

    # ------------------------------------------------------------------ the queue's state

    def idle(self) -> bool:
        """Nothing queued and nothing in flight with the flusher."""
        with self._lock:
            return not self._queue and not self._inflight

    def side_pending(self) -> bool:
        """An application thread is writing events of a full queue to the spool."""
        return bool(self._side)

    def pressed(self) -> bool:
        """The queue is half full (by count or by bytes): waiting longer would soon drop."""
        return len(self._queue) >= self._half_len or self._queue_bytes >= self._half_bytes

    def nearly_full(self) -> bool:
        """Three quarters full (by count or by bytes): the next moments will drop."""
        return (len(self._queue) * 4 >= 3 * self._max_size
                or self._queue_bytes * 4 >= 3 * self._max_bytes)

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

    # ------------------------------------------------------------------ waits

    def wait_for_work(self, interval: float) -> tuple[bool, bool]:
        """The flusher's wait: until a batch is full, flush() or close() call, or ``interval``
        passes. Returns (force: send a partial batch too, closed)."""
        timed_out = False
        if not self._closed:
            timed_out = not self._wake.wait(interval)
        with self._lock:
            if self._closed and self._side and not self._queue and not self._inflight:
                # Closing, and only an application thread's spool write is left: wait for it
                # (a disk write) rather than spin.
                self._progress.wait(0.05)
            self._wake.clear()
            self._wake_pending = False
            self._update_fast_path_locked()
            force, self._force = self._force or timed_out, False
            if force:  # what is queued now is owed a request, partial or not (take)
                self._owed_through = self._taken + len(self._queue)
            return force, self._closed

    def flusher_gone(self) -> None:
        """The flusher thread ends: whoever waits for progress re-checks."""
        with self._lock:
            self._progress.notify_all()

    def set_close_deadline(self, deadline: float, what: str = "shutdown_timeout") -> None:
        """Finish by ``deadline`` (monotonic), or by an earlier one already set; ``what``:
        the bound it comes from, for messages (``close_what``)."""
        with self._lock:
            self._set_close_deadline_locked(deadline, what)

    def time_left(self) -> float | None:
        """Seconds until the close deadline (None before close())."""
        deadline = self._close_deadline
        return None if deadline is None else deadline - _monotonic()

    def pause_until(self, until: float) -> None:
        """Pause sending until ``until`` (monotonic) or later; threads blocked for room
        (overflow="block") re-check whether waiting can still help."""
        with self._lock:
            self._paused_until = max(self._paused_until, until)
            self._space.notify_all()

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
