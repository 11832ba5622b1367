"""``IngestProcessor``: a structlog processor that ships a copy of each event dict.

structlog itself is never imported here: the processor only needs the event dict, so it works
whatever structlog version the application has, and ``import loghandler`` stays light.
"""

from __future__ import annotations

import time
from typing import Any

from .client import Client
from .events import add_fields, exception_fields, rfc3339
from .shipper import Shipper, Stats, make_shipper

__all__ = ["IngestProcessor", "event_dict_to_event"]

_BASE_SIZE = 400


def event_dict_to_event(method_name: str, event_dict: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """A JSON-safe copy of a structlog event dict, with ``_time`` and ``level`` when absent."""
    event: dict[str, Any] = {}
    exc = event_dict.get("exc_info")
    items = event_dict.items() if exc is None else (
        (k, v) for k, v in event_dict.items() if k != "exc_info")
    size = _BASE_SIZE + add_fields(event, items)
    if "_time" not in event:
        event["_time"] = _time_from(event_dict.get("timestamp"))
    if "level" not in event:
        event["level"] = "warning" if method_name == "warn" else method_name
    if exc and "exception" not in event:
        info = exception_fields(exc)
        if info:
            event["exception"] = info
            size += len(info["stacktrace"])
    return event, size


def _time_from(timestamp: Any) -> str:
    if isinstance(timestamp, str) and timestamp:
        return timestamp
    if isinstance(timestamp, (int, float)) and not isinstance(timestamp, bool):
        return rfc3339(float(timestamp))
    return rfc3339(time.time())


class IngestProcessor:
    """A structlog processor: ships a JSON-safe copy of the event and returns it unchanged.

    ``IngestProcessor(dataset=None, *, client=None, shipper=None, **options)`` takes the same
    options as ``IngestHandler``. Place it anywhere before the renderer.
    """

    __slots__ = ("_put", "shipper")

    def __init__(self, dataset: str | None = None, *, client: Client | None = None,
                 shipper: Shipper | None = None, **options: Any) -> None:
        self.shipper = make_shipper(dataset, client, shipper, options)
        self._put = self.shipper._put

    def __call__(self, logger: Any, method_name: str, event_dict: Any) -> Any:
        try:
            event, size = event_dict_to_event(method_name, event_dict)
            self._put(event, size)
        except Exception:
            pass  # never break the application's logging chain
        return event_dict

    def __repr__(self) -> str:
        return f"<IngestProcessor dataset={self.shipper.dataset!r}>"

    def flush(self, timeout: float | None = None) -> bool:
        """See ``Shipper.flush``."""
        return self.shipper.flush(timeout)

    def close(self, timeout: float | None = None) -> None:
        """See ``Shipper.close``."""
        self.shipper.close(timeout)

    def stats(self) -> Stats:
        """See ``Shipper.stats``."""
        return self.shipper.stats()
