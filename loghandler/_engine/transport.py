"""The transport: sends one request of a shipper and hands back the service's ``Answer``.

The seam between the engine and the wire, shaped like an exporter (OpenTelemetry's
``LogExporter.export``, sentry-python's ``Transport``, httpx's transports): the worker decides
what to send and what an answer means (``policy.py``); a transport only carries a request there
and the answer back, or raises ``TransportError`` when there is no answer. It is passed in
(``transport=`` on ``Shipper`` and every front end); the default is ``HttpTransport``, through
the client (its connection pool over urllib3, or the client's own ``transport=``). The
protocol, ``Transport``, is the wire's (``_wire/transport.py``): a ``Client`` takes one too.
``loghandler.testing.MemoryTransport`` keeps requests in memory and answers them as scripted,
for tests without sockets.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from .._output import redact
from .._wire.answer import Answer
from .._wire.client import Client
from .._wire.transport import Transport
from .guard import HTTP, sending
from .policy import status_bound

__all__ = ["HttpTransport", "Transport"]


class HttpTransport:
    """The default transport: requests through ``client`` (its pool, token and address).

    ``batch_size`` bounds how much of a 2xx answer is read (``policy.status_bound``): an ingest
    status lists a failure per event turned down, so it may be far larger than an error body
    (read up to the client's 1 MiB).
    """

    __slots__ = ("client", "max_bytes")

    def __init__(self, client: Client, batch_size: int) -> None:
        self.client = client
        self.max_bytes = status_bound(batch_size)

    def __repr__(self) -> str:
        return f"HttpTransport({self.client!r})"

    def send(self, method: str, path: str, body: bytes | None, *,
             headers: Mapping[str, str] | None = None,
             timeout: float | None = None,
             after_write: Callable[[], None] | None = None) -> Answer:
        """``Transport.send``; ``after_write``: called once the request is written, before
        its answer is read (``Client.send``), where the lean exchange carries it."""
        with sending(HTTP):  # urllib3's own log records are not shipped (guard.py)
            return self.client.send(method, path, body, headers=headers, timeout=timeout,
                                    max_success_bytes=self.max_bytes, after_write=after_write)


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
