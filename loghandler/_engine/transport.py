"""The transport: posts one body to one dataset and hands back the service's ``Answer``.

The seam between the sender and the wire, shaped like an exporter (OpenTelemetry's
``SpanExporter.export``, sentry-python's ``Transport``): the sender decides what to send and
what an answer means (``policy.py``); the transport only carries a body there and an answer back,
or raises ``TransportError`` when there is no answer. Tests of the policy and the accounting may
run the engine against an in-memory transport (``tests/helpers.py``) as well as over loopback.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Protocol

from .._client import Client, parse_reset
from .._output import redact
from .._status import LIMITS
from .guard import HTTP, sending
from .policy import Answer, status_bound

__all__ = ["HttpTransport", "Transport"]


class Transport(Protocol):
    """Posts one request body; the sender's only way to the service."""

    def post(self, body: bytes, headers: Mapping[str, str] | None,
             timeout: float | None) -> Answer:
        """Send ``body`` (encoded JSON, gzip-compressed when ``headers`` say so) within
        ``timeout`` seconds (None: the client's own); the answer, whatever its status. Raises
        ``TransportError`` only: no answer (refused, reset, timed out, a body cut mid-read)."""
        ...


class HttpTransport:
    """Posts to ``path`` (a dataset's ingest path) through ``client``.

    ``batch_size`` bounds how much of a 2xx answer is read (``policy.status_bound``): an ingest
    status lists a failure per event turned down, so it may be far larger than an error body
    (read up to the client's 1 MiB).
    """

    __slots__ = ("client", "max_bytes", "path")

    def __init__(self, client: Client, path: str, batch_size: int) -> None:
        self.client = client
        self.path = path
        self.max_bytes = status_bound(batch_size)

    def post(self, body: bytes, headers: Mapping[str, str] | None,
             timeout: float | None) -> Answer:
        with sending(HTTP):
            resp = self.client.send("POST", self.path, body, headers=headers, timeout=timeout,
                                    max_success_bytes=self.max_bytes)
        wait = resp.retry_after  # Retry-After, parsed by the client
        if wait is None and resp.status in LIMITS:
            wait = parse_reset(resp.headers)
        return Answer(resp.status, resp.headers, resp.body, resp.complete, wait)


class _RedactUrllib3(logging.Filter):
    """urllib3's DEBUG request line names the URL's path, where a token may sit (a base address
    such as ``https://proxy/<token>/``); it is logged on the flusher thread, and handled by the
    application's own handlers. Scrub every registered token from urllib3's records."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            text = record.getMessage()
        except Exception:
            return True
        clean = redact(text)
        if clean != text:
            record.msg, record.args = clean, None
        return True


_REDACT = _RedactUrllib3()
for _name in ("urllib3.connectionpool", "urllib3.connection"):
    logging.getLogger(_name).addFilter(_REDACT)
