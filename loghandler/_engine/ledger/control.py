"""The ledger's shipper face: what the ``Shipper`` (and the process's lifecycle) does with it.

- start the flusher before any event (``start_flusher``: a spool waits to be replayed);
- flush: ``begin_flush`` (a ``FlushTicket``) then ``wait_flushed``;
- close: ``begin_close``, and settle what no sender could take (``count_leftovers``);
- read the account: ``snapshot`` (shared by every face), ``undelivered``, ``queued_bytes``,
  ``settled_through``;
- after ``os.fork()``, in the child: ``reset``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ..stats import Fate
from .state import LedgerState

__all__ = ["Control", "FlushTicket"]

_monotonic = time.monotonic


class FlushTicket:
    """What one flush() waits for: the events up to ``target`` settled, and the undelivered
    count it started from. ``done``: nothing to wait for; ``flusher``: a flusher thread runs."""

    __slots__ = ("done", "flusher", "refused", "target", "undelivered")

    def __init__(self, target: int, undelivered: int, refused: int) -> None:
        self.target = target
        self.undelivered = undelivered
        self.refused = refused
        self.done = False
        self.flusher = True


class Control(LedgerState):
    """The shipper's face of the ledger (see the module docstring)."""

    __slots__ = ()

    def reset(self) -> None:
        """Empty the ledger, with new locks: in a forked child (the parent's queue belongs to
        the parent, which delivers it; its lock may have been held by another thread at fork).
        The object and its gate stay the same, so the front ends' references hold."""
        self._reset()

    def start_flusher(self) -> None:
        """Start the flusher now (``on_put``), before any event: a spool waits to be replayed."""
        with self._lock:
            self._on_put()
            self._flusher_started = True
            self._update_fast_path_locked()

    def begin_flush(self, ensure_flusher: Callable[[], bool]) -> FlushTicket:
        """Ask the flusher to send what is queued now, partial batches too. The ticket says up to
        which event to wait for (``wait_flushed``), or that all is settled already.
        ``ensure_flusher`` is called under the lock (as ``on_put``) and says whether a flusher
        runs; when none does, the caller sends on its own thread."""
        with self._lock:
            ticket = FlushTicket(self._taken + len(self._queue), self._undelivered,
                                 self._refused_too_large)
            self._refused_too_large = 0
            if self._settled_through_locked() >= ticket.target:
                ticket.done = True
                return ticket
            self._force = True
            ticket.flusher = ensure_flusher()
            self._flusher_started = True
        self._wake.set()
        return ticket

    def wait_flushed(self, ticket: FlushTicket, deadline: float) -> bool:
        """Wait until every event of ``ticket`` is settled, or ``deadline`` (monotonic). True
        when all of them were delivered (and none was refused at submit since the last flush)."""
        with self._lock:
            while self._settled_through_locked() < ticket.target:
                remaining = deadline - _monotonic()
                if remaining <= 0:
                    return False
                self._progress.wait(min(remaining, 0.25))
            return self._undelivered == ticket.undelivered and not ticket.refused

    def begin_close(self, deadline: float, late_ok: bool,
                    what: str = "shutdown_timeout", seconds: float | None = None) -> None:
        """Refuse events from now on (but, with ``late_ok``, take late ones: ``on_late``), and
        tell the flusher to finish by ``deadline`` (monotonic); ``what``: the bound it comes
        from, as messages name it (``shutdown_timeout``, ``close()'s timeout``), and ``seconds`` its
        setting."""
        with self._lock:
            self._set_close_deadline_locked(deadline, what, seconds)
            # A permission for late events (the exit hook's) outlives a later close() of the
            # same shipper: logging.shutdown() closes the handlers right after the exit hook,
            # and atexit hooks registered before `import logging` still log after that.
            self._late_ok = late_ok or (self._closed and self._late_ok)
            self._closed = True
            self._force = True
            self._update_fast_path_locked()
            self._space.notify_all()
        self._interrupt.set()
        self._pressure.set()
        self._wake.set()

    def wait_late_settled(self, deadline: float) -> bool:
        """While late events are taken (``begin_close``'s ``late_ok``): wait until every event
        queued now has met its fate, or ``deadline`` (monotonic). True when none is left
        (without ``late_ok``: at once, True only when nothing is queued or in flight)."""
        with self._lock:
            target = self._taken + len(self._queue)
            while self._settled_through_locked() < target:
                remaining = deadline - _monotonic()
                if not self._late_ok or remaining <= 0:
                    return False
                self._progress.wait(min(remaining, 0.25))
            return True

    def count_leftovers(self, fate: Fate) -> int:
        """Settle as ``fate`` whatever is still queued with nothing in flight (a late event no
        sender could take); returns how many."""
        with self._lock:
            if self._inflight:
                return 0
            self._account_locked()
            pop = self._pop_oldest_locked
            n = len([pop() for _ in range(len(self._queue))])
            self._record_locked(n, fate)
            return n

    def undelivered(self) -> int:
        """Events settled other than delivered, ever."""
        with self._lock:
            return self._undelivered

    def queued_bytes(self) -> int:
        """The estimated size of what is queued (for ``max_queue_bytes``)."""
        with self._lock:
            self._account_locked()
            return self._queue_bytes

    def settled_through(self) -> int:
        """The sequence number up to which every event has met its fate."""
        with self._lock:
            return self._settled_through_locked()
