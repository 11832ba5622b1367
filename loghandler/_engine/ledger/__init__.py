"""The ledger: the queue of a ``Shipper`` and the account of every event that entered it.

One object owns the state that application threads and the flusher thread share: the queue, the
fast path's gate, the sequence numbers, the counters, the lock and its conditions
(``state.py``). Its state is private, and only its own methods write it. Each of its three
callers sees it through a face of its own, one module each, keeping the operations' names:

    front ends, the compiled path   Intake    (intake.py)    gate, offer, put, drop, suppress
    the flusher (the sender)        Flushing  (flushing.py)  take, settle, abandon, waits, ...
    the shipper, the lifecycle      Control   (control.py)   begin_flush, begin_close, reset, ...
    every face                      (state.py)               snapshot, count, the read-only
                                                             views (closed, close_deadline, ...)

``Ledger`` is the one object with all three faces; a caller is typed with its own face and
calls nothing else. The lock never leaves the package: the ``*_locked`` steps are the state's.
Nothing here does I/O, so the lock is never held across any.

Accounting invariant, true of every ``snapshot()``::

    submitted == delivered + dropped + failed + spooled + queued

Every event ends in exactly one ``Fate`` (delivered, spooled, or dropped / failed with a reason),
and until then it is queued (in the deque, or in flight: taken by the flusher, not yet settled).

Sequence numbers: the events that entered the queue are numbered in queue order. Events leave
it only from the front, under the lock (``taken`` have left so far), so the queue holds the
numbers ``taken + 1 .. taken + len(queue)``, and the events in flight (taken by the flusher,
not yet settled) are the contiguous range that starts at ``inflight_first``. So "everything up
to N is settled" is a comparison (``settled_through() >= N``), with no per-event bookkeeping.

The application's fast path takes no lock: ``deque.append`` and ``len`` are atomic, and while
the queue is shorter than the gate's ``fast_len`` one comparison decides (``Intake.offer``, and
its compiled twin: the ledger contract in loghandler/_compiled.py). Sizes (for
``max_queue_bytes``) are added up later, under the lock, by whoever next needs them
(``_account_locked``): the fast path admits only events of at most ``FAST_ITEM_BYTES``, and
``fast_len`` leaves room for that many of them, so the bounds hold. (Threads racing past the
same check at the same instant may each add one event over ``max_queue_size``; the next locked
step corrects it.)

After ``os.fork()`` the child calls ``reset()``: the same object and gate, emptied, with new
locks. A front end that kept the intake face (or its gate) appends to the child's queue.
"""

from __future__ import annotations

from ..model import FAST_ITEM_BYTES
from ..stats import Count, Fate
from .control import Control, FlushTicket
from .flushing import Flushing
from .intake import Intake
from .state import SPILL_BATCHES

__all__ = ["FAST_ITEM_BYTES", "SPILL_BATCHES", "Control", "Count", "Fate", "FlushTicket",
           "Flushing", "Intake", "Ledger"]


class Ledger(Intake, Flushing, Control):
    """The queue and the account of one shipper, with its three faces (see the module
    docstring). ``Ledger(options, on_put, on_late=None)``: see ``LedgerState``."""

    __slots__ = ()
