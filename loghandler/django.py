"""Django request reports: ``"loghandler.django.RequestReports"`` in ``MIDDLEWARE``.

Options come from the setting ``LOGHANDLER_REQUEST_REPORTS`` (a dict of the keywords of
``loghandler.asgi.RequestReports``). Works under WSGI and ASGI (sync and async middleware
chains). The rule (fields, level, message, request id) is in ``_reports``; this module reads
Django's request and response. ``import loghandler`` does not import it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from time import perf_counter
from typing import Any

from . import _reports
from ._engine.context import context

__all__ = ["RequestReports"]

_EXCEPTION = "_loghandler_exception"


class RequestReports:
    """Django middleware: serve each request inside ``loghandler.context(request_id=...)``
    and log one report on ``logger`` when the response is made (a streaming one: when its
    last byte is sent). Put it first in ``MIDDLEWARE`` so that it sees every request.

    Options: the setting ``LOGHANDLER_REQUEST_REPORTS``, a dict of ``logger``,
    ``request_id_header``, ``exclude_paths``, ``client_address``, ``headers`` (as
    ``loghandler.asgi.RequestReports``); a wrong one is a ``ConfigurationError`` when Django
    loads the middleware.
    """

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[Any], Any]) -> None:
        from asgiref.sync import iscoroutinefunction, markcoroutinefunction
        from django.conf import settings  # type: ignore[import-untyped]

        self.get_response = get_response
        options = getattr(settings, "LOGHANDLER_REQUEST_REPORTS", None) or {}
        if not isinstance(options, dict):
            from ._errors import ConfigurationError

            raise ConfigurationError(
                f"LOGHANDLER_REQUEST_REPORTS must be a dict of options, not {options!r}")
        self._options = _reports.configure(options, "LOGHANDLER_REQUEST_REPORTS")
        self._async = iscoroutinefunction(get_response)
        if self._async:
            markcoroutinefunction(self)

    def __call__(self, request: Any) -> Any:
        if self._async:
            return self.__acall__(request)
        try:
            x = _Exchange(self._options, request)
        except Exception as error:
            _reports.fault("the request's report", error)
            return self.get_response(request)
        response = None
        try:
            with context(request_id=x.request_id):
                try:
                    response = self.get_response(request)
                finally:
                    x.finish(response, inside=True)
        finally:
            x.finish(response, inside=False)
        return response

    async def __acall__(self, request: Any) -> Any:
        try:
            x = _Exchange(self._options, request)
        except Exception as error:
            _reports.fault("the request's report", error)
            return await self.get_response(request)
        response = None
        try:
            with context(request_id=x.request_id):
                try:
                    response = await self.get_response(request)
                finally:
                    x.finish(response, inside=True)
        finally:
            x.finish(response, inside=False)
        return response

    def process_exception(self, request: Any, exception: Exception) -> None:
        # The view's exception, for the report: Django turns it into a 500 response.
        try:
            setattr(request, _EXCEPTION, exception)
        except Exception:
            pass


class _Exchange:
    __slots__ = ("ended", "gone", "level", "options", "report", "request", "request_id",
                 "size", "started", "status")

    def __init__(self, options: _reports.Options, request: Any) -> None:
        self.started = perf_counter()
        self.options = options
        self.request = request
        self.request_id = _reports.make_request_id(request.META.get(options.header_environ))
        self.level = 0  # 0: not decided; -1: reported, or nothing to report
        self.status = 0
        self.size = 0
        self.ended: float | None = None
        self.gone = False
        self.report: tuple[Any, ...] | None = None

    def finish(self, response: Any, inside: bool) -> None:
        try:
            if inside:
                if response is not None:
                    self._decide(response)
                return
            if self.report is not None:
                report, self.report = self.report, None
                _reports.report(*report)
        except Exception as error:
            _reports.fault("the request's report", error)

    def _decide(self, response: Any) -> None:
        """Inside the context: the response's header, and the report made (an ERROR one is
        logged now, the others after the context); none yet for a streaming body."""
        o = self.options
        if not response.has_header(o.header):
            response[o.header] = self.request_id
        if o.excluded(self.request.path):
            return
        self.status = response.status_code
        if getattr(response, "streaming", False) and not getattr(response, "is_async", False):
            response.streaming_content = _Counted(response.streaming_content, self)
            return
        if not getattr(response, "streaming", False):
            self.size = len(response.content)
        self.ended = perf_counter()
        self._make()

    def _make(self) -> None:
        request = self.request
        exc = getattr(request, _EXCEPTION, None)
        if self.gone:
            self.status = _reports.CLIENT_GONE
        failed = isinstance(exc, Exception)
        match = getattr(request, "resolver_match", None)
        route = getattr(match, "route", None) or None
        meta = request.META
        o = self.options
        self.report = (
            o, _reports.level_of(self.status, failed), request.method, route, request.path,
            self.status, self.started, self.ended, self.size, meta.get("HTTP_USER_AGENT"),
            self.request_id, meta.get("REMOTE_ADDR") if o.client_address else None,
            o.chosen(meta.get) if o.headers_environ else None, exc if failed else None)
        if self.report[1] == _reports.ERROR:
            report, self.report = self.report, None
            _reports.report(*report)

    def streamed(self, gone: bool) -> None:
        """A streaming body ended (or was closed before its end: ``gone``)."""
        try:
            self.ended = perf_counter()
            self.gone = gone
            self._make()
            if self.report is not None:
                report, self.report = self.report, None
                _reports.report(*report)
        except Exception as error:
            _reports.fault("the request's report", error)


class _Counted:
    """A streaming response's content, counted; the report at its end or at its close."""

    __slots__ = ("_done", "_it", "_x", "close_inner")

    def __init__(self, content: Any, x: _Exchange) -> None:
        self._it: Iterator[bytes] = iter(content)
        self._x = x
        self._done = False
        self.close_inner = getattr(content, "close", None)

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        try:
            chunk = next(self._it)
        except StopIteration:
            if not self._done:
                self._done = True
                self._x.streamed(False)
            raise
        self._x.size += len(chunk)
        return chunk

    def close(self) -> None:
        try:
            if self.close_inner is not None:
                self.close_inner()
        finally:
            if not self._done:
                self._done = True
                self._x.streamed(True)
