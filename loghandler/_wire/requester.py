"""``Requester``: what ``client.views`` and ``client.datasets`` need of their client (one JSON
request), so that they know nothing else of it: no import of the client, no cycle."""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["Requester"]


class Requester(Protocol):
    def request(self, method: str, path: str, body: Any = None, *,
                timeout: float | None = None) -> Any:
        """One JSON request; the parsed answer, or the matching ``Error`` raised."""
        ...
