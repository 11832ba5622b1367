"""A fault-injecting ingest receiver on loopback, for the fault suite and the soak.

It speaks just enough HTTP/1.1 (keep-alive, Content-Length or chunked bodies, gzip request
bodies) to take ``POST /v1/datasets/{name}/ingest`` from loghandler, and it misbehaves on
purpose, one scripted behaviour per request, then ``default`` (normally a plain 200)::

    with FaultServer([status(500), status(500)]) as srv:
        handler = IngestHandler("ds", url=srv.url, token="t", ...)

Behaviours are small frozen values built by the functions below (``status``, ``retry_after``,
``retry_after_date``, ``sleep``, ``hang_up``, ``reset``, ``closed_idle``, ``half_response``).
Two checks apply to every request whatever the script says, because they depend on the body: a
decoded body bigger than ``max_body`` gets 413, and a batch holding an event with
``"poison": true`` gets 400. Neither stores anything.

Every stored event is kept, parsed and in arrival order, in ``events`` (or only its
``keep_field`` value, for long soaks); every request is kept in ``requests`` with its arrival
time, sizes and outcome. ``stop()`` closes the port and every connection, ``start()`` listens
again on the same port. ``RandomFaults`` picks behaviours from a seeded RNG instead of a script.
"""

from __future__ import annotations

import collections
import dataclasses
import email.utils
import json
import random
import socket
import struct
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from helpers import decoded

__all__ = [
    "Behaviour",
    "FaultServer",
    "RandomFaults",
    "Request",
    "closed_idle",
    "half_response",
    "hang_up",
    "reset",
    "retry_after",
    "retry_after_date",
    "sleep",
    "status",
]

MAX_HEADER_BYTES = 64 * 1024
# A hard ceiling so a confused client cannot make the test process buffer without bound.
MAX_REQUEST_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class Behaviour:
    """What to do with one request.

    ``kind``: ``status`` (answer ``code``), ``sleep`` (wait ``seconds``, then hang up or answer),
    ``hang_up`` (read the request, close without a word), ``reset`` (read part of the body, then
    RST), ``closed_idle`` (RST at once, the request unread), ``half`` (store, then send headers
    promising a body and close halfway).
    ``store``: whether the events are stored before the misbehaviour; storing and then failing
    to tell the client is exactly the case where a retry duplicates events.
    """

    kind: str
    code: int = 200
    body: Any = None
    headers: tuple[tuple[str, str], ...] = ()
    seconds: float = 0.0
    retry_date_in: float | None = None  # 429 with an HTTP-date Retry-After this far ahead
    store: bool = False

    @property
    def label(self) -> str:
        if self.kind == "status":
            if self.code == 429:
                if self.retry_date_in is not None:
                    return "429-date"
                return "429-seconds" if self.headers else "429"
            return str(self.code)
        return self.kind + ("+stored" if self.store else "")


def status(code: int, body: Any = None, headers: Mapping[str, str] | None = None) -> Behaviour:
    """Answer ``code`` with a JSON ``body``. 2xx stores the events; anything else stores nothing."""
    return Behaviour("status", code=code, body=body,
                     headers=tuple((headers or {}).items()), store=200 <= code < 300)


def retry_after(seconds: float | str | None) -> Behaviour:
    """429 with ``Retry-After: <seconds>``, or without the header when ``seconds`` is None."""
    headers = {} if seconds is None else {"Retry-After": str(seconds)}
    return status(429, {"message": "slow down"}, headers)


def retry_after_date(seconds_ahead: float) -> Behaviour:
    """429 with ``Retry-After`` as an HTTP date, ``seconds_ahead`` from the moment of the answer."""
    return Behaviour("status", code=429, body={"message": "slow down"},
                     retry_date_in=seconds_ahead)


def sleep(seconds: float, *, then: int | None = None, store: bool = False) -> Behaviour:
    """Wait ``seconds`` (longer than the client's timeout), then hang up, or answer ``then``."""
    return Behaviour("sleep", code=then or 0, seconds=seconds, store=store)


def hang_up() -> Behaviour:
    """Read the whole request, then close the connection without answering (nothing stored)."""
    return Behaviour("hang_up")


def reset() -> Behaviour:
    """Read the headers and part of the body, then reset the connection (SO_LINGER 0)."""
    return Behaviour("reset")


def closed_idle() -> Behaviour:
    """Reset the connection at once, the request's body unread and nothing stored: what the
    client meets when the service closed a kept-alive connection (its idle timeout) just as
    the client sent the next request on it. Scripted after an answer, it comes on a kept-alive
    connection."""
    return Behaviour("closed_idle")


def half_response(*, store: bool = True) -> Behaviour:
    """(Store, then) send a 200 whose headers promise a body, send half of it and close."""
    return Behaviour("half", store=store)


OK = status(200, {"ingested": 0})


@dataclass
class Request:
    """One request as the server saw it."""

    arrived: float  # time.monotonic() when the request line was complete
    arrived_wall: float  # time.time() at the same moment (for HTTP-date checks)
    method: str = ""
    path: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    wire_bytes: int = 0  # body as sent (compressed or not)
    body_bytes: int = 0  # body after Content-Encoding was undone
    events: int = 0
    outcome: str = ""  # behaviour label, "413", "400-poison", or "broken" (client went away)
    stored: int = 0
    answered: float | None = None  # time.monotonic() just before the answer was sent
    retry_at_wall: float | None = None  # the instant an HTTP-date Retry-After named
    # The last request of its connection: when the client gave up waiting for its answer (its
    # timeout, on a busy host) it closed the connection, so a request it may not have seen
    # answered is always the last of one (check_accounting's allowance for duplicates).
    last_on_connection: bool = False


class RandomFaults:
    """A seeded source of behaviours: each request gets a fault with the given probabilities.

    ``weights`` pairs a behaviour with its probability; the rest of the mass goes to 200.
    """

    def __init__(self, seed: int, weights: Iterable[tuple[Behaviour, float]]) -> None:
        weights = list(weights)
        total = sum(p for _, p in weights)
        if not 0 <= total <= 1:
            raise ValueError("fault probabilities must add up to at most 1")
        self.seed = seed
        self._rng = random.Random(seed)
        self._choices = weights

    def next(self) -> Behaviour:
        x = self._rng.random()
        for behaviour, p in self._choices:
            if x < p:
                return behaviour
            x -= p
        return OK


class _Broken(Exception):
    """The client went away, or sent something we cannot read."""


class FaultServer:
    """A misbehaving ingest receiver on 127.0.0.1 (see the module docstring)."""

    def __init__(
        self,
        script: Iterable[Behaviour] = (),
        *,
        default: Behaviour = OK,
        faults: RandomFaults | None = None,
        max_body: int | None = None,
        poison_key: str = "poison",
        keep_field: str | None = None,
        port: int = 0,
        ssl_context: Any = None,
    ) -> None:
        self.default = default
        self.ssl_context = ssl_context  # an ssl.SSLContext: speak HTTPS instead
        self.handshake_errors: list[str] = []
        self.faults = faults
        self.max_body = max_body
        self.poison_key = poison_key
        self.keep_field = keep_field
        self.port = port
        self.events: list[Any] = []
        self.requests: list[Request] = []
        self.injected: collections.Counter[str] = collections.Counter()
        self._script: collections.deque[Behaviour] = collections.deque(script)
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._stopping = threading.Event()
        self._listener: socket.socket | None = None
        self._hold: socket.socket | None = None  # the port while stopped (_reserve)
        self._threads: set[threading.Thread] = set()
        self._conns: set[socket.socket] = set()
        self.accepted = 0  # connections accepted so far (keep-alive reuses one)

    # ------------------------------------------------------------------ life cycle

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FaultServer:
        """Listen (again) on the same port; SO_REUSEADDR lets us rebind right after stop()."""
        hold, self._hold = self._hold, None
        if hold is not None:
            hold.close()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        sock.listen(64)
        self.port = sock.getsockname()[1]
        self._stopping = threading.Event()
        self._listener = sock
        self._spawn(self._accept_loop, sock, self._stopping)
        return self

    def stop(self) -> None:
        """Stop listening and close every connection (connections are refused until start())."""
        self._stopping.set()
        sock, self._listener = self._listener, None
        if sock is not None:
            _shutdown(sock)
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            _shutdown(conn)
        for thread in list(self._threads):
            if thread is not threading.current_thread():
                thread.join(5)
        if sock is not None and self._hold is None:
            self._hold = _reserve(self.port)

    def __enter__(self) -> FaultServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def push(self, *behaviours: Behaviour) -> None:
        """Append behaviours to the script."""
        with self._lock:
            self._script.extend(behaviours)

    # ------------------------------------------------------------------ views for assertions

    def stored(self, key: str = "id") -> list[Any]:
        """The ``key`` field of every stored event, in order (duplicates kept)."""
        with self._lock:
            if self.keep_field is not None:
                return list(self.events)
            return [e.get(key) for e in self.events]

    def outcomes(self) -> list[str]:
        with self._lock:
            return [r.outcome for r in self.requests]

    def open_connections(self) -> int:
        """Connections open now (the client's end closes them: its pool was cleared)."""
        with self._lock:
            return len(self._conns)

    def wait_connections(self, n: int, timeout: float = 10.0) -> bool:
        """Wait until ``n`` connections are open (True), or the timeout passes (False)."""
        with self._lock:
            return self._changed.wait_for(lambda: len(self._conns) == n, timeout)

    def wait_events(self, n: int, timeout: float = 10.0) -> bool:
        """Wait until ``n`` events are stored (True), or the timeout passes (False)."""
        with self._lock:
            return self._changed.wait_for(lambda: len(self.events) >= n, timeout)

    def wait_requests(self, n: int, timeout: float = 10.0) -> bool:
        """Wait until ``n`` requests have been answered (or failed)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while sum(1 for r in self.requests if r.outcome) < n:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(remaining)
            return True

    # ------------------------------------------------------------------ threads

    def _spawn(self, target: Any, *args: Any) -> None:
        thread = threading.Thread(target=self._run_thread, args=(target, *args),
                                  name="faultserver", daemon=True)
        with self._lock:
            self._threads.add(thread)
        thread.start()

    def _run_thread(self, target: Any, *args: Any) -> None:
        try:
            target(*args)
        finally:
            with self._lock:
                self._threads.discard(threading.current_thread())

    def _accept_loop(self, sock: socket.socket, stopping: threading.Event) -> None:
        while not stopping.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                break
            if stopping.is_set():
                _shutdown(conn)
                break
            with self._lock:
                self._conns.add(conn)
                self.accepted += 1
                self._changed.notify_all()
            self._spawn(self._serve, conn, stopping)
        try:
            sock.close()
        except OSError:
            pass

    def _serve(self, conn: socket.socket, stopping: threading.Event) -> None:
        raw = conn
        last: list[Request] = []  # the connection's latest request
        try:
            if self.ssl_context is not None:
                conn.settimeout(10)
                try:
                    conn = self.ssl_context.wrap_socket(conn, server_side=True)
                    with self._lock:
                        self._conns.add(conn)
                except OSError as exc:
                    with self._lock:
                        self.handshake_errors.append(str(exc))
                    return
                conn.settimeout(None)
            reader = _Reader(conn)
            while not stopping.is_set():
                if not self._one_request(conn, reader, stopping, last):
                    break
        except (_Broken, OSError):
            pass
        finally:
            if last:
                last[0].last_on_connection = True
            with self._lock:
                self._conns.discard(conn)
                self._conns.discard(raw)
                self._changed.notify_all()
            try:
                conn.close()
            except OSError:
                pass

    def _next_behaviour(self) -> Behaviour:
        with self._lock:
            if self._script:
                return self._script.popleft()
        if self.faults is not None:
            return self.faults.next()
        return self.default

    # ------------------------------------------------------------------ one request

    def _one_request(self, conn: socket.socket, reader: _Reader, stopping: threading.Event,
                     last: list[Request] | None = None) -> bool:
        head = reader.read_head()
        if head is None:
            return False  # the client closed a kept-alive connection: normal
        req = Request(arrived=time.monotonic(), arrived_wall=time.time())
        if last is not None:
            last[:] = [req]
        lines = head.decode("latin-1").split("\r\n")
        try:
            req.method, req.path, _ = lines[0].split(" ", 2)
        except ValueError:
            raise _Broken("bad request line") from None
        for line in lines[1:]:
            name, _, value = line.partition(":")
            req.headers[name.strip().lower()] = value.strip()
        with self._lock:
            self.requests.append(req)
        behaviour = self._next_behaviour()
        try:
            return self._handle(conn, reader, req, behaviour, stopping)
        finally:
            if not req.outcome:
                req.outcome = "broken"
            with self._changed:
                self._changed.notify_all()

    def _handle(self, conn: socket.socket, reader: _Reader, req: Request, b: Behaviour,
                stopping: threading.Event) -> bool:
        if b.kind == "closed_idle":
            self._injected(req, b)
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()
            return False
        if b.kind == "reset":
            # Read part of the body only, so the client is (or may still be) mid-request.
            length = int(req.headers.get("content-length") or 0)
            reader.read_exact(length // 2)
            self._injected(req, b)
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()
            return False
        wire = reader.read_body(req.headers)
        req.wire_bytes = len(wire)
        try:
            body = decoded(wire, req.headers)
        except Exception:
            req.outcome = "400-encoding"
            self._send(conn, 400, {"message": "cannot decode body"})
            return True
        req.body_bytes = len(body)
        if self.max_body is not None and len(body) > self.max_body:
            req.outcome = "413"
            self._send(conn, 413, {"message": f"body over {self.max_body} bytes"})
            return True
        try:
            events = json.loads(body)
            if not isinstance(events, list) or not all(isinstance(e, dict) for e in events):
                raise ValueError("not a JSON array of objects")
        except ValueError as exc:
            req.outcome = "400-json"
            self._send(conn, 400, {"message": f"bad JSON: {exc}"})
            return True
        req.events = len(events)
        if any(e.get(self.poison_key) is True for e in events):
            req.outcome = "400-poison"
            self._send(conn, 400, {"message": "an event is poisoned"})
            return True
        if b.store:
            self._store(req, events)
        self._injected(req, b)
        if b.kind == "status":
            headers = list(b.headers)
            if b.retry_date_in is not None:
                when = time.time() + b.retry_date_in
                # HTTP dates have whole seconds: round up, so the date is never early.
                when = float(int(when) + 1)
                req.retry_at_wall = when
                headers.append(("Retry-After", email.utils.formatdate(when, usegmt=True)))
            body_obj = b.body if b.body is not None else {"ingested": req.stored}
            # Taken before sending: the client cannot have the answer earlier, so a wait it
            # starts on receipt ends after answered + its length (taken after, a busy host could
            # delay the stamp past the client's receipt, and the wait look short).
            req.answered = time.monotonic()
            self._send(conn, b.code, body_obj, headers)
            return True
        if b.kind == "sleep":
            if stopping.wait(b.seconds):
                return False
            if b.code:
                req.answered = time.monotonic()  # before sending, as above
                self._send(conn, b.code, {"ingested": req.stored})
                return True
            return False
        if b.kind == "hang_up":
            return False
        if b.kind == "half":
            payload = json.dumps({"ingested": req.stored, "padding": "x" * 64}).encode()
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n" % len(payload) + payload[:len(payload) // 2])
            return False
        raise AssertionError(f"unknown behaviour {b.kind!r}")

    def _injected(self, req: Request, b: Behaviour) -> None:
        req.outcome = b.label
        if b != OK:
            with self._lock:
                self.injected[b.label] += 1

    def _store(self, req: Request, events: list[dict[str, Any]]) -> None:
        with self._lock:
            if self.keep_field is None:
                self.events.extend(events)
            else:
                key = self.keep_field
                self.events.extend(e.get(key) for e in events)
            req.stored = len(events)

    @staticmethod
    def _send(conn: socket.socket, code: int, body: Any,
              headers: Iterable[tuple[str, str]] = ()) -> None:
        data = json.dumps(body).encode()
        head = [f"HTTP/1.1 {code} {_REASONS.get(code, 'Status')}",
                "Content-Type: application/json", f"Content-Length: {len(data)}"]
        head += [f"{k}: {v}" for k, v in headers]
        conn.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + data)


_REASONS = {200: "OK", 400: "Bad Request", 403: "Forbidden", 404: "Not Found",
            413: "Payload Too Large", 429: "Too Many Requests", 500: "Internal Server Error",
            502: "Bad Gateway", 503: "Service Unavailable"}


def _reserve(port: int) -> socket.socket | None:
    """The port held while the server is down: bound, not listening, so that connections are
    still refused, and without SO_REUSEADDR, so that no other server of the run (another
    worker's, binding port 0) is given it meanwhile: a test's client then met that server's
    403 instead of an outage (CI, 3.10's pure run). None when the port cannot be held (a
    connection of ours in TIME_WAIT on it): the outage is then as before."""
    hold = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        hold.bind(("127.0.0.1", port))
    except OSError:
        hold.close()
        return None
    return hold


def _shutdown(sock: socket.socket) -> None:
    # shutdown() wakes a thread blocked in accept()/recv() on the same socket; close() alone
    # does not on Linux.
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


class _Reader:
    """Buffered reads from a socket, for an HTTP/1.1 request stream."""

    def __init__(self, conn: socket.socket) -> None:
        self._conn = conn
        self._buf = b""

    def _fill(self) -> bool:
        data = self._conn.recv(65536)
        if not data:
            return False
        self._buf += data
        return True

    def read_head(self) -> bytes | None:
        while b"\r\n\r\n" not in self._buf:
            if len(self._buf) > MAX_HEADER_BYTES:
                raise _Broken("headers too long")
            if not self._fill():
                if self._buf:
                    raise _Broken("closed mid-headers")
                return None
        head, _, self._buf = self._buf.partition(b"\r\n\r\n")
        return head

    def read_exact(self, n: int) -> bytes:
        if n > MAX_REQUEST_BYTES:
            raise _Broken("body too long")
        while len(self._buf) < n:
            if not self._fill():
                raise _Broken("closed mid-body")
        data, self._buf = self._buf[:n], self._buf[n:]
        return data

    def read_line(self) -> bytes:
        while b"\r\n" not in self._buf:
            if len(self._buf) > MAX_HEADER_BYTES or not self._fill():
                raise _Broken("bad chunk line")
        line, _, self._buf = self._buf.partition(b"\r\n")
        return line

    def read_body(self, headers: Mapping[str, str]) -> bytes:
        if "chunked" in headers.get("transfer-encoding", "").lower():
            parts = []
            total = 0
            while True:
                size = int(self.read_line().split(b";")[0], 16)
                if size == 0:
                    while self.read_line():  # trailers
                        pass
                    return b"".join(parts)
                total += size
                if total > MAX_REQUEST_BYTES:
                    raise _Broken("body too long")
                parts.append(self.read_exact(size))
                self.read_exact(2)
        return self.read_exact(int(headers.get("content-length") or 0))


# --------------------------------------------------------------------------- test support

TOKEN = "lh-test-token-7f3a9c"  # distinctive, so a leak is easy to grep for
# Results of these behaviours never reach the client, so a retry may store the batch again.
UNKNOWN_OUTCOME = ("half+stored", "sleep+stored", "hang_up+stored")


class Front:
    """One front end (``"handler"`` or ``"processor"``) shipping to a FaultServer.

    Small retry delays and a long flush interval, so nothing leaves before ``flush()`` unless a
    test asks for it: scripted behaviours then meet the batches the test expects.
    """

    def __init__(self, kind: str, server: FaultServer, dataset: str = "faults",
                 **options: Any) -> None:
        import logging

        import loghandler

        options.setdefault("token", TOKEN)
        options.setdefault("url", server.url)
        options.setdefault("retry_backoff", 0.01)
        options.setdefault("max_retry_delay", 0.05)
        options.setdefault("flush_interval", 30.0)
        options.setdefault("shutdown_timeout", 5.0)
        self.kind = kind
        if kind == "handler":
            self.handler = loghandler.IngestHandler(dataset, **options)
            self.logger = logging.getLogger(f"faults.{id(self)}")
            self.logger.propagate = False
            self.logger.setLevel(logging.DEBUG)
            self.logger.addHandler(self.handler)
            self.front: Any = self.handler
        elif kind == "processor":
            self.front = loghandler.IngestProcessor(dataset, **options)
        else:
            raise ValueError(kind)
        self.shipper = self.front.shipper

    def emit(self, i: int, **fields: Any) -> None:
        if self.kind == "handler":
            self.logger.info("event %d", i, extra={"id": i, **fields})
        else:
            self.front(None, "info", {"event": f"event {i}", "id": i, **fields})

    def flush(self, timeout: float = 10.0) -> bool:
        return self.front.flush(timeout)

    def close(self, timeout: float = 5.0) -> None:
        self.shipper.close(timeout)
        if self.kind == "handler":
            self.logger.removeHandler(self.handler)
            self.handler.close()

    def stats(self) -> Any:
        return self.front.stats()


def check_accounting(stats: Any, server: FaultServer | None = None) -> None:
    """Exact accounting: every event is delivered, dropped, failed, spooled, still queued or
    unconfirmed; ``delivered`` is the number of distinct events the server stored, but for the
    unconfirmed ones it may have stored too (sent, their answer cut off by a deadline);
    duplicates only from requests whose outcome the client could not know (a fault cut the
    answer, or the client gave up waiting and closed the connection), at most the size of
    those requests."""
    assert stats.submitted == (stats.delivered + stats.dropped + stats.failed + stats.spooled
                               + stats.queued + stats.unconfirmed), stats
    # Every drop and failure has a reason: the per-reason counters add up to the totals.
    names = [f.name for f in dataclasses.fields(stats)]
    for group in ("dropped", "failed"):
        by_reason = sum(getattr(stats, n) for n in names if n.startswith(group + "_"))
        assert getattr(stats, group) == by_reason, (group, stats)
    if server is None:
        return
    ids = server.stored()
    distinct = set(ids)
    assert stats.delivered <= len(distinct) <= stats.delivered + stats.unconfirmed, (
        stats.delivered, stats.unconfirmed, len(distinct))
    # A request the client may not have seen answered: a fault that cut its answer, or one
    # answered after the client's own timeout (on a busy host, any request may be), which
    # leaves it the last of its connection (the client closes a connection it gave up on).
    allowance = sum(r.stored for r in server.requests
                    if r.outcome in UNKNOWN_OUTCOME or r.last_on_connection)
    assert len(ids) - len(distinct) <= allowance, (len(ids) - len(distinct), allowance)
