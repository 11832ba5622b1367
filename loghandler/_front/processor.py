"""``IngestProcessor``: a structlog processor that ships a copy of each event dict.

structlog itself is never imported here: the processor only needs the event dict, so it works
whatever structlog version the application has, and ``import loghandler`` stays light.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .._config import SEND_DOC, SHIPPING_OPTIONS_DOC, documented
from .._encoding import using_default
from .._engine import compiled
from .._engine.context import in_use
from .._engine.events import add_exception, add_fields
from .._engine.guard import SENDERS, own_record
from .._engine.model import METHOD_LEVELS, SIZE, STRUCTLOG_EVENT_SIZE, STRUCTLOG_SKIP
from .._engine.shipper import Shipper
from .._output import shown
from .._time import format_datetime, format_epoch, format_micros, parse_micros
from .._wire.client import Client
from .._wire.settings import CLIENT_ARGS_DOC
from .base import FrontEnd

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from .._options import FrontEndOptions

__all__ = ["IngestProcessor", "event_dict_to_event"]

# Keys that steer a processing step and carry no data of their own (model.STRUCTLOG_SKIP).
_NOT_FIELDS = STRUCTLOG_SKIP


def event_dict_to_event(
    method_name: str, event_dict: Mapping[str, Any]
) -> tuple[dict[str, Any], int]:
    """A JSON-safe copy of a structlog event dict and its rough size.

    The keys are kept as they are; ``_time`` (from ``timestamp``, else now) and ``level`` (from
    the method name) are added when absent, and an ``exc_info`` that no processor rendered
    becomes the ``exception`` object ``{type, message, stacktrace}``.
    """
    event: dict[str, Any] = {}
    exc = event_dict.get("exc_info")
    if _NOT_FIELDS.isdisjoint(event_dict):
        items: Any = event_dict.items()
    else:
        items = ((k, v) for k, v in event_dict.items() if k not in _NOT_FIELDS)
    size = STRUCTLOG_EVENT_SIZE + add_fields(event, items)
    if "_time" not in event:
        event["_time"] = time_from(event_dict.get("timestamp"))
    if "level" not in event:
        name = method_name if type(method_name) is str else str(method_name)
        event["level"] = METHOD_LEVELS.get(name, name)
    if exc:
        size += add_exception(event, exc)
    return event, size


def time_from(timestamp: Any) -> str:
    """``_time`` for a structlog ``timestamp`` value: RFC 3339 UTC with microseconds.

    - an ISO 8601 string with ``Z`` or an offset (``TimeStamper(fmt="iso")``) is converted to
      UTC; one already in the exact form ``...T..:..:..ffffffZ`` is kept as it is;
    - a number is seconds since the epoch (``TimeStamper()`` with no ``fmt``); a number too large
      to be seconds (over 1e11, i.e. past the year 5000) is taken as milliseconds;
    - an aware ``datetime`` is converted to UTC;
    - anything else -- a naive ISO string (``TimeStamper(utc=False)`` writes local time with no
      offset), a custom ``strftime`` format, a missing timestamp -- gives *now*: the processor
      runs right after the stamper, so that is the same instant, without guessing a time zone.
      The ``timestamp`` field itself is always shipped unchanged.
    """
    t = type(timestamp)
    try:
        if t is str:
            text: str = timestamp
            if len(text) == 27 and text[26] == "Z" and text[10] == "T" and text[19] == ".":
                return text  # the form already
            us = parse_micros(timestamp, naive_utc=False)
            if us is not None:
                return format_micros(us)
        elif (t is float or t is int) and math.isfinite(timestamp):
            seconds = float(timestamp)
            if abs(seconds) > 1e11:
                seconds /= 1000.0
            # Rounded to the microsecond, not truncated: a number the stamper wrote in
            # milliseconds (1.123) is not a hair under them (1.12299999).
            return format_micros(round(seconds * 1e6))
        elif isinstance(timestamp, datetime) and timestamp.utcoffset() is not None:
            # A tzinfo of the application's may raise, or give an offset of a day or more
            # (which datetime refuses): then now, and the timestamp field ships as its text.
            return format_datetime(timestamp)
    except Exception:
        pass
    return format_epoch(time.time())


@documented(("Client arguments (keyword; each falls back to its environment variable):",
             CLIENT_ARGS_DOC),
            ('Shipping options (keyword; docs/configuration.md: why each default):',
             SHIPPING_OPTIONS_DOC.rstrip() + "\n" + SEND_DOC))
class IngestProcessor(FrontEnd):
    """A structlog processor: ships a JSON-safe copy of the event and returns it unchanged.

    Place it anywhere before the renderer; it never changes the event dict and never raises
    into the chain. An event it cannot read (the processor placed after a renderer, so it gets
    a string) is counted in ``stats().dropped_invalid``.

    Args:
        dataset (str | None): the dataset to ship to. Default: ``LOGHANDLER_DATASET``.
        client (Client | None): a ``Client`` to ship through, instead of the Client arguments.
        shipper (Shipper | None): a ``Shipper`` to share with other front ends, instead of
            ``dataset``, ``client`` and the options; it is flushed, not closed, by ``close()``.

    Raises:
        ConfigurationError: a missing token, address or dataset, an unknown option (with a
            suggestion), an invalid value.
    """

    __slots__ = ("_fast_path",)  # flush, close, stats: FrontEnd's

    def _refresh(self) -> None:
        self._fast_path = self._wire_path()

    def __init__(self, dataset: str | None = None, *, client: Client | None = None,
                 shipper: Shipper | None = None, **options: Unpack[FrontEndOptions]) -> None:
        self._attach(dataset, client, shipper, dict(options))
        # The compiled fast path (its events queued as their final JSON), or None: read by
        # the compiled __call__.
        self._fast_path = self._wire_path()

    def _put(self, logger: Any, method_name: str, event_dict: Any,
             sampled: bool = False) -> Any:
        """``__call__`` in Python: the reference the compiled one stands in for (``sampled``:
        the compiled one's sampling kept the event already)."""
        try:
            if SENDERS and own_record(None):  # our on_error logged
                self._intake.suppress()
            elif isinstance(event_dict, Mapping):
                custom = self.shipper.options.json_default
                if custom is None:
                    event, size = event_dict_to_event(method_name, event_dict)
                else:
                    with using_default(custom):
                        event, size = event_dict_to_event(method_name, event_dict)
                if self._sampler is not None or in_use():
                    self._queue(event, size, event.get("level"), True, sampled)
                else:
                    event[SIZE] = size
                    self._intake.offer(event, size)
            else:
                self._invalid()
        except Exception:
            self._invalid()  # never break the application's logging chain
        return event_dict

    # What compiled.py decided (the compiled call, told its Python twin), once, here.
    __call__ = compiled.front_method("processor_call", _put)

    def __repr__(self) -> str:
        return f"<IngestProcessor dataset={shown(self.shipper.dataset)}>"

    def __enter__(self) -> IngestProcessor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
