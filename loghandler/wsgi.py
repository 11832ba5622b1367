"""WSGI request reports: one event per request, every line inside it carrying its id.

``app.wsgi_app = RequestReports(app.wsgi_app)`` (Flask), ``RequestReports(app)`` around any
WSGI app (Bottle, ...). The rule (fields, level, message, request id) is in ``_reports``; this
module reads the environ, ``start_response`` and the body's iteration. ``import loghandler``
does not import it; it imports no framework.

A WSGI body is iterated by the server after the app returned: each request gets its own copy
of the caller's ``contextvars`` context, in which the app is called and every chunk is made,
so lines logged while a body streams carry the request's id too, and the thread's own context
is left as it was (nothing of one request leaks into the next on that thread).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextvars import copy_context
from time import perf_counter
from typing import Any

from . import _reports
from ._engine.context import context

__all__ = ["RequestReports"]

StartResponse = Callable[..., Callable[[bytes], object]]
App = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


class RequestReports:
    """WSGI middleware: serve each request inside ``loghandler.context(request_id=...)`` and
    log one report on ``logger`` when the body's last byte is sent (or the app raised).

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

    The report's level: ERROR when the app raised (the exception is on the report, and still
    propagates) or the status is 5xx, WARNING for 4xx, INFO otherwise; a client gone before
    the body ended (the server closed it early, or writing failed) is 499.
    """

    __slots__ = ("_options", "app")

    def __init__(self, app: App, **options: Any) -> None:
        self.app = app
        self._options = _reports.configure(options, "RequestReports")

    def __call__(self, environ: dict[str, Any], start_response: StartResponse
                 ) -> Iterable[bytes]:
        try:
            x = _Exchange(self._options, environ, start_response)
            run = copy_context().run
            run(x.enter)
        except Exception as error:
            _reports.fault("the request's report", error)
            return self.app(environ, start_response)
        try:
            body = run(self.app, environ, x.start_response)
        except BaseException as exc:
            run(x.finish, exc)
            raise
        return _Body(body, x, run)


class _Body:
    """The app's body, iterated in the request's context; the report at its end."""

    __slots__ = ("_body", "_done", "_next", "_run", "_x")

    def __init__(self, body: Iterable[bytes], x: _Exchange, run: Any) -> None:
        self._body = body
        self._x = x
        self._run = run
        self._next: Callable[[], bytes] = iter(body).__next__
        self._done = False

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        try:
            chunk: bytes = self._run(self._next)
        except StopIteration:
            if not self._done:
                self._done = True
                self._x.ended = perf_counter()
                self._run(self._x.finish, None)
            raise
        except BaseException as exc:
            if not self._done:
                self._done = True
                self._run(self._x.finish, exc)
            raise
        self._x.size += len(chunk)
        return chunk

    def close(self) -> None:
        try:
            close = getattr(self._body, "close", None)
            if close is not None:
                self._run(close)
        finally:
            if not self._done:
                # Closed before its end: the client went away (or the server gave up on it).
                self._done = True
                self._x.gone = True
                self._run(self._x.finish, None)


class _Exchange:
    """One request's figures, its context, and the ``start_response`` that keeps them."""

    __slots__ = ("_start_response", "_write", "agent", "chosen", "client", "context", "ended",
                 "environ", "gone", "options", "request_id", "route", "size", "started",
                 "status")

    def __init__(self, options: _reports.Options, environ: dict[str, Any],
                 start_response: StartResponse) -> None:
        self.started = perf_counter()
        self.options = options
        self.environ = environ
        self._start_response = start_response
        self.status = 0
        self.size = 0
        self.ended: float | None = None
        self.gone = False
        self.route: str | None = None
        get = environ.get
        self.request_id = _reports.make_request_id(get(options.header_environ))
        self.agent: str | None = get("HTTP_USER_AGENT")
        self.chosen = options.chosen(get) if options.headers_environ else None
        self.client: str | None = get("REMOTE_ADDR") if options.client_address else None
        self.context = context(request_id=self.request_id)

    def enter(self) -> None:
        self.context.__enter__()

    def start_response(self, status: str, headers: list[tuple[str, str]],
                       exc_info: Any = None) -> Callable[[bytes], object]:
        try:
            self.status = int(status[:3])
            # Flask takes its request out of the environ when the app returns.
            self.route = _route(self.environ)
            want = self.options.header
            if not any(name.lower() == want for name, _ in headers):
                headers = [*headers, (want, self.request_id)]
        except Exception as error:
            _reports.fault("the request's report", error)
        # exc_info only when given: as the app called it (a server may take two arguments).
        if exc_info is None:
            self._write = self._start_response(status, headers)
        else:
            self._write = self._start_response(status, headers, exc_info)
        return self.write

    def write(self, data: bytes) -> object:
        """The ``write`` callable of WSGI's older apps, counted; an OSError: the client went
        away."""
        try:
            result = self._write(data)
        except OSError:
            self.gone = True
            raise
        self.size += len(data)
        return result

    def finish(self, exc: BaseException | None) -> None:
        """In the request's context: the report (an ERROR one before the context ends, so the
        lines it held ship first; another after), then the context's end."""
        try:
            report = self._report(exc)
        except Exception as error:
            _reports.fault("the request's report", error)
            report = None
        if report is not None and report[0] == _reports.ERROR:
            _reports.report(*report)
            report = None
        if exc is None:
            self.context.__exit__(None, None, None)
        else:
            self.context.__exit__(type(exc), exc, exc.__traceback__)
        if report is not None:
            _reports.report(*report)

    def _report(self, exc: BaseException | None) -> tuple[Any, ...] | None:
        environ = self.environ
        path = environ.get("SCRIPT_NAME", "") + environ.get("PATH_INFO", "")
        if not path.isascii():  # WSGI's str of the path's bytes
            path = path.encode("latin-1").decode("utf-8", "replace")
        o = self.options
        if o.excluded(path):
            return None
        failed = isinstance(exc, Exception) and not self.gone  # (gone: writing failed)
        if self.gone:
            self.status = _reports.CLIENT_GONE
        elif not self.status:
            self.status = 500
        return (o, _reports.level_of(self.status, failed), environ.get("REQUEST_METHOD", ""),
                self.route or _route(environ), path, self.status, self.started, self.ended,
                self.size, self.agent, self.request_id, self.client, self.chosen,
                exc if failed else None)


def _route(environ: dict[str, Any]) -> str | None:
    """The route template, when the framework left it in the environ (Flask / Werkzeug's
    request, Bottle's route)."""
    request = environ.get("werkzeug.request")
    if request is not None:
        rule = getattr(getattr(request, "url_rule", None), "rule", None)
        return rule if type(rule) is str else None
    route = environ.get("bottle.route")
    if route is not None:
        rule = getattr(route, "rule", None)
        return rule if type(rule) is str else None
    return None
