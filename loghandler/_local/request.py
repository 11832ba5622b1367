"""The HTTP mechanics of the local service's requests: the body's framing (Content-Length or
chunked, each checked), reading it within the size limit with its Content-Encoding undone, JSON
bodies, and the answers (JSON, raw bytes, the page's files). ``routes.Handler`` adds the routing;
the endpoints (``ep_*``) call the public methods here.
"""

from __future__ import annotations

import json
import re
import select
import socket
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from importlib import resources
from typing import Any

from .access import Access, verb
from .ingest import HttpError, decode_body
from .reader import PAGE
from .state import ServiceState
from .views import reject_constant

__all__ = ["Raw", "Request"]

# A body over the limit is read and thrown away up to this size, so the client (still sending)
# reads our 413 instead of a connection reset; beyond it we answer and close.
_DRAIN_LIMIT = 64 * 1024 * 1024
_CHUNK = 64 * 1024
_DIGITS = re.compile(r"[0-9]+", re.ASCII)
_HEX = re.compile(rb"[0-9A-Fa-f]{1,16}")


@dataclass(frozen=True)
class Raw:
    """An answer that is not JSON: its bytes and their media type (OTLP's protobuf)."""

    body: bytes
    content_type: str


class Request(BaseHTTPRequestHandler):
    """One connection's requests (keep-alive): the mechanics every endpoint uses."""

    protocol_version = "HTTP/1.1"  # keep-alive: clients reuse their connection
    disable_nagle_algorithm = True  # no 40 ms stall on what is written
    # A small answer leaves in one write, its head and body together, as real services write
    # it (Go's net/http, nginx): unbuffered, http.server writes the head, then the body, and a
    # client reads the answer in two receives (each a wait for the interpreter's lock on the
    # shipper's flusher: docs/performance.md, "Sixth pass"). http.server flushes after each
    # request; a body larger than the buffer is written straight through.
    wbufsize = 64 * 1024
    # A backstop per receive; the server's own time-outs (idle, whole request) come first.
    timeout = 60
    server_version = "loghandler-local"
    # Per request (one handler serves a whole keep-alive connection).
    limit_headers: dict[str, str]
    _body: bytes | None
    _body_kind: int | str | None
    token: Any  # Access.find's answer for this request, once the token is read
    # What the request's record says (RequestRecord): the dataset, events stored and failed.
    record_dataset: str | None
    record_events: int
    record_failed: int

    @property
    def state(self) -> ServiceState:
        """The server's state and settings (``service.Server.state``)."""
        return self.server.state  # type: ignore[attr-defined,no-any-return]

    def version_string(self) -> str:
        return self.server_version  # no Python version in Server: it tells an attacker more

    def send_response(self, code: int, message: str | None = None) -> None:
        super().send_response(code, message)
        # Every answer: a browser never guesses a type (JSON read as HTML) from the bytes.
        self.send_header("X-Content-Type-Options", "nosniff")

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the per-request line is ours (on_request), not http.server's

    def handle_expect_100(self) -> bool:
        # 100 Continue must leave now (the client waits for it before sending the body), not
        # with the answer (the buffered wfile above).
        ok = super().handle_expect_100()
        self.wfile.flush()
        return ok

    def setup(self) -> None:
        super().setup()
        server: Any = self.server
        self.connection.settimeout(max(server.idle_timeout, server.request_timeout) + 5)

    def handle(self) -> None:
        try:
            super().handle()
        finally:
            self.server.release(self.connection)  # type: ignore[attr-defined]

    def handle_one_request(self) -> None:
        # Waiting for the next request line: the idle time-out.
        self.server.watch(self.connection, self.server.idle_timeout)  # type: ignore[attr-defined]
        super().handle_one_request()

    def parse_request(self) -> bool:
        # The request line is here: its headers and body have the request time-out, as a whole.
        self.server.watch(self.connection,  # type: ignore[attr-defined]
                          self.server.request_timeout)  # type: ignore[attr-defined]
        return super().parse_request()

    def _arrived(self) -> None:
        """The request has arrived whole: no time-out while it is answered (a query has its
        own deadline)."""
        self.server.watch(self.connection, None)  # type: ignore[attr-defined]

    def _late(self) -> HttpError:
        """The request did not arrive within its time-out (the server cut it), or its client
        stopped sending: 408, and the connection closes."""
        self.close_connection = True
        timeout = self.server.request_timeout  # type: ignore[attr-defined]
        return HttpError(408, f"the request did not arrive within {timeout:g} s; send it "
                              "whole without pausing")

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        # http.server's own errors (bad request line, unknown method) are HTML; ours are JSON.
        self.close_connection = True
        self.limit_headers = {}  # this handler serves the whole connection: not the last one's
        try:
            text = message or self.responses.get(code, ("",))[0]
            self.send_json(code, {"code": code, "message": text})
        except OSError:
            pass

    def do_GET(self) -> None:
        self.handle_request("GET")

    def do_POST(self) -> None:
        self.handle_request("POST")

    def do_PUT(self) -> None:
        self.handle_request("PUT")

    def do_DELETE(self) -> None:
        self.handle_request("DELETE")

    def do_PATCH(self) -> None:
        self.handle_request("PATCH")

    def handle_request(self, method: str) -> None:
        raise NotImplementedError

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
            self._arrived()
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

    def discard(self) -> None:
        """Skip a body we will not use, so the connection stays usable."""
        kind = self._body_kind
        if not kind or self._body is not None:
            return
        try:
            self._discard(kind)
        except OSError:
            self.close_connection = True
        self._arrived()

    def _discard(self, kind: int | str) -> None:
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

    def client_gone(self) -> bool:
        """True when the client has hung up (an aborted fetch closes its connection): the
        query it asked for can stop. Its next request, sent early, is not a hang-up."""
        sock = self.connection
        try:
            if hasattr(select, "poll"):  # select() cannot watch a descriptor past 1023
                poller = select.poll()
                poller.register(sock, select.POLLIN)
                ready = bool(poller.poll(0))
            else:
                ready = bool(select.select([sock], [], [], 0)[0])
            return ready and sock.recv(1, socket.MSG_PEEK) == b""
        except ConnectionError:
            return True  # reset: gone
        except (OSError, ValueError):
            return False  # not known: the query goes on (its deadline still holds)

    def allow(self, method: str, *allowed: str) -> None:
        if method not in allowed:
            self.discard()
            raise HttpError(405, f"method {method} not allowed here; use "
                                 f"{' or '.join(allowed)}")

    def read_body(self) -> bytes:
        """The body, Content-Encoding undone, within the size limit."""
        limit = self.state.max_body_bytes
        kind = self._body_kind
        try:
            if kind is None:
                body = b""
            elif kind == "chunked":
                body = self._read_chunked(limit)
            else:
                length = int(kind)
                if length > limit:
                    self.discard()
                    raise HttpError(413, f"the body is {length} bytes, over this service's "
                                         f"limit of {limit} bytes; send smaller batches")
                body = self.rfile.read(length)
                if len(body) < length:
                    if self.server.was_cut(self.connection):  # type: ignore[attr-defined]
                        raise self._late()
                    self.close_connection = True
                    raise HttpError(400, "the body ended before Content-Length bytes arrived")
        except OSError:  # a time-out of a receive, or the client gone
            raise self._late() from None
        except HttpError as exc:
            if exc.status == 400 and self.server.was_cut(  # type: ignore[attr-defined]
                    self.connection):
                raise self._late() from None
            raise
        self._arrived()
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

    def parse_json(self, body: bytes) -> Any:
        if not body.strip():
            raise HttpError(400, "the body is empty; send JSON")
        try:
            return json.loads(body, parse_constant=reject_constant)
        except (ValueError, UnicodeDecodeError) as exc:
            raise HttpError(400, f"the body is not valid JSON: {exc}") from None
        except RecursionError:
            raise HttpError(400, "the body is not valid JSON: nested too deeply") from None

    def json_body(self) -> Any:
        """The body read as JSON (400 when it is not)."""
        return self.parse_json(self.read_body())

    def service_header(self, name: str) -> str | None:
        """The service's own header ``name``, in the seed's spelling (``x-service-<name>``) or
        the real service's (``X-Axiom-<name>``, what its official clients send)."""
        for prefix in ("x-service-", "X-Axiom-"):
            value = self.headers.get(prefix + name)
            if value is not None:
                return value
        return None

    def may(self, capability: str, method: str, dataset: str | None = None) -> None:
        """403 unless the request's token allows this: a token created through /v2/tokens
        holds only the capabilities it was given (the tokens the service started with: all)."""
        token = self.token
        if token is True or token is None:
            return
        action = verb(method) if capability not in ("ingest", "query") else (
            "create" if capability == "ingest" else "read")
        if not Access.allows(token, capability, action, dataset):
            self.discard()
            where = f"dataset {dataset!r}" if dataset is not None else "the organization"
            raise HttpError(403, f"this token may not {action} {capability} in {where}: "
                                 "create one with that capability")

    def may_some(self, capability: str) -> None:
        """403 unless the request's token may read ``capability`` (query) in some dataset:
        checked before the body is read, so that a token that may not query cannot make the
        service decode a body (the dataset, named in the body, is checked after)."""
        token = self.token
        if token is True or token is None:
            return
        names = token.get("datasetCapabilities") or {}
        if not any(Access.allows(token, capability, "read", name) for name in names):
            self.discard()
            raise HttpError(403, f"this token may not read {capability} in any dataset: "
                                 "create one with that capability")

    @property
    def client_key(self) -> Any:
        """Who this request is for the reader's fair share: its token (created tokens by
        their id; the tokens the service started with are one client)."""
        token = self.token
        key = token.get("id") if isinstance(token, dict) else "root"
        # The web page names the panel that asks: its queries yield to the API's (reader.py).
        # A client that sends the header only lowers its own queries' priority.
        return (PAGE, key) if self.headers.get("X-Loghandler-Panel") else key

    # ------------------------------------------------------------------ response

    def send_static(self, name: str, content_type: str) -> None:
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

    def send_raw(self, status: int, raw: Raw) -> None:
        self.send_response(status)
        for name, value in getattr(self, "limit_headers", {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", raw.content_type)
        self.send_header("Content-Length", str(len(raw.body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if raw.body:
            self.wfile.write(raw.body)

    def send_json(self, status: int, payload: Any) -> None:
        body = b"" if status == 204 else json.dumps(payload).encode()
        self.send_response(status)
        for name, value in getattr(self, "limit_headers", {}).items():
            self.send_header(name, value)
        if status != 204:
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if body:
            self.wfile.write(body)


