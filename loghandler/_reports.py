"""Request and task reports: the one rule behind ``loghandler.asgi``, ``loghandler.wsgi``,
``loghandler.django`` and ``loghandler.celery``'s task reports.

One event per unit of work ("canonical log line"): its options, the request id, the report's
fields, level and message are decided here, once; the framework modules only read their
framework's request and response and hand the figures over. The report is an ordinary logging
call on its own logger (``loghandler.request``, ``loghandler.task``), so it goes through the
application's handlers, levels, filters, sampling and scrubbing like any other line.

Where the report is logged matters for hold-until-error (``hold_level``): an ERROR report is
logged inside the request's ``loghandler.context``, so the lines it held ship first, in order;
a report at INFO or WARNING is logged after the context ends, so it is never held itself.

Nothing here may break a request: a failure of the middleware's own is told once on stderr
(per cause) and the request goes on as without it.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Iterable
from time import perf_counter
from typing import Any

from ._errors import ConfigurationError
from ._output import print_line

__all__ = ["DEFAULT_EXCLUDED", "Options", "configure", "fault", "level_of", "make_request_id",
           "report", "task_report"]

DEFAULT_EXCLUDED = ("/health", "/healthz", "/ready", "/readyz", "/livez", "/metrics")
_KEYWORDS = ("logger", "request_id_header", "exclude_paths", "client_address", "headers")
# A header's name: an HTTP token (RFC 9110), as the option names it: lowercase.
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9a-z-]+")
# An incoming request id is honoured when it is 1-128 printable ASCII characters.
_SANE_ID = re.compile(r"[\x20-\x7e]{1,128}")
_sane = _SANE_ID.fullmatch
_urandom = os.urandom

ERROR, WARNING, INFO = logging.ERROR, logging.WARNING, logging.INFO
CLIENT_GONE = 499


class Options:
    """A middleware's options, checked once when it is made."""

    __slots__ = ("client_address", "exact", "header", "header_bytes", "header_environ",
                 "headers", "headers_asgi", "headers_environ", "logger", "prefixes")

    def __init__(self, logger: logging.Logger, header: str, exact: frozenset[str],
                 prefixes: tuple[str, ...], client_address: bool,
                 headers: tuple[str, ...]) -> None:
        self.logger = logger
        self.header = header
        self.header_bytes = header.encode("ascii")
        self.header_environ = environ_key(header)
        self.exact = exact
        self.prefixes = prefixes
        self.client_address = client_address
        # The headers to report: (name, its field).
        self.headers = tuple((name, "http.request.header." + name) for name in headers)
        # The same, keyed as ASGI's scope and WSGI's environ have them.
        self.headers_asgi = tuple((name.encode("latin-1"), f) for name, f in self.headers)
        self.headers_environ = tuple((environ_key(name), f) for name, f in self.headers)

    def chosen(self, get: Any) -> dict[str, str] | None:
        """The chosen headers' fields, from a WSGI environ's (or Django META's) ``get``."""
        found = None
        for key, field in self.headers_environ:
            value = get(key)
            if value is not None:
                if found is None:
                    found = {}
                found[field] = value
        return found

    def excluded(self, path: str) -> bool:
        return path in self.exact or (bool(self.prefixes) and path.startswith(self.prefixes))


def environ_key(header: str) -> str:
    """A request header's key in a WSGI environ (and Django's ``request.META``)."""
    return "HTTP_" + header.upper().replace("-", "_")


def configure(options: dict[str, Any], where: str) -> Options:
    """``options`` (the keywords of the API) checked, or a ConfigurationError saying which is
    wrong and what it takes; ``where`` names the middleware (or the Django setting)."""
    for name in options:
        if name not in _KEYWORDS:
            raise ConfigurationError(
                f"{where}: unknown option {name!r}; the options are {', '.join(_KEYWORDS)}")
    logger: Any = options.get("logger", "loghandler.request")
    if isinstance(logger, str) and logger:
        logger = logging.getLogger(logger)
    elif not isinstance(logger, logging.Logger):
        raise ConfigurationError(
            f"{where}: logger must be a logger's name (a non-empty str) or a logging.Logger, "
            f"not {logger!r}")
    header = options.get("request_id_header", "x-request-id")
    if not isinstance(header, str) or not _TOKEN.fullmatch(header.lower()):
        raise ConfigurationError(
            f"{where}: request_id_header must be a header's name such as 'x-request-id', "
            f"not {header!r}")
    excluded = _strings(options.get("exclude_paths", DEFAULT_EXCLUDED), "exclude_paths",
                        where, "paths such as ('/health', '/internal/*')")
    for path in excluded:
        if not path.startswith("/"):
            raise ConfigurationError(
                f"{where}: exclude_paths: {path!r} is not a path: each starts with '/' "
                f"(a trailing '*' matches a prefix)")
    client_address = options.get("client_address", False)
    if type(client_address) is not bool:
        raise ConfigurationError(
            f"{where}: client_address must be True or False, not {client_address!r}")
    headers = _strings(options.get("headers", ()), "headers", where,
                       "request header names such as ('x-tenant',)")
    for name in headers:
        if not _TOKEN.fullmatch(name):
            raise ConfigurationError(
                f"{where}: headers: {name!r} is not a lowercase header name such as "
                f"'x-tenant'")
    return Options(logger, header.lower(),
                   frozenset(p for p in excluded if not p.endswith("*")),
                   tuple(p[:-1] for p in excluded if p.endswith("*")),
                   client_address, tuple(headers))


def _strings(value: Any, name: str, where: str, example: str) -> list[str]:
    # A lone str is a common slip for a tuple of one: it would match letter by letter.
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise ConfigurationError(f"{where}: {name} must be a list or tuple of {example}, "
                                 f"not {value!r}")
    values = list(value)
    for v in values:
        if not isinstance(v, str) or not v:
            raise ConfigurationError(f"{where}: {name} must be a list or tuple of {example}; "
                                     f"{v!r} is not")
    return values


def make_request_id(incoming: str | None) -> str:
    """The incoming id when it is 1-128 printable ASCII characters, else 32 new lowercase hex
    digits."""
    if incoming is not None and _sane(incoming):
        return incoming
    return _urandom(16).hex()


def level_of(status: int, raised: bool) -> int:
    """ERROR when the app raised or the status is 5xx, WARNING for 4xx (and 499), else INFO."""
    if raised or status >= 500:
        return ERROR
    return WARNING if status >= 400 else INFO


def report(o: Options, level: int, method: str, route: str | None, path: str, status: int,
           started: float, ended: float | None, size: int, agent: str | None,
           request_id: str, client: str | None, headers: dict[str, str] | None,
           exc: BaseException | None) -> None:
    """Log one request's report (never raises: a fault is told once on stderr)."""
    try:
        logger = o.logger
        if not logger.isEnabledFor(level):
            return
        # Microseconds as an int, then as ms: round() and "%.1f" each cost a float-to-text
        # conversion, about as much as a field.
        micros = int(((ended if ended is not None else perf_counter()) - started) * 1e6)
        fields: dict[str, Any] = {
            "http.request.method": method,
            "url.path": path,
            "http.response.status_code": status,
            "duration_ms": micros / 1000,
            "http.response.body.size": size,
            "request_id": request_id,
        }
        if route is not None:
            fields["http.route"] = route
        if agent is not None:
            fields["user_agent.original"] = agent
        if client is not None:
            fields["client.address"] = client
        if headers:
            fields.update(headers)
        tenths = micros // 100
        # Made here, with no arguments left for the handler to format (a path may hold "%").
        # (logger.log asks isEnabledFor again: a cached dict lookup, asked above so as not to
        # make the fields for nothing.)
        logger.log(level, f"{method} {route or path} {status} in {tenths // 10}.{tenths % 10} ms",
                   exc_info=exc if isinstance(exc, Exception) else None, extra=fields)
    except Exception as error:
        fault("the request's report", error)


def task_report(logger: logging.Logger, name: str, task_id: str, state: str, retries: int,
                duration: float, exc: BaseException | None) -> None:
    """Log one Celery task run's report (never raises)."""
    level = ERROR if state == "FAILURE" else WARNING if state == "RETRY" else INFO
    try:
        if not logger.isEnabledFor(level):
            return
        ms = duration * 1000.0
        logger.log(level, "%s %s in %.1f ms", name, state, ms, extra={
            "celery.task.name": name,
            "celery.task.id": task_id,
            "celery.task.state": state,
            "celery.task.retries": retries,
            "duration_ms": round(ms, 3),
        }, exc_info=exc if state == "FAILURE" and isinstance(exc, Exception) else None)
    except Exception as error:
        fault("the task's report", error)


_told: set[tuple[str, str]] = set()


def fault(what: str, error: BaseException) -> None:
    """A failure of the middleware's own, told once per cause on stderr; never raises."""
    try:
        cause = (what, type(error).__name__)
        if cause in _told:
            return
        _told.add(cause)
        print_line(f"loghandler: {what} failed ({type(error).__name__}: {error}); the work went "
                   f"on as without it (told once)")
    except Exception:
        try:
            sys.stderr.write("loghandler: the request report failed\n")
        except Exception:
            pass
