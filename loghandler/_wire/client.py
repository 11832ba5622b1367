"""The client: one keep-alive connection pool, the service's headers, its answers and errors.

``Client.send`` is the one way a request goes out (the shippers' HTTP transport uses it too):
it returns the service's ``Answer`` whatever its status and raises only ``TransportError``;
``request``, ``ingest`` and ``query`` raise the error an answer means (``errors.py``).
Requests are bounded as a whole by ``timeout=`` (``watchdog.py``); urllib3 is imported with
the first request (``imports.py``).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from .. import _encoding as encoding
from .._documented import documented
from .._errors import ApiError, ConfigurationError, TransportError
from .._output import clip, redact, shown
from .._status import is_success
from .._time import format_datetime
from .._version import __version__
from . import lean
from .answer import Answer, Limit
from .datasets import Datasets
from .errors import raise_for_status
from .imports import lazy_module
from .settings import (
    CLIENT_ARGS_DOC,
    CLIENT_TRANSPORT_DOC,
    Settings,
    check_timeout,
    resolve_org_id,
    resolve_region,
    resolve_token,
    resolve_url,
)
from .transport import Transport
from .views import Views
from .watchdog import Watch, watchdog, watched_pool_classes

if TYPE_CHECKING:
    # urllib3 (and with it ssl) is imported when the first client connects, not with the
    # package: it was a third of what ``import loghandler`` cost (docs/performance.md).
    import urllib3

__all__ = ["Client", "dataset_path", "query_rows", "shared_client"]

USER_AGENT = f"loghandler/{__version__}"
# Error answers are read only this far: a misbehaving proxy must not make us buffer megabytes.
MAX_RESPONSE_BYTES = 1024 * 1024
# A query answer may hold many rows (the service caps a query's result, 65,000 rows locally).
MAX_QUERY_RESPONSE_BYTES = 256 * 1024 * 1024


def dataset_path(dataset: str) -> str:
    if not isinstance(dataset, str) or not dataset:
        raise ConfigurationError("the dataset name must be a non-empty string")
    if dataset in (".", ".."):
        # quote() leaves dots alone, and a "." or ".." path segment is removed (urllib3, every
        # proxy): the request would go to another address than the dataset's.
        raise ConfigurationError(f"{dataset!r} is not a dataset name: choose a name with other "
                                 "characters than dots")
    return f"/v1/datasets/{quote(dataset, safe='')}/ingest"


@documented(('Args (each falls back to its environment variable; docs/configuration.md):',
             CLIENT_ARGS_DOC.rstrip() + "\n" + CLIENT_TRANSPORT_DOC))
class Client:
    """A connection to the service: ``ingest(dataset, events)``, ``query``, ``views``,
    ``datasets``, and the shippers.

    One urllib3 PoolManager is shared by every request and by every shipper using this client;
    TLS certificates are always verified; redirects are never followed. Usable as a context
    manager (``close()`` at the end). With ``transport=`` (e.g.
    ``loghandler.testing.MemoryTransport()`` in tests) every request goes through it instead:
    no pool, no socket.

    Raises:
        ConfigurationError: a missing token or address, an unknown region, whitespace or
            control characters in the token, plain http:// to another host than loopback.
    """

    def __init__(
        self,
        token: str | None = None,
        *,
        org_id: str | None = None,
        url: str | None = None,
        region: str | None = None,
        timeout: float = 10.0,
        allow_http: bool = False,
        transport: Transport | None = None,
    ) -> None:
        # The arguments are declared here only: each is checked by its own rule, in the order
        # the user would fix them.
        if transport is not None and not callable(getattr(transport, "send", None)):
            raise ConfigurationError(
                "transport must have a send(method, path, body, *, headers, timeout) method "
                "returning the service's answer, as loghandler.testing.MemoryTransport has")
        token = resolve_token(token)
        org_id = resolve_org_id(org_id)
        region_name, region_chosen = resolve_region(region)
        self._settings = Settings(token=token, org_id=org_id, region=region_name,
                                  url=resolve_url(url, region_name, region_chosen, allow_http),
                                  timeout=check_timeout(timeout))
        self._headers = {"Authorization": f"Bearer {token}", "User-Agent": USER_AGENT}
        if org_id:
            self._headers["x-service-org-id"] = org_id
        # None: HTTP through this client's own pool (the default transport, ``_send_http``).
        self._transport = transport
        self._pools = _Pools()
        # Request heads of the lean exchange (``_head``), per (URI, headers); b"": not lean.
        self._heads: dict[tuple[str, tuple[tuple[str, str], ...]], bytes] = {}
        # Whether ingest POSTs take the lean exchange (``lean.py``); False: urllib3's way.
        self._lean = os.environ.get("LOGHANDLER_LEAN_HTTP", "1") != "0"
        self.views = Views(self)
        self.datasets = Datasets(self)

    @property
    def url(self) -> str:
        return self._settings.url

    @property
    def settings(self) -> Settings:
        return self._settings

    @property
    def transport(self) -> Transport | None:
        """The ``transport=`` given (None: HTTP through this client's pool)."""
        return self._transport

    def __repr__(self) -> str:
        org = f", org_id={self._settings.org_id!r}" if self._settings.org_id else ""
        through = f", transport={self._transport!r}" if self._transport is not None else ""
        # The token may hide anywhere the user typed it (a URL path, an org id): scrubbed.
        return redact(f"Client(url={self._settings.url!r}{org}{through}, token=***)")

    # ------------------------------------------------------------------ connection pool

    def _get_pool(self) -> urllib3.PoolManager:
        pools = self._pools
        pool = pools.manager
        if pool is not None and pools.pid == os.getpid():
            return pool
        with pools.lock:
            if pools.manager is None or pools.pid != os.getpid():
                pools.pid = os.getpid()
                urllib3 = lazy_module("urllib3")
                pool = urllib3.PoolManager(
                    num_pools=4,
                    maxsize=8,
                    retries=False,
                    cert_reqs="CERT_REQUIRED",
                    timeout=urllib3.Timeout(
                        connect=min(self._settings.timeout, 10.0), read=self._settings.timeout
                    ),
                )
                # Connections the watchdog can end: timeout= bounds a whole request.
                pool.pool_classes_by_scheme = watched_pool_classes()
                pools.manager = pool
            else:
                pool = pools.manager  # made by another thread meanwhile
            return pool

    def close(self) -> None:
        """Close pooled connections. The client can still be used afterwards (it reconnects)."""
        self._pools.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ requests

    def send(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
        max_bytes: int = MAX_RESPONSE_BYTES,
        max_success_bytes: int | None = None,
        limit: Limit = "ingest",
        after_write: Callable[[], None] | None = None,
    ) -> Answer:
        """One HTTP request; returns the service's answer (2xx or not); raises only
        ``TransportError`` (no answer).

        An answer over ``max_bytes`` is cut there (and then is not valid JSON); a 2xx answer
        over ``max_success_bytes``, when given (an ingest status may list a failure per event),
        instead. ``limit``: the service's limit a 430 means for this request (its wait is read
        from that limit's reset header). ``after_write``: called on this thread once an ingest
        POST is written, before its answer is read (the lean exchange only: ``lean.py``); it
        must not raise."""
        all_headers = dict(self._headers)
        if body is not None:
            all_headers["Content-Type"] = "application/json"
        if headers:
            all_headers.update(headers)
        if self._transport is not None:
            # The given transport carries the request as it is (the token's header with it:
            # it stands where the pool would); what it answers is the answer.
            return self._transport.send(method, path, body, headers=all_headers,
                                        timeout=timeout)
        return self._send_http(method, path, body, all_headers, timeout, max_bytes,
                               max_success_bytes, limit, after_write)

    def _send_http(self, method: str, path: str, body: bytes | None,
                   all_headers: dict[str, str], timeout: float | None, max_bytes: int,
                   max_success_bytes: int | None, limit: Limit,
                   after_write: Callable[[], None] | None = None) -> Answer:
        """The default transport: one request through this client's urllib3 pool."""
        url = self._settings.url + path
        # timeout= bounds the whole request: connecting, sending, and the answer to its last
        # byte. urllib3's timeouts bound each socket operation only (a service trickling one
        # byte a second would never time out), so the watchdog ends a request at its deadline.
        limit_s = self._settings.timeout if timeout is None else min(
            max(0.001, timeout), self._settings.timeout)
        urllib3 = lazy_module("urllib3")
        manager = self._get_pool()
        target = self._pools.targets.get(url)
        if target is None or target[0] is not manager:
            target = self._target(manager, url)
        _, host_pool, uri, no_retries = target
        if method == "POST" and body is not None and uri.endswith("/ingest") and self._lean:
            key = (uri, tuple(all_headers.items()))
            head = self._heads.get(key)
            if head is None:
                head = self._head(host_pool, key)
            if head:
                data = b"".join((head, b"%d\r\n\r\n" % len(body), body))  # one copy
                return self._send_lean(host_pool, data, limit_s, max_bytes, max_success_bytes,
                                       limit, after_write)
        kwargs: dict[str, Any] = {}
        if timeout is not None:
            kwargs["timeout"] = urllib3.Timeout(connect=min(limit_s, 10.0), read=limit_s)
        watch = watchdog.arm(time.monotonic() + limit_s)
        try:
            try:
                try:
                    resp = host_pool.urlopen(
                        method, uri, body=body, headers=all_headers, redirect=False,
                        assert_same_host=False, retries=no_retries, preload_content=False,
                        **kwargs,
                    )
                except (urllib3.exceptions.HTTPError, OSError) as exc:
                    if not _closed_while_idle(watch, exc):
                        raise
                    # A kept-alive connection the service closed while it lay in the pool (its
                    # idle timeout) as this request went out on it: reset or ended before any
                    # byte of an answer. Sent again at once, once, on a new connection, as Go's
                    # net/http does; it was no try the service could answer, so it costs no
                    # retry and no backoff (with max_retries=0 it cost the batch).
                    resp = host_pool.urlopen(
                        method, uri, body=body, headers=all_headers, redirect=False,
                        assert_same_host=False, retries=no_retries, preload_content=False,
                        **kwargs,
                    )
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                # The socket's read time-out and the watchdog bound the same wait: whichever
                # fires first, the answer did not come within limit_s.
                slow = (watch is not None and watch.fired) or isinstance(
                    exc, urllib3.exceptions.ReadTimeoutError)
                error = TransportError(self._too_slow(limit_s) if slow else
                                       _transport_message(self._settings.url, exc))
                error.sent = not _before_sending(exc)
                raise error from None
            try:
                if max_success_bytes is not None and is_success(resp.status):
                    max_bytes = max_success_bytes
                raw = resp.read(max_bytes + 1, decode_content=True)
                complete = len(raw) <= max_bytes
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                resp.close()
                error = TransportError(
                    self._too_slow(limit_s) if watch is not None and watch.fired else
                    f"the connection to {self._settings.url} broke while reading the answer "
                    f"({clip(_short(exc), 80)})")
                error.sent = True
                raise error from None
        finally:
            watchdog.disarm(watch)
        if complete and not (watch is not None and watch.fired):
            resp.release_conn()
        else:
            # Too big to drain politely, or shut down by the watchdog just as the answer
            # completed: drop the connection instead.
            resp.close()
            raw = raw[:max_bytes]
        return Answer.of(resp.status, resp.headers, _parse_body(raw), complete=complete,
                         limit=limit)

    def _head(self, host_pool: Any, key: tuple[str, tuple[tuple[str, str], ...]]) -> bytes:
        """The lean request's head for this URI and headers (up to Content-Length's value),
        worked out once; b"" when it cannot be written as it is (urllib3's way then)."""
        host = host_pool.host
        if ":" in host:
            host = f"[{host}]"
        if host_pool.port and host_pool.port != (443 if host_pool.scheme == "https" else 80):
            host = f"{host}:{host_pool.port}"
        head = lean.request_head("POST", key[0], host, dict(key[1])) or b""
        if len(self._heads) >= 64:  # bounded, as the targets
            self._heads.clear()
        self._heads[key] = head
        return head

    def _send_lean(self, host_pool: Any, data: bytes, limit_s: float, max_bytes: int,
                   max_success_bytes: int | None, limit: Limit,
                   after_write: Callable[[], None] | None = None) -> Answer:
        """An ingest POST by the lean exchange (``lean.py``) on a connection of the host's
        pool: the same deadline, bounds, idle-close re-send and errors as ``_send_http``."""
        urllib3 = lazy_module("urllib3")
        url = self._settings.url
        watch = watchdog.arm(time.monotonic() + limit_s)
        conn = None
        try:
            try:
                conn = host_pool.borrow()
                try:
                    result = self._exchange(conn, data, limit_s, max_bytes, max_success_bytes,
                                            watch is not None, after_write)
                except (urllib3.exceptions.HTTPError, OSError) as exc:
                    if not _closed_while_idle(watch, exc):
                        raise
                    # As _send_http: a kept-alive connection the service closed while it lay
                    # in the pool; sent again at once, once, on a new connection.
                    conn.close()
                    result = self._exchange(conn, data, limit_s, max_bytes, max_success_bytes,
                                            watch is not None, after_write)
                status, headers, raw, complete, reusable = result
                if not reusable or (watch is not None and watch.fired):
                    # Cut at the read bound, told to close, or shut down by the watchdog just
                    # as the answer completed: given back closed (the pool reopens it).
                    conn.close()
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                if conn is not None:
                    conn.close()
                fired = watch is not None and watch.fired
                if isinstance(exc, lean.Cut):
                    message = (self._too_slow(limit_s) if fired else
                               f"the connection to {url} broke while reading the answer "
                               f"({clip(_short(exc), 80)})")
                elif isinstance(exc, lean.Malformed) and not fired:
                    message = f"the answer from {url} is not HTTP/1.1 ({clip(_short(exc), 80)})"
                else:
                    slow = fired or isinstance(exc, (TimeoutError,
                                                     urllib3.exceptions.ReadTimeoutError))
                    message = (self._too_slow(limit_s) if slow else
                               _transport_message(url, exc))
                error = TransportError(message)
                error.sent = not _before_sending(exc)
                raise error from None
        finally:
            watchdog.disarm(watch)
            if conn is not None:
                host_pool.give_back(conn)
        return Answer.of(status, headers, _parse_body(raw), complete=complete, limit=limit)

    @staticmethod
    def _exchange(conn: Any, data: bytes, limit_s: float, max_bytes: int,
                  max_success_bytes: int | None, watched: bool,
                  after_write: Callable[[], None] | None = None
                  ) -> tuple[int, lean.Headers, bytes, bool, bool]:
        """One request on ``conn`` (opened here by urllib3 when it is not: TLS verified,
        watched from its connect), and its answer (``lean.exchange``).

        ``watched``: the watchdog holds the request's deadline (it shuts the socket down at
        it, whatever the request is blocked in), so the socket blocks without a time-out of
        its own: CPython polls a socket that has one before every send and receive, each a
        release of the interpreter's lock that the flusher then waits up to a switch
        interval (5 ms) to get back from a thread that logs, and each such return a switch
        the application thread pays for (docs/performance.md, "Fourth pass"). The mode is
        set only when it changes: setting it is a system call too."""
        if conn.sock is None:
            conn.timeout = min(limit_s, 10.0)
            conn.connect()
        else:
            watchdog.attach(conn)
        sock = conn.sock
        timeout = None if watched else limit_s
        if sock.gettimeout() != timeout:
            sock.settimeout(timeout)
        return lean.exchange(sock, data, max_bytes, max_success_bytes, after_write)

    def _target(self, manager: urllib3.PoolManager, url: str) -> tuple[Any, Any, str, Any]:
        """What ``PoolManager.urlopen`` works out for ``url`` on every request (a tenth of a
        shipper's request, measured: docs/performance.md), worked out once: the host's pool
        (only this client's own host, so the manager never evicts it), the request URI, and
        ``retries=False`` as the pool reads it (a Retry never changed: increment() makes a new
        one). Kept per URL (a few: the datasets sent to, the query paths), and anew with a
        new manager (after close() or a fork)."""
        urllib3 = lazy_module("urllib3")
        parsed = urllib3.util.parse_url(url)
        target = (manager, manager.connection_from_host(parsed.host, port=parsed.port,
                                                        scheme=parsed.scheme),
                  parsed.request_uri, urllib3.util.Retry(False, redirect=False))
        targets = self._pools.targets
        if len(targets) >= 64:  # bounded: a client asked for many datasets' paths
            targets.clear()
        targets[url] = target
        return target

    def _too_slow(self, limit: float) -> str:
        return f"no answer from {self._settings.url} within {limit:.3g} s"

    def request(self, method: str, path: str, body: Any = None, *,
                timeout: float | None = None) -> Any:
        """One JSON request; returns the parsed answer or raises the matching ``Error``."""
        data = None if body is None else encoding.encode(body)
        answer = self.send(method, path, data, timeout=timeout)
        raise_for_status(answer, what=f"{method} {path}")
        return answer.body

    def ingest(self, dataset: str, events: Iterable[dict[str, Any]]) -> Any:
        """POST one JSON array of events to the dataset, synchronously; the service's answer."""
        path = dataset_path(dataset)
        if isinstance(events, (dict, str, bytes, bytearray)):
            raise ConfigurationError(
                f"events must be a list of event dicts, not one {type(events).__name__}"
            )
        body = b"[" + b",".join(encoding.encode(e) for e in events) + b"]"
        answer = self.send("POST", path, body)
        raise_for_status(answer, what=f"ingest into dataset {shown(dataset)}", dataset=dataset)
        return answer.body

    def query(self, apl: str, *, start: datetime | str | None = None,
              end: datetime | str | None = None) -> list[dict[str, Any]]:
        """Run an APL query (``POST /v1/datasets/_apl``); the result's rows as dicts.

        ``start``/``end`` bound ``_time`` (a ``datetime``, naive meaning UTC, or an RFC 3339
        string); rows keep the service's order. Raises the matching ``Error`` (an ``ApiError``
        with the service's message for a query it cannot run).
        """
        if not isinstance(apl, str) or not apl.strip():
            raise ConfigurationError("apl must be a non-empty query string, as in "
                                     "\"['app'] | take 10\"")
        body: dict[str, Any] = {"apl": apl}
        for key, value in (("startTime", start), ("endTime", end)):
            if value is not None:
                body[key] = _rfc3339(value)
        answer = self.send("POST", "/v1/datasets/_apl?format=tabular", encoding.encode(body),
                           max_bytes=MAX_QUERY_RESPONSE_BYTES, limit="query")
        raise_for_status(answer, what="query", limit="query")
        return query_rows(answer.body)


def _rfc3339(value: datetime | str) -> str:
    if isinstance(value, datetime):
        return format_datetime(value)  # naive means UTC
    if isinstance(value, str):
        return value
    raise ConfigurationError(f"start and end must be datetimes or RFC 3339 strings, not "
                             f"{type(value).__name__}")


def query_rows(answer: Any) -> list[dict[str, Any]]:
    """The rows of a ``format=tabular`` query answer (its first table that is not totals)."""
    if not isinstance(answer, dict) or not isinstance(answer.get("tables"), list):
        raise ApiError(200, answer, "the query answer is not a tabular result (no tables); "
                                    "was it cut short? Add a take to the query")
    for table in answer["tables"]:
        if not isinstance(table, dict) or table.get("name") == "_totals":
            continue
        names = [f.get("name") for f in table.get("fields") or []]
        columns = table.get("columns") or []
        length = len(columns[0]) if columns else 0
        return [{name: column[i] for name, column in zip(names, columns, strict=False)}
                for i in range(length)]
    return []


# A non-JSON answer (a proxy's HTML error page) is kept only this far: enough to see what it is.
MAX_TEXT_BODY = 2000


def _parse_body(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, or absurdly nested
        text = raw[: MAX_TEXT_BODY * 4].decode("utf-8", "replace")
        return text if len(text) <= MAX_TEXT_BODY else text[: MAX_TEXT_BODY - 1] + "…"


def _short(exc: BaseException) -> str:
    text = str(exc)
    return text if len(text) <= 300 else text[:299] + "…"


def _root_cause(exc: BaseException) -> BaseException:
    # urllib3 wraps the OSError that says what happened (MaxRetryError.reason, __cause__,
    # __context__); its own text names internal connection objects, so find the root.
    seen = 0
    while seen < 8:
        seen += 1
        nxt = getattr(exc, "reason", None)
        if not isinstance(nxt, BaseException):
            nxt = exc.__cause__ or exc.__context__
        if not isinstance(nxt, BaseException) or nxt is exc:
            break
        exc = nxt
    return exc


def _closed_while_idle(watch: Watch | None, exc: Exception) -> bool:
    """Whether a request that failed with ``exc`` went out on a kept-alive connection (it
    opened none) that the other end had closed: reset, or ended, before any byte of an answer
    (http.client's RemoteDisconnected is a ConnectionResetError), its deadline not passed."""
    if watch is None or watch.connected or watch.fired:
        return False
    return isinstance(_root_cause(exc), ConnectionError)


def _before_sending(exc: Exception) -> bool:
    """Whether a request that failed with ``exc`` never left: no connection (refused, a name
    or TLS failure, none in time). Otherwise it may have reached the service."""
    ssl = lazy_module("ssl")
    urllib3 = lazy_module("urllib3")
    root = _root_cause(exc)
    return isinstance(exc, (urllib3.exceptions.NewConnectionError,
                            urllib3.exceptions.ConnectTimeoutError,
                            urllib3.exceptions.SSLError, urllib3.exceptions.ProxyError,
                            urllib3.exceptions.LocationParseError)) or isinstance(
        root, (ConnectionRefusedError, socket.gaierror, ssl.SSLError))


def _transport_message(url: str, exc: Exception) -> str:
    ssl = lazy_module("ssl")
    urllib3 = lazy_module("urllib3")
    root = _root_cause(exc)
    text = _short(root)
    # NewConnectionError subclasses ConnectTimeoutError, so a refused connection must be
    # recognised before any time-out test.
    if isinstance(root, ConnectionRefusedError) or "refused" in text.lower():
        return f"cannot connect to {url} (connection refused)"
    if isinstance(exc, urllib3.exceptions.SSLError) or isinstance(root, ssl.SSLError):
        return f"TLS failed for {url} ({clip(text, 80)})"
    if isinstance(exc, urllib3.exceptions.NameResolutionError) or isinstance(
        root, socket.gaierror
    ):
        return f"cannot resolve the host of {url} ({clip(text, 80)})"
    timed_out = isinstance(exc, urllib3.exceptions.TimeoutError) and not isinstance(
        exc, urllib3.exceptions.NewConnectionError
    )
    if timed_out or isinstance(root, TimeoutError) or "timed out" in text.lower():
        return f"no answer from {url} in time ({clip(text, 80)})"
    return f"cannot reach {url} ({clip(text, 80)})"


class _Pools:
    """A client's urllib3 PoolManager (made on its first request, ``Client._get_pool``) and,
    per URL sent to, what the manager would work out on every request (the URL parsed, its
    host's pool, a Retry of no retries): ``targets``, (manager, pool, request URI, retries).
    Kept apart so that a forked child forgets them in one step (``after_fork_in_child``)."""

    __slots__ = ("__weakref__", "lock", "manager", "pid", "targets")

    def __init__(self) -> None:
        self.manager: urllib3.PoolManager | None = None
        self.targets: dict[str, tuple[Any, Any, str, Any]] = {}
        self.lock = threading.Lock()
        self.pid = os.getpid()
        _live_pools.add(self)

    def close(self) -> None:
        manager, self.manager = self.manager, None
        # urllib3 closes a host's connections when its pool is collected: keep none of them.
        self.targets = {}
        if manager is not None:
            manager.clear()

    def forget(self) -> None:
        """In a forked child: the parent's sockets are shared with the child, so never touch
        them here, just forget them and let the child open its own (and take a new lock: the
        parent's may have been held at fork)."""
        self.manager = None
        self.targets = {}
        self.lock = threading.Lock()
        self.pid = os.getpid()


_live_pools: weakref.WeakSet[_Pools] = weakref.WeakSet()
_shared: weakref.WeakValueDictionary[Settings, Client] = weakref.WeakValueDictionary()
_shared_lock = threading.Lock()


def shared_client(**client_args: Any) -> Client:
    """A Client for these arguments (``Client``'s), shared with every handler configured the
    same way: handlers built from plain arguments (``dictConfig``) share one connection pool."""
    client = Client(**client_args)  # checks them all, allow_http too
    with _shared_lock:
        return _shared.setdefault(client.settings, client)


def after_fork_in_child() -> None:
    """In a forked child: new watchdog and pools (the parent's thread is gone, and its locks may
    have been held). Called by the package's one at-fork hook (``_engine/lifecycle.py``)."""
    global _shared_lock
    _shared_lock = threading.Lock()  # shared_client()'s: the parent may have held it
    watchdog.reset()
    for pools in list(_live_pools):
        pools.forget()
