"""ASGI request reports: one event per HTTP request, every line inside it carrying its id.

``app.add_middleware(RequestReports)`` (FastAPI, Starlette) or ``RequestReports(app)`` around
any ASGI app (Quart, Django's ASGI handler, ...). The rule (fields, level, message, request id)
is in ``_reports``; this module reads ASGI's scope and messages. ``import loghandler`` does not
import it; it imports no framework.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from time import perf_counter
from typing import Any

from . import _reports
from ._engine.context import context

__all__ = ["RequestReports"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


class RequestReports:
    """ASGI middleware: serve each HTTP request inside ``loghandler.context(request_id=...)``
    and log one report on ``logger`` when its last byte is sent (or the app raised).

    Arguments (keywords; a wrong one is a ``ConfigurationError`` here):

    - ``logger``: the report's logger (default ``"loghandler.request"``).
    - ``request_id_header``: the header read for an incoming id and set on the response
      (default ``"x-request-id"``); an id that is not 1-128 printable ASCII characters is
      replaced by 32 new hex digits.
    - ``exclude_paths``: paths with no report (default: ``/health``, ``/healthz``, ``/ready``,
      ``/readyz``, ``/livez``, ``/metrics``); a trailing ``*`` matches a prefix.
    - ``client_address``: report ``client.address`` (default False).
    - ``headers``: request header names (lowercase) to report as
      ``http.request.header.<name>``.

    Websocket and lifespan scopes pass through untouched. The report's level: ERROR when the
    app raised (the exception is on the report, and still propagates) or the status is 5xx,
    WARNING for 4xx, INFO otherwise; a client gone before the response ended is 499.
    """

    __slots__ = ("_options", "app")

    def __init__(self, app: App, **options: Any) -> None:
        self.app = app
        self._options = _reports.configure(options, "RequestReports")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            x = _Exchange(self._options, scope, receive, send)
        except Exception as error:
            _reports.fault("the request's report", error)
            await self.app(scope, receive, send)
            return
        try:
            with context(request_id=x.request_id):
                exc: BaseException | None = None
                try:
                    await self.app(scope, x.receive, x.send)
                except BaseException as e:
                    exc = e
                    raise
                finally:
                    # An ERROR report inside the context: the lines it held ship first.
                    x.finish(exc, True)
        finally:
            x.finish(None, False)


class _Exchange:
    """One request's figures, and the receive / send that keep them."""

    __slots__ = ("_receive", "_send", "agent", "chosen", "client", "ended", "exc", "gone",
                 "header", "level", "options", "request_id", "scope", "size",
                 "started", "status")

    def __init__(self, options: _reports.Options, scope: Scope, receive: Receive,
                 send: Send) -> None:
        self.started = perf_counter()
        self.options = options
        self.scope = scope
        self._receive = receive
        self._send = send
        self.status = 0
        self.size = 0
        self.ended: float | None = None
        self.gone = False
        self.level = 0  # 0: not decided yet; -1: reported or nothing to report
        self.exc: BaseException | None = None
        incoming = agent = None
        want = options.header_bytes
        chosen: dict[str, str] | None = None
        for name, value in scope.get("headers") or ():
            if name == want:
                incoming = value.decode("latin-1")
            elif name == b"user-agent":
                agent = value.decode("latin-1")
            if options.headers_asgi:
                for header, field in options.headers_asgi:
                    if name == header:
                        if chosen is None:
                            chosen = {}
                        chosen[field] = value.decode("latin-1")
        self.request_id = _reports.make_request_id(incoming)
        self.header = (want, self.request_id.encode("latin-1"))
        self.agent = agent
        self.chosen = chosen
        client = scope.get("client") if options.client_address else None
        self.client = str(client[0]) if client else None

    async def receive(self) -> Message:
        message = await self._receive()
        if message.get("type") == "http.disconnect" and self.ended is None:
            self.gone = True
        return message

    async def send(self, message: Message) -> None:
        last = False
        try:
            kind = message["type"]
            if kind == "http.response.start":
                self.status = message["status"]
                headers = message.get("headers") or []
                want = self.header[0]
                for name, _ in headers:
                    if name.lower() == want:
                        break
                else:
                    message = {**message, "headers": [*headers, self.header]}
            elif kind == "http.response.body":
                self.size += len(message.get("body", b""))
                last = not message.get("more_body", False)
            elif kind == "http.response.pathsend":
                last = True
        except Exception as error:
            _reports.fault("the request's report", error)
        try:
            await self._send(message)
        except BaseException:
            if self.ended is None:
                self.gone = True
            raise
        if last:
            self.ended = perf_counter()

    def finish(self, exc: BaseException | None, inside: bool) -> None:
        """Inside the context (``inside``): decide the outcome, and log an ERROR report there;
        after it: log the report not logged yet."""
        try:
            if inside:
                self._decide(exc)
                if self.level != _reports.ERROR:
                    return
            if self.level <= 0:
                return
            level, self.level = self.level, -1
            scope = self.scope
            route = getattr(scope.get("route"), "path", None)
            _reports.report(
                self.options, level, scope.get("method", ""), route if type(route) is str
                else None, scope.get("path", ""), self.status, self.started, self.ended,
                self.size, self.agent, self.request_id, self.client, self.chosen, self.exc)
        except Exception as error:
            _reports.fault("the request's report", error)

    def _decide(self, exc: BaseException | None) -> None:
        if self.options.excluded(self.scope.get("path", "")):
            self.level = -1
            return
        # A client gone makes the app's send raise (or the framework's own error for it):
        # no failure of the app's.
        failed = isinstance(exc, Exception) and not self.gone
        if self.gone and self.ended is None:
            self.status = _reports.CLIENT_GONE
        elif self.ended is None and not self.status:
            self.status = 500  # no response: the server answers 500
        self.exc = exc if failed else None
        self.level = _reports.level_of(self.status, failed)
