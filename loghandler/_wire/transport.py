"""``Transport``: what carries one request to the service and hands back its ``Answer``.

Declared here, in the wire, because both sides take one: ``Client(transport=)`` for the
client's own calls (views, datasets, queries, ``ingest``), and the engine's shippers
(``_engine/transport.py``, which re-exports it). The default of both is HTTP through the
client's urllib3 pool; ``loghandler.testing.MemoryTransport`` answers in memory, as scripted.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from .answer import Answer

__all__ = ["Transport"]


class Transport(Protocol):
    """Sends one request; a shipper's only way to the service, and a client's when given."""

    def send(self, method: str, path: str, body: bytes | None, *,
             headers: Mapping[str, str] | None = None,
             timeout: float | None = None) -> Answer:
        """Send ``body`` (encoded JSON, gzip-compressed when ``headers`` say so; None for a
        request without one) to ``path`` (relative to the service's base address, with its
        query) within ``timeout`` seconds (None: no bound of the caller's); the answer,
        whatever its status. Raises ``TransportError`` only: no answer (refused, reset, timed
        out, a body cut mid-read)."""
        ...
