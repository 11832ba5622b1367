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

Messages never contain the token: every message built here is passed through ``redact``.
"""

from __future__ import annotations

import re
import sys
from typing import Any, TypeVar

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

# Tokens known to this process, so any text we print can be scrubbed of them even when a
# third-party message (urllib3, the service's error body) echoes one back.
_SECRETS: set[str] = set()


_SECRETS_ORDERED: tuple[str, ...] = ()


def register_secret(secret: str | None) -> None:
    """Remember a token so that ``redact`` scrubs it from every message from now on."""
    global _SECRETS_ORDERED
    # Very short values would scrub ordinary words; a real token is never that short.
    if isinstance(secret, str) and len(secret) >= 4 and secret not in _SECRETS:
        _SECRETS.add(secret)
        # Longest first, so a token that contains another registered one is removed whole.
        _SECRETS_ORDERED = tuple(sorted(_SECRETS, key=len, reverse=True))


def redact(text: str) -> str:
    """``text`` with every registered token replaced by ``***``."""
    for secret in _SECRETS_ORDERED:
        if secret in text:
            text = text.replace(secret, "***")
    return text


def redact_value(value: Any, _depth: int = 0) -> Any:
    """A copy of a parsed JSON body with every registered token scrubbed from its strings."""
    if isinstance(value, str):
        return redact(value)
    if _depth > 32:  # absurd nesting: flatten it rather than let a token through
        return redact(repr(value))
    if isinstance(value, dict):
        return {redact_value(k, _depth + 1): redact_value(v, _depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_value(v, _depth + 1) for v in value]
    return value


# Characters that must never reach a terminal or a log line from text we echo (a service's
# error body, a dataset name, a client's request line): C0 and C1 controls (escape sequences,
# carriage returns and newlines that forge lines), DEL, line and paragraph separators, and the
# bidirectional overrides that reorder what a reader sees.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e"
                     "\u2066-\u2069]")
# The longest line or message we print: a 70,000-character dataset name or a megabyte of error
# body must not become a 140 KB stderr line.
MAX_LINE = 2000


def printable(text: str) -> str:
    """``text`` with every control character escaped (``\\x1b``, ``\\n``, ``\\u202e``)."""
    return _UNSAFE.sub(_escape, text)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 256 else f"\\u{code:04x}"


def clip(text: str, limit: int) -> str:
    """``text``, cut to ``limit`` characters with a "…" when longer."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def shown(name: object, limit: int = 80) -> str:
    """A name (dataset, path) as shown in messages: quoted, escaped, clipped, token scrubbed."""
    return repr(clip(redact(str(name)), limit))


class Error(Exception):
    """Base class of every error raised by loghandler."""

    def __init__(self, message: str = "") -> None:
        super().__init__(clip(printable(redact(str(message))), MAX_LINE))


class ConfigurationError(Error, ValueError):
    """A setting is missing or invalid. The message names the argument and its variable."""


class TransportError(Error):
    """The service could not be reached or did not answer (refused, reset, time-out, TLS)."""


class ApiError(Error):
    """The service answered with a non-2xx status.

    ``status`` is the HTTP status, ``body`` the parsed JSON answer (or a short text excerpt when
    the answer was not JSON, e.g. a proxy's HTML error page).
    """

    def __init__(self, status: int, body: Any = None, message: str | None = None) -> None:
        self.status = status
        # The body may echo the request back (token included): it is shown and logged as
        # freely as the message, so it is scrubbed the same way.
        self.body = redact_value(body) if _SECRETS_ORDERED else body
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
        self.failures = redact_value(failures) if _SECRETS_ORDERED else failures
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.__dict__.copy(), self.args))


_E = TypeVar("_E", bound=Error)


def _rebuild(cls: type[_E], state: dict[str, Any], args: tuple[Any, ...]) -> _E:
    error = cls.__new__(cls)
    error.__dict__.update(state)
    error.args = args
    return error


_WS = re.compile(r"\s+")
_TAGS = re.compile(r"<[^>]*>")


def service_message(body: Any) -> str | None:
    """The service's own error text from a JSON error body, if it has one."""
    if isinstance(body, dict):
        for key in ("message", "error", "detail", "msg"):
            value = body.get(key)
            if isinstance(value, str) and value:
                return clip(printable(value), 500)
    return None


def excerpt(text: str, limit: int = 200) -> str:
    """A short one-line excerpt of a non-JSON body (HTML tags and whitespace folded)."""
    text = printable(_WS.sub(" ", _TAGS.sub(" ", text)).strip())
    return clip(text, limit)


def body_detail(body: Any) -> str:
    """": <what the service said>" for a message, or "" when the body says nothing."""
    msg = service_message(body)
    if msg:
        return f": {msg}"
    if isinstance(body, str) and body:
        return f": {excerpt(body)}"
    return ""


def print_line(line: str) -> None:
    """One diagnostic line on stderr, token scrubbed; never raises (stderr may be gone)."""
    try:
        stream = sys.stderr
        if stream is not None:
            stream.write(clip(printable(redact(line)), MAX_LINE) + "\n")
            stream.flush()
    except Exception:
        pass
