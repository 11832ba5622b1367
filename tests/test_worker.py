"""worker.py: the flusher's loop, through a ``MemoryTransport``: batches in order, settled
after their outcome is told, drops at the door told, a stuck request taken over at the close
deadline, and a ``flush()`` that waits for the service's answer, not the interval."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from helpers import balanced, wait_until

from loghandler import ApiError, Shipper
from loghandler.testing import MemoryTransport, SentRequest

FAST = {"flush_interval": 60, "retry_backoff": 0.001, "max_retry_delay": 0.002}


class Gate:
    """A transport's answer that holds each request until ``open()`` (a service that does not
    answer); ``arrived`` is set when the first request is held."""

    def __init__(self) -> None:
        self.arrived = threading.Event()
        self.opened = threading.Event()

    def __call__(self, request: SentRequest) -> Any:
        self.arrived.set()
        self.opened.wait(30)
        return 200

    def open(self) -> None:
        self.opened.set()


def test_flush_sends_at_once_and_keeps_the_order() -> None:
    """flush() does not wait for flush_interval (60 s here); batches and retries keep the
    order of the events."""
    t = MemoryTransport([500, 200, 503])
    s = Shipper(dataset="ds", transport=t, batch_size=7, max_retries=3, **FAST)
    for i in range(30):
        s.submit({"i": i})
    started = time.monotonic()
    assert s.flush(5)
    assert time.monotonic() - started < 5
    s.close()
    assert [e["i"] for e in t.events()] == list(range(30))
    assert all(len(r.events) <= 7 for r in t.requests)


def test_on_error_has_run_when_flush_returns() -> None:
    """A batch's events are settled after its outcome is told: a flush() waiting for them
    returns after on_error was called for them, not before."""
    seen: list[BaseException] = []

    def slow_callback(error: BaseException) -> None:
        time.sleep(0.2)  # an application's slow callback: flush must wait for it
        seen.append(error)

    s = Shipper(dataset="ds", transport=MemoryTransport([400]), on_error=slow_callback,
                **FAST)
    s.submit({"bad": True})
    assert s.flush(5) is False
    assert len(seen) == 1 and isinstance(seen[0], ApiError) and seen[0].status == 400
    assert s.stats().failed_rejected == 1
    s.close()


def test_drops_at_the_door_are_told_once(capfd: pytest.CaptureFixture[str]) -> None:
    """A full queue drops (counted) on the caller's thread, which prints nothing; the flusher
    tells it once, with the bound and what to do."""
    t = MemoryTransport()
    s = Shipper(dataset="ds", transport=t, max_queue_size=10, overflow="drop_newest", **FAST)
    for i in range(25):
        s.submit({"i": i})
    assert capfd.readouterr().err == ""  # not on the caller's thread
    s.flush(5)
    st = s.stats()
    s.close()
    assert st.dropped_queue_full == 15 and st.delivered == 10 and balanced(st)
    lines = [x for x in capfd.readouterr().err.splitlines() if "queue is full" in x]
    assert lines == ["loghandler: dataset 'ds': the queue is full (max_queue_size=10): 15 events "
                     "dropped (stats().dropped_queue_full): raise max_queue_size or set "
                     "spool_dir"]


def test_a_request_stuck_at_the_close_deadline_is_taken_over(
        capfd: pytest.CaptureFixture[str]) -> None:
    """The service never answers: close(timeout) returns near its deadline; the events held by
    the stuck flusher, sent and never answered, are counted unconfirmed (no spool; issue 35.5:
    the service may have stored them), the account balanced, and the close says so."""
    gate = Gate()
    s = Shipper(dataset="stuck", transport=MemoryTransport(gate), **FAST)
    try:
        for i in range(5):
            s.submit({"i": i})
        threading.Thread(target=s.flush, args=(5,), daemon=True).start()
        assert gate.arrived.wait(5), "the flusher never sent the batch"
        started = time.monotonic()
        s.close(0.3)
        assert time.monotonic() - started < 2.0
        st = s.stats()
        assert (st.unconfirmed, st.dropped, st.delivered) == (5, 0, 0) and balanced(st)
    finally:
        gate.open()
    # What the flusher learns afterwards settles nothing more: the events were taken over, and
    # the 200 that arrives then counts no batch and no bytes either (issue 35.9: the
    # counters agree with the account).
    assert wait_until(lambda: not [t for t in threading.enumerate()
                                   if t.name == "loghandler-flusher:stuck"])
    after = s.stats()
    assert (after.delivered, after.unconfirmed, after.submitted) == (0, 5, 5)
    assert (after.batches, after.bytes_sent) == (0, 0)
    lines = [x for x in capfd.readouterr().err.splitlines() if "closed" in x]
    assert lines == ["loghandler: dataset 'stuck': closed with 5 events not answered within "
                     "close()'s timeout (0.3 s): maybe stored (stats().unconfirmed): give "
                     "close() more time"], lines


def test_a_take_over_counts_the_pieces_already_delivered(
        capfd: pytest.CaptureFixture[str]) -> None:
    """Issue 35.9: a batch split by a 400, its first half delivered, its second half stuck at
    the close deadline. The closing thread takes over: the delivered half counts delivered
    (it used to be counted dropped_shutdown with the rest), the stuck one unconfirmed; the
    answer that comes later changes nothing, and tells nothing (no "delivering again")."""
    gate = Gate()
    s = Shipper(dataset="halves", transport=MemoryTransport([400, 200, gate]), **FAST)
    try:
        for i in range(10):
            s.submit({"i": i})
        threading.Thread(target=s.flush, args=(5,), daemon=True).start()
        assert gate.arrived.wait(5), "the second half was never sent"
        s.close(0.3)
        st = s.stats()
        assert (st.delivered, st.unconfirmed, st.dropped, st.failed) == (5, 5, 0, 0), st
        assert balanced(st)
    finally:
        gate.open()
    assert wait_until(lambda: not [t for t in threading.enumerate()
                                   if t.name == "loghandler-flusher:halves"])
    assert s.stats() == st
    lines = capfd.readouterr().err.splitlines()
    assert len(lines) == 1, lines
    assert "5 events not answered within close()'s timeout (0.3 s)" in lines[0], lines


def test_a_spool_write_under_way_at_the_close_deadline_counts_as_spooled(
        tmp_path: Any, capfd: pytest.CaptureFixture[str]) -> None:
    """Issue 48.5: the flusher is writing a batch to the spool when close()'s deadline comes
    (a slow disk: here its write is held until the closing thread has taken over). The write
    completes: its events are on disk, and count as spooled, not dropped_shutdown, and the
    close tells no loss (before: counted dropped_shutdown and told "undelivered" while the next
    process delivered them)."""
    from helpers import closed_port_url

    from loghandler import Client
    from loghandler._engine.spoolfiles import decode_file

    s = Shipper(Client("xaat-close-during-write-1", url=closed_port_url()), "slow-disk",
                spool_dir=str(tmp_path), max_retries=0, retry_backoff=0.001, flush_interval=60)
    # the flusher's spool, its disk write slowed to race close().
    spool = s._flusher.spool  # noqa: SLF001
    assert spool is not None
    real = spool.write_file
    entered, release = threading.Event(), threading.Event()

    def slow_write(path: str, data: bytes, sync: bool = True) -> None:
        entered.set()
        release.wait(10)  # the disk answers once the closing thread took over
        real(path, data, sync)

    spool.write_file = slow_write  # type: ignore[method-assign]
    ledger = s.intake  # the ledger (its abandoned flag)
    releaser = threading.Thread(
        target=lambda: (wait_until(lambda: ledger.abandoned, timeout=10), release.set()),
        daemon=True)
    releaser.start()
    try:
        for i in range(50):
            s.submit({"i": i})
        threading.Thread(target=s.flush, args=(5,), daemon=True).start()
        assert entered.wait(5), "the flusher never wrote to the spool"
        s.close(0.3)
        st = s.stats()
    finally:
        release.set()
        releaser.join(10)
    on_disk = sum(len(decode_file(p.read_bytes())) for p in tmp_path.rglob("*.spool"))
    assert on_disk == 50, st
    assert (st.spooled, st.dropped_shutdown, st.dropped) == (50, 0, 0), st
    assert balanced(st)
    assert "undelivered" not in capfd.readouterr().err
