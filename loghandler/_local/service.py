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
    ) -> None:
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
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()
        super().__init__(address, Handler)

    # Keep-alive connections outlive serve_forever(): track them so that closing the server
    # also ends them, instead of leaving threads that answer from a closed store.
    def process_request(self, request: Any, client_address: Any) -> None:
        with self._open_lock:
            self._open.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._open_lock:
            self._open.discard(request)
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
) -> Server:
    """A bound (not yet serving) local service; call ``serve_forever()`` on it.

    ``datasets``: datasets created at start. ``create_datasets``: an ingest into a dataset
    nobody created creates it (else 404, as the real service answers). ``rate_limit``:
    requests per minute, 429 past it; None: no limit. ``ingest_limit``: bytes of ingest a
    month, 430 past it; ``max_fields``: fields a dataset (limits.py).
    """
    store = Store(db)
    try:
        if views:
            store.seed_views(views)
        return Server((host, port), store, tokens,
                      max_body_bytes=max_body_bytes or DEFAULT_MAX_BODY_BYTES,
                      on_request=on_request, datasets=datasets,
                      create_datasets=create_datasets, rate_limit=rate_limit,
                      ingest_limit=ingest_limit, max_fields=max_fields)
    except BaseException:
        store.close()
        raise
