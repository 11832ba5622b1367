"""What ships: hold-until-error, sampling, repeats, scrubbing, identity, the event's shape.

End to end over loopback (the recording receiver), with the counters of ``stats()`` checked
against the invariant under every policy; the pure parts (Selector windows, Luhn, the Scrubber)
also as tables.
"""

from __future__ import annotations

import asyncio
import logging
import logging.config
import random
import threading
from typing import Any

import pytest
import structlog
from helpers import TOKEN, Receiver

import loghandler
from loghandler import ConfigurationError, IngestProcessor, Shipper
from loghandler._encoding import encode
from loghandler._engine.identity import identity_fields
from loghandler._engine.sampling import Sampler
from loghandler._engine.shaping import REDACTED, Scrubber, Selector, luhn_ok


def invariant(st: loghandler.Stats) -> None:
    assert st.submitted == (st.delivered + st.dropped + st.failed + st.spooled + st.queued
                            + st.unconfirmed), st


def messages(handler: Any, receiver: Receiver) -> list[str]:
    assert handler.flush(timeout=5) is True
    return [e.get("message", e.get("event")) for e in receiver.events]


# ------------------------------------------------------------------ hold until error

class TestHold:
    def test_released_in_order_before_the_error(self, make_logger, receiver):
        """A context that logs an error ships its held debug/info lines first, in order."""
        log, h = make_logger(hold_level="info")
        with loghandler.context(request_id="r-1"):
            log.debug("d1")
            log.info("i1")
            log.warning("w1")  # above hold_level: ships at once
            log.error("boom")
        assert messages(h, receiver) == ["w1", "d1", "i1", "boom"]
        assert all(e["request_id"] == "r-1" for e in receiver.events)
        st = h.stats()
        assert st.delivered == 4 and st.dropped_held == 0
        invariant(st)

    def test_released_when_the_context_is_left_by_an_exception(self, make_logger, receiver):
        """Issue 44: a context left by an exception counts as one that logged an error: its
        held lines ship, in order (before: none shipped, dropped_held == 2)."""
        log, h = make_logger(hold_level="info")
        with pytest.raises(RuntimeError), loghandler.context(request_id="r-x"):
            log.debug("d1")
            log.info("i1")
            raise RuntimeError("boom")
        assert messages(h, receiver) == ["d1", "i1"]
        assert all(e["request_id"] == "r-x" for e in receiver.events)
        st = h.stats()
        assert st.delivered == 2 and st.dropped_held == 0
        invariant(st)

    def test_an_exception_releases_the_outer_contexts_lines_first(self, make_logger, receiver):
        """Left by an exception, a nested context releases what it and the contexts around
        it hold, oldest first; an exception caught inside, or a cancellation, releases
        nothing."""
        log, h = make_logger(hold_level="info")
        with loghandler.context(request_id="outer"):
            log.info("o1")
            try:
                with loghandler.context(step="inner"):
                    log.info("n1")
                    raise ValueError("x")
            except ValueError:
                pass
            log.info("o2")
        with loghandler.context(request_id="quiet"):
            try:
                raise KeyError("caught inside")
            except KeyError:
                log.info("q1")
        with pytest.raises(asyncio.CancelledError), loghandler.context(request_id="cancelled"):
            log.info("c1")
            raise asyncio.CancelledError
        assert messages(h, receiver) == ["o1", "n1"]
        st = h.stats()
        assert st.dropped_held == 3, st
        invariant(st)

    def test_the_ring_and_the_total_bound_what_is_held(self, make_logger, receiver):
        """hold_size keeps a context's newest events, hold_total bounds every context's
        together; what either pushes out is counted dropped_held, and an error releases what
        is left, oldest first. The compiled path holds the common case itself (room in a
        buffer that exists) and hands over at these bounds: a count it failed to keep would
        let n1 through, a ring it failed to test would release o0 and o1."""
        log, h = make_logger(hold_level="info", hold_size=3, hold_total=4)
        with loghandler.context(request_id="outer"):
            for i in range(5):
                log.info(f"o{i}")  # the ring keeps o2, o3, o4
            with loghandler.context(step="inner"):
                log.debug("n0")  # four held: the total
                log.info("n1")  # dropped for the total
                log.error("boom")  # releases o2, o3, o4, n0, then ships
            log.info("after")  # held anew, dropped when the context ends without an error
        assert messages(h, receiver) == ["o2", "o3", "o4", "n0", "boom"]
        st = h.stats()
        assert st.dropped_held == 4 and st.delivered == 5, st
        invariant(st)
        # Nothing is held any more: the count the compiled path updates is back to zero, so
        # a new context holds up to the total again.
        with loghandler.context(request_id="again"):
            for i in range(4):
                log.info(f"a{i}")
            log.error("second")
        assert messages(h, receiver)[5:] == ["a1", "a2", "a3", "second"]

    def test_dropped_and_counted_when_no_error(self, make_logger, receiver):
        """Without an error, the held events are dropped at the context's end, counted."""
        log, h = make_logger(hold_level="debug")
        with loghandler.context(request_id="r-2"):
            log.debug("quiet 1")
            log.debug("quiet 2")
            log.info("kept")  # above debug
        log.debug("outside any context")
        assert messages(h, receiver) == ["kept", "outside any context"]
        st = h.stats()
        assert st.dropped_held == 2 and st.dropped == 2 and st.submitted == 4
        invariant(st)
        # A chosen drop is no failure: flush() still says everything went as asked.
        assert h.flush(5) is True

    def test_held_in_contexts_still_open_at_close_are_counted(self, make_logger, receiver):
        """Issue 35.6: contexts still open when the shipper closes (on this thread and on a
        parked one) logged no error, so their held events do not ship; they are counted in
        dropped_held at close, and the account holds (before: neither shipped nor counted)."""
        log, h = make_logger(hold_level="info")
        entered, release = threading.Event(), threading.Event()

        def request() -> None:
            with loghandler.context(request_id="parked"):
                for i in range(4):
                    log.info("parked %d", i)
                entered.set()
                release.wait(10)
                log.error("after close")  # the shipper is closed: not held, dropped_closed

        t = threading.Thread(target=request)
        t.start()
        try:
            assert entered.wait(10)
            with loghandler.context(request_id="open"):
                log.info("held 1")
                log.debug("held 2")
                log.warning("shipped")
                h.close()
                log.info("after close, in the context")  # dropped_closed, not held
        finally:
            release.set()
            t.join(10)
        assert [e["message"] for e in receiver.events] == ["shipped"]
        st = h.stats()
        assert (st.dropped_held, st.dropped_closed, st.delivered, st.submitted) == (
            6, 2, 1, 9), st
        invariant(st)

    def test_held_at_exit_are_counted(self, receiver, tmp_path):
        """Through the exit hook: a context open when the process ends counts its held events
        (dropped_held, a chosen drop: the exit line names no loss)."""
        import subprocess
        import sys
        import textwrap

        code = textwrap.dedent(f"""
            import atexit, logging
            stats = []
            # Registered before loghandler's own hook, so it runs after it.
            atexit.register(lambda: print("STATS", *stats[0]()[:4], flush=True))
            import loghandler
            h = loghandler.IngestHandler("ds", token={TOKEN!r}, url={receiver.url!r},
                                         hold_level="info", shutdown_timeout=2)
            log = logging.getLogger("app")
            log.addHandler(h)
            log.setLevel(logging.DEBUG)
            s = lambda: (lambda st: (st.submitted, st.delivered, st.dropped_held,
                                     st.submitted - st.delivered - st.dropped - st.failed
                                     - st.spooled - st.queued - st.unconfirmed))(h.stats())
            stats.append(s)
            ctx = loghandler.context(request_id="r-exit")
            ctx.__enter__()
            for i in range(5):
                log.info("held %d", i)
            log.warning("shipped")
        """)
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=60, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split() == ["STATS", "6", "1", "5", "0"], (proc.stdout, proc.stderr)
        assert proc.stderr == ""
        assert [e["message"] for e in receiver.events] == ["shipped"]

    def test_ring_keeps_the_newest(self, make_logger, receiver):
        """hold_size bounds a context: the oldest held events go first, counted."""
        log, h = make_logger(hold_level="info", hold_size=3)
        with loghandler.context(request_id="r-3"):
            for i in range(10):
                log.info("step %d", i)
            log.error("failed")
        assert messages(h, receiver) == ["step 7", "step 8", "step 9", "failed"]
        st = h.stats()
        assert st.dropped_held == 7
        invariant(st)

    def test_total_bound(self, make_logger, receiver):
        """hold_total bounds all contexts together; beyond it, new events are dropped."""
        log, h = make_logger(hold_level="info", hold_total=2)
        with loghandler.context(a=1):
            for i in range(5):
                log.info("x%d", i)
            log.error("e")
        assert messages(h, receiver) == ["x0", "x1", "e"]
        assert h.stats().dropped_held == 3
        invariant(h.stats())

    def test_nested_context_hands_to_outer(self, make_logger, receiver):
        """A nested context's held events stay held by the outer one, released by its error."""
        log, h = make_logger(hold_level="info")
        with loghandler.context(request_id="r-4"):
            log.info("outer before")
            with loghandler.context(step="db"):
                log.info("inner")
            log.info("outer after")
            log.error("late error")
        assert messages(h, receiver) == ["outer before", "inner", "outer after", "late error"]

    def test_threads_keep_their_own(self, make_logger, receiver):
        """Each thread's context holds its own events: one thread's error releases only its own."""
        log, h = make_logger(hold_level="info")
        barrier = threading.Barrier(2)

        def work(name: str, fail: bool) -> None:
            with loghandler.context(worker=name):
                log.info(f"{name} step")
                barrier.wait(5)  # both hold at once
                if fail:
                    log.error(f"{name} failed")
                barrier.wait(5)

        threads = [threading.Thread(target=work, args=("a", True)),
                   threading.Thread(target=work, args=("b", False))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert sorted(messages(h, receiver)) == ["a failed", "a step"]
        assert h.stats().dropped_held == 1

    def test_asyncio_tasks_keep_their_own(self, make_logger, receiver):
        """Each asyncio task's context holds its own events."""
        log, h = make_logger(hold_level="debug")

        async def request(n: int) -> None:
            with loghandler.context(request=n):
                log.debug(f"query {n}")
                await asyncio.sleep(0)  # interleave the tasks
                if n % 2:
                    log.error(f"error {n}")

        async def main() -> None:
            await asyncio.gather(*(request(n) for n in range(4)))

        asyncio.run(main())
        got = messages(h, receiver)
        assert sorted(got) == ["error 1", "error 3", "query 1", "query 3"]
        assert got.index("query 1") < got.index("error 1")
        assert h.stats().dropped_held == 2

    def test_processor_and_submit(self, receiver):
        """IngestProcessor and Shipper.submit hold the same way."""
        proc = IngestProcessor("ds", url=receiver.url, token=TOKEN, hold_level="info")
        try:
            with loghandler.context(job="j"):
                proc(None, "info", {"event": "loading"})
                proc(None, "error", {"event": "crashed"})
            with loghandler.context(job="k"):
                proc(None, "debug", {"event": "quiet"})
            assert proc.flush(5)
            assert [e["event"] for e in receiver.events] == ["loading", "crashed"]
            assert proc.stats().dropped_held == 1
        finally:
            proc.close()
        receiver.events.clear()
        s = Shipper(loghandler.Client(url=receiver.url, token=TOKEN), "ds", hold_level="info")
        try:
            with loghandler.context(job="m"):
                s.submit({"level": "info", "message": "m1"})
            with loghandler.context(job="n"):
                s.submit({"level": "INFO", "message": "n1"})
                s.submit({"level": "error", "message": "n2"})
            assert s.flush(5)
            assert [e["message"] for e in receiver.events] == ["n1", "n2"]
            invariant(s.stats())
        finally:
            s.close()


# ------------------------------------------------------------------ sampling

class TestSampling:
    def test_by_level_exact_at_the_edges(self, make_logger, receiver):
        """Rate 0 drops every event of that level, 1 keeps every one; unlisted levels ship."""
        log, h = make_logger(sample_levels={"debug": 0.0, "info": 1.0})
        for i in range(50):
            log.debug("d%d", i)
            log.info("i%d", i)
        log.warning("w")
        got = messages(h, receiver)
        assert got == [f"i{i}" for i in range(50)] + ["w"]
        st = h.stats()
        assert st.dropped_sampled == 50
        invariant(st)

    def test_by_logger_prefix(self, make_logger, receiver):
        """sample_loggers applies to the logger and its children, not to look-alike names."""
        _, h = make_logger(sample_loggers={"shaping-noisy": 0.0})
        names = ("shaping-noisy", "shaping-noisy.lib", "shaping-noisyneighbour", "shaping-app")
        try:
            for name in names:
                lg = logging.getLogger(name)
                lg.handlers[:] = [h]
                lg.propagate = False
                lg.setLevel(logging.INFO)
                lg.info(name)
            assert messages(h, receiver) == ["shaping-noisyneighbour", "shaping-app"]
        finally:  # loggers are process-wide: leave them as they were
            for name in names:
                lg = logging.getLogger(name)
                lg.handlers[:] = []
                lg.propagate = True
                lg.setLevel(logging.NOTSET)

    def test_a_trace_stays_whole(self, receiver):
        """Events of one trace are kept or dropped together, in every shipper alike."""
        client = loghandler.Client(url=receiver.url, token=TOKEN)
        shippers = [Shipper(client, "ds", sample_levels={"info": 0.5}) for _ in range(2)]
        try:
            rng = random.Random(7)  # W3C trace ids are random 128-bit numbers
            traces = [f"{rng.getrandbits(128):032x}" for _ in range(200)]
            for s in shippers:
                for t in traces:
                    for n in range(3):
                        s.submit({"level": "info", "message": f"{t}-{n}", "trace_id": t})
                assert s.flush(5)
            by_trace: dict[str, int] = {}
            for e in receiver.events:
                by_trace[e["trace_id"]] = by_trace.get(e["trace_id"], 0) + 1
            # 3 events from each shipper: a kept trace is whole in both.
            assert set(by_trace.values()) == {6}
            assert 40 <= len(by_trace) <= 160  # about half of 200
            for s in shippers:
                invariant(s.stats())
        finally:
            for s in shippers:
                s.close()

    def test_each_event_is_sampled_once(self, make_logger, receiver):
        """The handler decides before it builds the event; an event that then takes the careful
        path (a value to copy) is not decided again, which would keep it at the rate squared.
        Every event carries its own trace id, so the decision is exact: the events kept are
        those whose trace id's fraction is below the rate, on either way through the handler."""
        log, h = make_logger(sample_levels={"info": 0.5})
        rng = random.Random(5)
        traces = [f"{rng.getrandbits(128):032x}" for _ in range(400)]
        for i, t in enumerate(traces):
            extra: dict[str, Any] = {"trace_id": t}
            if i % 2:
                extra["items"] = [i]  # a list: copied, by the careful path
            log.info("e%d", i, extra=extra)
        expected = [f"e{i}" for i, t in enumerate(traces) if int(t[-16:], 16) / 2**64 < 0.5]
        assert 150 < len(expected) < 250
        assert messages(h, receiver) == expected
        st = h.stats()
        assert st.dropped_sampled == 400 - len(expected)
        invariant(st)

    def test_without_a_trace_id_each_event_is_decided_once(self, make_logger, receiver):
        """Without a trace id the random source decides: a second decision on the careful path
        would keep those events at a quarter, not half (about 1,500 kept of 4,000, not 2,000).
        """
        log, h = make_logger(sample_levels={"info": 0.5})
        random.seed(3)
        for i in range(4000):
            log.info("e%d", i, extra={"items": [i]} if i % 2 else {})
        assert h.flush(10)
        kept = len(receiver.events)
        careful = sum(1 for e in receiver.events if "items" in e)
        assert 1800 < kept < 2200 and 850 < careful < 1150, (kept, careful)
        invariant(h.stats())

    def test_the_sampler_decides_with_a_fixed_random(self):
        """Without a trace id the decision uses the random source: u < rate keeps; a trace
        id decides instead (its low 64 bits as a fraction), the event's own first."""
        values = iter([0.1, 0.9, 0.29, 0.31])
        sampler = Sampler({"debug": 0.3}, None, rand=lambda: next(values))
        assert [sampler.decide("debug", "app") for _ in range(4)] == [True, False, True, False]
        low, high = "0" * 16 + "1" + "0" * 15, "0" * 16 + "f" * 16
        assert sampler.decide("debug", "app", low) and not sampler.decide("debug", "app", high)
        assert not sampler.decide("debug", "app", high, context_trace=low)
        assert sampler.decide("debug", "app", context_trace=low)
        assert sampler.decide("info", "app")  # a rate of 1: no random number drawn


# ------------------------------------------------------------------ repeats

class TestRepeats:
    def test_suppressed_after_n_with_one_summary(self, make_logger, receiver):
        """50,000 identical lines: N ship, the rest are counted, one summary says how many."""
        log, h = make_logger(repeat_limit=5, max_queue_size=100_000)
        for _ in range(50_000):
            log.warning("retrying connection")
        log.info("something else")
        assert h.flush(10)
        h.close()
        got = [e["message"] for e in receiver.events]
        assert got[:5] == ["retrying connection"] * 5
        assert "something else" in got
        summaries = [e for e in receiver.events if "repeats_suppressed" in e]
        assert len(summaries) == 1
        assert summaries[0]["repeats_suppressed"] == 49_995
        assert summaries[0]["level"] == "warning"
        assert summaries[0]["message"].startswith("retrying connection (repeated 49,995 more")
        st = h.stats()
        assert st.dropped_repeat == 49_995 and st.delivered == 7  # 5 + other + summary
        invariant(st)

    def test_every_summary_due_at_close_ships_and_counts(self):
        """Issue 35.4: close() without flush(), repeat_limit=3, three repeated lines (40
        events): each line's summary is shipped and counted, so submitted is 43 (it was 40:
        the summaries were neither sent nor counted), and the account holds."""
        from loghandler.testing import MemoryTransport

        transport = MemoryTransport()
        h = loghandler.IngestHandler("ds", transport=transport, repeat_limit=3,
                                     repeat_window=60, flush_interval=60)
        log = logging.getLogger("repeats-at-close")
        log.propagate = False
        log.addHandler(h)
        try:
            for message, times in (("disk full", 10), ("retrying", 15), ("timeout", 15)):
                for _ in range(times):
                    log.warning(message)
            h.close()
        finally:
            log.removeHandler(h)
        st = h.stats()
        assert (st.submitted, st.delivered, st.dropped_repeat) == (43, 12, 31), st
        invariant(st)
        sent = [e for r in transport.requests for e in r.events]
        summaries = {e["repeated_message"]: e["repeats_suppressed"] for e in sent
                     if "repeats_suppressed" in e}
        assert summaries == {"disk full": 7, "retrying": 12, "timeout": 12}
        assert len(sent) == 12

    def test_windows(self):
        """A new window ships N again; the summary of the old one comes when it ends."""
        sel = Selector(2, 10.0)
        ev = {"level": "info", "logger": "a", "message": "m", "_time": "t"}
        kept, rep, summ = sel.select([dict(ev) for _ in range(5)], now=0)
        assert len(kept) == 2 and rep == 3 and summ == []
        assert sel.expired(5) == []
        kept, rep, summ = sel.select([dict(ev)], now=11)
        assert len(kept) == 1 and rep == 0
        assert [s["repeats_suppressed"] for s in summ] == [3]
        # Different loggers or levels are different lines.
        kept, rep, _ = sel.select([{**ev, "logger": "b"}, {**ev, "level": "error"}], now=12)
        assert len(kept) == 2 and rep == 0

    def test_bounded_memory_evicts_the_oldest_window(self):
        """At most MAX_KEYS lines are tracked; the oldest window goes first, with its summary."""
        sel = Selector(1, 60.0, max_keys=3)
        lines = [{"level": "info", "logger": "a", "message": f"m{i}"} for i in range(5)]
        summaries = []
        for line in lines:
            _, rep, summ = sel.select([dict(line), dict(line)], now=0)  # one suppressed
            assert rep == 1
            summaries += summ
        assert [s["repeated_message"] for s in summaries] == ["m0", "m1"]
        # Three windows are left (m0 and m1 evicted), and they expire oldest first.
        assert [s["repeated_message"] for s in sel.expired(61)] == ["m2", "m3", "m4"]

    @pytest.mark.parametrize("admit", ["compiled", "python"])
    def test_restarted_windows_keep_the_order_and_the_memory_bounded(self, admit: str) -> None:
        """A window that ends and starts again leaves its old place behind in the order of
        windows: passed over when the oldest is looked for (an eviction takes the oldest open
        window, not the restarted key), and the places passed are cut off, so that a steady
        stream of restarts and evictions keeps the selector's memory bounded."""
        from loghandler._engine.events import admit_repeats

        if admit == "compiled" and admit_repeats is None:
            pytest.skip("the compiled path is not built")
        how = {"admit": admit_repeats if admit == "compiled" else None}
        sel = Selector(2, 10.0, max_keys=3)

        def line(m: str) -> dict[str, Any]:
            return {"level": "info", "logger": "a", "message": m}

        sel.select([line("old")] * 3, now=0, **how)  # "old" suppressed once
        sel.select([line("b"), line("b"), line("c"), line("c")], now=5, **how)
        # "old" ends (its summary) and starts again: the newest window now, b the oldest.
        _, rep, summ = sel.select([line("old"), line("old")], now=11, **how)
        assert rep == 0 and [s["repeated_message"] for s in summ] == ["old"]
        # b is suppressed, then evicted for d's room: the oldest open window, not "old".
        _, rep, summ = sel.select([line("b"), line("d"), line("d")], now=12, **how)
        assert rep == 1 and [(s["repeated_message"], s["repeats_suppressed"]) for s in summ] == [
            ("b", 1)]
        # The open windows and their order are what this checks (no public view): the
        # compiled loop keys them by a hash, each entry holds its (logger, level, message).
        seen = sel._seen  # noqa: SLF001
        assert [e[4] for e in seen.values()] == [("a", "info", "c"), ("a", "info", "old"),
                                                 ("a", "info", "d")]
        # The first sightings: the Python loop's dicts (the compiled loop's, a fixed table).
        once = sel._once  # noqa: SLF001
        for t in range(20, 20 + 5000):  # every batch: a window ends, another is evicted
            x, y = line(f"x{t % 7}"), line(f"y{t}")
            sel.select([x, x, y, y, line(f"z{t}")], now=float(t) * 10, **how)
            assert len(seen) <= 3 and len(sel._order) <= 3 + 2 * 64  # noqa: SLF001
            assert len(once[0]) < 3 and len(once[1]) <= 3
        assert sorted(s["repeated_message"] for s in sel.flush_all()) == []
        assert sel._order == [] and seen == {} and once == [{}, {}]  # noqa: SLF001

    @pytest.mark.parametrize("admit", ["compiled", "python"])
    def test_a_window_opens_at_the_second_sighting_from_the_first(self, admit: str) -> None:
        """A message seen once opens no window, only its time noted; seen again within the
        window, its window opens, started at the first sighting and counting it, so the first
        repeat_limit occurrences in the window ship as before. A message seen once and again
        after the window is new both times. The sightings are bounded: two generations of at
        most max_keys messages; one forgotten is new again."""
        from loghandler._engine.events import admit_repeats

        if admit == "compiled" and admit_repeats is None:
            pytest.skip("the compiled path is not built")
        how = {"admit": admit_repeats if admit == "compiled" else None}
        sel = Selector(1, 10.0, max_keys=3)

        def line(m: str) -> bytes | dict[str, Any]:
            e = {"level": "info", "logger": "a", "message": m, "_time": "t"}
            return encode(e) if m.startswith("w") else e

        kept, rep, _ = sel.select([line("a"), line("w1"), line("b")], now=0, **how)
        assert len(kept) == 3 and rep == 0 and sel._seen == {}  # noqa: SLF001
        # a again at 5: its window started at 0, so it ends at 10 with one suppressed
        kept, rep, _ = sel.select([line("a"), line("w1")], now=5, **how)
        assert kept == [] and rep == 2
        assert sel.expired(9.9) == []
        assert sorted(s["repeated_message"] for s in sel.expired(10)) == ["a", "w1"]
        # b at 0 and 10: the first sighting's window is over, b is new again (and ships)
        kept, rep, summ = sel.select([line("b")], now=10, **how)
        assert len(kept) == 1 and rep == 0 and summ == []
        # c seen at 11, then six new messages (two generations of three): c is forgotten
        sel.select([line("c")], now=11, **how)
        sel.select([line(f"n{i}") for i in range(6)], now=12, **how)
        kept, rep, _ = sel.select([line("c")], now=13, **how)
        assert len(kept) == 1 and rep == 0
        kept, rep, _ = sel.select([line("c")], now=14, **how)
        assert kept == [] and rep == 1
        assert [(s["repeated_message"], s["repeats_suppressed"]) for s in sel.flush_all()] == [
            ("c", 1)]


# ------------------------------------------------------------------ scrubbing

JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"


class TestScrubbing:
    def test_message_extra_nested_and_traceback(self, make_logger, receiver):
        """A secret in the message, an extra, a nested value and a traceback never leaves."""
        log, h = make_logger(scrub="all")
        log.info("login with password=hunter2 and header Authorization: Bearer abcdef0123456789xyz",
                 extra={"api_key": "k-live-123", "request": {"headers": {"Cookie": "sid=1"},
                                                              "body": [f"jwt {JWT}"]}})
        try:
            raise RuntimeError("card 4111 1111 1111 1111 declined for AKIAIOSFODNN7EXAMPLE")
        except RuntimeError:
            log.exception("payment failed")
        assert h.flush(5)
        first, second = receiver.events
        text = repr(receiver.events)
        for secret in ("hunter2", "abcdef0123456789xyz", "k-live-123", "sid=1", JWT,
                       "4111 1111 1111 1111", "AKIAIOSFODNN7EXAMPLE"):
            assert secret not in text, secret
        assert first["message"] == ("login with password=[redacted] and header "
                                    "Authorization: Bearer [redacted]")
        assert first["api_key"] == REDACTED
        assert first["request"]["headers"]["Cookie"] == REDACTED
        assert first["request"]["body"] == [f"jwt {REDACTED}"]
        assert "card [redacted] declined for [redacted]" in second["exception"]["message"]
        assert "card [redacted] declined" in second["exception"]["stacktrace"]

    def test_look_alikes_are_kept(self, make_logger, receiver):
        """Numbers that fail Luhn, words near secrets and keys that merely contain one stay."""
        log, h = make_logger(scrub="all")
        log.info("order 4111 1111 1111 1112 shipped; bearer of good news; token count 3",
                 extra={"token_count": 17, "max_tokens": 4096, "secretary": "Ann",
                        "passage": "a long passage of text", "phone": "+44 20 7946 0958"})
        assert h.flush(5)
        (e,) = receiver.events
        assert e["message"] == ("order 4111 1111 1111 1112 shipped; bearer of good news; "
                                "token count 3")
        assert e["token_count"] == 17 and e["max_tokens"] == 4096
        assert e["secretary"] == "Ann" and e["passage"] == "a long passage of text"
        assert e["phone"] == "+44 20 7946 0958"

    def test_modes_by_argument_and_environment(self, make_logger, receiver, monkeypatch):
        """The default scrubs keys only; scrub=False (LOGHANDLER_SCRUB=0) nothing; "all"
        (LOGHANDLER_SCRUB=all) text too."""
        log, h = make_logger()
        log.info("password=hunter2", extra={"password": "hunter2"})
        assert h.flush(5)
        assert receiver.events[-1]["message"] == "password=hunter2"
        assert receiver.events[-1]["password"] == REDACTED
        log, h = make_logger(scrub=False)
        log.info("off", extra={"password": "hunter2"})
        assert h.flush(5) and receiver.events[-1]["password"] == "hunter2"
        monkeypatch.setenv("LOGHANDLER_SCRUB", "0")
        log, h = make_logger()
        log.info("off by env", extra={"password": "letmein"})
        assert h.flush(5) and receiver.events[-1]["password"] == "letmein"
        monkeypatch.setenv("LOGHANDLER_SCRUB", "all")
        log, h = make_logger()
        log.info("password=letmein")
        assert h.flush(5) and receiver.events[-1]["message"] == "password=[redacted]"

    def test_keys_in_context_and_fields_are_scrubbed_too(self, make_logger, receiver):
        """The default (keys) reaches nested values a context or fields= add to a fast-path
        event, and a secret key among the extras of one."""
        log, h = make_logger(fields={"deploy": {"api_key": "k-1", "region": "eu"}})
        with loghandler.context(session={"cookie": "c-2", "user": 7}):
            log.info("plain", extra={"password": "p-3", "n": 1})
        assert h.flush(5)
        (e,) = receiver.events
        assert e["password"] == REDACTED and e["n"] == 1
        assert e["session"] == REDACTED  # a secret key hides what it holds
        assert e["deploy"] == {"api_key": REDACTED, "region": "eu"}

    def test_own_keys_and_patterns(self, make_logger, receiver):
        """scrub_keys and scrub_patterns add to the defaults."""
        # Patterns of one's own turn the text scan on, with the defaults.
        log, h = make_logger(scrub_keys=["patient_id"], scrub_patterns=[r"\bEMP-\d{6}\b"])
        log.info("employee EMP-123456 seen", extra={"patient_id": "p-9", "ward": "b"})
        assert h.flush(5)
        (e,) = receiver.events
        assert e["message"] == "employee [redacted] seen"
        assert e["patient_id"] == REDACTED and e["ward"] == "b"

    def test_structlog_processor(self, receiver):
        """The structlog processor's events are scrubbed the same way."""
        proc = IngestProcessor("ds", url=receiver.url, token=TOKEN)
        try:
            proc(None, "info", {"event": "connect", "dsn": "postgres://u:pw@h/db",
                                "db_password": "pw", "conn": {"token": "t0k3n-abc"},
                                "auth": {"user": "u"}})
            assert proc.flush(5)
            (e,) = receiver.events
            assert e["db_password"] == REDACTED and e["conn"]["token"] == REDACTED
            assert e["auth"] == REDACTED  # a secret key hides whatever it holds
        finally:
            proc.close()

    @pytest.mark.parametrize(("digits", "ok"), [
        ("4111111111111111", True), ("4111111111111112", False), ("378282246310005", True),
        ("5555555555554444", True), ("1234567812345678", False),
    ])
    def test_luhn(self, digits, ok):
        assert luhn_ok(digits) is ok

    def test_scrubber_leaves_the_applications_objects_alone(self):
        """Copy on write: the event's nested values are replaced, never changed in place."""
        nested = {"password": "x", "list": ["Bearer abcdefghijklmnopqrstu"]}
        event = {"message": "m", "nested": nested}
        Scrubber().event(event)
        assert nested == {"password": "x", "list": ["Bearer abcdefghijklmnopqrstu"]}
        assert event["nested"] == {"password": REDACTED, "list": [f"Bearer {REDACTED}"]}


# ------------------------------------------------------------------ identity

class TestIdentity:
    def test_from_the_environment(self, make_logger, receiver, monkeypatch):
        """OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES name the sender; host is added."""
        monkeypatch.delenv("LOGHANDLER_IDENTITY")
        monkeypatch.setenv("OTEL_SERVICE_NAME", "checkout")
        monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES",
                           "deployment.environment=prod,service.version=1.4.2,team=pay")
        log, h = make_logger()
        log.info("paid", extra={"version": "own"})  # the event's own field wins
        assert h.flush(5)
        (e,) = receiver.events
        assert e["service"] == "checkout" and e["environment"] == "prod"
        assert e["version"] == "own" and isinstance(e["host"], str) and e["host"]

    def test_loghandler_variables_win_over_otel(self, monkeypatch):
        env = {"LOGHANDLER_SERVICE": "a", "OTEL_SERVICE_NAME": "b",
               "LOGHANDLER_ENVIRONMENT": "staging", "LOGHANDLER_VERSION": "2"}
        who = identity_fields(True, env)
        assert (who["service"], who["environment"], who["version"]) == ("a", "staging", "2")
        assert identity_fields(False, env) == {}
        assert identity_fields({"service": "x", "host": "h"}, {})["service"] == "x"

    def test_mapping_fields_and_opt_out(self, make_logger, receiver, monkeypatch):
        """identity={...} sets the fields (fields= wins on a shared name); False: none."""
        monkeypatch.delenv("LOGHANDLER_IDENTITY")
        log, h = make_logger(identity={"service": "api", "environment": "dev"},
                             fields={"environment": "from-fields"})
        log.info("one")
        log2, h2 = make_logger(identity=False)
        log2.info("two")
        assert h.flush(5) and h2.flush(5)
        one, two = sorted(receiver.events, key=lambda e: e["message"])
        assert one["service"] == "api" and one["environment"] == "from-fields"
        assert "host" in one
        assert not {"service", "environment", "host"} & set(two)


# ------------------------------------------------------------------ shape

class TestShape:
    def test_formatter_text_is_the_message(self, make_logger, receiver):
        """setFormatter() is honoured: its output is the message, fields stay structured."""
        log, h = make_logger()
        h.setFormatter(logging.Formatter("%(levelname)s [%(name)s] %(message)s"))
        log.info("paid %s", 10, extra={"order": 7})
        assert h.flush(5)
        (e,) = receiver.events
        assert e["message"] == f"INFO [{log.name}] paid 10" and e["order"] == 7

    def test_formatter_from_dictconfig(self, receiver):
        """dictConfig's "formatter" on the handler works too, with the new options."""
        logging.config.dictConfig({
            "version": 1, "disable_existing_loggers": False,
            "formatters": {"short": {"format": "%(levelname)s: %(message)s"}},
            "handlers": {"ship": {"class": "loghandler.IngestHandler", "dataset": "ds",
                                  "url": receiver.url, "token": TOKEN, "formatter": "short",
                                  "exclude_fields": ["module", "function", "file", "thread"],
                                  "repeat_limit": 100}},
            "loggers": {"dc": {"handlers": ["ship"], "level": "INFO", "propagate": False}},
        })
        try:
            logging.getLogger("dc").info("hello")
            h = logging.getLogger("dc").handlers[0]
            assert h.flush(5)
            (e,) = receiver.events
            assert e["message"] == "INFO: hello"
            assert not {"module", "function", "file", "thread"} & set(e)
            assert {"logger", "line", "process"} <= set(e)
        finally:
            logging.config.dictConfig({"version": 1, "disable_existing_loggers": False})

    def test_json_default_for_own_types(self, make_logger, receiver):
        """json_default converts the application's own types, on every front end."""

        class Money:
            def __init__(self, cents: int) -> None:
                self.cents = cents

        def convert(value: Any) -> Any:
            return {"cents": value.cents} if isinstance(value, Money) else value

        log, h = make_logger(json_default=convert)
        log.info("paid", extra={"amount": Money(250)})
        assert h.flush(5)
        assert receiver.events[-1]["amount"] == {"cents": 250}
        configure = structlog.get_config()
        proc = IngestProcessor("ds", url=receiver.url, token=TOKEN, json_default=convert)
        s = Shipper(loghandler.Client(url=receiver.url, token=TOKEN), "ds",
                    json_default=convert)
        try:
            proc(None, "info", {"event": "p", "amount": Money(3)})
            s.submit({"message": "s", "amount": Money(4), "other": object()})
            assert proc.flush(5) and s.flush(5)
            by = {e.get("message", e.get("event")): e for e in receiver.events}
            assert by["p"]["amount"] == {"cents": 3} and by["s"]["amount"] == {"cents": 4}
            assert by["s"]["other"].startswith("<object object")  # built-in rules after
        finally:
            proc.close()
            s.close()
            structlog.configure(**configure)

    def test_errors_name_the_option(self):
        """Bad values are ConfigurationErrors naming the option."""
        client = loghandler.Client(url="http://127.0.0.1:1", token=TOKEN)
        cases = [({"sample_levels": {"debug": 2}}, "sample_levels"),
                 ({"hold_level": "error"}, "hold_level"),
                 ({"repeat_limit": 0}, "repeat_limit"),
                 ({"scrub_patterns": ["("]}, "scrub_patterns"),
                 ({"identity": 3}, "identity"),
                 ({"scrub": "everything"}, "scrub"),
                 ({"json_default": 5}, "json_default")]
        for options, name in cases:
            with pytest.raises(ConfigurationError, match=name):
                Shipper(client, "ds", **options)
