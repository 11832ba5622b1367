"""``Flusher``: a shipper's flusher thread and the parts it works with.

The ledger (queue and counters), the worker (the thread's loop), the reporter, the spool: made
together for one dataset, started on the first event (or at once when the spool holds files), and
what ``lifecycle.py`` closes at exit and renews after a fork (``lifecycle.Member``). It outlives
its ``Shipper`` (``shipper.py``, the facade) when the application drops that without ``close()``.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from .._config import ShipperOptions
from .._output import clip, print_line, printable
from .._wire.client import Client, dataset_path
from .._wire.imports import ImportsRestored
from . import lifecycle as lifecycle
from .guard import in_sender_thread, logging_lock_held
from .hold import Hold
from .ledger import Fate, Ledger
from .policy import Cause
from .reporter import Reporter
from .spool import Spool
from .transport import Transport
from .worker import Worker

__all__ = ["Flusher"]

_monotonic = time.monotonic


def _weak(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` (a bound method) held weakly: calling it once its object is gone does
    nothing (the ledger calls its flusher back without keeping it alive)."""
    ref = weakref.WeakMethod(method)

    def call(*args: Any) -> Any:
        bound = ref()
        return None if bound is None else bound(*args)

    return call


class Flusher:
    """A shipper's flusher thread and the parts it works with: the ledger (queue and counters),
    the worker (its loop), the reporter, the spool; what ``lifecycle.py`` closes at exit and
    renews after a fork (``lifecycle.Member``).

    It outlives its shipper when the application drops that without ``close()``: the shipper's
    finalizer calls ``orphaned()``, the queue is closed with the usual deadline
    (``shutdown_timeout``), the flusher delivers what it holds and ends, and a client made for
    the shipper is closed once no live shipper uses it: threads and sockets go back to what
    they were. Until then the exit hook waits for it as for a live one.
    """

    def __init__(self, client: Client | None, dataset: str, options: ShipperOptions,
                 transport: Transport) -> None:
        self.client = client
        self.dataset = dataset
        self.options = options
        spool = None
        if options.spool_dir is not None:
            spool = Spool(options.spool_dir, dataset, max_bytes=options.max_spool_bytes,
                          max_file_events=options.batch_size,
                          max_file_bytes=options.max_batch_bytes)
        self.spool = spool
        self.ledger = Ledger(options, _weak(self._ensure_thread_locked), _weak(self._send_late),
                             _weak(self._spill_from_caller))
        self.reporter = Reporter(dataset, options.on_error)
        if spool is not None and spool.problem is not None:
            # Once, now: the writes that fail later are the same cause (not told again).
            where = clip(printable(str(options.spool_dir)), 120)
            self.reporter.report(
                Cause.SPOOL_WRITE, f"spool_dir {where} cannot be written now "
                                   f"({clip(spool.problem, 60)}): what cannot be delivered is "
                                   "counted, not spooled, until it can: check its disk space "
                                   "and permissions")
        self.worker = Worker(self.ledger, self.reporter, transport, dataset_path(dataset),
                             dataset, options, spool)
        self.thread: threading.Thread | None = None
        self.thread_failed = False
        self.pid = os.getpid()
        self.owns_client = False  # a client made for the shipper (make_shipper): closed with it
        self.orphan = False
        self.hold: Hold | None = None  # the shipper's hold-until-error (counted at close)

    # ------------------------------------------------------------------ the thread

    def start_if_spooled(self) -> None:
        """A restarted process that logs nothing must still deliver what an earlier one
        spooled: start the flusher now rather than on the first event."""
        if self.spool is not None and self.spool.has_waiting():
            self.ledger.start_flusher()

    def _ensure_thread_locked(self) -> None:
        # The ledger calls this after each event its slow path queues.
        thread = self.thread
        if thread is None or (not thread.is_alive() and not self.ledger.closed):
            # First event, or the flusher died on an internal error (reported once): start one.
            self._start_thread_locked()

    def _start_thread_locked(self) -> None:
        if self.thread_failed:
            return
        if sys.is_finalizing():  # a new thread would never run (and start() would wait)
            self.thread_failed = True
            return
        try:
            # Constructed inside: an isolated sub-interpreter (3.12+) refuses daemon threads
            # in Thread() itself, one made with allow_threads=False in start().
            thread = threading.Thread(target=self.worker.run,
                                      name=f"loghandler-flusher:{self.dataset}", daemon=True)
            # Known before it starts: a Ctrl+C inside start() (which waits for the thread) must
            # not leave it running unknown, for the next event to start a second one beside it.
            self.thread = thread
            thread.start()
        except RuntimeError as exc:
            # No flusher, for good: flush() and close() send on their caller's thread (bounded
            # by their timeouts), and so does the exit hook, at the interpreter's end too.
            self.thread = None
            self.thread_failed = True
            if "shutdown" not in str(exc):  # at exit that is expected: nothing to tell
                self._tell_no_thread(exc)
        else:
            _warn_if_uwsgi_without_threads()

    def _tell_no_thread(self, exc: RuntimeError) -> None:
        """Threads refused for good (an isolated sub-interpreter, or the system's limit):
        said once per interpreter (module state is per interpreter), as what to do."""
        global _told_no_thread
        if _told_no_thread:
            return
        _told_no_thread = True
        self.reporter.report(
            Cause.NO_THREAD,
            f"no thread can be started here ({clip(printable(str(exc)), 80)}), so events are "
            "sent only when flush() or close() is called, on that thread, and at this "
            "interpreter's end; until then they wait in the queue (past max_queue_size they "
            "are dropped and counted): call flush() after each request or unit of work")

    def _thread_for_flush_locked(self) -> bool:
        # Under the ledger's lock (Ledger.begin_flush): whether a flusher runs; one that died is
        # replaced, unless closed (then the closing thread sends).
        thread_ok = self.thread is not None and self.thread.is_alive()
        if not thread_ok and not self.ledger.closed and not self.thread_failed:
            self.thread = None
            self._start_thread_locked()
            thread_ok = self.thread is not None
        return thread_ok

    def flusher_alive(self) -> bool:
        """True while a flusher thread runs (also after close() began, until it is done)."""
        thread = self.thread
        return thread is not None and thread.is_alive()

    def after_fork_in_child(self) -> None:
        """In a forked child (lifecycle.py): the parent's queue belongs to the parent (it
        delivers it); the child starts empty, with new locks (the parent's may have been held
        by another thread at fork) and no flusher (threads do not survive fork)."""
        self.pid = os.getpid()
        self.thread = None
        self.thread_failed = False
        self.ledger.reset()  # in place: the front ends' cached references stay valid
        self.worker.reset()
        self.reporter.reset()
        if self.orphan:  # the parent delivers what its dropped shipper held
            lifecycle.release(self)

    def _spill_from_caller(self, first: int, items: list[Any]) -> None:
        # The ledger calls this on an application thread whose event found the queue full
        # with a spool, outside its lock (Intake.put).
        self.worker.spill_from_caller(first, items)

    def _check_fork(self) -> None:
        if os.getpid() != self.pid:
            self.after_fork_in_child()

    # ------------------------------------------------------------------ flush / close

    @property
    def closed(self) -> bool:
        return self.ledger.closed

    @property
    def shutdown_timeout(self) -> float:
        return self.options.shutdown_timeout

    def flush(self, timeout: float | None = None) -> bool:
        """``Shipper.flush`` (the exit of a job runner's work horse flushes through here)."""
        self._check_fork()
        if in_sender_thread():
            return False  # waiting for ourselves would never end
        ledger = self.ledger
        timeout = self.options.shutdown_timeout if timeout is None else max(0.0, timeout)
        deadline = _monotonic() + timeout
        if ledger.close_deadline is not None:
            # Closed already (the exit hook ran): logging.shutdown()'s flush() must not add a
            # second shutdown_timeout to the exit.
            deadline = min(deadline, ledger.close_deadline + 0.2)
        ticket = ledger.begin_flush(self._thread_for_flush_locked)
        if ticket.done:
            return not ticket.refused
        if not ticket.flusher:
            self.worker.drain_on_this_thread(deadline)
        elif logging_lock_held():
            return False
        return ledger.wait_flushed(ticket, deadline)

    def begin_close(self, deadline: float, *, at_exit: bool = False,
                    late_events: bool = False, what: str = "shutdown_timeout",
                    seconds: float | None = None) -> None:
        """Stop taking events and tell the flusher to finish by ``deadline`` (monotonic).

        ``at_exit``: the exit hook closes this shipper and prints one summary line for all
        (``exit_summary``), so failures from now on are told there, not in lines of their own.
        ``late_events``: events submitted later are still taken, and sent at once on the
        submitting thread within ``deadline`` (``_send_late``): the exit hook's close, after
        which atexit hooks registered before ``import loghandler`` still run and may log.
        ``what``: the bound the deadline comes from, as messages name it; ``seconds``: its
        setting (messages name the setting, not the time left when the close began).
        """
        if self.orphan:
            return  # closing already (orphaned)
        self._check_fork()
        if at_exit:
            self.reporter.begin_exit_summary()
        self.ledger.begin_close(deadline, late_events, what, seconds)
        if self.hold is not None:
            self.hold.close()  # contexts still open: their held events are counted

    def wait_closed(self) -> None:
        """Wait for the flusher until the close deadline (``begin_close``), then take over
        what it still holds; or send on this thread when there is no flusher."""
        ledger = self.ledger
        deadline = ledger.close_deadline if ledger.close_deadline is not None else _monotonic()
        thread = self.thread
        if thread is not None and thread.is_alive() and thread is not threading.current_thread():
            # A little grace past the deadline: the flusher settles the rest as "shutdown"
            # right at the deadline and needs a moment to do it.
            thread.join(max(0.0, deadline - _monotonic()) + 0.2)
            if thread.is_alive():
                self.worker.abandon()
        elif not self.orphan and not in_sender_thread():
            self.worker.drain_on_this_thread(deadline)

    def _send_late(self) -> None:
        """Deliver events submitted after the exit hook closed this shipper (``begin_close``'s
        ``late_events``; the ledger calls this after queueing one, outside its lock).

        atexit runs hooks in reverse order of registration, so one registered before loghandler
        was imported runs after loghandler's own, which has closed the shippers and printed its
        summary. What such a hook logs is sent at once, on its own thread, within what is left
        of the exit deadline (nothing else would run after it to send it); past the deadline it
        is spooled or counted as ``dropped_shutdown``, and a line says so.
        """
        ledger = self.ledger
        deadline = ledger.close_deadline if ledger.close_deadline is not None else _monotonic()
        before = ledger.undelivered()
        why = "shutdown_timeout ran out"
        try:
            with ImportsRestored():
                self.worker.drain_on_this_thread(deadline)
        except BaseException as exc:
            # Late in interpreter shutdown (a __del__ of a module global), what sending needs
            # may be torn down already: the events in flight may or may not have reached the
            # service, and are counted lost, not delivered; that is told.
            why = f"interpreter shutdown: {type(exc).__name__}"
            ledger.settle_inflight(Fate.DROPPED_SHUTDOWN)
        ledger.count_leftovers(Fate.DROPPED_SHUTDOWN)
        if ledger.undelivered() > before:
            where = "spooled" if ledger.snapshot().spooled else "dropped"
            self.reporter.report(
                Cause.LATE, f"an event logged after the exit hook (by a later atexit hook or a "
                        f"__del__) was {where} ({why}): raise shutdown_timeout")

    def exit_summary(self) -> str | None:
        """This shipper's part of the exit hook's line: None when everything was delivered.

        Events logged after the exit hook closed the shipper are sent at once on the thread
        that logged them (``_send_late``): loguru's own thread with ``enqueue=True`` hands its
        queue over just then. The line waits for those under way (within the exit's deadline),
        rather than call them "still queued" while they are being delivered."""
        ledger = self.ledger
        st = ledger.snapshot()
        deadline = ledger.close_deadline
        while (st.queued and deadline is not None and _monotonic() < deadline
               and ledger.wait_late_settled(deadline)):
            st = ledger.snapshot()  # one more late event may have come meanwhile
        return self.reporter.exit_summary(st, self.options.spool_dir)

    def uses(self, client: object) -> bool:
        """Whether this (open) shipper ships through ``client``."""
        return client is not None and self.client is client and not self.closed

    def release_client(self) -> None:
        """Close a client this library made (from plain arguments) with the last shipper using
        it, so its keep-alive sockets do not outlive the handlers. A client the user passed in
        is theirs to close."""
        if not self.owns_client or self.client is None:
            return
        thread = self.thread
        if thread is not None and thread.is_alive() and thread is not threading.current_thread():
            return  # still sending (close() under logging's lock): the exit hook cleans up
        if not any(m is not self and m.uses(self.client) for m in lifecycle.live_shippers()):
            self.client.close()

    # ------------------------------------------------------------------ orphaned

    def orphaned(self) -> None:
        """The shipper was collected (never from a flusher: it holds no reference to it)."""
        try:
            thread = self.thread
            if thread is None or not thread.is_alive():
                self.release_client()
                return
            self.orphan = True
            self.ledger.begin_close(_monotonic() + self.options.shutdown_timeout, False,
                                    seconds=self.options.shutdown_timeout)
            if self.hold is not None:
                self.hold.close()
            self.worker.after_run = self._done
            lifecycle.adopt(self)
        except Exception:
            pass

    def _done(self) -> None:
        lifecycle.release(self)
        self.release_client()


_uwsgi_checked = False
_told_no_thread = False  # _tell_no_thread's: once per interpreter


def _warn_if_uwsgi_without_threads() -> None:
    """uWSGI runs Python threads only with --enable-threads (or --threads): say so, once."""
    global _uwsgi_checked
    if _uwsgi_checked:
        return
    _uwsgi_checked = True
    uwsgi = sys.modules.get("uwsgi")
    if uwsgi is None:
        return
    try:
        opt = getattr(uwsgi, "opt", {}) or {}
        keys = ("enable-threads", b"enable-threads", "threads", b"threads")
        if not any(opt.get(k) for k in keys):
            print_line("loghandler: uWSGI runs without --enable-threads, so no event is "
                       "shipped: start uWSGI with --enable-threads")
    except Exception:
        pass
