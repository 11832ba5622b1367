"""The local service: the real one's endpoints on loopback, standard library only.

``POST /v1/datasets/{name}/ingest`` (every body shape the real service takes: _ingest.py) and
views (``GET|POST /v2/views``, ``GET|PUT|DELETE /v2/views/{id}``) over ``http.server`` (one
thread per connection, HTTP/1.1 keep-alive) with events and views in SQLite. It answers the way
the real service does, so its own clients work against it: errors are
``{"code": <status>, "message": "..."}``, events it cannot take are reported per event in the
ingest status, optional rate limits and a fixed set of datasets can be rehearsed.
Also ``POST /v1/datasets/_apl`` (a subset of APL: _apl.py, _aplsql.py), ``GET /v1/datasets`` and the
web page at ``/`` (the files in ``loghandler/_local/web``, the only answers given without a token).
Storage and queries are store.py. Used by ``loghandler serve`` and ``loghandler.testing``.
"""

from __future__ import annotations

import json
import re
import socket
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from . import apl as apl
from . import aplsql as aplsql
from . import otlp
from .access import Access, Annotations, verb
from .apl import format_time
from .ingest import (
    HttpError,
    IngestOptions,
    decode_body,
    media_type,
    parse_values,
    prepare_events,
)
from .limits import DEFAULT_MAX_FIELDS, FieldLimit, IngestLimit
from .search import FACET_ROWS, PAGE_ROWS, SearchError, facets, page_query
from .store import VIEW_FIELDS, Store, reject_constant, validate_view

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
# A body over the limit is read and thrown away up to this size, so the client (still sending)
# reads our 413 instead of a connection reset; beyond it we answer and close.
_DRAIN_LIMIT = 64 * 1024 * 1024
_CHUNK = 64 * 1024

# Bound to every interface: clients on this machine reach it on loopback.
_WILDCARDS = {"0.0.0.0": "127.0.0.1", "::": "::1"}

_QUERY_PATH = "/v1/datasets/_apl"
_QUERY_PATHS = (_QUERY_PATH, "/v1/query/_apl")  # the second: the edge endpoint
# The web page: plain files shipped in the package, served without a token (the page then
# reads everything through the authenticated API, with the token from the URL fragment).
_STATIC = {"/": ("index.html", "text/html; charset=utf-8"),
           "/index.html": ("index.html", "text/html; charset=utf-8"),
           "/app.js": ("app.js", "text/javascript; charset=utf-8"),
           "/style.css": ("style.css", "text/css; charset=utf-8")}
# The ingest endpoint, and the edge endpoint the official SDK uses when configured for one.
_INGEST = re.compile(r"^/v1/(?:datasets/([^/]+)/ingest|ingest/([^/]+))$")
# A personal access token (the service's own prefix): it needs the organization's id header.
PAT_PREFIX = "xapt-"
# /v1/datasets (and /v2/datasets), /v1/datasets/{name}, /v1/datasets/{name}/trim
_DATASETS = re.compile(r"^/v[12]/datasets(?:/([^/]+))?(/trim)?$")
_TOKENS = re.compile(r"^/v2/tokens(?:/([^/]+)(/regenerate)?)?$")
_ANNOTATIONS = re.compile(r"^/v2/annotations(?:/([^/]+))?$")
_DATASET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_VIEW = re.compile(r"^/v2/views/([^/]+)$")


@dataclass(frozen=True)
class RequestRecord:
    """One request the service answered (for assertions and the ``serve`` log)."""

    method: str
    path: str
    status: int
    dataset: str | None = None
    events: int = 0
    error: str | None = None
    failed: int = 0  # events of an ingest the service turned down (in its 200 answer)


class RateLimiter:
    """``limit`` requests per minute, in fixed windows, like the real service's limits.

    ``take()`` counts one request and returns ``(allowed, remaining, reset)``, ``reset`` being
    the epoch second the current window ends (the ``X-RateLimit-Reset`` header).
    """

    def __init__(self, limit: int, window: float = 60.0,
                 clock: Callable[[], float] = time.time) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"rate_limit must be a positive number of requests per minute, "
                             f"not {limit!r}")
        self.limit = limit
        self._window = window
        self._clock = clock
        self._lock = threading.Lock()
        self._start = 0.0
        self._used = 0

    def take(self) -> tuple[bool, int, int]:
        with self._lock:
            now = self._clock()
            if now >= self._start + self._window:
                self._start, self._used = now, 0
            allowed = self._used < self.limit
            if allowed:
                self._used += 1
            reset = int(-(-(self._start + self._window) // 1))  # ceil: the window is over then
            return allowed, self.limit - self._used, reset


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
        self.store = store
        self.access = Access([t.encode() for t in tokens])  # and the tokens created by API
        self.annotations = Annotations()
        self.edge_deployments: dict[str, str] = {}  # dataset -> edgeDeployment, as created
        self.max_body_bytes = max_body_bytes
        self.on_request = on_request
        # None: a dataset is created by its first ingest. A set: only these exist (404 else).
        self.datasets: set[str] | None = None
        if datasets is not None:
            names = [datasets] if isinstance(datasets, str) else list(datasets)
            if not all(isinstance(n, str) and n for n in names):
                raise ValueError("datasets must be non-empty dataset names")
            self.datasets = set(names)
        self.rate_limiter = None if rate_limit is None else RateLimiter(rate_limit)
        self.ingest_limit = None if ingest_limit is None else IngestLimit(ingest_limit)
        self.field_limit = FieldLimit(max_fields)
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()
        super().__init__(address, _Handler)

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

    def token_ok(self, header: str | None) -> bool:
        return self.access.find(header) is not None


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
    rate_limit: int | None = None,
    ingest_limit: int | None = None,
    max_fields: int = DEFAULT_MAX_FIELDS,
) -> Server:
    """A bound (not yet serving) local service; call ``serve_forever()`` on it.

    ``datasets``: the only datasets that exist (others answer 404); None: any name, created
    by its first ingest. ``rate_limit``: requests per minute, 429 past it; None: no limit.
    ``ingest_limit``: bytes of ingest a month, 430 past it; ``max_fields``: fields a dataset
    (limits.py).
    """
    store = Store(db)
    try:
        if views:
            store.seed_views(views)
        return Server((host, port), store, tokens,
                      max_body_bytes=max_body_bytes or DEFAULT_MAX_BODY_BYTES,
                      on_request=on_request, datasets=datasets, rate_limit=rate_limit,
                      ingest_limit=ingest_limit, max_fields=max_fields)
    except BaseException:
        store.close()
        raise


class _Handler(BaseHTTPRequestHandler):
    server: Server
    protocol_version = "HTTP/1.1"  # keep-alive: clients reuse their connection
    disable_nagle_algorithm = True  # headers and body go in two writes; no 40 ms stall
    timeout = 60  # a client that stops sending mid-body does not hold a thread forever
    server_version = "loghandler-local"
    # Per request (one handler serves a whole keep-alive connection).
    _limit_headers: dict[str, str]
    _body: bytes | None
    _body_kind: int | str | None

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the per-request line is ours (on_request), not http.server's

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        # http.server's own errors (bad request line, unknown method) are HTML; ours are JSON.
        self.close_connection = True
        self._limit_headers = {}  # this handler serves the whole connection: not the last one's
        try:
            text = message or self.responses.get(code, ("",))[0]
            self._send_json(code, {"code": code, "message": text})
        except OSError:
            pass

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def _handle(self, method: str) -> None:
        parts = urlsplit(self.path)
        path = parts.path
        dataset: str | None = None
        count = failed = 0
        error: str | None = None
        answer: Any
        self._limit_headers = {}
        self._body = None
        self._body_kind = None
        self._token: Any = None  # Access.find's answer, once the token is read
        try:
            self._body_kind = self._framing()
            if method == "GET" and path in _STATIC:
                self._discard()
                self._send_static(*_STATIC[path])
                return
            auth = self.headers.get("Authorization")
            self._token = self.server.access.find(auth)
            if self._token is None:
                self._discard()
                raise HttpError(403, "authentication failed: send Authorization: Bearer <token> "
                                     "with a token this service accepts")
            if auth is not None and auth[7:].strip().startswith(PAT_PREFIX) and (
                    not self._service_header("Org-Id")):
                self._discard()
                raise HttpError(403, "a personal access token needs the organization's id: "
                                     "send it in the x-service-org-id header (LOGHANDLER_ORG_ID, "
                                     "--org-id)")
            self._rate_limit()
            m = _INGEST.match(path)
            if path in _QUERY_PATHS:
                self._allow(method, "POST")
                status, answer = 200, self._query()
            elif (d := _DATASETS.match(path)) is not None and not m:
                self._may("datasets", method)
                status, answer = self._datasets(method, d.group(1), d.group(2))
            elif m:
                dataset = unquote(m.group(1) or m.group(2))
                self._allow(method, "POST")
                self._may("ingest", method, dataset)
                answer = self._ingest(dataset, parse_qs(parts.query))
                count, failed = answer["ingested"], answer["failed"]
                status = 200
            elif path in ("/v1/logs", "/v1/traces"):  # OTLP/HTTP (otlp.py)
                self._allow(method, "POST")
                dataset = self._service_header("Dataset")
                counts, answer = self._otlp(path[4:], dataset)
                count, failed, status = counts["ingested"], counts["failed"], 200
            elif path == "/local/search":  # the page's search box, as APL (search.py)
                self._allow(method, "POST")
                status, answer = 200, self._search()
            elif path == "/local/facets":  # the page's facets of a search (search.py)
                self._allow(method, "POST")
                status, answer = 200, self._facets()
            elif (t := _TOKENS.match(path)) is not None:
                self._may("apiTokens", method)
                status, answer = self._tokens(method, t.group(1), t.group(2))
            elif (a := _ANNOTATIONS.match(path)) is not None:
                self._may("annotations", method)
                status, answer = self._annotations(method, a.group(1), parts.query)
            elif path == "/v2/views":
                self._may("views", method)
                self._allow(method, "GET", "POST")
                if method == "GET":
                    self._discard()
                    status, answer = 200, self.server.store.views()
                else:
                    view = validate_view(self._parse_json(self._read_body()))
                    status, answer = 200, self.server.store.create_view(view)
            elif (m := _VIEW.match(path)) is not None:
                self._may("views", method)
                self._allow(method, "GET", "PUT", "DELETE")
                status, answer = self._view(method, unquote(m.group(1)))
            else:
                self._discard()
                raise HttpError(404, f"no such endpoint: {method} {path}")
        except HttpError as exc:
            status, error = exc.status, exc.message
            answer = {"code": exc.status, "message": exc.message}
        except Exception as exc:  # a bug, or the store closing under us: answer, never hang up
            self.close_connection = True
            if not isinstance(exc, sqlite3.ProgrammingError):
                import traceback

                traceback.print_exc()
            status, error = 500, f"internal error: {type(exc).__name__}: {exc}"
            answer = {"code": 500, "message": error}
        # Recorded before answering: when a client has its answer, the record is there.
        on_request = self.server.on_request
        if on_request is not None:
            try:
                on_request(RequestRecord(method, path, status, dataset, count, error, failed))
            except Exception:
                pass
        if isinstance(answer, _Raw):
            self._send_raw(status, answer)
        else:
            self._send_json(status, answer)

    def _rate_limit(self) -> None:
        limiter = self.server.rate_limiter
        if limiter is None:
            return
        allowed, remaining, reset = limiter.take()
        self._limit_headers = {"X-RateLimit-Scope": "user",
                               "X-RateLimit-Limit": str(limiter.limit),
                               "X-RateLimit-Remaining": str(remaining),
                               "X-RateLimit-Reset": str(reset)}
        if not allowed:
            self._discard()
            raise HttpError(429, f"rate limit exceeded: this service takes {limiter.limit} "
                                 "requests per minute; wait until X-RateLimit-Reset")

    # ------------------------------------------------------------------ request body

    def _framing(self) -> int | str | None:
        """How the body ends: its length, "chunked", or None (no body)."""
        te = self.headers.get("Transfer-Encoding")
        if te is not None:
            # A body framed by both headers is the classic smuggling shape: chunked wins (RFC
            # 9112) and the connection is not reused after it.
            if self.headers.get("Content-Length") is not None:
                self.close_connection = True
            codings = [c.strip().lower() for c in te.split(",") if c.strip()]
            if codings != ["chunked"]:
                self.close_connection = True
                raise HttpError(501, f"unsupported Transfer-Encoding {te[:40]!r}; send the body "
                                     "with Content-Length or chunked (compress with "
                                     "Content-Encoding)")
            return "chunked"
        raw = self.headers.get("Content-Length")
        if raw is None:
            return None
        lengths = {v.strip() for v in self.headers.get_all("Content-Length") or ()}
        if len(lengths) > 1:
            # Two lengths that disagree: which one frames the body is anyone's guess (the rest
            # would be read as another request on this connection). Refused (RFC 9112).
            self.close_connection = True
            raise HttpError(400, "the request has Content-Length headers that disagree")
        # ASCII digits only: str.isdigit() also takes "²", which int() then refuses.
        if not _DIGITS.fullmatch(raw.strip()):
            self.close_connection = True
            raise HttpError(400, f"bad Content-Length header {raw[:40]!r}")
        return int(raw)

    def _discard(self) -> None:
        """Skip a body we will not use, so the connection stays usable."""
        kind = self._body_kind
        if not kind or self._body is not None:
            return
        if kind == "chunked":
            try:
                self._read_chunked(_DRAIN_LIMIT, keep=False)
            except HttpError:
                self.close_connection = True
            return
        length = int(kind)
        if length > _DRAIN_LIMIT:
            self.close_connection = True
            return
        while length > 0:
            chunk = self.rfile.read(min(length, _CHUNK))
            if not chunk:
                self.close_connection = True
                return
            length -= len(chunk)

    def _allow(self, method: str, *allowed: str) -> None:
        if method not in allowed:
            self._discard()
            raise HttpError(405, f"method {method} not allowed here; use "
                                 f"{' or '.join(allowed)}")

    def _read_body(self) -> bytes:
        """The body, Content-Encoding undone, within the size limit."""
        limit = self.server.max_body_bytes
        kind = self._body_kind
        if kind is None:
            body = b""
        elif kind == "chunked":
            body = self._read_chunked(limit)
        else:
            length = int(kind)
            if length > limit:
                self._discard()
                raise HttpError(413, f"the body is {length} bytes, over this service's limit "
                                     f"of {limit} bytes; send smaller batches")
            body = self.rfile.read(length)
            if len(body) < length:
                self.close_connection = True
                raise HttpError(400, "the body ended before Content-Length bytes arrived")
        self._body = body
        return decode_body(body, self.headers.get("Content-Encoding"), limit)

    def _read_chunked(self, limit: int, keep: bool = True) -> bytes:
        # Transfer-Encoding: chunked (RFC 9112 7.1): size line, data, CRLF; a 0 size, trailers.
        # keep=False skips a body we will not use without holding it in memory.
        out = bytearray()
        total = 0
        try:
            while True:
                line = self.rfile.readline(1024)
                size_text = line.split(b";", 1)[0].strip()
                if not line.endswith(b"\n") or not _HEX.fullmatch(size_text):
                    raise HttpError(400, "bad chunked body: a chunk size line is malformed")
                size = int(size_text, 16)
                if size == 0:
                    break
                if total + size > limit:
                    self.close_connection = True  # the rest is not worth reading
                    raise HttpError(413, f"the body is over this service's limit of {limit} "
                                         "bytes; send smaller batches")
                total += size
                while size > 0:
                    data = self.rfile.read(min(size, _CHUNK))
                    if not data:
                        raise HttpError(400, "bad chunked body: it ends inside a chunk")
                    size -= len(data)
                    if keep:
                        out += data
                if self.rfile.readline(3) not in (b"\r\n", b"\n"):
                    raise HttpError(400, "bad chunked body: a chunk is longer than its size")
            for _ in range(100):  # trailer fields, then the empty line
                line = self.rfile.readline(8192)
                if line in (b"\r\n", b"\n", b""):
                    break
            else:
                raise HttpError(400, "bad chunked body: too many trailer lines")
        except HttpError:
            self.close_connection = True
            raise
        self._body = bytes(out)
        return self._body

    def _parse_json(self, body: bytes) -> Any:
        if not body.strip():
            raise HttpError(400, "the body is empty; send JSON")
        try:
            return json.loads(body, parse_constant=reject_constant)
        except (ValueError, UnicodeDecodeError) as exc:
            raise HttpError(400, f"the body is not valid JSON: {exc}") from None
        except RecursionError:
            raise HttpError(400, "the body is not valid JSON: nested too deeply") from None

    # ------------------------------------------------------------------ endpoints

    def _datasets(self, method: str, name: str | None, trim: str | None
                  ) -> tuple[int, Any]:
        """The datasets API: list and create, get, update and delete, trim."""
        store = self.server.store
        allowed = self.server.datasets
        if name is None:
            self._allow(method, "GET", "POST")
            if method == "GET":
                self._discard()
                listed = store.dataset_list()
                if allowed is not None:
                    known = {d["name"] for d in listed}
                    listed += [{"id": n, "name": n, "description": "", "who": "",
                                "created": ""} for n in sorted(allowed) if n not in known]
                return 200, [self._with_edge(d) for d in listed]
            data = self._parse_json(self._read_body())
            if not isinstance(data, dict) or not isinstance(data.get("name"), str) or not (
                    _DATASET_NAME.fullmatch(data["name"])):
                raise HttpError(400, "a dataset needs a name of 1-128 letters, digits, '-', "
                                     "'_' or '.': {\"name\": \"logs\", \"description\": \"...\"}")
            created = store.dataset_create(data["name"], str(data.get("description") or ""))
            if created is None:
                raise HttpError(409, f"dataset {data['name']!r} exists already")
            if allowed is not None:
                allowed.add(data["name"])
            edge = data.get("edgeDeployment")
            if isinstance(edge, str) and edge:
                self.server.edge_deployments[data["name"]] = edge
            return 200, self._with_edge(created)
        name = unquote(name)
        if trim:
            self._allow(method, "POST")
            data = self._parse_json(self._read_body())
            span = data.get("maxDuration") if isinstance(data, dict) else None
            try:
                now_us = time.time_ns() // 1000
                cutoff = apl.parse_relative_time(f"now-{span}", now_us) if isinstance(
                    span, str) else None
            except apl.AplError:
                cutoff = None
            if cutoff is None:
                raise HttpError(400, 'trim needs {"maxDuration": "1h"} (a span: 30m, 1h, 2d)')
            n = store.dataset_trim(name, cutoff)
            if n is None:
                raise HttpError(404, f"dataset {name!r} not found")
            return 200, {"numDeleted": n}
        self._allow(method, "GET", "PUT", "DELETE")
        if method == "GET":
            self._discard()
            found = store.dataset_get(name)
        elif method == "PUT":
            data = self._parse_json(self._read_body())
            description = data.get("description") if isinstance(data, dict) else None
            if not isinstance(description, str):
                raise HttpError(400, 'update needs {"description": "..."}')
            found = store.dataset_update(name, description)
        else:
            self._discard()
            if not store.dataset_delete(name):
                raise HttpError(404, f"dataset {name!r} not found")
            if allowed is not None:
                allowed.discard(name)
            self.server.edge_deployments.pop(name, None)
            self.server.field_limit.forget(name)
            return 204, None
        if found is None:
            raise HttpError(404, f"dataset {name!r} not found")
        return 200, self._with_edge(found)

    def _with_edge(self, dataset: dict[str, Any]) -> dict[str, Any]:
        # The edge deployment a dataset was created in (the official SDK's edge tests read it
        # back); kept for the life of the service, "" when none was given.
        return {**dataset, "edgeDeployment": self.server.edge_deployments.get(
            dataset.get("name", ""), "")}

    def _may(self, capability: str, method: str, dataset: str | None = None) -> None:
        """403 unless the request's token allows this: a token created through /v2/tokens
        holds only the capabilities it was given (the tokens the service started with: all)."""
        token = self._token
        if token is True or token is None:
            return
        action = verb(method) if capability not in ("ingest", "query") else (
            "create" if capability == "ingest" else "read")
        if not Access.allows(token, capability, action, dataset):
            self._discard()
            where = f"dataset {dataset!r}" if dataset is not None else "the organization"
            raise HttpError(403, f"this token may not {action} {capability} in {where}: "
                                 "create one with that capability")

    def _tokens(self, method: str, token_id: str | None, sub: str | None) -> tuple[int, Any]:
        access = self.server.access
        if token_id is None:
            self._allow(method, "GET", "POST")
            if method == "GET":
                self._discard()
                return 200, access.list()
            return 200, access.create(self._parse_json(self._read_body()))
        token_id = unquote(token_id)
        if sub:
            self._allow(method, "POST")
            return 200, access.regenerate(token_id, self._parse_json(self._read_body()))
        self._allow(method, "GET", "DELETE")
        self._discard()
        if method == "GET":
            return 200, access.get(token_id)
        access.delete(token_id)
        return 204, None

    def _annotations(self, method: str, item_id: str | None, query: str) -> tuple[int, Any]:
        notes = self.server.annotations
        if item_id is None:
            self._allow(method, "GET", "POST")
            if method == "GET":
                self._discard()
                params = parse_qs(query)
                datasets = [d for v in params.get("datasets", []) for d in v.split(",") if d]
                start, end = params.get("start"), params.get("end")
                return 200, notes.list(datasets, start[0] if start else None,
                                       end[0] if end else None)
            return 200, notes.create(self._parse_json(self._read_body()))
        item_id = unquote(item_id)
        self._allow(method, "GET", "PUT", "DELETE")
        if method == "PUT":
            return 200, notes.update(item_id, self._parse_json(self._read_body()))
        self._discard()
        if method == "GET":
            return 200, notes.get(item_id)
        notes.delete(item_id)
        return 204, None

    def _search(self, rows: int | None = None) -> dict[str, Any]:
        data = self._parse_json(self._read_body())
        if not isinstance(data, dict) or not isinstance(data.get("dataset"), str) or not (
                isinstance(data.get("q", ""), str)):
            raise HttpError(400, 'send {"dataset": "...", "q": "...", "range": "1h"}')
        self._may("query", "GET", data["dataset"])
        time_range = data.get("range") if isinstance(data.get("range"), str) else None
        after = data.get("after")  # the last row shown: {"_time", "_rowId"}, for the next page
        before = None
        if isinstance(after, dict):
            if not isinstance(after.get("_time"), str) or not isinstance(after.get("_rowId"),
                                                                           str):
                raise HttpError(400, '"after" needs the "_time" and "_rowId" of a row')
            before = (after["_time"], after["_rowId"])
        try:
            return {"apl": page_query(data["dataset"], data.get("q", ""), time_range,
                                      PAGE_ROWS if rows is None else rows, before)}
        except SearchError as exc:
            raise HttpError(400, str(exc)) from None

    def _facets(self) -> dict[str, Any]:
        apl = self._search(FACET_ROWS)["apl"]
        answer = self.server.store.query(apl, None, None, "tabular")
        return {"apl": apl, **facets(answer.get("tables", []))}

    def _service_header(self, name: str) -> str | None:
        """The service's own header ``name``, in the seed's spelling (``x-service-<name>``) or
        the real service's (``X-Axiom-<name>``, what its official clients send)."""
        for prefix in ("x-service-", "X-Axiom-"):
            value = self.headers.get(prefix + name)
            if value is not None:
                return value
        return None

    def _exists(self, dataset: str) -> None:
        # Only the named datasets exist (serve --dataset): another one is the real 404.
        allowed = self.server.datasets
        if allowed is not None and dataset not in allowed:
            self._discard()
            raise HttpError(404, "dataset not found")

    def _ingest(self, dataset: str, params: dict[str, list[str]]) -> dict[str, Any]:
        self._exists(dataset)
        try:
            options = IngestOptions(params)
        except HttpError:
            self._discard()
            raise
        fields_header = self._service_header("CSV-Fields")
        labels_header = self._service_header("Event-Labels")
        labels: Any = None
        try:
            if labels_header is not None:
                labels = json.loads(labels_header)
                if not isinstance(labels, dict):
                    raise ValueError("not a JSON object")
        except ValueError as exc:
            self._discard()
            raise HttpError(400, f"the event-labels header must be a JSON object of the "
                                 f"fields to add to every event ({exc})") from None
        body = self._read_body()
        limit = self.server.ingest_limit
        if limit is not None:
            within, headers = limit.take(len(body))
            self._limit_headers = {**self._limit_headers, **headers}
            if not within:
                raise HttpError(430, f"ingest limit exceeded: this service takes {limit.limit:,} "
                                     "bytes a month; wait until X-IngestLimit-Reset")
        values = parse_values(body, self.headers.get("Content-Type"),
                              csv_delimiter=options.csv_delimiter,
                              csv_fields=(None if fields_header is None else
                                          [f.strip() for f in fields_header.split(",")]))
        return self._store(dataset, values, options, labels, len(body))

    def _store(self, dataset: str, values: list[Any], options: IngestOptions, labels: Any,
               size: int) -> dict[str, Any]:
        """Validate and store the values of one request: its ingest status."""
        now = format_time(time.time_ns() // 1000)
        events, failures = prepare_events(values, options, now, labels)
        events, refused = self.server.field_limit.admit(dataset, events)
        for _ in refused:
            failures.append({"timestamp": now, "error": (
                f"field limit exceeded: dataset {dataset!r} may hold at most "
                f"{self.server.field_limit.limit} fields")})
        self.server.store.add_events(dataset, events)
        return {"ingested": len(events), "failed": len(failures), "failures": failures,
                "processedBytes": size, "blocksCreated": 0, "walLength": len(events)}

    def _otlp(self, signal: str, dataset: str | None) -> tuple[dict[str, Any], _Raw]:
        """OTLP/HTTP logs or traces into the dataset the dataset header names (otlp.py)."""
        if not dataset:
            self._discard()
            raise HttpError(400, "name the dataset for OTLP data in the X-Axiom-Dataset "
                                 "(or x-service-dataset) header")
        self._may("ingest", "POST", dataset)
        self._exists(dataset)
        kind = media_type(self.headers.get("Content-Type"))
        if kind not in ("application/x-protobuf", "application/json"):
            self._discard()
            raise HttpError(415, "OTLP/HTTP bodies are application/x-protobuf or "
                                 "application/json")
        body = self._read_body()
        try:
            values = otlp.decode_request(body, kind, signal)
        except otlp.OtlpError as exc:
            raise HttpError(400, f"the body is not an OTLP {signal} request: {exc}") from None
        status = self._store(dataset, values, IngestOptions({}), None, len(body))
        message = "; ".join(sorted({f["error"] for f in status["failures"]}))
        return status, _Raw(otlp.encode_response(kind, signal, status["failed"], message), kind)

    def _view(self, method: str, view_id: str) -> tuple[int, Any]:
        store = self.server.store
        if method == "GET":
            self._discard()
            found = store.get_view(view_id)
        elif method == "PUT":
            view = validate_view(self._parse_json(self._read_body()))
            found = store.put_view(view_id, view)
        else:
            self._discard()
            if store.delete_view(view_id):
                return 204, None
            found = None
        if found is None:
            raise HttpError(404, f"view not found: no view with id {view_id!r}")
        return 200, found

    def _query(self) -> dict[str, Any]:
        data = self._parse_json(self._read_body())
        if not isinstance(data, dict) or not isinstance(data.get("apl"), str):
            raise HttpError(400, 'the body must be a JSON object with "apl": the query text')
        fmt = (parse_qs(urlsplit(self.path).query).get("format") or ["legacy"])[0]
        if fmt not in ("legacy", "tabular"):
            raise HttpError(400, f"unsupported format {fmt!r}; use legacy or tabular")
        allowed = self.server.datasets
        if allowed is not None or self._token is not True:
            try:
                name: str | None = apl.parse_query(data["apl"]).dataset
            except apl.AplError:
                name = None  # the store's run of the query answers 400, naming what is wrong
            if name is not None:
                self._may("query", "GET", name)
            # Only the named datasets exist (serve --dataset): another one is the real 404.
            if allowed is not None and name is not None and name not in allowed:
                raise HttpError(404, "dataset not found")
        return self.server.store.query(data["apl"], data.get("startTime"),
                                       data.get("endTime"), fmt, cursor=data.get("cursor"),
                                       include_cursor=data.get("includeCursor", False))

    # ------------------------------------------------------------------ response

    def _send_static(self, name: str, content_type: str) -> None:
        body = (resources.files("loghandler._local") / "web" / name).read_bytes()
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-cache")
        # Everything the page needs comes from this service: no external asset can load.
        self.send_header("Content-Security-Policy",
                         "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
        self.send_header("Referrer-Policy", "no-referrer")
        self.end_headers()
        self.wfile.write(body)

    def _send_raw(self, status: int, raw: _Raw) -> None:
        self.send_response(status)
        for name, value in getattr(self, "_limit_headers", {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", raw.content_type)
        self.send_header("Content-Length", str(len(raw.body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if raw.body:
            self.wfile.write(raw.body)

    def _send_json(self, status: int, payload: Any) -> None:
        body = b"" if status == 204 else json.dumps(payload).encode()
        self.send_response(status)
        for name, value in getattr(self, "_limit_headers", {}).items():
            self.send_header(name, value)
        if status != 204:
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if body:
            self.wfile.write(body)


@dataclass(frozen=True)
class _Raw:
    """An answer that is not JSON: its bytes and their media type (OTLP's protobuf)."""

    body: bytes
    content_type: str


_DIGITS = re.compile(r"[0-9]+", re.ASCII)
_HEX = re.compile(rb"[0-9A-Fa-f]{1,16}")
