"""The shipping engine shared by the logging handler and the structlog processor.

One ``Shipper`` per dataset: a bounded queue that application threads append to in O(1), and one
daemon flusher thread that cuts batches, encodes them, compresses them and posts them, retrying
with backoff. Nothing here ever blocks an application thread on I/O or raises into it.

Accounting invariant, true of every ``stats()`` snapshot::

    submitted == delivered + dropped + failed + spooled + queued

Sequence numbers: every event that enters the queue gets the next number. The queue always holds
a contiguous range ending at ``_enq_seq``, and the events in flight (taken by the flusher, not yet
settled) are the contiguous range that starts at ``_inflight_first``. So "everything up to N is
settled" is a comparison, with no per-event bookkeeping.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping
from typing import Any

from . import encoding, lifecycle
from .client import Client, dataset_path, shared_client
from .config import ShipperOptions, resolve_dataset, split_options
from .delivery import Delivery, _Chunk
from .errors import ConfigurationError, print_line
from .guard import _SENDERS, _get_ident, in_sender_thread, logging_lock_held
from .spool import Spool
from .stats import STAT_FIELDS, Stats

__all__ = ["Shipper", "Stats", "make_shipper"]

_monotonic = time.monotonic

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
        self._queue: deque[dict[str, Any]] = deque()
        self._queue_bytes = 0
        self._enq_seq = 0
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
        self._fast_bytes = 0

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
            return self._put(event, _estimate(event))
        except Exception:
            return False

    def _put(self, event: dict[str, Any], size: int) -> bool:
        """Queue an event the caller owns (the handler and processor build theirs fresh).

        The caller has checked ``in_sender_thread()``. This is the hot path of every log call:
        while the queue is below the wake-up point, one comparison decides and nothing else is
        touched (``submitted`` is derived: enqueued plus refused at the door).
        """
        with self._lock:
            q = self._queue
            held = self._queue_bytes + size
            if len(q) < self._fast_len and held <= self._fast_bytes:
                q.append(event)
                self._queue_bytes = held
                self._enq_seq += 1
                return True
            return self._put_slow(event, size)

    def _put_slow(self, event: dict[str, Any], size: int) -> bool:
        # Under self._lock. Everything _put's fast path leaves out: closed, first event (start
        # the thread), a full batch (wake the flusher), a full queue (overflow policy).
        if self._closed:
            return self._drop_locked("closed")
        q = self._queue
        held = self._queue_bytes + size
        if len(q) >= self._max_size or held > self._max_bytes:
            if not self._make_room_locked(size):
                return False
            held = self._queue_bytes + size
        q.append(event)
        self._queue_bytes = held
        self._enq_seq += 1
        thread = self._thread
        if thread is None or (not thread.is_alive() and not self._closed):
            # First event, or the flusher died on an internal error (reported once): start one.
            self._start_thread_locked()
        # Wake the flusher once per full batch, not per event: setting an Event costs more
        # than everything else here.
        if not self._wake_pending and (
            len(q) >= self._max_batch or held >= self._wake_bytes
        ):
            self._wake_pending = True
            self._wake.set()
        self._update_fast_path_locked()
        return True

    def _update_fast_path_locked(self) -> None:
        """Set the bounds under which _put may skip _put_slow."""
        if self._closed or (self._thread is None and not self._thread_failed):
            self._fast_len, self._fast_bytes = 0, 0
        elif self._wake_pending:
            self._fast_len, self._fast_bytes = self._max_size, self._max_bytes
        else:
            self._fast_len = min(self._max_size, self._max_batch)
            self._fast_bytes = min(self._max_bytes, self._wake_bytes)

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
            while len(self._queue) >= self._max_size or self._queue_bytes + size > self._max_bytes:
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
                self._queue_bytes -= self._queue_bytes // len(q)
                q.popleft()
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
            target = self._enq_seq
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
            n = self._inflight + len(self._queue)
            chunks = [c for c in (self._posting, *reversed(self._stack)) if c is not None]
            carry = list(self._carry)
            queued = list(self._queue)
            self._queue.clear()
            self._queue_bytes = 0
            self._inflight = 0
            self._inflight_first = self._enq_seq + 1
            group, reason = "dropped", "shutdown"
        if n and self._spool is not None:
            parts = [p for c in chunks for p in c.as_parts()] + carry
            parts.extend(encoding.encode(e) for e in queued)
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
            values["submitted"] += self._enq_seq
            values["queued"] = len(self._queue) + self._inflight
        return Stats(**values)

    def __enter__(self) -> Shipper:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _settled_through_locked(self) -> int:
        if self._inflight:
            return self._inflight_first - 1
        return self._enq_seq - len(self._queue)

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


# Rough memory cost of a queued event: a dict and its values. Used for max_queue_bytes, which
# bounds memory; the real encoded size is measured later, on the flusher thread.
EVENT_OVERHEAD = 400
FIELD_OVERHEAD = 80


def _estimate(event: dict[str, Any]) -> int:
    size = EVENT_OVERHEAD
    for value in event.values():
        size += FIELD_OVERHEAD
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
