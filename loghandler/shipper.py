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
import random
import sys
import threading
import time
import zlib
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from . import encoding, lifecycle
from .client import Client, dataset_path, raise_for_status, shared_client
from .config import ShipperOptions, resolve_dataset, split_options
from .errors import ApiError, ConfigurationError, Error, TransportError, redact

if TYPE_CHECKING:
    from .spool import Spool

__all__ = ["Shipper", "Stats", "make_shipper"]

_monotonic = time.monotonic

# Threads currently doing loghandler's own I/O (the flusher threads, and a closing thread that
# sends synchronously at interpreter exit). Anything they log -- urllib3's debug lines, a user's
# on_error callback -- is never shipped: that is how a handler on the root logger at DEBUG
# avoids shipping its own HTTP logs, forever.
_SENDERS: set[int] = set()
_get_ident = threading.get_ident


def in_sender_thread() -> bool:
    return _get_ident() in _SENDERS


def _logging_lock_held() -> bool:
    # dictConfig() and logging.shutdown(handlers) call flush()/close() holding logging's module
    # lock; a flusher that logs (urllib3) may be waiting for that lock. Waiting for it from there
    # would deadlock, so such calls hand the work to the flusher and return at once.
    import logging

    owned = getattr(logging._lock, "_is_owned", None)  # type: ignore[attr-defined]
    try:
        return bool(owned and owned())
    except Exception:
        return False


@dataclass(frozen=True)
class Stats:
    """A snapshot of a shipper's counters (events unless the name says otherwise).

    ``submitted == delivered + dropped + failed + spooled + queued`` always holds.
    """

    submitted: int = 0
    delivered: int = 0
    dropped: int = 0
    failed: int = 0
    spooled: int = 0
    queued: int = 0
    retried: int = 0
    batches: int = 0
    bytes_sent: int = 0
    # dropped, by reason
    dropped_queue_full: int = 0
    dropped_too_large: int = 0
    dropped_closed: int = 0
    dropped_shutdown: int = 0
    dropped_invalid: int = 0
    # failed, by reason
    failed_rejected: int = 0
    failed_auth: int = 0
    failed_not_found: int = 0
    failed_client_error: int = 0
    failed_retries_exhausted: int = 0
    # spool
    replayed: int = 0  # events delivered from the spool (not part of the invariant above)
    replay_rejected: int = 0  # events from the spool the service refused for good
    spool_dropped: int = 0  # spooled events deleted to keep the spool under max_spool_bytes
    spool_corrupt: int = 0  # spool files found damaged and moved aside
    # records our own I/O threads emitted and that were deliberately not shipped
    suppressed: int = 0


_STAT_FIELDS = tuple(f.name for f in fields(Stats))
# Terminal outcomes, as (counter group, reason). Which of them go to the spool when one is set.
_SPOOLABLE = frozenset({"retries_exhausted", "auth", "not_found", "shutdown"})
# Report causes about single events rather than about the service being reachable.
_EVENT_CAUSES = frozenset({"rejected", "too_large"})


class _Outcome:
    __slots__ = ("error", "kind")

    def __init__(self, kind: str, error: BaseException | None = None) -> None:
        self.kind = kind  # delivered | split | rejected | auth | not_found | client_error |
        self.error = error  # retries_exhausted | shutdown


class _Chunk:
    """Events on their way: dicts encoded as one body (the fast path), or encoded one by one.

    Encoding a whole batch in one call is several times cheaper than event by event; the
    per-event form is needed only to cut by bytes, to split (413 / 400) and to spool.
    """

    __slots__ = ("_body", "events", "parts")

    def __init__(self, events: list[dict[str, Any]] | None = None,
                 parts: list[bytes] | None = None, body: bytes | None = None) -> None:
        self.events = events
        self.parts = parts
        self._body = body

    def __len__(self) -> int:
        return len(self.parts) if self.parts is not None else len(self.events or ())

    def body(self) -> bytes:
        if self._body is None:
            self._body = b"[" + b",".join(self.as_parts()) + b"]"
        return self._body

    def as_parts(self) -> list[bytes]:
        if self.parts is None:
            encode = encoding.encode
            self.parts = [encode(e) for e in self.events or ()]
        return self.parts

    def halves(self) -> tuple[_Chunk, _Chunk]:
        if self.events is not None:
            mid = len(self.events) // 2
            return _Chunk(self.events[:mid]), _Chunk(self.events[mid:])
        parts = self.as_parts()
        mid = len(parts) // 2
        return _Chunk(parts=parts[:mid]), _Chunk(parts=parts[mid:])


class Shipper:
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
            from .spool import Spool

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
        self._c = dict.fromkeys(_STAT_FIELDS, 0)
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
        if self._thread is None:
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
        elif _logging_lock_held():
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
            if not _logging_lock_held():
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
                group, reason = "spooled", None
            except Exception as exc:
                self._report("spool_write", f"could not write to the spool: {exc}")
        with self._lock:
            self._c[group] += n
            if reason:
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

    # ------------------------------------------------------------------ flusher side

    def _run(self) -> None:
        _SENDERS.add(_get_ident())
        try:
            interval = self.options.flush_interval
            if self._spool is not None:
                self._replay_spool()
            while True:
                timed_out = False
                if not self._closed:
                    timed_out = not self._wake.wait(interval)
                with self._lock:
                    self._wake.clear()
                    self._wake_pending = False
                    self._update_fast_path_locked()
                    force, self._force = self._force or timed_out, False
                    closed = self._closed
                with self._send_lock:
                    self._send_available(partial=force or closed)
                    if closed:
                        if self._deadline_passed():
                            self._settle_leftovers_at_deadline()
                        with self._lock:
                            if not self._queue and not self._inflight:
                                return
                if self._spool is not None and not closed and (
                    _monotonic() - self._last_replay >= interval
                ):
                    # Time-based, not on idle wake-ups only: under steady load the flusher is
                    # never idle, and the spool must still drain, interleaved with new events.
                    self._replay_spool()
        except BaseException as exc:  # never let the thread die silently
            self._report("internal", f"the flusher thread stopped on an internal error: "
                                     f"{type(exc).__name__}: {exc}")
            self._call_on_error(exc)
        finally:
            _SENDERS.discard(_get_ident())
            with self._lock:
                self._progress.notify_all()

    def _drain_on_this_thread(self, deadline: float) -> None:
        """Send on the calling thread: used when no flusher thread can run (interpreter exit)."""
        if not self._send_lock.acquire(timeout=max(0.0, deadline - _monotonic())):
            return
        ident = _get_ident()
        _SENDERS.add(ident)
        try:
            with self._lock:
                if self._close_deadline is None or deadline < self._close_deadline:
                    self._close_deadline = deadline
            self._send_available(partial=True)
            if self._deadline_passed():
                self._settle_leftovers_at_deadline()
        finally:
            _SENDERS.discard(ident)
            self._send_lock.release()

    def _deadline_passed(self) -> bool:
        d = self._close_deadline
        return d is not None and (self._gave_up or _monotonic() >= d)

    def _send_available(self, partial: bool) -> None:
        """Send batches until the queue is drained (or only a partial batch is left)."""
        carry: list[bytes] = []
        self._carry = carry
        try:
            while not self._deadline_passed():
                batch = self._take_batch(carry, partial)
                if batch is None:
                    break
                self._deliver(batch)
        finally:
            if carry:  # only when the close deadline cut the loop short
                self._fail(_Chunk(parts=carry), "shutdown", None)

    def _take_batch(self, carry: list[bytes], partial: bool) -> _Chunk | None:
        """Cut the next batch: up to ``batch_size`` events and ``max_batch_bytes`` encoded bytes.

        ``carry`` holds encoded events already taken from the queue (in flight) that did not fit
        in the previous batch; they go first.
        """
        max_n = self._max_batch
        limit = self._max_batch_bytes
        while True:
            with self._lock:
                q = self._queue
                if not carry:
                    if not q:
                        return None
                    if not partial and len(q) < max_n and self._queue_bytes < self._wake_bytes:
                        return None
                take = min(max_n - len(carry), len(q))
                events: list[dict[str, Any]] = []
                if take > 0:
                    if self._inflight == 0:
                        self._inflight_first = self._enq_seq - len(q) + 1
                    n = len(q)
                    if take == n:
                        events = list(q)
                        q.clear()
                        self._queue_bytes = 0
                    else:
                        popleft = q.popleft
                        events = [popleft() for _ in range(take)]
                        # Sizes are not kept per event (that would cost the hot path a tuple):
                        # the byte count shrinks in proportion, and is exact again at empty.
                        self._queue_bytes -= self._queue_bytes * take // n
                    self._inflight += take
                    if self._overflow == "block":
                        self._space.notify_all()
            if not carry:
                body = encoding.encode_many(events)
                if body is not None and len(body) <= limit:
                    return _Chunk(events, body=body)
            # Too big for one request, or a value the fast path refused: event by event.
            parts = carry[:]
            carry.clear()
            encode = encoding.encode
            parts.extend(encode(event) for event in events)
            batch: list[bytes] = []
            total = 2  # the brackets
            for i, part in enumerate(parts):
                size = len(part) + (1 if batch else 0)
                if total + size > limit:
                    if not batch:
                        # One event bigger than a whole batch: the service could never take it.
                        # It is the oldest event in flight, so settling it now keeps the order.
                        self._settle(1, "dropped", "too_large")
                        continue
                    carry.extend(parts[i:])
                    break
                batch.append(part)
                total += size
            if batch:
                return _Chunk(parts=batch)

    def _deliver(self, batch: _Chunk) -> None:
        # A stack of sub-batches, first half on top: 413 splits, 400 bisects to the bad events.
        stack = [batch]
        self._stack = stack
        while stack:
            chunk = stack.pop()
            self._posting = chunk
            outcome = self._post(chunk)
            self._posting = None
            kind = outcome.kind
            if kind == "delivered":
                self._settle(len(chunk), "delivered")
                self._recovered()
            elif kind in ("split", "rejected") and len(chunk) > 1:
                first, second = chunk.halves()
                stack.append(second)
                stack.append(first)
            elif kind in ("split", "rejected"):
                if kind == "split":
                    self._settle(1, "dropped", "too_large")
                else:
                    self._settle(1, "failed", "rejected")
                self._single_refused(kind, outcome.error)
            else:
                self._fail(chunk, kind, outcome.error)

    def _single_refused(self, kind: str, error: BaseException | None) -> None:
        if error is not None:
            self._call_on_error(error)
        if kind == "split":
            self._report("too_large", "the service refused an event as too large (HTTP 413); "
                         "it was dropped and counted in stats().dropped_too_large")
        else:
            self._report("rejected", f"the service rejected an event (HTTP 400){_said(error)}; "
                         "the rest of its batch was delivered. Rejected events are counted in "
                         "stats().failed_rejected")

    def replay_parts(self, parts: list[bytes]) -> list[bytes]:
        """Send encoded events read back from the spool, one attempt per request.

        Returns what is still undelivered (empty when done). Events the service refuses for
        good (400 / 413 down to one event) are counted in ``replay_rejected`` and not returned.
        """
        stack = [_Chunk(parts=parts)]
        while stack:
            chunk = stack.pop()
            outcome = self._post(chunk, max_retries=0)
            kind = outcome.kind
            if kind == "delivered":
                self._bump("replayed", len(chunk))
                self._recovered()
            elif kind in ("split", "rejected") and len(chunk) > 1:
                first, second = chunk.halves()
                stack.append(second)
                stack.append(first)
            elif kind in ("split", "rejected", "client_error"):
                self._bump("replay_rejected", len(chunk))
                self._single_refused(kind, outcome.error)
            else:
                remaining = [chunk, *reversed(stack)]
                return [part for c in remaining for part in c.as_parts()]
        return []

    def _fail(self, chunk: _Chunk, reason: str, error: BaseException | None) -> None:
        if self._abandoned:
            return
        if self._spool is not None and reason in _SPOOLABLE:
            try:
                dropped = self._spool.write(chunk.as_parts())
            except Exception as exc:
                self._report("spool_write", f"could not write to the spool: {exc}")
                self._call_on_error(exc)
            else:
                self._settle(len(chunk), "spooled")
                if dropped:
                    self._bump("spool_dropped", dropped)
                return
        if reason == "shutdown":
            self._gave_up = True  # the deadline is (about to be) reached: stop trying the rest
            self._settle(len(chunk), "dropped", "shutdown")
        else:
            self._settle(len(chunk), "failed", reason)
            if error is not None:
                self._call_on_error(error)

    def _bump(self, counter: str, n: int = 1) -> None:
        with self._lock:
            self._c[counter] += n

    def _settle(self, n: int, group: str, reason: str | None = None) -> None:
        c = self._c
        with self._lock:
            if self._abandoned:
                return  # the closing thread has accounted for these already
            c[group] += n
            if reason is not None:
                c[f"{group}_{reason}"] += n
            if group != "delivered":
                self._undelivered += n
            self._inflight -= n
            self._inflight_first += n
            self._progress.notify_all()

    def _settle_leftovers_at_deadline(self) -> None:
        """The close deadline passed: spool or drop everything still queued, at once."""
        with self._lock:
            items = list(self._queue)
            self._queue.clear()
            self._queue_bytes = 0
            if items:
                if self._inflight == 0:
                    self._inflight_first = self._enq_seq - len(items) + 1
                self._inflight += len(items)
        if items:
            self._fail(_Chunk(items), "shutdown", None)

    # ------------------------------------------------------------------ one request, retried

    def _post(self, chunk: _Chunk, max_retries: int | None = None) -> _Outcome:
        opts = self.options
        if max_retries is None:
            max_retries = opts.max_retries
        body = chunk.body()
        headers = None
        if opts.compression == "gzip":
            comp = zlib.compressobj(opts.compression_level, zlib.DEFLATED, 31)
            body = comp.compress(body) + comp.flush()
            headers = {"Content-Encoding": "gzip"}
        attempt = 0
        while True:
            if not self._wait_until(self._paused_until):
                return _Outcome("shutdown")
            timeout = None
            if self._close_deadline is not None:
                timeout = self._close_deadline - _monotonic()
                if timeout <= 0:
                    return _Outcome("shutdown")
            retry_after = None
            try:
                resp = self._client.send("POST", self._path, body, headers=headers,
                                         timeout=timeout)
            except TransportError as exc:
                error: Error = exc
            else:
                status = resp.status
                if 200 <= status < 300:
                    with self._lock:
                        self._c["bytes_sent"] += len(body)
                        self._c["batches"] += 1
                    return _Outcome("delivered")
                try:
                    raise_for_status(resp, what=f"ingest into dataset {self.dataset!r}",
                                     dataset=self.dataset)
                except ApiError as exc:
                    error = exc
                if status == 413:
                    return _Outcome("split", error)
                if status == 400:
                    return _Outcome("rejected", error)
                if status in (401, 403):
                    return self._auth_failed(error)
                if status == 404:
                    self._report("not_found", str(error))
                    return _Outcome("not_found", error)
                retry_after = resp.retry_after
                if not (status in (408, 429) or status >= 500):
                    self._report(f"http_{status}", str(error))
                    return _Outcome("client_error", error)
                if retry_after is not None and status in (429, 503):
                    # The service asked everyone to wait: pause all sending, not just this batch.
                    with self._lock:
                        self._paused_until = max(self._paused_until,
                                                 _monotonic() + min(retry_after, 3600.0))
                        self._space.notify_all()
            attempt += 1
            if attempt > max_retries:
                self._report("retries_exhausted",
                             f"could not deliver a batch of {len(chunk)} events after "
                             f"{attempt} attempts: {error}")
                return _Outcome("retries_exhausted", error)
            with self._lock:
                self._c["retried"] += 1
            cap = min(opts.max_retry_delay, opts.retry_backoff * (2 ** (attempt - 1)))
            delay = random.uniform(0, cap)  # full jitter
            if retry_after is not None:
                delay = max(delay, min(retry_after, 3600.0))
            if not self._wait_until(_monotonic() + delay):
                return _Outcome("shutdown", error)

    def _auth_failed(self, error: Error) -> _Outcome:
        self._call_on_error(error)
        where = "spooled" if self._spool is not None else "counted in stats().failed_auth"
        self._report("auth", f"{error}. The batch was {where}; new events stay queued (bounded) "
                             f"and sending pauses {self._auth_delay:g} s before the next try")
        # Back off hard instead of hammering the service with a bad token; double each time.
        with self._lock:
            self._paused_until = _monotonic() + self._auth_delay
            self._space.notify_all()  # threads blocked for room give up now (overflow=block)
        self._auth_delay = min(self._auth_delay * 2, 600.0)
        return _Outcome("auth", error)

    def _wait_until(self, until: float) -> bool:
        """Sleep until ``until``. False when close()'s deadline comes first: give up now."""
        while True:
            now = _monotonic()
            if now >= until:
                return True
            deadline = self._close_deadline
            if deadline is not None:
                if until > deadline:
                    return False
                time.sleep(until - now)
                return True
            # close() sets the interrupt so that a long backoff is re-measured against its
            # deadline at once.
            self._interrupt.wait(until - now)

    # ------------------------------------------------------------------ spool

    def _replay_spool(self) -> None:
        """Re-send spooled batches, oldest first, one file at a time, while delivery works."""
        spool = self._spool
        self._last_replay = _monotonic()
        if spool is None or self._closed:
            return
        try:
            spool.replay(self)
        except Exception as exc:
            self._report("spool_replay", f"spool replay failed: {exc}")
            self._call_on_error(exc)

    # ------------------------------------------------------------------ reporting

    def _recovered(self) -> None:
        # Only outages end; a rejected or too-large event says nothing about the service, so
        # those stay reported once for the shipper's life instead of after every good batch.
        if self._reported and not self._reported <= _EVENT_CAUSES:
            ended = self._reported - _EVENT_CAUSES
            self._reported &= _EVENT_CAUSES
            self._auth_delay = self.options.auth_retry_delay
            _stderr(f"loghandler: dataset {self.dataset!r}: delivering again "
                    f"(after: {', '.join(sorted(ended))})")

    def _report(self, cause: str, message: str) -> None:
        """One stderr line per cause, until delivery recovers."""
        if cause not in self._reported:
            self._reported.add(cause)
            _stderr(f"loghandler: dataset {self.dataset!r}: {message}")

    def _call_on_error(self, error: BaseException) -> None:
        callback = self.options.on_error
        if callback is None:
            return
        try:
            callback(error)
        except Exception:
            pass


def _said(error: BaseException | None) -> str:
    if isinstance(error, ApiError):
        from .errors import body_detail

        return body_detail(error.body)
    return ""


def _stderr(line: str) -> None:
    try:
        stream = sys.stderr
        if stream is not None:
            stream.write(redact(line) + "\n")
            stream.flush()
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
