"""The local service: the real one's endpoints on loopback, standard library only.

``http.server`` (one thread per connection, HTTP/1.1 keep-alive) with events, views and datasets
in SQLite (store.py). It answers the way the real service does, so its own clients work
against it. The pieces: ``request`` (the HTTP mechanics of a request), ``routes`` (the checks
and the routing table), the endpoints (``ep_data``: ingest, OTLP, the APL query;
``ep_datasets``; ``ep_org``: tokens, annotations, views; ``ep_page``: the web page's files and
search), ``state`` (what the handlers share). Used by ``loghandler serve`` and
``loghandler.testing``.
"""

from __future__ import annotations

import socket
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from http.server import ThreadingHTTPServer
from typing import Any

from .access import Access
from .ingest import HttpError
from .limits import DEFAULT_MAX_FIELDS, FieldLimit, IngestLimit, RateLimiter
from .routes import Handler
from .state import RequestRecord, ServiceState
from .store import DATASET_NAME_RULE, VIEW_FIELDS, Store, valid_dataset_name, validate_view

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "VIEW_FIELDS",
    "HttpError",
    "RateLimiter",
    "RequestRecord",
    "Server",
    "Store",
    "make_server",
    "validate_view",
]

DEFAULT_MAX_BODY_BYTES = 10 * 1024 * 1024
# A connection waits at most this long (s) for its next request line; a request's headers and
# body arrive within DEFAULT_REQUEST_TIMEOUT of its request line, however slowly they trickle
# in (a time-out per receive let a byte every 20 s hold a connection for ever).
DEFAULT_IDLE_TIMEOUT = 60.0
DEFAULT_REQUEST_TIMEOUT = 60.0
# Past this many connections the one waiting longest for its request is closed; when none is
# waiting (every one is being answered), the new one is answered 503 and closed.
MAX_CONNECTIONS = 256
# A connection is closed for a newer one only after waiting this long (s) for its client: one
# that has just arrived is sending its request.
EVICT_AFTER = 0.5


def default_max_connections() -> int:
    """MAX_CONNECTIONS, or fewer when the process may open fewer files: a cap under the limit
    keeps accept() working (past it, every client was locked out)."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):
        return MAX_CONNECTIONS
    if soft in (-1, getattr(resource, "RLIM_INFINITY", -1)):
        return MAX_CONNECTIONS
    # The store's files, the reader connections' (three each) and the listening socket.
    return max(4, min(MAX_CONNECTIONS, (soft - 64) // 2))


class _Conn:
    """A connection's state for the time-outs: when it must have sent what it is sending
    (None: it is being answered), since when it waits, and whether it was cut."""

    __slots__ = ("cut", "deadline", "since")

    def __init__(self, deadline: float) -> None:
        self.deadline: float | None = deadline
        self.since = time.monotonic()
        self.cut = False


_REFUSAL = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
            b"Connection: close\r\nRetry-After: 1\r\nContent-Length: %d\r\n\r\n%s")

# Bound to every interface: clients on this machine reach it on loopback.
_WILDCARDS = {"0.0.0.0": "127.0.0.1", "::": "::1"}


class Server(ThreadingHTTPServer):
    """The HTTP server: settings and the store live here, the handler reads them per request."""

    daemon_threads = True
    request_queue_size = 128

    def __init__(
        self,
        address: tuple[str, int],
        store: Store,
        tokens: Sequence[str],
        *,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        on_request: Callable[[RequestRecord], None] | None = None,
        datasets: Iterable[str] | None = None,
        create_datasets: bool = False,
        rate_limit: int | None = None,
        ingest_limit: int | None = None,
        max_fields: int = DEFAULT_MAX_FIELDS,
        max_connections: int | None = None,
        idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
    ) -> None:
        for name, value in (("idle_timeout", idle_timeout),
                            ("request_timeout", request_timeout)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                    value > 0):
                raise ValueError(f"{name} must be a positive number of seconds, not {value!r}")
        if max_connections is None:
            max_connections = default_max_connections()
        if isinstance(max_connections, bool) or not isinstance(max_connections, int) or (
                max_connections < 1):
            raise ValueError(f"max_connections must be a positive integer, not "
                             f"{max_connections!r}")
        self.max_connections = max_connections
        self.idle_timeout = float(idle_timeout)
        self.request_timeout = float(request_timeout)
        if not tokens or any(not isinstance(t, str) or not t for t in tokens):
            raise ValueError("the local service needs at least one non-empty token")
        if isinstance(max_body_bytes, bool) or not isinstance(max_body_bytes, int) or (
            max_body_bytes < 1
        ):
            raise ValueError(f"max_body_bytes must be a positive integer, not {max_body_bytes!r}")
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        if datasets is not None:
            names = [datasets] if isinstance(datasets, str) else list(datasets)
            bad = [n for n in names if not valid_dataset_name(n)]
            if bad:
                raise ValueError(f"bad dataset name {str(bad[0])[:200]!r}: a dataset's name is "
                                 f"{DATASET_NAME_RULE}")
            for name in names:
                store.ensure_dataset(name)
        field_limit = FieldLimit(max_fields)
        for name, types in store.field_types().items():
            field_limit.seed(name, types)
        self.state = ServiceState(
            store=store,
            access=Access([t.encode() for t in tokens]),  # and the tokens created by API
            max_body_bytes=max_body_bytes,
            field_limit=field_limit,
            on_request=on_request,
            create_datasets=bool(create_datasets),
            rate_limiter=None if rate_limit is None else RateLimiter(rate_limit),
            ingest_limit=None if ingest_limit is None else IngestLimit(ingest_limit))
        # A stored event must stay readable: the readers' length limit is over the body's.
        store.reader.max_length = max(store.reader.max_length, max_body_bytes + 2 * 1024 * 1024)
        self._open: dict[socket.socket, _Conn] = {}
        self._open_lock = threading.Lock()
        self._closing = threading.Event()
        self._reaper: threading.Thread | None = None
        super().__init__(address, Handler)

    # Keep-alive connections outlive serve_forever(): track them so that closing the server
    # also ends them, instead of leaving threads that answer from a closed store.
    def process_request(self, request: Any, client_address: Any) -> None:
        refuse = False
        with self._open_lock:
            if sum(not c.cut for c in self._open.values()) >= self.max_connections:
                # Room for the new one: the connection waiting longest for its client goes
                # (a slow client's, or an idle one's); when none has waited EVICT_AFTER (all
                # are being answered, or sending), 503.
                old = time.monotonic() - EVICT_AFTER
                waiting = [(c.since, s) for s, c in self._open.items()
                           if not c.cut and c.deadline is not None and c.since < old]
                if waiting:
                    self._cut_locked(min(waiting, key=lambda x: x[0])[1])
                else:
                    refuse = True
            if not refuse:
                self._open[request] = _Conn(time.monotonic() + self.idle_timeout)
                if self._reaper is None:
                    self._reaper = threading.Thread(target=self._reap, daemon=True,
                                                    name="loghandler-serve-timeouts")
                    self._reaper.start()
        if refuse:
            self._refuse(request)
            return
        super().process_request(request, client_address)

    def _refuse(self, request: socket.socket) -> None:
        """503 and close, without blocking the accept loop: every connection is busy."""
        body = (b'{"code": 503, "message": "the local service is answering its most '
                b'connections at once (%d); try again"}' % self.max_connections)
        try:
            request.setblocking(False)
            request.send(_REFUSAL % (len(body), body))
        except OSError:
            pass
        self.shutdown_request(request)

    def _cut_locked(self, sock: socket.socket) -> None:
        """End a connection that is waiting: its reads see the end (the handler answers 408
        mid-body, or closes), its answer can still be written."""
        conn = self._open.get(sock)
        if conn is None or conn.cut:
            return
        conn.cut = True
        try:
            sock.shutdown(socket.SHUT_RD)
        except OSError:
            pass

    def _reap(self) -> None:
        # One thread for every connection's deadline: a connection past it is cut.
        while not self._closing.wait(0.1):
            now = time.monotonic()
            with self._open_lock:
                for sock, conn in list(self._open.items()):
                    if conn.deadline is not None and now > conn.deadline:
                        self._cut_locked(sock)

    def watch(self, sock: socket.socket, timeout: float | None) -> None:
        """The connection now waits for its client, who has ``timeout`` seconds to send what
        it is sending (None: it is being answered, no deadline)."""
        with self._open_lock:
            conn = self._open.get(sock)
            if conn is not None:
                conn.deadline = None if timeout is None else time.monotonic() + timeout
                conn.since = time.monotonic()

    def release(self, sock: socket.socket) -> None:
        """The connection's handler is done: it no longer counts against the cap."""
        with self._open_lock:
            self._open.pop(sock, None)

    def was_cut(self, sock: socket.socket) -> bool:
        """True when the connection was cut at its deadline (or for a newer one)."""
        with self._open_lock:
            conn = self._open.get(sock)
            return conn is not None and conn.cut

    def shutdown_request(self, request: Any) -> None:
        with self._open_lock:
            self._open.pop(request, None)
        try:
            # A lingering close: when we answered before reading the whole body (411, 413 on a
            # large body), closing with unread input makes the kernel send RST, and the client
            # can lose our answer. Say we are done, then read a bounded amount first.
            request.shutdown(socket.SHUT_WR)
            request.settimeout(0.5)
            drained = 0
            while drained < 1024 * 1024:
                chunk = request.recv(65536)
                if not chunk:
                    break
                drained += len(chunk)
        except OSError:
            pass
        self.close_request(request)

    def server_close(self) -> None:
        self._closing.set()
        super().server_close()
        with self._open_lock:
            conns = list(self._open)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up mid-request is normal; only print what is a real bug.
        import sys

        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError, sqlite3.ProgrammingError)):
            return
        super().handle_error(request, client_address)

    @property
    def store(self) -> Store:
        """The events, views and datasets."""
        return self.state.store

    @property
    def url(self) -> str:
        """The address to give clients: loopback when bound to every interface (0.0.0.0 is not
        an address a client can use, and a client refuses plain http to other hosts)."""
        host, port = self.server_address[:2]
        host = _WILDCARDS.get(str(host), str(host))
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{port}"

    @property
    def wildcard(self) -> bool:
        """True when bound to every interface: reachable from other machines."""
        return str(self.server_address[0]) in _WILDCARDS


def make_server(
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    tokens: Sequence[str],
    db: str | None = None,
    views: Iterable[dict[str, Any]] | None = None,
    max_body_bytes: int | None = None,
    on_request: Callable[[RequestRecord], None] | None = None,
    datasets: Iterable[str] | None = None,
    create_datasets: bool = False,
    rate_limit: int | None = None,
    ingest_limit: int | None = None,
    max_fields: int = DEFAULT_MAX_FIELDS,
    max_connections: int | None = None,
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
) -> Server:
    """A bound (not yet serving) local service; call ``serve_forever()`` on it.

    ``datasets``: datasets created at start. ``create_datasets``: an ingest into a dataset
    nobody created creates it (else 404, as the real service answers). ``rate_limit``:
    requests per minute, 429 past it; None: no limit. ``ingest_limit``: bytes of ingest a
    month, 430 past it; ``max_fields``: fields a dataset (limits.py). ``max_connections``:
    connections at once (default: MAX_CONNECTIONS, fewer under a low open-files limit);
    ``idle_timeout``: seconds a connection may wait for its next request;
    ``request_timeout``: seconds a request's headers and body may take to arrive.
    """
    store = Store(db)
    try:
        if views:
            store.seed_views(views)
        return Server((host, port), store, tokens,
                      max_body_bytes=max_body_bytes or DEFAULT_MAX_BODY_BYTES,
                      on_request=on_request, datasets=datasets,
                      create_datasets=create_datasets, rate_limit=rate_limit,
                      ingest_limit=ingest_limit, max_fields=max_fields,
                      max_connections=max_connections, idle_timeout=idle_timeout,
                      request_timeout=request_timeout)
    except BaseException:
        store.close()
        raise
