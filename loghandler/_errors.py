"""Errors raised by loghandler.

    Error
    ├── ConfigurationError (also a ValueError)   bad or missing settings, at construction
    ├── TransportError                           refused, reset, time-out, TLS: no HTTP answer
    ├── PartialIngestError (.ingested, .failed,  a 2xx whose ingest status says the service
    │   .failures)                               turned down some events of a batch
    └── ApiError (.status, .body)                a non-2xx answer from the service
        ├── AuthenticationError                  401 / 403
        ├── RateLimitError (.retry_after)        429, 430 (the rate and ingest limits)
        └── NotFoundError                        404

Messages never contain the token: every message built here is passed through ``redact``
(_output.py).
"""

from __future__ import annotations

from typing import Any, TypeVar

from ._output import MAX_LINE, body_detail, clip, printable, redact, redact_value

__all__ = [
    "ApiError",
    "AuthenticationError",
    "ConfigurationError",
    "Error",
    "NotFoundError",
    "PartialIngestError",
    "RateLimitError",
    "TransportError",
]


class Error(Exception):
    """Base class of every error raised by loghandler."""

    def __init__(self, message: str = "") -> None:
        super().__init__(clip(printable(redact(str(message))), MAX_LINE))


class ConfigurationError(Error, ValueError):
    """A setting is missing or invalid. The message names the argument and its variable."""


class TransportError(Error):
    """The service could not be reached or did not answer (refused, reset, time-out, TLS).

    ``sent``: False when the request never left (refused, name or TLS failure, no
    connection in time); True when it was sent and its answer did not come (the service may
    have stored it); None when unknown.
    """

    sent: bool | None = None


class ApiError(Error):
    """The service answered with a non-2xx status.

    ``status`` is the HTTP status, ``body`` the parsed JSON answer (or a short text excerpt when
    the answer was not JSON, e.g. a proxy's HTML error page).
    """

    def __init__(self, status: int, body: Any = None, message: str | None = None) -> None:
        self.status = status
        # The body may echo the request back (token included): it is shown and logged as
        # freely as the message, so it is scrubbed the same way.
        self.body = redact_value(body)
        super().__init__(message or f"the service answered HTTP {status}{body_detail(body)}")

    def __reduce__(self) -> tuple[Any, ...]:
        # The default pickling calls cls(*args) == cls(message): wrong for this signature, and
        # errors do cross process boundaries (multiprocessing, concurrent.futures).
        return (_rebuild, (type(self), self.__dict__.copy(), self.args))


class AuthenticationError(ApiError):
    """401 / 403: the token is missing, wrong, expired, or lacks the permission."""


class RateLimitError(ApiError):
    """429 (rate limit) or 430 (ingest limit). ``retry_after`` is the wait the service asked
    for, in seconds: its ``Retry-After``, else the time left until its limit resets
    (``X-RateLimit-Reset`` / ``X-IngestLimit-Reset``), else None."""

    def __init__(
        self, status: int, body: Any = None, message: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        self.retry_after = retry_after
        super().__init__(status, body, message)


class NotFoundError(ApiError):
    """404: the dataset, view or path does not exist."""


class PartialIngestError(Error):
    """The service answered 2xx, but its ingest status says it turned down ``failed`` events
    of the batch (and stored ``ingested``). ``failures`` is its list of ``{"timestamp",
    "error"}`` (at most the first 100); it carries no index, so which events failed is unknown.
    Passed to ``on_error``; the events are counted in ``stats().failed_by_service``."""

    def __init__(self, message: str = "", *, ingested: int = 0, failed: int = 0,
                 failures: list[Any] | None = None) -> None:
        self.ingested = ingested
        self.failed = failed
        failures = list(failures or ())[:100]
        self.failures = redact_value(failures)
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.__dict__.copy(), self.args))


_E = TypeVar("_E", bound=Error)


def _rebuild(cls: type[_E], state: dict[str, Any], args: tuple[Any, ...]) -> _E:
    error = cls.__new__(cls)
    error.__dict__.update(state)
    error.args = args
    return error
