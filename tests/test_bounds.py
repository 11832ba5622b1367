"""Bounds and accounts that hold under stress (issue 23): a clashing extra never replaces the
record's exception, an interrupt on the logging thread never breaks the invariant, a callback
that raises never kills the flusher, odd datetimes, and a fork while the spool's lock is held."""

from __future__ import annotations

import gc
import logging
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
from typing import Any

import pytest
from helpers import TOKEN, LoggerFactory, balanced, closed_port_url

import loghandler
from loghandler import IngestHandler, IngestProcessor
from loghandler._engine.events import size_of


def queued_size(shipper: loghandler.Shipper) -> int:
    """The estimated bytes the shipper's queue holds (what max_queue_bytes bounds)."""
    return sum(map(size_of, list(shipper.intake.queue)))


@pytest.fixture
def logger(make_logger: LoggerFactory) -> LoggerFactory:
    """``logger(**options)`` -> (logger, handler): conftest's ``make_logger`` (nothing sent
    before ``flush()``)."""
    return make_logger


class TestClashes:
    def test_extra_named_exception_keeps_the_traceback(self, logger, receiver):
        """log.exception(..., extra={"exception": ...}): the traceback ships, the extra is
        renamed extra_exception."""
        log, h = logger()
        try:
            raise ValueError("real")
        except ValueError:
            log.exception("failed", extra={"exception": "handled"})
        assert h.flush(5)
        (e,) = receiver.events
        assert e["exception"]["type"] == "ValueError" and e["exception"]["message"] == "real"
        assert e["extra_exception"] == "handled"

    def test_extra_named_stack_is_kept(self, logger, receiver):
        log, h = logger()
        log.warning("where", stack_info=True, extra={"stack": "mine"})
        assert h.flush(5)
        (e,) = receiver.events
        assert e["stack"].startswith("Stack (most recent call last)")
        assert e["extra_stack"] == "mine"


class TestInterrupts:
    @pytest.mark.parametrize("spool", [False, True])
    def test_keyboard_interrupt_in_a_full_queue_keeps_the_invariant(self, logger, tmp_path,
                                                                    spool):
        """A signal handler raising KeyboardInterrupt lands anywhere in tight logging calls
        with a full drop_oldest queue (with a spool: while the logging thread writes the
        oldest batch to the spool itself): every event is still accounted for. On CPython
        3.10, which checks for signals between most bytecodes, the ledger's steps are made
        whole after an interrupt (ledger/state.py, _repair_locked)."""
        if spool:  # the service down, a small batch: the logging thread spools full batches
            log, h = logger(max_queue_size=200, batch_size=100, max_retries=0,
                            spool_dir=str(tmp_path), url=closed_port_url())
        else:
            log, h = logger(max_queue_size=200, batch_size=10_000, max_retries=0)
        interrupts = 0
        armed = [False]

        def interrupt(signum: int, frame: Any) -> None:
            if armed[0]:  # only inside the logging call: the test's own loop is not the point
                # Disarmed here, not only by the loop: the next tick could otherwise land in
                # the loop's own `except` before it disarms (seen on 3.10), and escape it.
                armed[0] = False
                raise KeyboardInterrupt

        old = signal.signal(signal.SIGALRM, interrupt)
        # No collection inside the loop: an interrupt landing in some finalizer the collector
        # runs there is reported as unraisable (pytest then fails the test, whatever it was).
        gc.disable()
        signal.setitimer(signal.ITIMER_REAL, 0.0005, 0.0005)
        try:
            for i in range(60_000):
                try:
                    armed[0] = True
                    log.info("event %d", i, extra={"n": i})
                    armed[0] = False
                except KeyboardInterrupt:
                    armed[0] = False
                    interrupts += 1
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0, 0)
            signal.signal(signal.SIGALRM, old)
            gc.enable()
        assert interrupts > 20
        st = h.stats()
        if spool:
            # The logging thread's spool writes ran (and most were cut by the interrupts,
            # every 0.5 ms: their events are then counted dropped for the full queue).
            assert st.spooled_by_caller + st.dropped_queue_full > 0, st
        else:
            assert st.dropped_queue_full > 0
        assert balanced(st), st

    def test_an_interrupt_inside_a_lock_taken_in_python_hangs_nothing(self, receiver):
        """A Ctrl+C that lands just after a Python-level lock was taken (threading.Event's
        Condition.__enter__) leaves that lock held for ever: if the logging call woke the
        flusher with such an event, every later flush and close hung (seen once in 60,000
        interrupted calls). Here the interrupt lands exactly there, every time such a lock is
        entered to set an event on the logging thread: the events still flush and close
        returns."""
        code = textwrap.dedent(f"""
            import logging, sys, threading, loghandler
            enter = threading.Condition.__enter__.__code__
            event_set = threading.Event.set.__code__
            interrupts = 0

            def at_return(frame, event, arg):
                global interrupts
                if event == "return":
                    interrupts += 1
                    raise KeyboardInterrupt  # the lock is taken: the worst moment
                return at_return

            def tracer(frame, event, arg):
                # An event set by the logging call (to wake the flusher, say).
                if frame.f_code is enter and frame.f_back.f_code is event_set:
                    return at_return
                return None

            h = loghandler.IngestHandler("ds", url={receiver.url!r}, token={TOKEN!r},
                                         batch_size=10, flush_interval=60,
                                         shutdown_timeout=5)
            log = logging.getLogger("x")
            log.addHandler(h)
            log.propagate = False
            for i in range(100):
                sys.settrace(tracer)  # a trace function that raises is removed: set it again
                try:
                    log.warning("event %d", i)
                except KeyboardInterrupt:
                    pass
                finally:
                    sys.settrace(None)
            print("flushed", h.flush(10), "interrupts", interrupts, flush=True)
            h.close()
            st = h.stats()
            print("delivered", st.delivered, "submitted", st.submitted, flush=True)
        """)
        # A hang is what this checks: 30 s is far beyond the second the run takes.
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=30)
        assert proc.returncode == 0, proc.stderr
        assert "flushed True" in proc.stdout, proc.stdout + proc.stderr
        assert "delivered 100 submitted 100" in proc.stdout, proc.stdout + proc.stderr
        assert len(receiver.events) == 100


class TestCallbacks:
    def test_on_error_raising_keyboard_interrupt_is_one_line(self, receiver):
        """on_error raising a BaseException: one stderr line, the flusher lives on."""
        code = textwrap.dedent(f"""
            import logging, loghandler
            def on_error(exc):
                raise KeyboardInterrupt
            h = loghandler.IngestHandler("ds", url={receiver.url!r}, token={TOKEN!r},
                                         on_error=on_error, shutdown_timeout=2)
            log = logging.getLogger("x")
            log.addHandler(h)
            log.warning("first")
            print(h.flush(5))
            log.warning("second")
            print(h.flush(5))
            print(h.stats().delivered)
        """)
        receiver.script = [400]  # the first batch is turned down: on_error is called
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=60)
        assert "Traceback" not in proc.stderr and "Exception in thread" not in proc.stderr
        lines = [ln for ln in proc.stderr.splitlines() if "on_error" in ln]
        assert lines == ["loghandler: dataset 'ds': on_error raised KeyboardInterrupt, which "
                         "was ignored: make the callback catch its own errors"]
        assert proc.stdout.split() == ["False", "True", "1"]


class TestOddValues:
    def test_processor_timestamp_with_a_broken_tzinfo(self, receiver):
        """A datetime whose utcoffset() raises, or is a day or more: shipped, not dropped."""
        import datetime as dt

        class Broken(dt.tzinfo):
            def utcoffset(self, d: Any) -> Any:
                raise RuntimeError("no offset")

        class TooFar(dt.tzinfo):
            def utcoffset(self, d: Any) -> Any:
                return dt.timedelta(hours=30)

        proc = IngestProcessor("ds", url=receiver.url, token=TOKEN)
        try:
            for tz in (Broken(), TooFar()):
                proc(None, "info", {"event": "odd", "timestamp": dt.datetime(2024, 1, 1,
                                                                              tzinfo=tz)})
            assert proc.flush(5)
            assert len(receiver.events) == 2
            assert all(e["event"] == "odd" and isinstance(e["timestamp"], str)
                       for e in receiver.events)
            assert proc.stats().dropped_invalid == 0
        finally:
            proc.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_fork_while_the_spool_lock_is_held(tmp_path):
    """A child forked while the spool's module lock is held can still spool and exit."""
    code = textwrap.dedent(f"""
        import os, sys
        from loghandler._engine import spool
        import loghandler
        spool._names_lock.acquire()      # as the flusher holds it while naming a file
        pid = os.fork()
        if pid == 0:
            s = loghandler.Shipper(loghandler.Client(url="http://127.0.0.1:9", token="t-123456"),
                                   "ds", spool_dir={str(tmp_path)!r}, shutdown_timeout=2,
                                   max_retries=0)
            s.submit({{"n": 1}})
            s.close()
            os._exit(0 if s.stats().spooled == 1 else 3)
        _, status = os.waitpid(pid, 0)
        sys.exit(os.waitstatus_to_exitcode(status))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode == 0, proc.stderr


class TestNestedSizes:
    """max_queue_bytes bounds what nested values hold, not a fixed guess per value.

    The flusher's first request is held until the checks are done (``held``): what it took is
    in flight, the queue refills behind it, and everything after that is refused at the door,
    however fast or slow the flusher thread is scheduled (on a busy host it used to drain the
    queue between events, and how many were refused depended on when it ran)."""

    BIG = "x" * 50_000
    LIMIT = 16 * 1024 * 1024
    N = 2000

    @pytest.fixture
    def held(self) -> Any:
        """A transport whose requests wait until the test ends (30 s at most, so a failing
        test never hangs the run), then fail as a refused connection would."""
        from loghandler import TransportError
        from loghandler.testing import MemoryTransport

        release = threading.Event()

        def answer(request: Any) -> Any:
            release.wait(30)
            return TransportError("held by the test, then refused")

        yield MemoryTransport(answer)
        release.set()

    def check(self, st: loghandler.Stats, queued_bytes: int) -> None:
        assert queued_bytes <= self.LIMIT
        # About 16 MiB of 50 KB values fit in the queue: some 320 events. ``queued`` also counts
        # what the flusher holds in flight, which the bound leaves out (one take, at most a
        # queue's worth, cut into requests by bytes): at most about two queues' worth are in,
        # never the 2,000 (100 MB) that a fixed guess per value let in; the rest is refused.
        assert 150 <= st.queued <= 800, st
        assert st.dropped_queue_full == self.N - st.queued and balanced(st)

    def test_handler_extra(self, held: Any) -> None:
        h = IngestHandler("ds", url="http://127.0.0.1:9", token=TOKEN, flush_interval=60,
                          batch_size=10_000, max_queue_bytes=self.LIMIT, max_retries=0,
                          shutdown_timeout=0.1, transport=held)
        log = logging.getLogger("test.bounds.nested")
        log.handlers[:] = [h]
        log.propagate = False
        try:
            for i in range(self.N):
                log.warning("big", extra={"payload": {"blob": self.BIG, "i": i}})
            self.check(h.stats(), queued_size(h.shipper))
        finally:
            h.close()

    def test_processor_value(self, held: Any) -> None:
        proc = IngestProcessor("ds", url="http://127.0.0.1:9", token=TOKEN, flush_interval=60,
                               batch_size=10_000, max_queue_bytes=self.LIMIT, max_retries=0,
                               shutdown_timeout=0.1, transport=held)
        try:
            for i in range(self.N):
                proc(None, "info", {"event": "big", "payload": {"blob": self.BIG, "i": i}})
            self.check(proc.stats(), queued_size(proc.shipper))
        finally:
            proc.close(0.1)

    def test_submit_value(self, held: Any) -> None:
        s = loghandler.Shipper(loghandler.Client(url="http://127.0.0.1:9", token=TOKEN), "ds",
                               flush_interval=60, batch_size=10_000,
                               max_queue_bytes=self.LIMIT, max_retries=0, shutdown_timeout=0.1,
                               transport=held)
        try:
            for i in range(self.N):
                s.submit({"message": "big", "payload": {"blob": self.BIG, "i": i}})
            self.check(s.stats(), queued_size(s))
        finally:
            s.close(0.1)


def test_an_internal_error_on_the_locked_path_is_counted_not_lost(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug of ours inside the queue's locked step (here: its accounting raises) costs the
    event, but counted (dropped_invalid), never silently: submitted stays the sum of the rest.
    An event already queued when the error comes is not counted twice."""
    from loghandler._engine.ledger import Ledger

    h = IngestHandler("ds", url="http://127.0.0.1:9", token=TOKEN, flush_interval=3600,
                      shutdown_timeout=0.1, handle_sigterm=False)
    log = logging.getLogger("bounds.internal")
    log.propagate = False
    log.handlers[:] = [h]
    try:
        def broken(self: Any) -> None:
            raise RuntimeError("a bug of ours")

        monkeypatch.setattr(Ledger, "_account_locked", broken)
        log.warning("lost to a bug")  # the first event always takes the locked step
        st = h.stats()
        assert st.submitted == 1 and st.dropped_invalid == 1 and st.queued == 0

        calls = []

        def after_append(self: Any) -> None:  # raises only once the event is in the queue
            calls.append(1)
            if len(calls) == 2:
                raise RuntimeError("a bug of ours, after the append")

        monkeypatch.setattr(Ledger, "_account_locked", after_append)
        log.warning("queued before the bug")
        st = h.stats()
        assert st.submitted == 2 and st.dropped_invalid == 1 and st.queued == 1
    finally:
        monkeypatch.undo()
        h.close()


def test_a_full_queue_is_told_on_stderr_when_it_happens() -> None:
    """Events dropped because the queue is full are told on stderr at the flusher's next look
    (the caller's thread prints nothing), not only counted or summed up at exit: one line, with
    the bounds, the count and what to do.

    The count: 1,000 events into a queue of 100 while the service refuses connections. The
    queue keeps 100; the flusher's batch, when it wakes during the loop, takes up to the
    queue's 100 more out of it (its retries then hold it past the loop): 800-900 dropped, as
    the host's timing has it (a quiet host: 900; a loaded one: 800)."""
    code = textwrap.dedent("""
        import logging, sys
        from loghandler import IngestHandler
        h = IngestHandler("ds", token="t", url="http://127.0.0.1:9", max_queue_size=100,
                          flush_interval=0.05, shutdown_timeout=0.2, handle_sigterm=False)
        log = logging.getLogger("full")
        log.propagate = False
        log.handlers[:] = [h]
        for i in range(1000):
            log.warning("event %d", i)
        h.flush(2)  # the flusher tries (and looks) meanwhile
        s = h.stats()
        print("MARK", s.dropped_queue_full, s.queued, s.failed, s.submitted, file=sys.stderr,
              flush=True)
        h.close()
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    before, _, after = proc.stderr.partition("MARK")
    dropped, queued, failed, submitted = map(int, after.split()[:4])
    assert 800 <= dropped <= 900, proc.stderr
    # Exact whatever the timing: every event is either dropped, still held (queued or in the
    # flusher's batch, which Stats counts as queued until it settles), or failed: the retries'
    # waits are drawn with full jitter, and once in a while all five fall within flush's 2 s
    # (seen once on CPython 3.10), the batch then given up and counted failed.
    assert dropped + queued + failed == submitted == 1000, proc.stderr
    assert before.count("the queue is full") == 1, proc.stderr
    line = next(x for x in before.splitlines() if "the queue is full" in x)
    assert re.fullmatch(r"loghandler: dataset 'ds': the queue is full \(max_queue_size=100\): "
                        r"[\d,]+ events dropped \(stats\(\)\.dropped_queue_full\): raise "
                        r"max_queue_size or set spool_dir", line), line
    assert "the queue is full" not in after
