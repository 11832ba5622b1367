"""The shipper against a receiver that misbehaves on purpose, with exact accounting.

Every test ends with ``check_accounting``: submitted == delivered + dropped + failed + spooled +
queued, every drop and failure has a reason, and delivered == the distinct events the server
stored (duplicates only from requests whose outcome the client could not know).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from faultserver import (
    TOKEN,
    FaultServer,
    Front,
    check_accounting,
    closed_idle,
    half_response,
    hang_up,
    reset,
    retry_after,
    retry_after_date,
    sleep,
    status,
)
from helpers import run_in_threads, wait_until

BOTH = pytest.mark.parametrize("kind", ["handler", "processor"])


@pytest.fixture
def make(make_front: Any) -> Any:
    """conftest's make_front, by this file's short name."""
    return make_front


def _emit(front: Front, ids: range, **fields: Any) -> None:
    for i in ids:
        front.emit(i, **fields)


class TestStatuses:
    @BOTH
    def test_5xx_twice_then_ok(self, kind: str, make: Any) -> None:
        """500, 500, 200: the batch is retried twice and delivered once."""
        with FaultServer([status(500), status(500)]) as srv:
            front = make(kind, srv)
            _emit(front, range(50))
            assert front.flush(10)
            front.close()
            s = front.stats()
            assert s.delivered == 50 and s.retried == 2 and s.failed == 0
            assert srv.outcomes() == ["500", "500", "200"]
            assert srv.stored() == list(range(50))
            check_accounting(s, srv)

    @BOTH
    def test_429_retry_after_seconds(self, kind: str, make: Any) -> None:
        """429 with Retry-After: 1: no request arrives before that second has passed."""
        with FaultServer([retry_after(1)]) as srv:
            front = make(kind, srv)
            _emit(front, range(20))
            assert front.flush(10)
            first, second = srv.requests
            assert first.outcome == "429-seconds" and first.answered is not None
            assert second.arrived - first.answered >= 1.0
            s = front.stats()
            assert s.delivered == 20 and s.retried == 1
            check_accounting(s, srv)

    def test_429_retry_after_date(self, make: Any) -> None:
        """429 with Retry-After as an HTTP date: the retry waits until that date."""
        with FaultServer([retry_after_date(1)]) as srv:
            front = make("handler", srv)
            _emit(front, range(20))
            assert front.flush(10)
            first, second = srv.requests
            assert first.retry_at_wall is not None
            # Wall clock on both sides; a little slack for rounding inside time.time().
            assert second.arrived_wall >= first.retry_at_wall - 0.01
            assert srv.stored() == list(range(20))
            check_accounting(front.stats(), srv)

    def test_429_without_retry_after(self, make: Any) -> None:
        """429 without Retry-After: retried after the ordinary backoff."""
        with FaultServer([retry_after(None), retry_after(None)]) as srv:
            front = make("handler", srv)
            _emit(front, range(20))
            assert front.flush(10)
            s = front.stats()
            assert s.delivered == 20 and s.retried == 2
            assert srv.outcomes() == ["429", "429", "200"]
            check_accounting(s, srv)

    @BOTH
    def test_413_splits_down_and_drops_one_too_large_event(self, kind: str, make: Any) -> None:
        """413: batches are halved until they fit; an event too big alone is dropped_too_large."""
        limit = 2000
        with FaultServer(max_body=limit) as srv:
            front = make(kind, srv)
            _emit(front, range(0, 20))
            front.emit(999, blob="x" * 5000)
            _emit(front, range(20, 40))
            assert not front.flush(10)  # one event was dropped
            s = front.stats()
            assert s.dropped_too_large == 1 and s.dropped == 1
            assert s.delivered == 40 and s.failed == 0
            assert srv.stored() == list(range(40))
            assert "413" in srv.outcomes()
            assert all(r.body_bytes <= limit for r in srv.requests if r.stored)
            check_accounting(s, srv)

    @BOTH
    def test_400_poison_event_is_isolated(self, kind: str, make: Any) -> None:
        """400 for a poisoned batch: bisected to the bad events; the rest delivered in order."""
        poison = {7, 33, 34}
        with FaultServer() as srv:
            front = make(kind, srv)
            for i in range(60):
                if i in poison:
                    front.emit(i, poison=True)
                else:
                    front.emit(i)
            assert not front.flush(10)
            s = front.stats()
            assert s.failed_rejected == len(poison) and s.failed == len(poison)
            assert s.delivered == 60 - len(poison)
            assert srv.stored() == [i for i in range(60) if i not in poison]
            check_accounting(s, srv)

    @BOTH
    def test_403_fails_auth_and_says_so_once(self, kind: str, make: Any,
                                             capfd: pytest.CaptureFixture[str]) -> None:
        """403: every batch counted failed_auth, not retried; one stderr line; no token."""
        denied = status(403, {"message": "invalid token"})
        with FaultServer(default=denied) as srv:
            front = make(kind, srv, batch_size=10, auth_retry_delay=0.01)
            _emit(front, range(50))
            assert not front.flush(10)
            front.close()
            s = front.stats()
            assert s.failed_auth == 50 and s.delivered == 0 and s.retried == 0
            assert srv.outcomes() == ["403"] * 5
            check_accounting(s, srv)
        err = capfd.readouterr().err
        lines = [line for line in err.splitlines() if line.startswith("loghandler:")]
        assert len(lines) == 1, err
        assert "403" in lines[0] and "invalid token" in lines[0]
        assert TOKEN not in err


class TestDeadServer:
    @pytest.mark.parametrize("policy", ["drop_oldest", "drop_newest"])
    @pytest.mark.parametrize("kind", ["handler", "processor"])
    def test_overflow_counts_exactly(self, kind: str, policy: str, make: Any) -> None:
        """Closed port, queue of 100, 1000 events: 900 dropped_queue_full, 100 dropped_shutdown."""
        srv = FaultServer().start()
        srv.stop()  # the port is closed now: connections are refused
        # Retries never run out here, so the close deadline is what ends the attempts.
        front = make(kind, srv, max_queue_size=100, overflow=policy, max_retries=1000)
        _emit(front, range(1000))
        s = front.stats()
        assert s.dropped_queue_full == 900 and s.queued == 100
        started = time.monotonic()
        front.close(timeout=0.3)
        assert time.monotonic() - started < 2.0
        s = front.stats()
        assert s.dropped_queue_full == 900 and s.dropped_shutdown == 100
        assert s.delivered == 0 and s.queued == 0
        check_accounting(s, srv)

    @pytest.mark.parametrize(("policy", "kept"), [("drop_oldest", range(900, 1000)),
                                                  ("drop_newest", range(100))])
    def test_overflow_keeps_the_right_events(self, policy: str, kept: range, make: Any) -> None:
        """drop_oldest keeps the newest 100 events, drop_newest the first 100."""
        srv = FaultServer().start()
        srv.stop()
        front = make("handler", srv, max_queue_size=100, overflow=policy)
        _emit(front, range(1000))
        srv.start()  # same port
        try:
            assert front.flush(10)
            assert srv.stored() == list(kept)
            check_accounting(front.stats(), srv)
        finally:
            srv.stop()

    def test_block_gives_up_after_block_timeout(self, make: Any) -> None:
        """overflow="block" against a dead server: each submit waits block_timeout, then drops."""
        srv = FaultServer().start()
        srv.stop()
        front = make("handler", srv, max_queue_size=10, overflow="block", block_timeout=0.01,
                     max_retries=1000)
        started = time.monotonic()
        _emit(front, range(100))
        elapsed = time.monotonic() - started
        assert 90 * 0.01 <= elapsed < 10
        front.close(timeout=0.3)
        s = front.stats()
        assert s.dropped_queue_full == 90 and s.dropped_shutdown == 10 and s.delivered == 0
        check_accounting(s, srv)

    def test_block_loses_nothing_when_the_server_keeps_up(self, make: Any) -> None:
        """overflow="block" with a slow-to-drain queue: producers wait, nothing is dropped."""
        with FaultServer() as srv:
            front = make("handler", srv, max_queue_size=10, batch_size=10, overflow="block",
                         block_timeout=5.0)
            _emit(front, range(500))
            assert front.flush(10)
            s = front.stats()
            assert s.delivered == 500 and s.dropped == 0
            assert srv.stored() == list(range(500))
            check_accounting(s, srv)

    @BOTH
    def test_down_then_back_on_the_same_port(self, kind: str, make: Any) -> None:
        """Server down, then back on the same port: everything is delivered after it returns."""
        srv = FaultServer().start()
        port = srv.port
        front = make(kind, srv, max_retries=1000)
        front.emit(-1)
        assert front.flush(10)  # a kept-alive connection now exists, and goes stale
        srv.stop()
        _emit(front, range(200))
        assert not front.flush(0.3)  # refused, refused, ...: still retrying
        # The flusher has met the closed port (and dropped the stale connection) before the
        # server returns: a condition, not 0.3 s, which a busy host may spend before the
        # flusher's first try (retried was 0 there).
        assert wait_until(lambda: front.stats().retried >= 1, 10), "no try met the closed port"
        srv.start()
        try:
            assert srv.port == port
            back = time.monotonic()
            # Once back, each try is answered: a flush that fails names the tries it saw.
            assert front.flush(10), (front.stats(), [
                (round(r.arrived - back, 3), r.outcome, r.events) for r in srv.requests])
            s = front.stats()
            assert s.delivered == 201 and s.failed == 0 and s.dropped == 0
            assert srv.stored() == [-1, *range(200)]
            check_accounting(s, srv)
        finally:
            srv.stop()


class TestBrokenConnections:
    @BOTH
    def test_time_out_then_delivered(self, kind: str, make: Any) -> None:
        """The server sleeps past the client's timeout: retried, then delivered once."""
        with FaultServer([sleep(1.0)]) as srv:
            front = make(kind, srv, timeout=0.3)
            _emit(front, range(30))
            assert front.flush(10)
            s = front.stats()
            assert s.delivered == 30 and s.retried == 1
            assert srv.stored() == list(range(30))
            check_accounting(s, srv)

    def test_time_out_until_retries_are_exhausted(self, make: Any) -> None:
        """Sleeping on every attempt: after max_retries the batch is failed_retries_exhausted."""
        with FaultServer([sleep(1.0), sleep(1.0)]) as srv:
            front = make("handler", srv, timeout=0.2, max_retries=1)
            _emit(front, range(30))
            assert not front.flush(10)
            s = front.stats()
            assert s.failed_retries_exhausted == 30 and s.retried == 1 and s.delivered == 0
            assert srv.stored() == []
            check_accounting(s, srv)

    @pytest.mark.parametrize("fault", [hang_up(), reset()], ids=["hang_up", "reset"])
    @BOTH
    def test_no_answer_is_retried(self, kind: str, fault: Any, make: Any) -> None:
        """Accept-and-close / reset mid-request, twice: retried, delivered exactly once."""
        with FaultServer([fault, fault]) as srv:
            front = make(kind, srv)
            _emit(front, range(40))
            assert front.flush(10)
            s = front.stats()
            assert s.delivered == 40 and s.retried == 2
            assert srv.stored() == list(range(40))  # nothing stored twice
            check_accounting(s, srv)

    @BOTH
    def test_a_kept_alive_connection_closed_while_idle_costs_no_retry(self, kind: str,
                                                                       make: Any) -> None:
        """The service resets a kept-alive connection as the next request goes out on it (it
        closed it while idle): the request is sent again at once on a new connection, and no
        retry is spent, since the service never answered a try. Before: counted a failed try
        (with max_retries=0 the batch failed: "gave up on 20 events after 1 attempt")."""
        with FaultServer([status(200), closed_idle()]) as srv:
            front = make(kind, srv, max_retries=0)
            front.emit(-1)
            assert front.flush(10)  # its connection is kept alive, in the pool
            _emit(front, range(20))
            assert front.flush(10)
            s = front.stats()
            assert (s.delivered, s.retried, s.failed) == (21, 0, 0)
            assert srv.outcomes() == ["200", "closed_idle", "200"]
            assert srv.accepted == 2  # the second try on a new connection
            assert srv.stored() == [-1, *range(20)]
            check_accounting(s, srv)

    @BOTH
    def test_half_response_is_retried_duplicates_bounded(self, kind: str, make: Any) -> None:
        """A 200 cut in half after the events were stored: the client cannot know, so it retries.

        Duplicates are the price of not losing anything; they are bounded by the batches whose
        outcome was unknown (check_accounting), and delivered counts each event once.
        """
        with FaultServer([half_response()]) as srv:
            front = make(kind, srv)
            _emit(front, range(40))
            assert front.flush(10)
            s = front.stats()
            assert s.delivered == 40 and s.retried == 1
            assert srv.stored() == list(range(40)) * 2
            check_accounting(s, srv)

    def test_half_response_without_storing(self, make: Any) -> None:
        """A half response from a server that stored nothing: retried, delivered once."""
        with FaultServer([half_response(store=False)]) as srv:
            front = make("handler", srv)
            _emit(front, range(40))
            assert front.flush(10)
            assert srv.stored() == list(range(40))
            check_accounting(front.stats(), srv)


class TestConcurrency:
    def test_eight_threads_ten_thousand_each(self, make: Any) -> None:
        """8 threads x 10,000 records: exactly 80,000 delivered, none twice."""
        with FaultServer(keep_field="id") as srv:
            front = make("handler", srv, flush_interval=0.05)
            start = threading.Barrier(8)

            def produce(t: int) -> None:
                start.wait()
                _emit(front, range(t * 10_000, (t + 1) * 10_000))

            run_in_threads(produce)
            assert front.flush(30)
            s = front.stats()
            ids = srv.stored()
            assert s.submitted == s.delivered == 80_000
            assert len(ids) == 80_000 and set(ids) == set(range(80_000))
            check_accounting(s, srv)

    def test_processor_from_threads_with_faults(self, make: Any) -> None:
        """The processor from 8 threads while the server fails now and then: nothing lost."""
        script = [status(500), hang_up(), status(503), reset(), retry_after(0)] * 3
        with FaultServer(script, keep_field="id") as srv:
            front = make("processor", srv, flush_interval=0.05, batch_size=200, max_retries=20)

            def produce(t: int) -> None:
                _emit(front, range(t * 2_000, (t + 1) * 2_000))

            run_in_threads(produce)
            assert front.flush(30)
            s = front.stats()
            # Each of the 15 faults was met. 500, 503 and the 429 asking 0 s spend a retry each;
            # hang_up and reset come on the connection kept alive after an answer, where they
            # look as the service's idle close does (test_a_kept_alive_connection_closed_...):
            # sent again at once on a new connection, spending none.
            assert srv.injected == {"500": 3, "hang_up": 3, "503": 3, "reset": 3,
                                    "429-seconds": 3}
            assert s.delivered == 16_000 and s.retried == 9
            assert sorted(srv.stored()) == list(range(16_000))
            check_accounting(s, srv)


class TestReporting:
    def test_repeated_rejections_are_reported_once(
        self, make: Any, capfd: pytest.CaptureFixture[str]
    ) -> None:
        """One poisoned event in each of 10 batches: one stderr line, not one per event.

        A refused event is not an outage, so delivering the rest of a batch is no "recovery"
        that re-arms the report; otherwise a recurring bad field prints a line per event.
        """
        with FaultServer() as srv:
            front = make("handler", srv, batch_size=10)
            for i in range(100):
                if i % 10 == 5:
                    front.emit(i, poison=True)
                else:
                    front.emit(i)
            assert not front.flush(10)
            s = front.stats()
            assert s.failed_rejected == 10 and s.delivered == 90
            check_accounting(s, srv)
        lines = [x for x in capfd.readouterr().err.splitlines() if x.startswith("loghandler:")]
        assert len(lines) == 1, lines

    def test_flusher_stopped_by_a_bug_accounts_for_what_it_held(
        self, capfd: pytest.CaptureFixture[str]
    ) -> None:
        """A bug that stops the flusher thread mid-batch (planted here: the transport raises
        what no transport may) must not leave the batch in flight for ever: its events are
        counted (dropped_invalid), flush() answers without waiting out its timeout, and one line
        says what happened."""
        import loghandler
        from loghandler.testing import MemoryTransport

        def broken(request: Any) -> Any:
            raise RuntimeError("planted bug")

        shipper = loghandler.Shipper(dataset="ds", transport=MemoryTransport(broken))
        for i in range(10):
            shipper.submit({"id": i})
        started = time.monotonic()
        assert shipper.flush(20) is False
        assert time.monotonic() - started < 10
        st = shipper.stats()
        shipper.close(1)
        assert st.dropped_invalid == 10 and st.delivered == 0, st
        lines = [x for x in capfd.readouterr().err.splitlines() if "internal error" in x]
        assert len(lines) == 1, lines
        assert lines[0] == ("loghandler: dataset 'ds': the background thread stopped on an "
                            "internal error (RuntimeError: planted bug), losing 10 events "
                            "(stats().dropped_invalid): please report it")


class TestDeadlines:
    @BOTH
    def test_close_is_bounded_by_a_long_retry_after(self, kind: str, make: Any) -> None:
        """429 Retry-After: 30 then close(timeout=0.5): returns in time, the batch counted
        dropped_shutdown, and no second request is sent early."""
        with FaultServer([retry_after(30)]) as srv:
            front = make(kind, srv)
            _emit(front, range(25))
            assert not front.flush(0.2)
            assert srv.wait_requests(1)
            started = time.monotonic()
            front.close(timeout=0.5)
            assert time.monotonic() - started < 1.5
            s = front.stats()
            assert s.dropped_shutdown == 25 and s.delivered == 0 and s.queued == 0
            assert len(srv.requests) == 1
            check_accounting(s, srv)

    def test_flush_timeout_holds_while_the_server_sleeps(self, make: Any) -> None:
        """flush(timeout) returns False on time while a request hangs; the batch goes later."""
        with FaultServer([sleep(1.0, then=200, store=True)]) as srv:
            front = make("handler", srv, timeout=5.0)
            _emit(front, range(10))
            started = time.monotonic()
            assert not front.flush(0.2)
            assert time.monotonic() - started < 0.7
            assert front.flush(10)
            s = front.stats()
            assert s.delivered == 10 and s.retried == 0
            assert srv.stored() == list(range(10))
            check_accounting(s, srv)
