"""The engine: batching, order, bounds, retries, flush/close semantics, accounting."""

from __future__ import annotations

import gzip
import threading
import time
from dataclasses import fields

import pytest
from helpers import TOKEN, balanced, closed_port_url, run_in_threads, wait_until

from loghandler import AuthenticationError, Client, ConfigurationError, Shipper, Stats
from loghandler._config import ShipperOptions
from loghandler._engine.events import SIZE
from loghandler._engine.ledger import Count, Fate, Ledger
from loghandler.testing import MemoryTransport


def make(url: str, **options) -> Shipper:
    options.setdefault("flush_interval", 0.05)
    options.setdefault("retry_backoff", 0.01)
    return Shipper(Client(TOKEN, url=url), "ds", **options)


def flushers(dataset: str) -> list[threading.Thread]:
    """The live flusher threads of the shippers of ``dataset`` (their name says it)."""
    return [t for t in threading.enumerate() if t.name == f"loghandler-flusher:{dataset}"]


class TestBatching:
    def test_batches_are_cut_by_count(self, receiver):
        """No request carries more than batch_size events; all arrive."""
        s = make(receiver.url, batch_size=10)
        for i in range(35):
            assert s.submit({"i": i})
        assert s.flush(5)
        assert [r["events"] for r in receiver.requests][-1] <= 10
        assert all(r["events"] <= 10 for r in receiver.requests)
        assert sum(r["events"] for r in receiver.requests) == 35
        assert s.stats().batches == len(receiver.requests) >= 4
        s.close()

    def test_batches_are_cut_by_encoded_bytes(self, receiver):
        """The uncompressed body never exceeds max_batch_bytes."""
        s = make(receiver.url, max_batch_bytes=1000, compression=None)
        for i in range(100):
            s.submit({"i": i, "pad": "x" * 80})
        assert s.flush(5)
        assert max(r["bytes"] for r in receiver.requests) <= 1000
        assert len(receiver.events) == 100
        s.close()

    def test_interval_sends_without_flush(self, receiver):
        """A lone event goes out after flush_interval, with no flush() call."""
        s = make(receiver.url, flush_interval=0.05)
        s.submit({"lonely": True})
        assert receiver.wait_requests(1, timeout=5)
        assert receiver.events == [{"lonely": True}]
        s.close()

    def test_order_is_kept(self, receiver):
        """Events arrive in submission order across many batches."""
        s = make(receiver.url, batch_size=7)
        for i in range(1000):
            s.submit({"seq": i})
        assert s.flush(10)
        assert [e["seq"] for e in receiver.events] == list(range(1000))
        s.close()

    def test_event_larger_than_a_batch_is_dropped_and_counted(self, receiver):
        """One event over max_batch_bytes is dropped (too_large); its neighbours are delivered."""
        s = make(receiver.url, max_batch_bytes=500, compression=None)
        s.submit({"n": 1})
        s.submit({"big": "y" * 1000})
        s.submit({"n": 2})
        assert s.flush(5) is False
        st = s.stats()
        assert st.dropped_too_large == 1 and st.delivered == 2
        assert receiver.events == [{"n": 1}, {"n": 2}]
        s.close()

    def test_gzip_by_default(self, receiver):
        """Bodies are gzip-compressed with Content-Encoding: gzip unless compression=None."""
        s = make(receiver.url)
        s.submit({"msg": "hello " * 50})
        assert s.flush(5)
        assert receiver.requests[0]["headers"].get("Content-Encoding") == "gzip"
        assert receiver.requests[0]["wire_bytes"] < receiver.requests[0]["bytes"]
        s.close()
        s2 = make(receiver.url, compression=None)
        s2.submit({"msg": "x"})
        assert s2.flush(5)
        assert "Content-Encoding" not in receiver.requests[-1]["headers"]
        s2.close()

    def test_gzip_body_is_valid_gzip(self, receiver):
        """The compressed body is a gzip stream of the JSON array."""
        captured = []
        receiver.server.clear()
        from werkzeug import Response

        receiver.server.expect_request(
            receiver.prefix + "/v1/datasets/ds/ingest").respond_with_handler(
            lambda r: captured.append(r.get_data()) or Response("{}", 200))
        s = make(receiver.url)
        s.submit({"a": 1})
        assert s.flush(5)
        assert gzip.decompress(captured[0]) == b'[{"a":1}]'
        s.close()


class TestSubmit:
    def test_non_json_values_are_made_safe(self, receiver):
        """datetime, sets, objects and cycles in a submitted event never break a batch."""
        import datetime

        cyc: list = []
        cyc.append(cyc)
        s = make(receiver.url)
        s.submit({"when": datetime.datetime(2026, 1, 2, 3, 4, 5), "tags": {"a"},
                  "obj": object(), "cyc": cyc, "nan": float("nan")})
        assert s.flush(5)
        ev = receiver.events[0]
        assert ev["when"] == "2026-01-02T03:04:05"
        assert ev["tags"] == ["a"] and ev["nan"] is None and ev["cyc"] == ["<cycle>"]
        assert ev["obj"].startswith("<object object")
        s.close()

    def test_submit_copies_the_event(self, receiver):
        """Changing the dict after submit() does not change what is sent."""
        s = make(receiver.url)
        ev = {"v": 1}
        s.submit(ev)
        ev["v"] = 2
        assert s.flush(5)
        assert receiver.events == [{"v": 1}]
        s.close()

    def test_invalid_event_is_counted(self, receiver):
        """A non-mapping is dropped with reason invalid, never raised."""
        s = make(receiver.url)
        assert s.submit("not a dict") is False  # type: ignore[arg-type]
        st = s.stats()
        assert st.dropped_invalid == 1 and st.submitted == 1 and balanced(st)
        s.close()

    def test_submit_after_close_is_dropped(self, receiver):
        """Events after close() are counted as dropped_closed."""
        s = make(receiver.url)
        s.close()
        assert s.submit({"late": 1}) is False
        assert s.stats().dropped_closed == 1

    def test_unknown_option_is_a_configuration_error(self, receiver):
        """A typo in an option names the option and suggests the right one."""
        with pytest.raises(ConfigurationError, match="batch_size"):
            make(receiver.url, batch_sise=3)
        with pytest.raises(ConfigurationError, match="overflow"):
            make(receiver.url, overflow="explode")
        with pytest.raises(ConfigurationError, match="batch_size"):
            make(receiver.url, batch_size=0)

    def test_no_thread_before_first_submit(self):
        """The flusher thread starts lazily, as a daemon, and ends with close()."""
        s = Shipper(dataset="lazy-start", transport=MemoryTransport(), flush_interval=0.05)
        assert flushers("lazy-start") == []
        s.submit({"a": 1})
        assert [t.daemon for t in flushers("lazy-start")] == [True]
        s.close()
        assert flushers("lazy-start") == []


class TestBounds:
    @pytest.mark.parametrize("policy", ["drop_oldest", "drop_newest", "block"])
    def test_dead_server_overflow_counts_exactly(self, policy):
        """With nothing listening, the queue holds max_queue_size and drops are exact."""
        s = make(closed_port_url(), max_queue_size=100, overflow=policy, block_timeout=0.001,
                 flush_interval=60, batch_size=1000, max_retries=0)
        accepted = sum(s.submit({"i": i}) for i in range(1000))
        st = s.stats()
        assert st.submitted == 1000
        assert st.dropped_queue_full == 900 and st.queued == 100 and balanced(st)
        assert accepted == (1000 if policy == "drop_oldest" else 100)
        s.close(timeout=1)
        st = s.stats()
        assert st.queued == 0 and st.delivered == 0 and balanced(st)

    def test_event_over_the_batch_limit_is_refused_at_submit(self, receiver):
        """An event that could never be sent (over max_batch_bytes, under max_queue_bytes) is
        counted dropped_too_large when submitted: it pushes no queued event out."""
        s = make(receiver.url, max_batch_bytes=4000, max_queue_bytes=20_000, flush_interval=60,
                 batch_size=1000, overflow="drop_oldest")
        # Nine events of about 860 estimated bytes: under the flusher's wake-up (twice
        # max_batch_bytes), so they stay queued; the big one would need the room of all nine.
        for i in range(9):
            assert s.submit({"i": i, "pad": "p" * 300})
        assert s.submit({"big": "x" * 15_000}) is False
        st = s.stats()
        assert st.dropped_too_large == 1 and st.dropped_queue_full == 0 and st.queued == 9
        assert balanced(st)
        assert s.flush(5) is False  # an event submitted before the call was not delivered
        assert [e["i"] for e in receiver.events] == list(range(9))
        assert s.submit({"i": 9}) and s.flush(5) is True  # told once
        s.close()

    def test_event_estimated_over_the_batch_limit_but_small_is_sent(self, receiver):
        """The check is on a lower bound of the encoded size, not on the memory estimate: many
        small fields (a large estimate, a small JSON) still go."""
        s = make(receiver.url, max_batch_bytes=1000, batch_size=1000, compression=None)
        event = {f"k{i}": i for i in range(30)}  # estimate > 2,000; JSON about 300 bytes
        assert s.submit(event)
        assert s.flush(5) is True and receiver.events == [event]
        s.close()

    def test_drop_oldest_keeps_the_newest(self, receiver):
        """drop_oldest delivers the last max_queue_size events."""
        s = make(receiver.url, max_queue_size=10, flush_interval=60, batch_size=1000)
        for i in range(50):
            s.submit({"i": i})
        assert s.flush(5) is True  # what was queued at the call was delivered
        assert [e["i"] for e in receiver.events] == list(range(40, 50))
        assert s.stats().dropped_queue_full == 40
        s.close()

    def test_queue_byte_bound_is_respected(self):
        """The estimated bytes held never exceed max_queue_bytes."""
        s = make(closed_port_url(), max_queue_bytes=20_000, flush_interval=60, batch_size=10_000,
                 overflow="drop_newest")
        for i in range(1000):
            s.submit({"i": i, "text": "z" * 100})
            # What is queued (the fast path's unaccounted tail included) stays in bounds.
            assert sum(item[SIZE] for item in s.intake.queue) <= 20_000
        st = s.stats()
        assert 0 < st.queued < 1000 and st.dropped_queue_full == 1000 - st.queued
        s.close(timeout=0.5)

    @pytest.mark.parametrize("overflow", ["drop_oldest", "drop_newest"])
    def test_bounds_and_accounting_hold_under_many_threads(self, overflow):
        """Eight threads appending without a lock: the queue stays within its bounds (give or
        take one event per thread racing at the same instant), and every event is accounted."""
        s = make(closed_port_url(), max_queue_size=500, max_queue_bytes=100_000,
                 flush_interval=60, batch_size=10_000, overflow=overflow)
        peak = [0, 0]

        def work(t: int) -> None:
            for i in range(5000):
                s.submit({"t": t, "i": i, "text": "z" * (i % 300)})
                if i % 50 == 0:
                    items = list(s.intake.queue)
                    peak[0] = max(peak[0], len(items))
                    peak[1] = max(peak[1], sum(item[SIZE] for item in items))

        run_in_threads(work, 8)
        st = s.stats()
        assert st.submitted == 40_000 and balanced(st)
        assert st.queued == len(s.intake.queue) and st.dropped_queue_full == 40_000 - st.queued
        assert peak[0] <= 500 + 8 and peak[1] <= 100_000 + 8 * 1_000
        assert s.intake.queued_bytes() == sum(item[SIZE] for item in s.intake.queue)
        s.close(timeout=0.5)

    def test_block_waits_for_room_then_proceeds(self, receiver):
        """overflow=block waits (bounded) for the flusher instead of dropping."""
        s = make(receiver.url, max_queue_size=5, overflow="block", block_timeout=5,
                 batch_size=5)
        for i in range(200):
            assert s.submit({"i": i})
        assert s.flush(5)
        assert len(receiver.events) == 200 and s.stats().dropped == 0
        s.close()


class TestRetries:
    def test_5xx_then_success(self, receiver):
        """500, 500, 200: delivered once, two retries counted."""
        receiver.script = [500, 500]
        s = make(receiver.url)
        s.submit({"a": 1})
        assert s.flush(5)
        st = s.stats()
        assert st.delivered == 1 and st.retried == 2 and len(receiver.events) == 1
        s.close()

    def test_retries_are_bounded(self, receiver, capfd):
        """max_retries=2 means at most 3 requests for a batch, then failed with a reason."""
        receiver.script = [503] * 10
        s = make(receiver.url, max_retries=2)
        s.submit({"a": 1})
        assert s.flush(5) is False
        st = s.stats()
        assert len(receiver.requests) == 3
        assert st.failed_retries_exhausted == 1 and balanced(st)
        err = capfd.readouterr().err
        assert "after 3 attempts" in err and TOKEN not in err
        s.close()

    def test_retry_after_pauses_sending(self, receiver):
        """429 with Retry-After: 1 -> no request before a second has passed."""
        receiver.script = [(429, {"Retry-After": "1"})]
        s = make(receiver.url)
        s.submit({"a": 1})
        t0 = time.monotonic()
        assert s.flush(10)
        assert time.monotonic() - t0 >= 0.95
        assert len(receiver.requests) == 2 and s.stats().retried == 1
        s.close()

    def test_413_splits_the_batch(self, receiver):
        """413 halves the batch until the service takes it; nothing lost or duplicated."""
        receiver.script = [413, 413]
        s = make(receiver.url, flush_interval=60)
        for i in range(8):
            s.submit({"i": i})
        assert s.flush(5)
        assert [e["i"] for e in receiver.events] == list(range(8))
        assert [r["events"] for r in receiver.requests][:3] == [8, 4, 2]
        s.close()

    def test_400_bisects_to_the_rejected_event(self, receiver):
        """400 on a batch of 4 then on the half holding the bad event: only it fails."""
        # [0..3] -> 400; [0,1] -> 200; [2,3] -> 400; [2] -> 400 (bad); [3] -> 200
        receiver.script = [400, 200, 400, 400, 200]
        s = make(receiver.url, flush_interval=60)
        for i in range(4):
            s.submit({"i": i})
        assert s.flush(5) is False
        st = s.stats()
        assert st.failed_rejected == 1 and st.delivered == 3 and balanced(st)
        assert [e["i"] for e in receiver.events] == [0, 1, 3]
        s.close()

    def test_403_reported_once_and_paused(self, receiver, capfd):
        """403: AuthenticationError to on_error, one stderr line, then a long pause."""
        errors = []
        receiver.script = [403] * 5
        s = make(receiver.url, on_error=errors.append, auth_retry_delay=30)
        s.submit({"a": 1})
        assert s.flush(5) is False
        s.submit({"b": 2})
        assert s.flush(0.3) is False  # paused: the second batch waits, no request is made
        assert len(receiver.requests) == 1
        assert isinstance(errors[0], AuthenticationError)
        s.close(timeout=0.2)
        st = s.stats()
        assert st.failed_auth == 1 and st.dropped_shutdown == 1 and balanced(st)
        err = capfd.readouterr().err
        assert err.count("refused the token") == 1 and TOKEN not in err

    def test_404_names_the_dataset(self, receiver, capfd):
        """A missing dataset is one clear line naming it; not retried."""
        receiver.server.expect_request(
            receiver.prefix + "/v1/datasets/nope/ingest").respond_with_json(
            {"message": "dataset not found"}, status=404)
        s = Shipper(Client(TOKEN, url=receiver.url), "nope", flush_interval=0.05)
        for i in range(3):
            s.submit({"i": i})
        assert s.flush(5) is False
        assert s.stats().failed_not_found == 3
        err = capfd.readouterr().err
        assert err == ("loghandler: dataset 'nope': the service has no such dataset (HTTP 404): "
                       "create it (loghandler datasets create nope) or check the name and url=\n")
        s.close()


class TestFlushClose:
    def test_flush_on_empty_is_true(self, receiver):
        """Nothing queued: flush() is True at once."""
        s = make(receiver.url)
        assert s.flush(0) is True
        s.close()

    def test_flush_times_out_on_dead_server(self):
        """flush(timeout) returns False by the deadline when nothing can be delivered."""
        s = make(closed_port_url(), max_retries=100, retry_backoff=0.05)
        s.submit({"a": 1})
        t0 = time.monotonic()
        assert s.flush(0.3) is False
        assert time.monotonic() - t0 < 1.5
        s.close(timeout=0.2)

    def test_close_is_bounded_and_idempotent(self):
        """close() on a dead server returns within its timeout; a second close is instant."""
        s = Shipper(Client(TOKEN, url=closed_port_url()), "close-bounded", max_retries=100,
                    retry_backoff=0.5, flush_interval=0.05)
        for i in range(10):
            s.submit({"i": i})
        t0 = time.monotonic()
        s.close(timeout=0.5)
        assert time.monotonic() - t0 < 1.5
        st = s.stats()
        assert st.queued == 0 and st.dropped_shutdown == 10 and balanced(st)
        t0 = time.monotonic()
        s.close()
        assert time.monotonic() - t0 < 0.1
        assert flushers("close-bounded") == []

    @pytest.mark.parametrize("timeout, named", [
        (0.1, "after close()'s timeout (0.1 s): give close() more time"),
        (None, "after shutdown_timeout (0.3 s): raise shutdown_timeout")])
    def test_close_names_the_timeout_in_force(self, capfd, timeout, named):
        """Issue 35.9: close(0.1) said "after shutdown_timeout (5 s)"; the line names the bound
        that ended the close, and what to do about that one."""
        s = Shipper(Client(TOKEN, url=closed_port_url()), "named", max_retries=100,
                    retry_backoff=30, max_retry_delay=30, shutdown_timeout=0.3)
        for i in range(10):
            s.submit({"i": i})
        assert s.flush(0.2) is False  # refused, now waiting out a long backoff
        s.close(timeout)
        st = s.stats()
        assert st.dropped_shutdown == 10 and balanced(st)
        lines = [x for x in capfd.readouterr().err.splitlines() if "closed" in x]
        assert lines == [f"loghandler: dataset 'named': closed (close() or a logging reload) "
                         f"with 10 events undelivered {named}"], lines

    def test_close_interrupts_backoff(self):
        """A long backoff sleep is cut short by close()."""
        s = make(closed_port_url(), max_retries=5, retry_backoff=30, max_retry_delay=30)
        s.submit({"a": 1})
        assert s.flush(0.2) is False  # now sleeping in backoff
        t0 = time.monotonic()
        s.close(timeout=0.3)
        assert time.monotonic() - t0 < 1.0

    def test_flush_from_on_error_does_not_deadlock(self, receiver):
        """A callback on the flusher thread calling flush() returns instead of waiting forever."""
        results = []
        receiver.script = [404]
        s: Shipper
        s = make(receiver.url, on_error=lambda e: results.append(s.flush(5)))
        s.submit({"a": 1})
        s.flush(5)
        assert results == [False]
        s.close()

    def test_many_threads_exactly_once(self, receiver):
        """8 threads x 2,500 events: every one delivered exactly once."""
        s = make(receiver.url, batch_size=500)

        def work(t: int) -> None:
            for i in range(2500):
                s.submit({"t": t, "i": i})

        run_in_threads(work)
        assert s.flush(20)
        keys = {(e["t"], e["i"]) for e in receiver.events}
        assert len(receiver.events) == 20000 and len(keys) == 20000
        st = s.stats()
        assert st.delivered == 20000 and balanced(st)
        s.close()

    def test_stats_is_frozen(self, receiver):
        """stats() is an immutable snapshot."""
        s = make(receiver.url)
        st = s.stats()
        with pytest.raises(AttributeError):
            st.delivered = 5  # type: ignore[misc]
        s.close()

    def test_repr_hides_token(self, receiver):
        """No token in the shipper's or client's repr."""
        s = make(receiver.url)
        assert TOKEN not in repr(s) and TOKEN not in repr(s.client)
        s.close()


class TestBlockWhilePaused:
    def test_block_gives_up_at_once_when_sending_is_paused(self, receiver):
        """overflow=block does not hold the application while a 403 pause runs."""
        receiver.script = [403]
        s = make(receiver.url, max_queue_size=2, overflow="block", block_timeout=30,
                 auth_retry_delay=60, batch_size=1)
        s.submit({"a": 1})
        assert s.flush(5) is False  # 403: sending now paused for 60 s
        t0 = time.monotonic()
        results = [s.submit({"i": i}) for i in range(5)]
        assert time.monotonic() - t0 < 5  # not 30 s per call
        assert results == [True, True, False, False, False]
        st = s.stats()
        assert st.dropped_queue_full == 3 and balanced(st)
        s.close(timeout=0.1)


class TestSelfHealing:
    def test_a_dead_flusher_is_restarted_by_the_next_batch(self, capfd):
        """If the flusher thread ever dies (here: a BaseException out of the transport), the
        batch it held is counted, it says so, and the next full batch starts a new one."""

        class Crash(BaseException):
            """Not an Exception: nothing on the flusher's way catches it but its loop."""

        def answer(request):
            if request.events[0]["i"] == 0:
                raise Crash("scripted")
            return 200

        transport = MemoryTransport(answer)
        s = Shipper(dataset="self-heal", transport=transport, batch_size=5, flush_interval=60)
        for i in range(5):
            s.submit({"i": i})
        assert s.flush(5) is False  # the flusher died on them: counted, never delivered
        assert s.stats().dropped_invalid == 5
        assert wait_until(lambda: not flushers("self-heal")), "the dead flusher is still alive"
        for i in range(5, 11):  # the 6th is past a full batch: the slow path checks the thread
            s.submit({"i": i})
        assert len(flushers("self-heal")) == 1
        assert s.flush(5)
        assert [e["i"] for e in transport.events()] == list(range(5, 11))
        assert balanced(s.stats())
        s.close()
        assert capfd.readouterr().err == (
            "loghandler: dataset 'self-heal': the background thread stopped on an internal "
            "error (Crash: scripted), losing 5 events (stats().dropped_invalid): please report "
            "it\nloghandler: dataset 'self-heal': delivering again\n")
        s.close()


class TestLedger:
    def test_counters_are_the_stats_fields(self):
        """One Count member per Stats counter (queued is computed): no name built from parts."""
        assert {c.value for c in Count} == {f.name for f in fields(Stats)} - {
            "queued", "spool_unsynced"}
        assert all(f.total.value in ("delivered", "spooled", "dropped", "failed", "unconfirmed")
                   for f in Fate)

    def test_take_and_settle_keep_the_invariant(self):
        """Events taken are queued (in flight) until settled; settled_through follows."""
        ledger = Ledger(ShipperOptions(batch_size=4), lambda: None)
        for i in range(6):
            assert ledger.put({"i": i, SIZE: 10}, 10)
        items = ledger.take(4, partial=False)
        assert [e["i"] for e in items] == [0, 1, 2, 3]
        assert ledger.snapshot().queued == 6
        ledger.settle(3, Fate.DELIVERED)
        assert ledger.settled_through() == 3
        ledger.settle(1, Fate.FAILED_REJECTED)
        st = ledger.snapshot()
        assert (st.submitted, st.delivered, st.failed_rejected, st.queued) == (6, 3, 1, 2)
        assert ledger.take(4, partial=False) is None  # less than a batch
        assert len(ledger.drain()) == 2 and balanced(ledger.snapshot())
