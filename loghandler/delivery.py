"""The flusher side of a ``Shipper``: cutting batches, posting them with retries, splitting on
413, bisecting on 400, spooling what cannot be delivered, replaying the spool, reporting.

``Delivery`` is a mixin of ``Shipper`` (shipper.py holds the application side: the queue, flush,
close); both work on the same state, guarded by the shipper's lock, and no lock is held across
I/O.
"""

from __future__ import annotations

import random
import time
import zlib
from typing import TYPE_CHECKING, Any

from . import encoding
from .client import raise_for_status
from .errors import ApiError, Error, TransportError, body_detail, print_line
from .events import item_events, item_size
from .guard import _SENDERS, _get_ident

if TYPE_CHECKING:
    import threading
    from collections import deque

    from .client import Client
    from .config import ShipperOptions
    from .spool import Spool

__all__ = ["Delivery"]

_monotonic = time.monotonic

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


class Delivery:
    """The flusher thread's work (see the module docstring)."""

    # State owned by Shipper, set in Shipper._reset_state (declared for type checkers).
    dataset: str
    options: ShipperOptions
    _client: Client
    _path: str
    _spool: Spool | None
    _lock: threading.RLock
    _progress: threading.Condition
    _space: threading.Condition
    _wake: threading.Event
    _interrupt: threading.Event
    _send_lock: threading.Lock
    _queue: deque[tuple[Any, ...]]
    _queue_bytes: int
    _taken: int
    _accounted: int
    _inflight: int
    _inflight_first: int
    _wake_pending: bool
    _force: bool
    _closed: bool
    _close_deadline: float | None
    _gave_up: bool
    _abandoned: bool
    _posting: _Chunk | None
    _stack: list[_Chunk]
    _carry: list[bytes]
    _last_replay: float
    _paused_until: float
    _auth_delay: float
    _reported: set[str]
    _exit_summary: bool
    _exit_cause: str | None
    _c: dict[str, int]
    _undelivered: int
    _max_batch: int
    _max_batch_bytes: int
    _wake_bytes: int
    _overflow: str

    def _update_fast_path_locked(self) -> None:  # Shipper's
        raise NotImplementedError

    def _account_locked(self) -> None:  # Shipper's
        raise NotImplementedError

    def _pop_oldest_locked(self) -> tuple[Any, ...]:  # Shipper's
        raise NotImplementedError

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
                self._account_locked()
                # Only accounted events are taken: the fast path may append more meanwhile.
                n = self._accounted - self._taken
                if not carry:
                    if n <= 0:
                        return None
                    if not partial and n < max_n and self._queue_bytes < self._wake_bytes:
                        return None
                take = min(max_n - len(carry), n)
                items: list[tuple[Any, ...]] = []
                if take > 0:
                    if self._inflight == 0:
                        self._inflight_first = self._taken + 1
                    popleft = self._queue.popleft
                    items = [popleft() for _ in range(take)]
                    self._queue_bytes -= sum(map(item_size, items))  # all accounted
                    self._taken += take
                    if self._accounted == self._taken:
                        self._queue_bytes = 0
                    self._inflight += take
                    self._update_fast_path_locked()
                    if self._overflow == "block":
                        self._space.notify_all()
            events = item_events(items, self.options.fields)
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
            if error is not None and self._exit_summary and self._exit_cause is None:
                self._exit_cause = f"last error: {error}"
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
            self._account_locked()
            first = self._taken + 1
            pop = self._pop_oldest_locked
            items = [pop() for _ in range(len(self._queue))]
            if items:
                if self._inflight == 0:
                    self._inflight_first = first
                self._inflight += len(items)
        if items:
            events = item_events(items, self.options.fields)
            self._fail(_Chunk(events), "shutdown", None)

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
                self._report_or_defer("retries_exhausted",
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
            print_line(f"loghandler: dataset {self.dataset!r}: delivering again "
                    f"(after: {', '.join(sorted(ended))})")

    def _report(self, cause: str, message: str) -> None:
        """One stderr line per cause, until delivery recovers."""
        if cause not in self._reported:
            self._reported.add(cause)
            print_line(f"loghandler: dataset {self.dataset!r}: {message}")

    def _report_or_defer(self, cause: str, message: str) -> None:
        # During the exit hook's close, the hook's summary line says it (one line at exit).
        if self._exit_summary:
            if self._exit_cause is None and cause not in self._reported:
                self._exit_cause = message
        else:
            self._report(cause, message)

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
        return body_detail(error.body)
    return ""
