"""spilling.py: what cannot be delivered, through a ``MemoryTransport``: counted without a
spool; with one, spooled when the outcome allows it (and later replayed, counted), taken over
from a stuck flusher at the close deadline."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from helpers import balanced, wait_until

from loghandler import Shipper, Stats, TransportError
from loghandler.testing import MemoryTransport, SentRequest

FAST = {"flush_interval": 0.05, "retry_backoff": 0.001, "max_retry_delay": 0.002,
        "max_retries": 1}


def ship(transport: MemoryTransport, n: int, spool: Path | None = None,
         **options: Any) -> Stats:
    """Ship events 0..n-1 through ``transport``, flush, close: the final stats."""
    s = Shipper(dataset="ds", transport=transport, spool_dir=None if spool is None
                else str(spool), **{**FAST, **options})
    for i in range(n):
        s.submit({"i": i})
    s.flush(5)
    s.close()
    st = s.stats()
    assert balanced(st), st
    return st


def test_without_a_spool_what_cannot_be_delivered_is_counted() -> None:
    st = ship(MemoryTransport(lambda request: 404), 5)
    assert (st.failed_not_found, st.spooled, st.delivered) == (5, 0, 0)


def test_a_configuration_mistake_waits_on_disk_and_is_replayed(tmp_path: Path) -> None:
    """404 (a dataset not created yet) with a spool: the batch is spooled; a later shipper
    (the next process) replays it, oldest first, counted in replayed."""
    st = ship(MemoryTransport(lambda request: 404), 5, tmp_path)
    assert (st.spooled, st.failed) == (5, 0)
    later = MemoryTransport()
    s = Shipper(dataset="ds", transport=later, spool_dir=str(tmp_path), **FAST)
    try:
        # Files wait: the flusher starts with the shipper and replays them.
        assert wait_until(lambda: s.stats().replayed == 5), "the spool was not replayed"
    finally:
        s.close()
    assert [e["i"] for e in later.events()] == list(range(5))


def test_what_no_retry_can_fix_is_not_spooled(tmp_path: Path) -> None:
    """A rejected event (400) would be rejected again: counted, not spooled."""
    st = ship(MemoryTransport([400]), 1, tmp_path)
    assert (st.failed_rejected, st.spooled) == (1, 0)


def test_an_outage_goes_to_disk(tmp_path: Path) -> None:
    """No answer at all: once the retries are spent, to the spool, nothing lost."""

    def down(request: SentRequest) -> Any:
        raise TransportError("connection refused (scripted)")

    st = ship(MemoryTransport(down), 20, tmp_path)
    assert (st.spooled, st.failed, st.dropped) == (20, 0, 0)


def test_replay_counts_what_the_service_turns_down(tmp_path: Path) -> None:
    ship(MemoryTransport(lambda request: 503), 4, tmp_path, max_retries=0)
    status = {"ingested": 3, "failed": 1, "failures": [{"error": "bad"}]}
    later = MemoryTransport([(200, {}, status)])
    s = Shipper(dataset="ds", transport=later, spool_dir=str(tmp_path), **FAST)
    try:
        assert wait_until(lambda: s.stats().replayed == 3), "the spool was not replayed"
        assert s.stats().replay_rejected == 1
    finally:
        s.close()


def test_a_request_stuck_at_the_close_deadline_is_spooled(tmp_path: Path) -> None:
    """The service never answers: at the close deadline, the events held by the stuck
    flusher go to the spool (counted spooled), to be replayed by the next process."""
    arrived, opened = threading.Event(), threading.Event()

    def stuck(request: SentRequest) -> Any:
        arrived.set()
        opened.wait(30)
        return 200

    s = Shipper(dataset="ds", transport=MemoryTransport(stuck), spool_dir=str(tmp_path),
                **{**FAST, "flush_interval": 60})
    try:
        for i in range(5):
            s.submit({"i": i})
        threading.Thread(target=s.flush, args=(5,), daemon=True).start()
        assert arrived.wait(5), "the flusher never sent the batch"
        s.close(0.3)
        st = s.stats()
    finally:
        opened.set()
    assert (st.spooled, st.dropped_shutdown) == (5, 0) and balanced(st)
    later = MemoryTransport()
    again = Shipper(dataset="ds", transport=later, spool_dir=str(tmp_path), **FAST)
    try:
        assert wait_until(lambda: again.stats().replayed == 5), "the spool was not replayed"
    finally:
        again.close()
    assert [e["i"] for e in later.events()] == list(range(5))
