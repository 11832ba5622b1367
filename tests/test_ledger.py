"""The ledger (loghandler/_engine/ledger/): one state, three faces, each tested for its own
contract through its public operations.

- ``Intake`` (front ends, the compiled path): the gate's lock-free admission, the slow path's
  bounds and overflow policies, refusals at the door;
- ``Flushing`` (the sender): batches into flight, settling, taking over from a stuck flusher;
- ``Control`` (the shipper): flush tickets, close, reset after fork;
- every face: ``snapshot()`` keeps ``submitted == delivered + dropped + failed + spooled +
  queued`` at every step.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from helpers import balanced

from loghandler._config import shipper_options
from loghandler._engine.ledger import (
    FAST_ITEM_BYTES,
    Control,
    Fate,
    Flushing,
    Intake,
    Ledger,
)
from loghandler._engine.model import SIZE, WIRE_ITEM_SIZE


class Starts:
    """The ``on_put`` hook: counts the calls (the shipper starts its flusher there)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1


def make(on_late: Callable[[], None] | None = None, **options: Any) -> tuple[Ledger, Starts]:
    starts = Starts()
    return Ledger(shipper_options(options), starts, on_late), starts


def event(i: int = 0, size: int = 600) -> dict[Any, Any]:
    return {"i": i, SIZE: size}


class TestFaces:
    def test_each_face_offers_its_callers_operations_only(self) -> None:
        """The split by caller, as docs/architecture.md draws it: what each face adds to the
        shared state (snapshot, count, the read-only views)."""
        def own(face: type) -> set[str]:
            return {name for name in vars(face) if not name.startswith("_")}

        assert own(Intake) == {"offer", "put", "drop", "suppress"}
        assert own(Flushing) == {
            "take", "drain", "settle", "settle_inflight", "abandon", "settle_abandoned",
            "add_own", "record_sent", "delivered", "idle", "pressed", "nearly_full",
            "set_spilling", "wait_for_work", "flusher_gone", "set_close_deadline", "time_left",
            "pause_until", "sleep_until", "wait_pressed", "settle_side", "pause_side",
            "side_pending", "oldest_in_flight"}
        assert own(Control) == {
            "reset", "start_flusher", "begin_flush", "wait_flushed", "begin_close",
            "count_leftovers", "undelivered", "queued_bytes", "settled_through",
            "wait_late_settled"}
        assert issubclass(Ledger, Intake) and issubclass(Ledger, Flushing)
        assert issubclass(Ledger, Control)
        assert own(Ledger) == set()  # nothing beyond the three faces


class TestIntake:
    def test_the_gate_is_shut_until_the_flusher_starts(self) -> None:
        """The first event takes the locked path, which starts the flusher (on_put); from
        then on the gate lets events in without the lock, up to fast_len."""
        ledger, starts = make(batch_size=100)
        queue, fast_len = ledger.gate
        assert queue is ledger.queue and fast_len == 0
        assert ledger.offer(event(0), 600)
        assert starts.calls == 1 and ledger.gate[1] > 0
        for i in range(1, 50):
            assert ledger.offer(event(i), 600)
        assert starts.calls == 1  # the fast path calls nothing
        assert [e["i"] for e in ledger.queue] == list(range(50))
        st = ledger.snapshot()
        assert st.submitted == st.queued == 50 and balanced(st)

    def test_the_gate_admits_only_small_items_below_its_length(self) -> None:
        """Intake.offer's one test (the compiled path's contract): below fast_len and at most
        FAST_ITEM_BYTES, an append; anything else the locked path, which calls on_put."""
        ledger, starts = make(batch_size=10)
        ledger.offer(event(0), 600)
        fast_len = ledger.gate[1]
        assert 0 < fast_len <= 10
        ledger.offer(event(1, FAST_ITEM_BYTES + 1), FAST_ITEM_BYTES + 1)
        assert starts.calls == 2  # too big for the gate: locked
        while len(ledger.queue) < ledger.gate[1]:
            ledger.offer(event(len(ledger.queue)), 600)
        calls = starts.calls
        ledger.offer(event(99), 600)  # at fast_len: locked
        assert starts.calls == calls + 1
        assert balanced(ledger.snapshot())

    @pytest.mark.parametrize("overflow", ["drop_oldest", "drop_newest"])
    def test_a_full_queue_drops_by_its_policy_and_counts(self, overflow: str) -> None:
        ledger, _ = make(max_queue_size=10, batch_size=100, overflow=overflow)
        for i in range(25):
            ledger.offer(event(i), 600)
        st = ledger.snapshot()
        assert st.queued == 10 and st.dropped_queue_full == 15 and balanced(st)
        kept = [e["i"] for e in ledger.queue]
        assert kept == (list(range(15, 25)) if overflow == "drop_oldest" else list(range(10)))

    def test_the_byte_bound_counts_wire_items_by_their_length(self) -> None:
        """A wire item (bytes: an event's final JSON) weighs its length and WIRE_ITEM_SIZE;
        the fast path's appends are accounted at the next locked step."""
        ledger, _ = make(batch_size=1000)
        wire = b'{"message":"m"}'
        ledger.offer(event(0), 600)
        ledger.offer(wire, len(wire) + WIRE_ITEM_SIZE)
        ledger.offer(event(1, 700), 700)
        assert ledger.queued_bytes() == 600 + len(wire) + WIRE_ITEM_SIZE + 700

    def test_an_event_no_request_could_carry_is_refused_at_the_door(self) -> None:
        """Larger than max_batch_bytes even encoded: dropped_too_large at once, and the next
        flush answers False for it."""
        ledger, _ = make(max_batch_bytes=1000)
        big = {"text": "x" * 5000, SIZE: 6000}
        assert not ledger.offer(big, 6000)
        st = ledger.snapshot()
        assert st.dropped_too_large == 1 and st.queued == 0 and balanced(st)
        ticket = ledger.begin_flush(lambda: True)
        assert ticket.done and ticket.refused

    def test_drop_and_suppress_count(self) -> None:
        ledger, _ = make()
        assert ledger.drop(Fate.DROPPED_INVALID) is False
        assert ledger.suppress() is False
        st = ledger.snapshot()
        assert (st.submitted, st.dropped_invalid, st.suppressed) == (1, 1, 1)
        assert balanced(st)

    def test_many_threads_stay_within_the_bounds(self) -> None:
        """Eight threads offering without the lock: the queue stays within max_queue_size
        (give or take one event per racing thread), every event is accounted, and the bytes
        counted for what is queued are exactly its sizes."""
        ledger, _ = make(max_queue_size=500, batch_size=10_000, overflow="drop_newest")

        def work(t: int) -> None:
            for i in range(2000):
                size = 600 + i % 300
                ledger.offer({"t": t, "i": i, SIZE: size}, size)

        threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        st = ledger.snapshot()
        assert st.submitted == 16_000 and balanced(st)
        assert 500 <= st.queued <= 508
        assert ledger.queued_bytes() == sum(item[SIZE] for item in ledger.queue)


class TestFlushing:
    def test_take_settle_and_the_sequence(self) -> None:
        """A batch leaves the queue into flight, oldest first; settling it moves the settled
        mark, and the counts follow the fate."""
        ledger, _ = make(batch_size=4)
        for i in range(10):
            ledger.offer(event(i), 600)
        batch = ledger.take(4, partial=False)
        assert batch is not None and [e["i"] for e in batch] == [0, 1, 2, 3]
        assert ledger.settled_through() == 0
        ledger.settle(3, Fate.DELIVERED)
        ledger.settle(1, Fate.FAILED_REJECTED)
        assert ledger.settled_through() == 4
        st = ledger.snapshot()
        assert (st.delivered, st.failed_rejected, st.queued) == (3, 1, 6) and balanced(st)

    def test_take_waits_for_a_full_batch_unless_partial(self) -> None:
        ledger, _ = make(batch_size=5)
        for i in range(3):
            ledger.offer(event(i), 600)
        assert ledger.take(5, partial=False) is None
        assert ledger.wait_for_work(0) == (True, False)  # flush_interval passed: forced
        assert [e["i"] for e in ledger.take(5, partial=True) or []] == [0, 1, 2]
        assert ledger.take(5, partial=True) is None  # nothing left

    def test_a_partial_batch_only_for_what_was_queued_when_forced(self) -> None:
        """Issue 49: what is logged while the forced batch is sent waits for the next forced
        wake (flush_interval) or a full batch, not a request of its own at once; flush() and
        close() make a partial batch owed again."""
        ledger, _ = make(batch_size=5)
        ledger.offer(event(0), 600)
        assert ledger.take(5, partial=True) is None  # not forced yet: it waits
        assert ledger.wait_for_work(0) == (True, False)
        ledger.offer(event(1), 600)  # queued after the wake, before the take: taken with it
        assert [e["i"] for e in ledger.take(5, partial=True) or []] == [0, 1]
        ledger.offer(event(2), 600)  # logged while that batch was sent
        assert ledger.take(5, partial=True) is None
        for i in range(3, 7):
            ledger.offer(event(i), 600)
        assert [e["i"] for e in ledger.take(5, partial=False) or []] == [2, 3, 4, 5, 6]
        ledger.offer(event(7), 600)
        assert ledger.take(5, partial=True) is None
        ledger.begin_flush(lambda: True)  # a flush() before the flusher wakes: owed at once
        assert [e["i"] for e in ledger.take(5, partial=True) or []] == [7]
        ledger.offer(event(8), 600)
        assert ledger.wait_for_work(0) == (True, False)  # the flush's wake: 8 is owed too
        assert [e["i"] for e in ledger.take(5, partial=True) or []] == [8]
        ledger.offer(event(9), 600)
        assert ledger.take(5, partial=True) is None
        ledger.begin_close(time.monotonic() + 5, False)
        assert [e["i"] for e in ledger.take(5, partial=True) or []] == [9]

    def test_a_half_full_queue_smaller_than_a_batch_is_taken_partial(self) -> None:
        """A queue a batch never fills: once it is half full, the round goes on taking it (it
        would overflow while the flusher waited for the next forced wake)."""
        ledger, _ = make(batch_size=500, max_queue_size=10)
        for i in range(4):
            ledger.offer(event(i), 600)
        assert ledger.take(500, partial=True) is None
        ledger.offer(event(4), 600)
        assert ledger.take(500, partial=False) is None  # not a full batch
        assert [e["i"] for e in ledger.take(500, partial=True) or []] == [0, 1, 2, 3, 4]

    def test_take_by_bytes_takes_at_least_one(self) -> None:
        ledger, _ = make(batch_size=100)
        for i in range(5):
            ledger.offer(event(i, 1000), 1000)
        ledger.wait_for_work(0)  # forced: a partial batch is owed
        assert len(ledger.take(100, True, max_bytes=2500) or []) == 2
        assert len(ledger.take(100, True, max_bytes=10) or []) == 1

    def test_a_closing_thread_takes_over_from_a_stuck_flusher(self) -> None:
        """abandon(): what is in flight and queued ends with the caller; the stuck flusher's
        later settle counts nothing (no event counted twice)."""
        ledger, _ = make(batch_size=2)
        for i in range(5):
            ledger.offer(event(i), 600)
        assert ledger.take(2, partial=False) is not None
        taken = ledger.abandon()
        assert taken is not None
        n, queued = taken
        assert n == 5 and [e["i"] for e in queued] == [2, 3, 4]
        assert ledger.abandon() is None
        ledger.settle(2, Fate.DELIVERED)  # the stuck flusher wakes up: ignored
        ledger.settle_abandoned(n, Fate.SPOOLED)
        st = ledger.snapshot()
        assert (st.spooled, st.delivered, st.queued) == (5, 0, 0) and balanced(st)

    def test_a_policy_summary_is_queued_even_when_closed(self) -> None:
        ledger, _ = make()
        ledger.begin_close(time.monotonic() + 1, late_ok=False)
        ledger.add_own(event(0), 600)
        assert ledger.snapshot().queued == 1

    def test_wait_pressed_returns_when_the_queue_fills(self) -> None:
        """The flusher waiting out a retry with a spool wakes as the queue crosses half full
        (the application's slow path sets the mark), not at the end of its wait."""
        ledger, _ = make(max_queue_size=20, batch_size=100, spool_dir=None)
        ledger.offer(event(0), 600)
        got: list[bool | None] = []
        waiter = threading.Thread(target=lambda: got.append(
            ledger.wait_pressed(time.monotonic() + 30)))
        waiter.start()
        for i in range(1, 15):
            ledger.offer(event(i), 600)
        waiter.join(10)
        assert not waiter.is_alive() and got == [None]

    def test_sleep_until_ends_at_the_close_deadline(self) -> None:
        ledger, _ = make()
        ledger.set_close_deadline(time.monotonic() + 0.05)
        start = time.monotonic()
        assert ledger.sleep_until(time.monotonic() + 60) is False
        assert time.monotonic() - start < 5


class TestControl:
    def test_flush_ticket_waits_for_its_events_and_answers_their_fate(self) -> None:
        ledger, _ = make(batch_size=100)
        for i in range(3):
            ledger.offer(event(i), 600)
        ticket = ledger.begin_flush(lambda: True)
        assert not ticket.done and ticket.target == 3
        assert ledger.wait_flushed(ticket, time.monotonic() + 0.01) is False  # not settled
        batch = ledger.take(100, partial=True)
        assert batch is not None
        ledger.settle(len(batch), Fate.DELIVERED)
        assert ledger.wait_flushed(ticket, time.monotonic() + 1) is True
        ledger.offer(event(9), 600)
        ticket = ledger.begin_flush(lambda: True)
        ledger.settle(len(ledger.take(100, partial=True) or []), Fate.FAILED_AUTH)
        assert ledger.wait_flushed(ticket, time.monotonic() + 1) is False  # not delivered

    def test_close_refuses_events_but_late_ones_when_allowed(self) -> None:
        late: list[int] = []
        ledger, _ = make(on_late=lambda: late.append(1))
        ledger.begin_close(time.monotonic() + 1, late_ok=False)
        assert ledger.closed and ledger.gate[1] == 0
        assert not ledger.offer(event(0), 600)
        assert ledger.snapshot().dropped_closed == 1
        ledger.begin_close(time.monotonic() + 1, late_ok=True)
        assert ledger.offer(event(1), 600) and late == [1]
        assert ledger.count_leftovers(Fate.DROPPED_SHUTDOWN) == 1
        assert balanced(ledger.snapshot())

    def test_reset_keeps_the_object_and_its_gate(self) -> None:
        """After fork the child resets the ledger in place: a front end holding the intake
        face, or its gate, appends to the child's new queue."""
        ledger, _ = make(batch_size=100)
        for i in range(5):
            ledger.offer(event(i), 600)
        gate, old = ledger.gate, ledger.queue
        ledger.reset()
        assert ledger.gate is gate and gate[0] is ledger.queue is not old
        assert len(ledger.queue) == 0 and gate[1] == 0
        st = ledger.snapshot()
        assert st.submitted == st.queued == 0 and balanced(st)
        ledger.offer(event(0), 600)
        assert list(gate[0]) == [event(0)]
