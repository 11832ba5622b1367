"""The shipping engine shared by the logging handler and the structlog processor.

One ``Shipper`` per dataset: a bounded queue that application threads append to in O(1), and one
daemon flusher thread that cuts batches, encodes them, compresses them and posts them, retrying
with backoff. Nothing here ever blocks an application thread on I/O or raises into it.

Accounting invariant, true of every ``stats()`` snapshot::

    submitted == delivered + dropped + failed + spooled + queued

Sequence numbers: the events that entered the queue are numbered in queue order. Events leave
it only from the front, under the lock (``_taken`` have left so far), so the queue holds the
numbers ``_taken + 1 .. _taken + len(queue)``, and the events in flight (taken by the flusher,
not yet settled) are the contiguous range that starts at ``_inflight_first``. So "everything up
to N is settled" is a comparison, with no per-event bookkeeping.

The application's fast path takes no lock: ``deque.append`` and ``len`` are atomic, and while
the queue is shorter than ``_fast_len`` one comparison decides. Sizes (for ``max_queue_bytes``)
are added up later, under the lock, by whoever next needs them (``_account_locked``): the fast
path admits only events of at most ``FAST_ITEM_BYTES``, and ``_fast_len`` leaves room for that
many of them, so the bounds hold. (Threads racing past the same check at the same instant may
each add one event over ``max_queue_size``; the next locked step corrects it.)
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping
from itertools import islice
from typing import Any

from . import encoding, lifecycle
from .client import Client, dataset_path, shared_client
from .config import ShipperOptions, resolve_dataset, split_options
from .delivery import Delivery, _Chunk
from .errors import ConfigurationError, print_line
from .events import SUBMIT_EVENT_SIZE, SUBMIT_FIELD_SIZE, item_events, item_size
from .guard import _SENDERS, _get_ident, in_sender_thread, logging_lock_held
from .spool import Spool
from .stats import STAT_FIELDS, Stats

__all__ = ["FAST_ITEM_BYTES", "Shipper", "Stats", "make_shipper"]

_monotonic = time.monotonic
# The largest event (by estimated size) the lock-free fast path takes; larger ones lock.
FAST_ITEM_BYTES = 8 * 1024

class Shipper(Delivery):
    """Queue events and ship them in the background to one dataset.

    ``Shipper(client, dataset, **options)``; the options are listed in README "Options".
    """

    def __init__(self, client: Client, dataset: str | None = None, **options: Any) -> None:
        if not isinstance(client, Client):
            raise ConfigurationError("client must be a loghandler.Client")
        self._client = client
        self._owns_client = False  # set by make_shipper for a client built from arguments
        self.dataset = resolve_dataset(dataset)
        self._path = dataset_path(self.dataset)
        try:
            self.options = ShipperOptions(**options)
        except TypeError as exc:
            split_options(options)  # raises a ConfigurationError naming the unknown option
            raise ConfigurationError(str(exc)) from None
        self._spool: Spool | None = None
        if self.options.spool_dir is not None:
            self._spool = Spool(self.options.spool_dir, self.dataset,
                                max_bytes=self.options.max_spool_bytes,
                                max_file_events=self.options.batch_size,
                                max_file_bytes=self.options.max_batch_bytes)
        self._reset_state()
        lifecycle.register(self)
        if self._spool is not None and self._spool.has_waiting():
            # A restarted process that logs nothing must still deliver what an earlier one
            # spooled: start the flusher now rather than on the first event.
            with self._lock:
                self._start_thread_locked()

    # ------------------------------------------------------------------ state

    def _reset_state(self) -> None:
        self._lock = threading.RLock()
        self._progress = threading.Condition(self._lock)
        self._space = threading.Condition(self._lock)
        self._wake = threading.Event()
        self._interrupt = threading.Event()
        self._queue: deque[tuple[Any, ...]] = deque()
        self._queue_bytes = 0  # sizes of the accounted events still queued
        self._taken = 0  # events that left the queue (taken by the flusher, or dropped), ever
        self._accounted = 0  # events, in queue order, whose sizes are in _queue_bytes, ever
        self._inflight = 0
        self._inflight_first = 1
        self._wake_pending = False
        self._force = False
        self._closed = False
        self._close_deadline: float | None = None
        self._thread: threading.Thread | None = None
        self._thread_failed = False
        self._gave_up = False
        self._abandoned = False
        # What the flusher holds while it sends, so _abandon() can take it over.
        self._posting: _Chunk | None = None
        self._stack: list[_Chunk] = []
        self._carry: list[bytes] = []
        self._last_replay = 0.0
        self._send_lock = threading.Lock()
        self._paused_until = 0.0
        self._auth_delay = self.options.auth_retry_delay
        self._reported: set[str] = set()
        # Set by the exit hook before it closes this shipper: a batch that fails from then on is
        # told in the hook's one summary line (_exit_cause), not in a line of its own.
        self._exit_summary = False
        self._exit_cause: str | None = None
        self._pid = os.getpid()
        self._c = dict.fromkeys(STAT_FIELDS, 0)
        self._undelivered = 0
        self._max_batch = self.options.batch_size
        self._max_batch_bytes = self.options.max_batch_bytes
        # Queued sizes are memory estimates, about three times the encoded JSON: wake up for a
        # byte-full batch at twice max_batch_bytes of them (the real cut is on encoded bytes).
        self._wake_bytes = 2 * self._max_batch_bytes
        self._max_size = self.options.max_queue_size
        self._max_bytes = self.options.max_queue_bytes
        self._overflow = self.options.overflow
        self._fast_len = 0  # see _update_fast_path_locked

    def _after_fork_in_child(self) -> None:
        # The parent's queue belongs to the parent (it delivers it); the child starts empty,
        # with new locks (the parent's may have been held by another thread at fork) and no
        # thread (threads do not survive fork).
        self._reset_state()

    def __repr__(self) -> str:
        return f"Shipper(dataset={self.dataset!r}, url={self._client.url!r})"

    @property
    def client(self) -> Client:
        return self._client

    # ------------------------------------------------------------------ application side

    def submit(self, event: Mapping[str, Any]) -> bool:
        """Queue one event (a dict). O(1); never blocks on I/O and never raises.

        Returns False when the event was dropped (queue full, closed, not a mapping).
        The event is copied shallowly; values JSON cannot carry are converted when the batch is
        encoded on the flusher thread.
        """
        try:
            if _get_ident() in _SENDERS:
                return self._suppress()
            if type(event) is not dict:
                if not isinstance(event, Mapping):
                    return self._count_dropped("invalid")
                event = dict(event)
            else:
                event = event.copy()
            size = _estimate(event)
            return self._put((event, size), size)
        except Exception:
            return False

    def _put(self, item: tuple[Any, ...], size: int) -> bool:
        """Queue an item the caller built (see events.py "Queue items"; ``size`` is item[1]).

        The caller has checked ``in_sender_thread()``. This is the hot path of every log call
        (the handler inlines it): below ``_fast_len``, one comparison and an append.
        """
        q = self._queue
        if len(q) < self._fast_len and size <= FAST_ITEM_BYTES:
            q.append(item)
            return True
        return self._put_locked(item, size)

    def _put_locked(self, item: tuple[Any, ...], size: int) -> bool:
        try:
            with self._lock:
                return self._put_slow(item, size)
        except Exception:
            return False

    def _put_slow(self, item: tuple[Any, ...], size: int) -> bool:
        # Under self._lock. Everything the fast path leaves out: closed, first event (start the
        # thread), a full batch (wake the flusher), a full queue (overflow policy), big events.
        if self._closed:
            return self._drop_locked("closed")
        self._account_locked()
        q = self._queue
        if (len(q) >= self._max_size or self._queue_bytes + size > self._max_bytes) and (
            not self._make_room_locked(size)
        ):
            return False
        q.append(item)
        self._account_locked()
        thread = self._thread
        if thread is None or (not thread.is_alive() and not self._closed):
            # First event, or the flusher died on an internal error (reported once): start one.
            self._start_thread_locked()
        # Wake the flusher once per full batch, not per event: setting an Event costs more
        # than everything else here.
        if not self._wake_pending and (
            len(q) >= self._max_batch or self._queue_bytes >= self._wake_bytes
        ):
            self._wake_pending = True
            self._wake.set()
        self._update_fast_path_locked()
        return True

    def _account_locked(self) -> None:
        """Add the sizes of the events the fast path appended since the last call."""
        q = self._queue
        tail: list[tuple[Any, ...]] = []
        new = 0
        for _ in range(8):
            new = self._taken + len(q) - self._accounted
            if new <= 0:
                return
            try:
                # C calls only: no other thread runs while the list is copied.
                tail = list(islice(reversed(q), new))
            except RuntimeError:  # appended to while being read (free-threaded builds)
                tail = []
                continue
            if self._taken + len(q) - self._accounted == new:
                break
        if not tail:
            return  # raced every time: the next locked step accounts for them
        # (After eight races in a row, the sizes of the newest events stand in for the ones
        # just before them: the count stays exact, the byte estimate is off by a few events.)
        self._queue_bytes += sum(map(item_size, tail))
        self._accounted += new

    def _pop_oldest_locked(self) -> tuple[Any, ...]:
        item = self._queue.popleft()
        if self._accounted > self._taken:
            self._queue_bytes -= item[1]
        else:
            self._accounted += 1
        self._taken += 1
        if self._accounted == self._taken:
            self._queue_bytes = 0  # exact again whenever nothing accounted is left
        return item

    def _update_fast_path_locked(self) -> None:
        """Set the queue length under which _put may skip the lock: room, by count and by
        bytes, for events of up to FAST_ITEM_BYTES each beyond those accounted for."""
        if self._closed or (self._thread is None and not self._thread_failed):
            self._fast_len = 0
            return
        if self._wake_pending:
            max_n, max_b = self._max_size, self._max_bytes
        else:  # up to the next wake-up of the flusher
            max_n = min(self._max_size, self._max_batch)
            max_b = min(self._max_bytes, self._wake_bytes)
        held = self._accounted - self._taken
        room = min(max_n - held, (max_b - self._queue_bytes) // FAST_ITEM_BYTES)
        self._fast_len = held + room if room > 0 else 0

    def _suppress(self) -> bool:
        with self._lock:
            self._c["suppressed"] += 1
        return False

    def _make_room_locked(self, size: int) -> bool:
        if size > self._max_bytes:
            return self._drop_locked("too_large")
        policy = self._overflow
        if policy == "block" and not in_sender_thread():
            deadline = _monotonic() + self.options.block_timeout
            self._wake.set()
            while True:
                self._account_locked()
                if (len(self._queue) < self._max_size
                        and self._queue_bytes + size <= self._max_bytes):
                    break
                now = _monotonic()
                remaining = deadline - now
                # Sending is paused (Retry-After, a bad token) past our bound: no room will
                # come in time, so do not make the application wait for nothing.
                if remaining <= 0 or self._closed or self._paused_until > deadline:
                    return self._drop_locked("closed" if self._closed else "queue_full")
                self._space.wait(remaining)
            return True
        if policy == "drop_oldest":
            q = self._queue
            while q and (len(q) >= self._max_size or self._queue_bytes + size > self._max_bytes):
                self._pop_oldest_locked()
                self._c["dropped"] += 1
                self._c["dropped_queue_full"] += 1
                self._undelivered += 1
            return True
        return self._drop_locked("queue_full")

    def _drop_locked(self, reason: str) -> bool:
        # Refused at the door: counted as submitted here, since it never gets a sequence number.
        self._c["submitted"] += 1
        self._c["dropped"] += 1
        self._c["dropped_" + reason] += 1
        self._undelivered += 1
        return False

    def _count_dropped(self, reason: str) -> bool:
        with self._lock:
            return self._drop_locked(reason)

    def _start_thread_locked(self) -> None:
        if self._thread_failed:
            return
        thread = threading.Thread(target=self._run, name=f"loghandler-flusher:{self.dataset}",
                                  daemon=True)
        try:
            thread.start()
        except RuntimeError:
            # "can't create new thread at interpreter shutdown": the exit hook sends what is
            # queued on its own thread instead.
            self._thread_failed = True
            return
        self._thread = thread
        _warn_if_uwsgi_without_threads()

    # ------------------------------------------------------------------ flush / close / stats

    def flush(self, timeout: float | None = None) -> bool:
        """Send what is queued now and wait until it is settled.

        Returns True when everything queued at the call was delivered; False when any of it was
        dropped, failed or spooled, or when ``timeout`` (default: ``shutdown_timeout``) passed.
        """
        try:
            return self._flush(timeout)
        except Exception:
            return False

    def _flush(self, timeout: float | None) -> bool:
        if os.getpid() != self._pid:
            self._after_fork_in_child()
        if in_sender_thread():
            return False  # waiting for ourselves would never end
        timeout = self.options.shutdown_timeout if timeout is None else max(0.0, timeout)
        deadline = _monotonic() + timeout
        if self._close_deadline is not None:
            # Closed already (the exit hook ran): logging.shutdown()'s flush() must not add a
            # second shutdown_timeout to the exit.
            deadline = min(deadline, self._close_deadline + 0.2)
        with self._lock:
            target = self._taken + len(self._queue)
            before = self._undelivered
            if self._settled_through_locked() >= target:
                return True
            self._force = True
            thread_ok = self._thread is not None and self._thread.is_alive()
            if not thread_ok and not self._closed and not self._thread_failed:
                self._thread = None
                self._start_thread_locked()
                thread_ok = self._thread is not None
        self._wake.set()
        if not thread_ok:
            self._drain_on_this_thread(deadline)
        elif logging_lock_held():
            return False
        with self._lock:
            while self._settled_through_locked() < target:
                remaining = deadline - _monotonic()
                if remaining <= 0:
                    return False
                self._progress.wait(min(remaining, 0.25))
            return self._undelivered == before

    def close(self, timeout: float | None = None) -> None:
        """Flush, then stop the flusher thread. Idempotent; bounded by ``timeout``.

        ``timeout`` defaults to ``shutdown_timeout``. What cannot be delivered in time is spooled
        (with ``spool_dir``) or counted as ``dropped_shutdown``. Later submits are dropped.
        """
        try:
            timeout = self.options.shutdown_timeout if timeout is None else max(0.0, timeout)
            self._begin_close(_monotonic() + timeout)
            if not logging_lock_held():
                self._wait_closed()
                self._release_client()
        except Exception:
            pass

    def _release_client(self) -> None:
        # A client this library made (from plain arguments) is closed with the last shipper
        # using it, so its keep-alive sockets do not outlive the handlers. A client the user
        # passed in is theirs to close.
        if not self._owns_client:
            return
        thread = self._thread
        if thread is not None and thread.is_alive():
            return  # still sending (close() under logging's lock): the exit hook cleans up
        others = [s for s in lifecycle.live_shippers()
                  if s is not self and s._client is self._client and not s._closed]
        if not others:
            self._client.close()

    def _begin_close(self, deadline: float) -> None:
        if os.getpid() != self._pid:
            self._after_fork_in_child()
        with self._lock:
            if self._close_deadline is None or deadline < self._close_deadline:
                self._close_deadline = deadline
            self._closed = True
            self._force = True
            self._update_fast_path_locked()
            self._space.notify_all()
        self._interrupt.set()
        self._wake.set()

    def _wait_closed(self) -> None:
        deadline = self._close_deadline if self._close_deadline is not None else _monotonic()
        thread = self._thread
        if thread is not None and thread.is_alive() and thread is not threading.current_thread():
            # A little grace past the deadline: the flusher settles the rest as "shutdown"
            # right at the deadline and needs a moment to do it.
            thread.join(max(0.0, deadline - _monotonic()) + 0.2)
            if thread.is_alive():
                self._abandon()
        elif not in_sender_thread():
            self._drain_on_this_thread(deadline)

    def _abandon(self) -> None:
        """The flusher is stuck past the deadline in one request (a service that accepts and
        never answers): take its events over on this thread, spool them or count them, and let
        the flusher count nothing more. The batch in flight may then arrive twice: the request
        might still succeed (at-least-once)."""
        with self._lock:
            if self._abandoned:
                return
            self._abandoned = True
            self._account_locked()
            pop = self._pop_oldest_locked
            queued = [pop() for _ in range(len(self._queue))]
            n = self._inflight + len(queued)
            chunks = [c for c in (self._posting, *reversed(self._stack)) if c is not None]
            carry = list(self._carry)
            self._inflight = 0
            self._inflight_first = self._taken + 1
            group, reason = "dropped", "shutdown"
        if n and self._spool is not None:
            parts = [p for c in chunks for p in c.as_parts()] + carry
            parts.extend(encoding.encode(e) for e in item_events(queued, self.options.fields))
            try:
                self._bump("spool_dropped", self._spool.write(parts))
                group, reason = "spooled", ""
            except Exception as exc:
                self._report("spool_write", f"could not write to the spool: {exc}")
        with self._lock:
            self._c[group] += n
            if reason:  # "spooled" has no breakdown by reason
                self._c[f"{group}_{reason}"] += n
            self._undelivered += n
            self._progress.notify_all()

    def stats(self) -> Stats:
        """A consistent snapshot of the counters."""
        with self._lock:
            values = dict(self._c)
            queued = len(self._queue)
            values["submitted"] += self._taken + queued
            values["queued"] = queued + self._inflight
        return Stats(**values)

    def __enter__(self) -> Shipper:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _settled_through_locked(self) -> int:
        if self._inflight:
            return self._inflight_first - 1
        return self._taken

_uwsgi_checked = False


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
            print_line("loghandler: uWSGI runs without --enable-threads: the background thread "
                       "that ships events will not run. Start uWSGI with --enable-threads")
    except Exception:
        pass


def _estimate(event: dict[str, Any]) -> int:
    # Rough memory cost of a queued event (events.py, "the memory model").
    size = SUBMIT_EVENT_SIZE
    for value in event.values():
        size += SUBMIT_FIELD_SIZE
        if type(value) is str:
            size += len(value)
    return size


def make_shipper(dataset: str | None, client: Client | None, shipper: Shipper | None,
                 options: dict[str, Any]) -> Shipper:
    """The shipper for a front end (handler, processor) built from its arguments."""
    if shipper is not None:
        if options or client is not None or dataset is not None:
            raise ConfigurationError(
                "pass either shipper=... or dataset/client/options, not both: the shipper "
                "already has its dataset, client and options"
            )
        if not isinstance(shipper, Shipper):
            raise ConfigurationError("shipper must be a loghandler.Shipper")
        return shipper
    client_args, shipper_args = split_options(options)
    if client is None:
        client = shared_client(**client_args)
        shipper = Shipper(client, dataset, **shipper_args)
        shipper._owns_client = True
        return shipper
    elif client_args:
        raise ConfigurationError(
            f"pass either client=... or Client arguments ({', '.join(sorted(client_args))}), "
            "not both"
        )
    return Shipper(client, dataset, **shipper_args)
