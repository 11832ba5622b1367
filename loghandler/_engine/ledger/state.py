"""The ledger's one state: its slots, its initialization (and reset after fork), the read-only
views every face shares, and the locked steps the faces are built from (see the package's
docstring for the scheme). The three faces (``intake``, ``flushing``, ``control``) are
subclasses that add their caller's operations; ``Ledger`` is all three.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from itertools import islice
from typing import Any

from ..._config import ShipperOptions
from .. import events as _events
from ..events import size_of
from ..model import FAST_ITEM_BYTES
from ..stats import Count, Fate, Stats
from .wake import Wake

__all__ = ["SPILL_BATCHES", "LedgerState"]

# Module globals: read without a call (an enum's class attribute may be one; see
# Intake._pop_dropped_locked for why the locked steps call nothing).
SUBMITTED, DROPPED, DROPPED_QUEUE_FULL = Count.SUBMITTED, Count.DROPPED, Count.DROPPED_QUEUE_FULL
DROPPED_INVALID = Count.DROPPED_INVALID
# The kinds of journaled steps (LedgerState._repair_locked).
DOOR, OLDEST, SIDE, SETTLE = "door", "oldest", "side", "settle"
# While spilling to the spool: batches (batch_size events, max_batch_bytes of estimated sizes)
# the queue may hold beyond its bounds, and the sender takes in one step.
SPILL_BATCHES = 2


class LedgerState:
    """The state of one shipper's ledger (``Ledger(options, on_put, on_late=None,
    on_full=None)``).

    ``options`` are the shipper's ``ShipperOptions`` (the bounds, the overflow policy);
    ``on_put`` is called under the lock after each event the slow path queues, to start the
    flusher when there is none; ``on_late`` outside the lock after an event queued late (closed
    with ``late_ok``: the shipper sends it at once). ``on_full(first, items)`` (with a spool)
    is called outside the lock, on the application's thread, with the oldest events the queue
    gave up to make room when it was full and the flusher behind (``Intake.put``): it writes
    them to the spool and settles them (``Flushing.settle_side``).
    """

    __slots__ = (
        "_abandoned",
        "_accounted",
        "_block_timeout",
        "_close_deadline",
        "_close_what",
        "_closed",
        "_counts",
        "_flight",
        "_flusher_started",
        "_force",
        "_half_bytes",
        "_half_len",
        "_inflight",
        "_interrupt",
        "_journal",
        "_late_ok",
        "_late_pending",
        "_limit_bytes",
        "_limit_len",
        "_lock",
        "_max_batch",
        "_max_batch_bytes",
        "_max_bytes",
        "_max_size",
        "_on_full",
        "_on_late",
        "_on_put",
        "_overflow",
        "_owed_through",
        "_paused_until",
        "_pressure",
        "_progress",
        "_queue",
        "_queue_bytes",
        "_refused_too_large",
        "_side",
        "_side_paused",
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
        "gate",
    )

    def __init__(self, options: ShipperOptions, on_put: Callable[[], None],
                 on_late: Callable[[], None] | None = None,
                 on_full: Callable[[int, list[Any]], None] | None = None) -> None:
        self._on_put = on_put
        self._on_late = on_late
        self._on_full = on_full if options.spool_dir is not None else None
        self._max_batch = options.batch_size
        self._max_batch_bytes = options.max_batch_bytes
        self._max_size = options.max_queue_size
        self._max_bytes = options.max_queue_bytes
        self._spill_ok = options.spool_dir is not None
        self._half_len = max(1, self._max_size // 2)  # "pressed": see Flushing.pressed
        self._half_bytes = max(1, self._max_bytes // 2)
        self._overflow = options.overflow
        self._block_timeout = options.block_timeout
        # The fast path's gate, [queue, fast_len] (Intake.offer; the compiled path's contract):
        # one list for the ledger's life, which only the ledger writes, so that a front end
        # may keep it and always sees the current queue and limit.
        self.gate: list[Any] = [None, 0]
        self._reset()

    def _reset(self) -> None:
        """Empty, with new locks: at construction, and in a forked child (Control.reset)."""
        self._lock = threading.RLock()
        self._progress = threading.Condition(self._lock)  # events settled
        self._space = threading.Condition(self._lock)  # room in the queue (overflow="block")
        # The flusher's wake-ups, set by the application's threads: Wake, not threading.Event,
        # which a Ctrl+C can leave locked for ever (wake.py).
        self._wake = Wake()  # the flusher: a batch is full, or flush/close
        self._interrupt = Wake()  # the flusher: close() came, re-measure waits
        # The flusher waiting out a retry with a spool (wait_pressed): the queue is half full,
        # spill now. Set by the slow path while _watching, and by close().
        self._pressure = Wake()
        self._watching = False
        self._queue: deque[Any] = deque()
        self.gate[0] = self._queue
        self._queue_bytes = 0  # sizes of the accounted events still queued
        self._taken = 0  # events that left the queue (taken by the flusher, or dropped), ever
        self._accounted = 0  # events, in queue order, whose sizes are in queue_bytes, ever
        # Events in flight with the flusher (taken, not yet settled): how many, and their
        # sequence numbers as [first, count] runs, oldest first. One run, but when the
        # application's threads took events to the spool in between (_side).
        self._inflight = 0
        self._flight: deque[list[int]] = deque()
        # Runs of events an application thread took from a full queue to write to the spool
        # itself (Intake.put, on_full): {first sequence number: events not yet settled}.
        # (Their total is summed when read: one store registers or settles a run.)
        self._side: dict[int, int] = {}
        self._side_paused = False  # the spool failed: a full queue drops again (overflow)
        self._wake_pending = False
        self._force = False
        # Partial batches are sent for events up to this sequence number (those queued when
        # the flusher was last forced): see _partial_owed_locked.
        self._owed_through = 0
        self._closed = False
        self._close_deadline: float | None = None
        self._close_what = "shutdown_timeout"  # the bound in force, for messages
        self._late_ok = False  # closed, but events are still taken (Control.begin_close)
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
        # The step of an application thread in progress (see _repair_locked), or None.
        self._journal: tuple[Any, ...] | None = None
        self.gate[1] = 0  # see _update_fast_path_locked

    # ------------------------------------------------------------------ read-only views

    @property
    def queue(self) -> deque[Any]:
        """The queued items, oldest first (``gate[0]``): read it, never change it (but by the
        gate's rule, ``Intake.offer``)."""
        return self._queue

    @property
    def closed(self) -> bool:
        """close() began: events are refused (but late ones, with ``late_ok``)."""
        return self._closed

    @property
    def close_deadline(self) -> float | None:
        """When close() must be done (monotonic), or None before close()."""
        return self._close_deadline

    @property
    def close_what(self) -> str:
        """The bound the close deadline came from, as messages name it: ``shutdown_timeout
        (5 s)``, ``close()'s timeout (0.1 s)``."""
        return self._close_what

    @property
    def paused_until(self) -> float:
        """Sending is paused until then (monotonic): a limit, a bad token."""
        return self._paused_until

    @property
    def abandoned(self) -> bool:
        """A closing thread took over from a stuck flusher (``Flushing.abandon``)."""
        return self._abandoned

    def count(self, counter: Count, n: int = 1) -> None:
        """Add to a counter outside the invariant (retried, replayed, suppressed, ...)."""
        with self._lock:
            self._counts[counter] += n

    def drops(self) -> tuple[int, int]:
        """(dropped_queue_full, dropped_invalid), as ``snapshot()`` counts them: what the
        flusher looks at between batches (``Reporter.tell_drops``), without a whole snapshot
        (29 counters through the Enum's ``value``: 30,000 instructions a batch)."""
        with self._lock:
            return self._counts[DROPPED_QUEUE_FULL], self._counts[DROPPED_INVALID]

    def snapshot(self) -> Stats:
        """A consistent snapshot of the counters."""
        with self._lock:
            values = {c.value: n for c, n in self._counts.items()}
            queued = len(self._queue)
            values["submitted"] += self._taken + queued
            values["queued"] = queued + self._inflight + sum(self._side.values())
        return Stats(**values)

    # ------------------------------------------------------------------ the locked steps

    def _account_locked(self) -> None:
        """Add the sizes of the events the fast path appended since the last call."""
        q = self._queue
        tail: list[Any] = []
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

    def _pop_oldest_locked(self) -> Any:
        item = self._queue.popleft()
        if self._accounted > self._taken:
            self._queue_bytes -= size_of(item)
        else:
            self._accounted += 1
        self._taken += 1
        if self._accounted == self._taken:
            self._queue_bytes = 0  # exact again whenever nothing accounted is left
        return item

    def _drop_locked(self, fate: Fate) -> bool:
        """Refuse one event at the door. It is counted as submitted here, since it never gets a
        sequence number. Returns False (the event was not queued). Journaled (see
        ``_repair_locked``): an interrupt landing between its counts is made whole."""
        c = self._counts
        reason = fate.reason
        self._journal = (DOOR, fate, c[SUBMITTED], c[fate.total],
                         c[reason] if reason is not None else 0, self._undelivered)
        c[SUBMITTED] += 1
        c[fate.total] += 1
        if reason is not None:
            c[reason] += 1
        if not fate.chosen:
            self._undelivered += 1
        self._journal = None
        return False

    def _repair_locked(self) -> None:
        """Make whole the step an interrupt cut short, before the lock is let go.

        A signal handler runs on the main thread between two bytecodes of whatever it was
        doing, and its exception (a KeyboardInterrupt) propagates from there: inside a logging
        call, from the middle of a step that counts an event in several places. CPython 3.11+
        checks for signals only at calls and backward jumps, which the steps avoid; 3.10
        checks between most bytecodes. So the steps an application thread runs under the lock
        (a drop at the door, the oldest dropped for room, a batch taken for the spool) first
        note what they start from (``_journal``), and the intake's operations call this on
        the way out of any exception: the step is completed from that note, whatever part of
        it ran. Idempotent."""
        journal = self._journal
        if journal is None:
            return
        self._journal = None
        c = self._counts
        kind = journal[0]
        if kind is DOOR:
            _, fate, submitted, total, reason, undelivered = journal
            c[SUBMITTED] = submitted + 1
            c[fate.total] = total + 1
            if fate.reason is not None:
                c[fate.reason] = reason + 1
            self._undelivered = undelivered + (0 if fate.chosen else 1)
        elif kind is OLDEST:
            _, head, taken, accounted, queue_bytes, dropped, full, undelivered = journal
            if accounted > taken:
                queue_bytes -= size_of(head)
            else:
                accounted += 1
            taken += 1
            self._accounted, self._taken = accounted, taken
            self._queue_bytes = 0 if accounted == taken else queue_bytes
            c[DROPPED] = dropped + 1
            c[DROPPED_QUEUE_FULL] = full + 1
            self._undelivered = undelivered + 1
            q = self._queue
            if q and q[0] is head:
                q.popleft()
        elif kind is SETTLE:
            _, first, left, n, fate, total, reason, undelivered = journal
            c[fate.total] = total + n
            if fate.reason is not None:
                c[fate.reason] = reason + n
            self._undelivered = undelivered + (0 if fate.chosen else n)
            if left > n:
                self._side[first] = left - n
            else:
                self._side.pop(first, None)
        elif kind is SIDE:
            # Events taken for the spool that this thread will not write: counted as dropped
            # for the full queue. How many left the queue: those of the front noted that are
            # no longer there.
            _, first, front = journal
            if first not in self._side:
                q = self._queue
                head = q[0] if q else None
                gone = next((i for i, item in enumerate(front) if item is head), len(front))
                self._taken = first - 1 + gone
                self._accounted, self._queue_bytes = self._taken, 0
                self._account_locked()  # the queued sizes, counted afresh
                if gone:
                    self._side[first] = gone
            if first in self._side:
                self._settle_side_locked(first, self._side[first], Fate.DROPPED_QUEUE_FULL)

    def _record_locked(self, n: int, fate: Fate) -> None:
        c = self._counts
        c[fate.total] += n
        if fate.reason is not None:
            c[fate.reason] += n
        if not fate.chosen:
            self._undelivered += n

    def _settle_side_locked(self, first: int, n: int, fate: Fate) -> None:
        """Settle ``n`` events of the run an application thread took to the spool (``first``:
        its first sequence number); what is not in the run any more is ignored."""
        left = self._side.get(first)
        if left is None:
            return
        n = min(n, left)
        c = self._counts
        reason = fate.reason
        # Journaled: an application thread settles what it spooled (_repair_locked).
        self._journal = (SETTLE, first, left, n, fate, c[fate.total],
                         c[reason] if reason is not None else 0, self._undelivered)
        self._record_locked(n, fate)
        if left > n:
            self._side[first] = left - n
        else:
            del self._side[first]
        self._journal = None
        self._progress.notify_all()

    def _settled_through_locked(self) -> int:
        """The sequence number up to which every event has met its fate."""
        through = self._flight[0][0] - 1 if self._flight else self._taken
        if self._side:
            through = min(through, min(self._side) - 1)
        return through

    def _fly_locked(self, first: int, n: int) -> None:
        """Events ``first`` .. ``first + n - 1`` are in flight with the flusher."""
        if not n:
            return
        flight = self._flight
        if flight and flight[-1][0] + flight[-1][1] == first:
            flight[-1][1] += n
        else:
            flight.append([first, n])
        self._inflight += n

    def _land_locked(self, n: int) -> None:
        """The oldest ``n`` events in flight with the flusher are settled."""
        self._inflight -= n
        flight = self._flight
        while n and flight:
            run = flight[0]
            k = min(n, run[1])
            run[0] += k
            run[1] -= k
            n -= k
            if not run[1]:
                flight.popleft()

    def _set_close_deadline_locked(self, deadline: float, what: str,
                                   seconds: float | None = None) -> None:
        """``seconds``: the bound as configured, for messages; without it, the time left now
        (which reads less than the setting on a busy host)."""
        if self._close_deadline is None or deadline < self._close_deadline:
            self._close_deadline = deadline
            if seconds is None:
                seconds = max(0.0, deadline - time.monotonic())
            self._close_what = f"{what} ({seconds:.2g} s)" if seconds < 1 else \
                f"{what} ({seconds:.3g} s)"

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

    def _partial_owed_locked(self) -> bool:
        """Whether a batch short of the wake marks may be taken now: when the flusher was
        forced (``flush_interval`` passed, ``flush()``, ``close()``) and events queued at that
        moment are still waiting (``_owed_through``, set by ``Flushing.wait_for_work``), or a
        flush()/close() is pending. Events queued since wait for the next forced wake, at most
        ``flush_interval`` later, or a full batch. Without this rule the flusher, sending
        what was queued, found the events logged during that request and sent them too, and
        so on: while the application logged, one request after another, each carrying what a
        request's round trip let in (measured: about 120 events a request at full speed,
        natively; a handful under valgrind or on a busy host), each paying the request's fixed
        cost (some 1 M instructions: docs/performance.md). Also while the queue is half full
        (``pressed``): a queue smaller than a batch is never full by the wake marks, and would
        overflow while the flusher waited."""
        return (self._force or self._closed or self._taken < self._owed_through
                or len(self._queue) >= self._half_len or self._queue_bytes >= self._half_bytes)

    def _update_fast_path_locked(self) -> None:
        """Set the queue length under which ``Intake.offer`` may skip the lock (the gate's
        ``fast_len``): room, by count and by bytes, for events of up to FAST_ITEM_BYTES each
        beyond those accounted for."""
        if self._closed or not self._flusher_started:
            self.gate[1] = 0
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
        self.gate[1] = held + room if room > 0 else 0
