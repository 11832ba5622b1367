"""The HTTP client: one keep-alive connection pool, the service's headers, its errors mapped."""

from __future__ import annotations

import heapq
import itertools
import json
import os
import signal
import socket
import sys
import threading
import time
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from . import _encoding as encoding
from ._config import CLIENT_ARGS_DOC, Settings, documented, resolve_settings
from ._datasets import Datasets
from ._errors import (
    ApiError,
    AuthenticationError,
    ConfigurationError,
    NotFoundError,
    RateLimitError,
    TransportError,
)
from ._output import body_detail, clip, redact, service_message, shown
from ._status import AUTH, LIMITS, NOT_FOUND, RATE_LIMIT, RESET_HEADERS, is_redirect, is_success
from ._time import format_datetime
from ._version import __version__
from ._views import Views

if TYPE_CHECKING:
    # urllib3 (and with it ssl) is imported when the first client connects, not with the
    # package: it was a third of what ``import loghandler`` cost (docs/performance.md).
    import urllib3
    from urllib3.connection import HTTPConnection

__all__ = ["Client", "Response", "parse_reset", "parse_retry_after", "raise_for_status"]

_kept_modules: dict[str, Any] = {}
_is_finalizing = sys.is_finalizing


def lazy_module(name: str) -> Any:
    """``name`` imported on first use (urllib3 and ssl are a third of ``import loghandler``'s
    cost), then kept here: late in interpreter shutdown (a ``__del__`` that logs) an ``import``
    statement fails, a kept reference still works."""
    module = _kept_modules.get(name)
    if module is None:
        import importlib

        module = _kept_modules[name] = importlib.import_module(name)
    return module


def preload_http() -> None:
    """Import what the first request needs (urllib3, the host-name codec, the watched
    connection classes), on the calling thread: a shipper calls this when it is built, so that
    its flusher does not import them while the application runs (see Shipper)."""
    for name in ("urllib3", "encodings.idna", "urllib3.connectionpool", "http.client"):
        lazy_module(name)
    _watched_pool_classes()


# The modules as the exit hook saw them (keep_modules), held weakly: see ImportsRestored.
_modules_at_exit: dict[str, weakref.ref[Any]] = {}


def keep_modules() -> None:
    """Remember the loaded modules (the exit hook calls this, while imports still work).

    Weakly: holding them would change the order in which the interpreter tears them down, and
    a ``__del__`` that logs could then run after ``logging`` itself is gone. The wire's modules
    are imported first (no request may have been made yet)."""
    for name in ("urllib3", "encodings.idna"):
        lazy_module(name)
    for name, module in list(sys.modules.items()):
        try:
            _modules_at_exit[name] = weakref.ref(module)
        except TypeError:  # not a module (a lazy loader's stand-in)
            pass


class ImportsRestored:
    """While a request is sent late in interpreter shutdown (a ``__del__`` that logs), the
    modules the exit hook saw are back in ``sys.modules``, and are taken out again after.

    By then the interpreter has emptied ``sys.modules``, and urllib3 imports a module of its own
    inside ``getresponse()``: without this, the request went out, its answer could not be read,
    and the events it carried were neither counted delivered nor lost.
    """

    __slots__ = ("_put_back",)

    def __enter__(self) -> None:
        self._put_back: list[tuple[str, Any]] = []
        if not _is_finalizing():
            return
        modules = sys.modules
        missing = object()
        for name, ref in _modules_at_exit.items():
            before = modules.get(name, missing)
            if before is None or before is missing:
                module = ref()
                if module is not None:
                    self._put_back.append((name, before))
                    modules[name] = module

    def __exit__(self, *exc: object) -> None:
        modules: dict[str, Any] = sys.modules  # entries may be None: the interpreter's marks
        for name, before in self._put_back:
            if before is None:
                modules[name] = None
            else:
                modules.pop(name, None)
        self._put_back.clear()


USER_AGENT = f"loghandler/{__version__}"
# Error answers are read only this far: a misbehaving proxy must not make us buffer megabytes.
MAX_RESPONSE_BYTES = 1024 * 1024
# A query answer may hold many rows (the service caps a query's result, 65,000 rows locally).
MAX_QUERY_RESPONSE_BYTES = 256 * 1024 * 1024


def block_sigterm_in_this_thread() -> None:
    """Called first by each of loghandler's own threads: the kernel then hands a process-wide
    SIGTERM to another thread (the main one, where Python runs its handler), never to ours."""
    try:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    except (AttributeError, OSError, ValueError):  # not POSIX
        pass


@dataclass(frozen=True)
class Response:
    status: int
    body: Any
    retry_after: float | None
    # The answer's headers (case-insensitive): the limit answers' reset times are read there.
    headers: Mapping[str, str] = field(default_factory=dict)
    # False when the body was cut at the read bound (``send``'s ``max_bytes``).
    complete: bool = True


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header: delta-seconds or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            import email.utils  # only for an HTTP date: rare, and 7 ms to import

            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None:
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    if seconds != seconds:  # NaN
        return None
    return max(0.0, seconds)


def parse_reset(headers: Mapping[str, str], now: float | None = None,
                names: tuple[str, ...] = (RESET_HEADERS["rate"], RESET_HEADERS["ingest"]),
                ) -> float | None:
    """Seconds until the limit named in a reset header resets (0 when past), or None.
    ``names``: the headers to read, first found first (default: the ingest path's limits)."""
    for name in names:
        value = headers.get(name)
        if not value:
            continue
        try:
            when = float(value.strip())
        except ValueError:
            continue
        if when != when or when in (float("inf"), float("-inf")):
            continue
        return max(0.0, when - (time.time() if now is None else now))
    return None


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
             CLIENT_ARGS_DOC))
class Client:
    """A connection to the service: ``ingest(dataset, events)``, ``views``, and the shippers.

    One urllib3 PoolManager is shared by every request and by every shipper using this client;
    TLS certificates are always verified; redirects are never followed. Usable as a context
    manager (``close()`` at the end).

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
    ) -> None:
        self._settings = resolve_settings(
            token, org_id=org_id, url=url, region=region, timeout=timeout, allow_http=allow_http
        )
        self._headers = {"Authorization": f"Bearer {self._settings.token}",
                         "User-Agent": USER_AGENT}
        if self._settings.org_id:
            self._headers["x-service-org-id"] = self._settings.org_id
        self._pool: urllib3.PoolManager | None = None
        self._pool_lock = threading.Lock()
        self._pid = os.getpid()
        self.views = Views(self)
        self.datasets = Datasets(self)
        _live_clients.add(self)

    @property
    def url(self) -> str:
        return self._settings.url

    @property
    def settings(self) -> Settings:
        return self._settings

    def __repr__(self) -> str:
        org = f", org_id={self._settings.org_id!r}" if self._settings.org_id else ""
        # The token may hide anywhere the user typed it (a URL path, an org id): scrubbed.
        return redact(f"Client(url={self._settings.url!r}{org}, token=***)")

    # ------------------------------------------------------------------ connection pool

    def _get_pool(self) -> urllib3.PoolManager:
        pool = self._pool
        if pool is not None and self._pid == os.getpid():
            return pool
        with self._pool_lock:
            if self._pool is None or self._pid != os.getpid():
                self._pid = os.getpid()
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
                pool.pool_classes_by_scheme = _watched_pool_classes()
                self._pool = pool
            return self._pool

    def _reset_after_fork(self) -> None:
        # The parent's sockets are shared with the child after fork: never touch them here,
        # just forget them and let the child open its own.
        self._pool = None
        self._pool_lock = threading.Lock()
        self._pid = os.getpid()

    def close(self) -> None:
        """Close pooled connections. The client can still be used afterwards (it reconnects)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.clear()

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
    ) -> Response:
        """One HTTP request; returns any answer (2xx or not); raises only ``TransportError``.

        An answer over ``max_bytes`` is cut there (and then is not valid JSON); a 2xx answer
        over ``max_success_bytes``, when given (an ingest status may list a failure per event),
        instead."""
        all_headers = dict(self._headers)
        if body is not None:
            all_headers["Content-Type"] = "application/json"
        if headers:
            all_headers.update(headers)
        url = self._settings.url + path
        # timeout= bounds the whole request: connecting, sending, and the answer to its last
        # byte. urllib3's timeouts bound each socket operation only (a service trickling one
        # byte a second would never time out), so the watchdog ends a request at its deadline.
        limit = self._settings.timeout if timeout is None else min(
            max(0.001, timeout), self._settings.timeout)
        urllib3 = lazy_module("urllib3")
        kwargs: dict[str, Any] = {}
        if timeout is not None:
            kwargs["timeout"] = urllib3.Timeout(connect=min(limit, 10.0), read=limit)
        watch = _watchdog.arm(time.monotonic() + limit)
        try:
            try:
                resp = self._get_pool().urlopen(
                    method, url, body=body, headers=all_headers, redirect=False,
                    retries=False, preload_content=False, **kwargs,
                )
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                if watch is not None and watch.fired:
                    raise TransportError(self._too_slow(limit)) from None
                raise TransportError(_transport_message(self._settings.url, exc)) from None
            try:
                if max_success_bytes is not None and 200 <= resp.status < 300:
                    max_bytes = max_success_bytes
                raw = resp.read(max_bytes + 1, decode_content=True)
                complete = len(raw) <= max_bytes
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                resp.close()
                if watch is not None and watch.fired:
                    raise TransportError(self._too_slow(limit)) from None
                raise TransportError(
                    f"the connection to {self._settings.url} broke while reading the answer "
                    f"({clip(_short(exc), 80)})"
                ) from None
        finally:
            _watchdog.disarm(watch)
        if complete and not (watch is not None and watch.fired):
            resp.release_conn()
        else:
            # Too big to drain politely, or shut down by the watchdog just as the answer
            # completed: drop the connection instead.
            resp.close()
            raw = raw[:max_bytes]
        return Response(resp.status, _parse_body(raw),
                        parse_retry_after(resp.headers.get("Retry-After")), resp.headers,
                        complete)

    def _too_slow(self, limit: float) -> str:
        return f"no answer from {self._settings.url} within {limit:.3g} s"

    def request(self, method: str, path: str, body: Any = None, *,
                timeout: float | None = None) -> Any:
        """One JSON request; returns the parsed answer or raises the matching ``Error``."""
        data = None if body is None else encoding.encode(body)
        resp = self.send(method, path, data, timeout=timeout)
        raise_for_status(resp, what=f"{method} {path}")
        return resp.body

    def ingest(self, dataset: str, events: Iterable[dict[str, Any]]) -> Any:
        """POST one JSON array of events to the dataset, synchronously; the service's answer."""
        path = dataset_path(dataset)
        if isinstance(events, (dict, str, bytes, bytearray)):
            raise ConfigurationError(
                f"events must be a list of event dicts, not one {type(events).__name__}"
            )
        body = b"[" + b",".join(encoding.encode(e) for e in events) + b"]"
        resp = self.send("POST", path, body)
        raise_for_status(resp, what=f"ingest into dataset {shown(dataset)}", dataset=dataset)
        return resp.body

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
        resp = self.send("POST", "/v1/datasets/_apl?format=tabular", encoding.encode(body),
                         max_bytes=MAX_QUERY_RESPONSE_BYTES)
        raise_for_status(resp, what="query", limit="query")
        return query_rows(resp.body)


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


def raise_for_status(resp: Response, *, what: str, dataset: str | None = None,
                     limit: str = "ingest") -> None:
    """Raise the error that matches a non-2xx answer. ``limit``: the service's limit a 430
    means for this request ("ingest", or "query" for a query)."""
    status = resp.status
    if is_success(status):
        return
    body = resp.body
    own = service_message(body)
    said = f": {clip(own, 60)}" if own else ""
    from ._config import said as _said

    if status in AUTH:
        raise AuthenticationError(
            status, body,
            f"the service refused the token (HTTP {status}{said}) for {what}: check "
            f"{_said('token')} or LOGHANDLER_TOKEN (a personal access token also needs "
            f"{_said('org_id')})",
        )
    if status in LIMITS:
        which = "rate" if status == RATE_LIMIT else limit
        retry_after = resp.retry_after
        if retry_after is None:
            retry_after = parse_reset(resp.headers, names=(RESET_HEADERS[which],))
        wait = (f": retry after {retry_after:g} s" if retry_after is not None
                else ": retry later")
        raise RateLimitError(status, body, f"the service's {which} limit was reached (HTTP "
                                           f"{status}{said}) for {what}{wait}",
                             retry_after=retry_after)
    if status in NOT_FOUND:
        if dataset is not None:
            msg = (f"dataset {shown(dataset, 40)} not found (HTTP 404): create it (loghandler "
                   f"datasets create {clip(redact(dataset), 40)}) or check the name and "
                   f"{_said('url_arg')}")
        else:
            msg = f"{what}: not found (HTTP 404{said}): check {_said('url_arg')}"
        raise NotFoundError(status, body, msg)
    if is_redirect(status):
        raise ApiError(status, body, f"{what} was redirected (HTTP {status}): check "
                                     f"{_said('url_arg')} (https, no path too many or missing)")
    raise ApiError(status, body, f"{what} failed with HTTP {status}{clip(body_detail(body), 300)}")


_live_clients: weakref.WeakSet[Client] = weakref.WeakSet()
_shared: weakref.WeakValueDictionary[Settings, Client] = weakref.WeakValueDictionary()
_shared_lock = threading.Lock()


def shared_client(**client_args: Any) -> Client:
    """A Client for these arguments, shared with every handler configured the same way.

    Handlers built from plain arguments (``dictConfig``) then share one connection pool.
    """
    allow_http = bool(client_args.pop("allow_http", False))
    settings = resolve_settings(allow_http=allow_http, **client_args)
    with _shared_lock:
        client = _shared.get(settings)
        if client is None:
            client = Client(settings.token, org_id=settings.org_id, url=settings.url,
                            region=settings.region, timeout=settings.timeout, allow_http=True)
            _shared[settings] = client
        return client


class _Watch:
    __slots__ = ("conn", "deadline", "done", "fired")

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.conn: HTTPConnection | None = None
        self.done = False
        self.fired = False


# Seconds the watchdog thread waits with nothing to watch before it ends.
WATCHDOG_IDLE = 2.0


class _Watchdog:
    """Ends requests that outlive their deadline, by shutting their socket down.

    One daemon thread for the process, started with the first request. A request is armed
    before urllib3 takes a connection, and the connection is attached to it when urllib3 connects
    or sends on it (``_Watched``), on the requesting thread. At the deadline the socket is shut
    down: whatever the request is blocked in (send, the status line, a trickling body) fails at
    once, and the request raises ``TransportError``.
    """

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._heap: list[tuple[float, int, _Watch]] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None
        self._local = threading.local()

    def arm(self, deadline: float) -> _Watch | None:
        watch = _Watch(deadline)
        with self._cond:
            if self._thread is None or not self._thread.is_alive():
                if _is_finalizing():
                    # Interpreter shutdown: a new thread would never run, and start() would
                    # wait for it for ever. urllib3's own timeouts bound the request.
                    return None
                thread = threading.Thread(target=self._run, name="loghandler-watchdog",
                                          daemon=True)
                try:
                    thread.start()
                except RuntimeError:  # interpreter shutdown: urllib3's timeouts only
                    return None
                self._thread = thread
            heapq.heappush(self._heap, (deadline, next(self._order), watch))
            if self._heap[0][2] is watch:
                self._cond.notify()
        self._local.watch = watch
        return watch

    def disarm(self, watch: _Watch | None) -> None:
        self._local.watch = None
        if watch is not None:
            with self._cond:
                watch.done = True
                watch.conn = None

    def attach(self, conn: HTTPConnection) -> None:
        watch = getattr(self._local, "watch", None)
        if watch is None:
            return
        with self._cond:
            watch.conn = conn
            fired = watch.fired
        if fired:
            raise TimeoutError("the request's deadline passed")

    def _run(self) -> None:
        block_sigterm_in_this_thread()
        heap = self._heap
        with self._cond:
            while True:
                while heap and heap[0][2].done:
                    heapq.heappop(heap)
                if not heap:
                    # Idle: the thread ends after a while, and the next request starts one
                    # (so a process whose shippers are all gone keeps no thread of ours).
                    self._cond.wait(WATCHDOG_IDLE)
                    if not heap:
                        self._thread = None
                        return
                    continue
                remaining = heap[0][0] - time.monotonic()
                if remaining > 0:
                    self._cond.wait(remaining)
                    continue
                watch = heapq.heappop(heap)[2]
                watch.fired = True
                conn, watch.conn = watch.conn, None
                sock = getattr(conn, "sock", None)
                if isinstance(sock, socket.socket):
                    try:
                        # The plain socket's shutdown, also under TLS: it ends the blocked
                        # read or write at once without touching the TLS object in use.
                        socket.socket.shutdown(sock, socket.SHUT_RDWR)
                    except OSError:
                        pass


_watchdog = _Watchdog()


class _Watched:
    """A urllib3 connection that attaches itself to its thread's armed request (``_Watchdog``)."""

    def connect(self) -> None:
        _watchdog.attach(self)  # type: ignore[arg-type]
        super().connect()  # type: ignore[misc]

    def request(self, *args: Any, **kwargs: Any) -> None:
        _watchdog.attach(self)  # type: ignore[arg-type]
        super().request(*args, **kwargs)  # type: ignore[misc]


_pool_classes: dict[str, type] = {}


def _watched_pool_classes() -> dict[str, type]:
    """urllib3's pools whose connections attach themselves to the watchdog, made once."""
    if not _pool_classes:
        from urllib3.connection import HTTPConnection, HTTPSConnection
        from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

        class _WatchedHTTPConnection(_Watched, HTTPConnection):
            pass

        class _WatchedHTTPSConnection(_Watched, HTTPSConnection):
            pass

        class _WatchedHTTPPool(HTTPConnectionPool):
            ConnectionCls = _WatchedHTTPConnection

        class _WatchedHTTPSPool(HTTPSConnectionPool):
            ConnectionCls = _WatchedHTTPSConnection

        _pool_classes.update(http=_WatchedHTTPPool, https=_WatchedHTTPSPool)
    return _pool_classes


def _after_fork_in_child() -> None:
    """In a forked child: new watchdog and pools (the parent's thread is gone, and its locks may
    have been held). Called by the package's one at-fork hook (``_engine/lifecycle.py``)."""
    global _shared_lock
    _shared_lock = threading.Lock()  # shared_client()'s: the parent may have held it
    _watchdog._reset()
    for client in list(_live_clients):
        client._reset_after_fork()
