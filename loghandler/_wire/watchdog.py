"""The watchdog: ends requests that outlive their deadline (``timeout=`` bounds a whole request).

urllib3's timeouts bound each socket operation only (a service trickling one byte a second would
never time out). So each request is armed here with its deadline, and one daemon thread shuts
down the socket of a request still running at its deadline: whatever the request is blocked in
fails at once, and the client raises ``TransportError``.
"""

from __future__ import annotations

import heapq
import itertools
import queue
import signal
import socket
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from urllib3.connection import HTTPConnection

__all__ = ["Watch", "block_sigterm_in_this_thread", "watchdog", "watched_pool_classes"]

_is_finalizing = sys.is_finalizing


def block_sigterm_in_this_thread() -> None:
    """Called first by each of loghandler's own threads: the kernel then hands a process-wide
    SIGTERM to another thread (the main one, where Python runs its handler), never to ours."""
    try:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    except (AttributeError, OSError, ValueError):  # not POSIX
        pass


class Watch:
    __slots__ = ("conn", "connected", "deadline", "done", "fired")

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.conn: HTTPConnection | None = None
        self.done = False
        self.fired = False
        # Whether the request opened a connection of its own; False: it went out on a kept-alive
        # one from the pool (the client then tells the service's idle close apart).
        self.connected = False


# Seconds within which a connection given back to the pool is lent again without a look for
# the service having closed it (``_Lending.borrow``): below any service's idle timeout (Node's
# 5 s default is among the shortest).
FRESH = 2.0

# Seconds the watchdog thread waits with nothing to watch before it ends.
WATCHDOG_IDLE = 2.0


class Watchdog:
    """Ends requests that outlive their deadline, by shutting their socket down.

    One daemon thread for the process, started with the first request. A request is armed
    before urllib3 takes a connection, and the connection is attached to it when urllib3 connects
    or sends on it (``_Watched``), on the requesting thread. At the deadline the socket is shut
    down: whatever the request is blocked in (send, the status line, a trickling body) fails at
    once, and the request raises ``TransportError``.
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Anew: at construction, and in a forked child (the parent's thread is gone, and its
        lock may have been held at the fork)."""
        # The requesting threads take the lock itself (a C call): a Condition's Python-level
        # __enter__ interrupted by Ctrl+C would leave it held for ever (engine/ledger/wake.py).
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._heap: list[tuple[float, int, Watch]] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None
        self._local = threading.local()
        self._stopping = False  # end now when idle (stop_if_idle), not after WATCHDOG_IDLE

    def arm(self, deadline: float) -> Watch | None:
        if _is_finalizing():
            # Interpreter shutdown (a __del__ logging as the modules are torn down): a new
            # thread would never run, and the running one, once it wakes, ends as it asks for
            # the interpreter's lock, holding ours if it had just taken it (the next arm() then
            # waited for ever). urllib3's own timeouts bound the request.
            return None
        watch = Watch(deadline)
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                try:
                    thread = threading.Thread(target=self._run, name="loghandler-watchdog",
                                              daemon=True)
                    self._thread = thread  # known before start(), which an interrupt may cut
                    thread.start()
                except RuntimeError:
                    # Interpreter shutdown, or a sub-interpreter that refuses daemon threads
                    # (in Thread() itself): urllib3's timeouts only.
                    self._thread = None
                    return None
            self._stopping = False
            heapq.heappush(self._heap, (deadline, next(self._order), watch))
            if self._heap[0][2] is watch:
                self._cond.notify()
        self._local.watch = watch
        return watch

    def stop_if_idle(self, wait: float = 0.5) -> None:
        """End the thread now if no request is under way (the last shipper closed: no thread
        of ours outlives ``close()``, which a sub-interpreter's end requires), waiting up to
        ``wait`` seconds for it to end."""
        # Bounded: at exit a daemon thread may have ended holding the lock (arm()).
        if _is_finalizing() or not self._lock.acquire(timeout=0.1):
            return
        try:
            thread = self._thread
            if thread is None or any(not w.done for _, _, w in self._heap):
                return
            self._stopping = True
            self._cond.notify()
        finally:
            self._lock.release()
        if thread is not threading.current_thread():
            thread.join(wait)

    def disarm(self, watch: Watch | None) -> None:
        self._local.watch = None
        if watch is not None:
            with self._lock:
                watch.done = True
                watch.conn = None

    def attach(self, conn: HTTPConnection, *, connecting: bool = False) -> None:
        watch = getattr(self._local, "watch", None)
        if watch is None:
            return
        with self._lock:
            watch.conn = conn
            watch.connected = watch.connected or connecting
            fired = watch.fired
        if fired:
            raise TimeoutError("the request's deadline passed")

    def _run(self) -> None:
        block_sigterm_in_this_thread()
        heap = self._heap
        with self._cond:
            while True:
                while heap and heap[0][2].done:
                    heapq.heappop(heap)
                if not heap:
                    # Idle: the thread ends after a while (at once when the last shipper
                    # closed: stop_if_idle), and the next request starts one (so a process
                    # whose shippers are all gone keeps no thread of ours).
                    if not self._stopping:
                        self._cond.wait(WATCHDOG_IDLE)
                    if not heap:
                        self._thread = None
                        return
                    continue
                remaining = heap[0][0] - time.monotonic()
                if remaining > 0:
                    self._cond.wait(remaining)
                    continue
                watch = heapq.heappop(heap)[2]
                watch.fired = True
                conn, watch.conn = watch.conn, None
                sock = getattr(conn, "sock", None)
                if isinstance(sock, socket.socket):
                    try:
                        # The plain socket's shutdown, also under TLS: it ends the blocked
                        # read or write at once without touching the TLS object in use.
                        socket.socket.shutdown(sock, socket.SHUT_RDWR)
                    except OSError:
                        pass


watchdog = Watchdog()


class _Watched:
    """A urllib3 connection that attaches itself to its thread's armed request (``Watchdog``)."""

    def connect(self) -> None:
        watchdog.attach(self, connecting=True)  # type: ignore[arg-type]
        super().connect()  # type: ignore[misc]

    def request(self, *args: Any, **kwargs: Any) -> None:
        watchdog.attach(self)  # type: ignore[arg-type]
        super().request(*args, **kwargs)  # type: ignore[misc]


class _Lending:
    """A urllib3 pool that lends a connection to the lean exchange (``lean.py``): the pool
    keeps owning its connections (their count, their reuse, their closing at ``clear()``)
    while the ingest POST is written and read by our code."""

    def borrow(self) -> Any:
        """A kept-alive connection, or a new one. urllib3's ``_get_conn`` first polls a
        kept-alive connection for the other end having closed it: a release of the
        interpreter's lock per request, which the flusher waits up to a switch interval to
        get back while the application logs. A connection given back less than ``FRESH``
        seconds ago is lent without that look (no service closes an idle connection that
        soon; one closed anyway, before any byte of an answer, is sent again once on a new
        one: ``Client._send_lean``); an older one is looked at as urllib3 does, so that
        what a service wrote before closing an idle connection (a 408) is never read as
        the next request's answer."""
        if self.block:  # type: ignore[attr-defined]
            return self._get_conn()  # type: ignore[attr-defined]  # (not the client's pools)
        try:
            conn = self.pool.get(block=False)  # type: ignore[attr-defined]
        except (AttributeError, queue.Empty):  # closed (urllib3 raises), or none kept
            return self._get_conn()  # type: ignore[attr-defined]
        if conn is None:
            return self._new_conn()  # type: ignore[attr-defined]
        if time.monotonic() - getattr(conn, "given_back", -FRESH) >= FRESH:
            from urllib3.util.connection import is_connection_dropped

            if is_connection_dropped(conn):
                conn.close()  # reopened by the exchange, as urllib3's own would be
        return conn

    def give_back(self, conn: Any) -> None:
        conn.given_back = time.monotonic()
        self._put_conn(conn)  # type: ignore[attr-defined]


_pool_classes: dict[str, type] = {}


def watched_pool_classes() -> dict[str, type]:
    """urllib3's pools whose connections attach themselves to the watchdog and can be lent
    to the lean exchange, made once."""
    if not _pool_classes:
        from urllib3.connection import HTTPConnection, HTTPSConnection
        from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

        class _WatchedHTTPConnection(_Watched, HTTPConnection):
            pass

        class _WatchedHTTPSConnection(_Watched, HTTPSConnection):
            pass

        class _WatchedHTTPPool(_Lending, HTTPConnectionPool):
            ConnectionCls = _WatchedHTTPConnection

        class _WatchedHTTPSPool(_Lending, HTTPSConnectionPool):
            ConnectionCls = _WatchedHTTPSConnection

        _pool_classes.update(http=_WatchedHTTPPool, https=_WatchedHTTPSPool)
    return _pool_classes


