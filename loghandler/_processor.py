"""``IngestProcessor``: a structlog processor that ships a copy of each event dict.

structlog itself is never imported here: the processor only needs the event dict, so it works
whatever structlog version the application has, and ``import loghandler`` stays light.
"""

from __future__ import annotations

import datetime as _dt
import math
import sys
import time
from collections.abc import Mapping
from typing import Any

from ._config import SHIPPING_OPTIONS_DOC, documented
from ._encoding import using_default
from ._engine.context import on_first_use as _on_first_use
from ._engine.context import snapshot as _snapshot
from ._engine.events import CONTEXT as _CONTEXT
from ._engine.events import METHOD_LEVELS, STRUCTLOG_EVENT_SIZE, add_exception, add_fields, rfc3339
from ._engine.events import SIZE as _SIZE
from ._engine.guard import _SENDERS, _get_ident, own_record
from ._engine.hold import level_number
from ._engine.ledger import Fate
from ._engine.shipper import Shipper, make_shipper
from ._front import FrontEnd
from ._output import shown
from ._wire.client import Client
from ._wire.settings import CLIENT_ARGS_DOC

__all__ = ["IngestProcessor", "event_dict_to_event"]

_UTC = _dt.timezone.utc
_modules = sys.modules
# True once a loghandler.context was entered anywhere (see _handler.py's twin).
_context_on = False


def _context_used() -> None:
    global _context_on
    _context_on = True


_on_first_use(_context_used)
# Keys that steer a processing step and carry no data of their own: ``exc_info`` becomes the
# ``exception`` object; the other two are the bookkeeping ProcessorFormatter adds to its copy.
_NOT_FIELDS = frozenset({"exc_info", "_record", "_from_structlog"})


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
    if t is str:
        if (len(timestamp) == 27 and timestamp[26] == "Z" and timestamp[10] == "T"
                and timestamp[19] == "."):
            return timestamp
        parsed = _parse_iso(timestamp)
        if parsed is not None:
            return parsed
    elif (t is float or t is int) and math.isfinite(timestamp):
        seconds = float(timestamp)
        if abs(seconds) > 1e11:
            seconds /= 1000.0
        try:
            return _format(_dt.datetime.fromtimestamp(seconds, _UTC))
        except (OverflowError, OSError, ValueError):
            pass
    elif isinstance(timestamp, _dt.datetime):
        # A tzinfo of the application's may raise, or give an offset of a day or more (which
        # datetime refuses): then now, and the timestamp field ships as its text.
        try:
            if timestamp.utcoffset() is not None:
                return _format(timestamp)
        except Exception:
            pass
    return rfc3339(time.time())


def _parse_iso(text: str) -> str | None:
    if text[-1:] in ("Z", "z"):
        text = text[:-1] + "+00:00"  # Python 3.10's fromisoformat does not read "Z"
    try:
        parsed = _dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    if parsed.utcoffset() is None:
        return None
    try:
        return _format(parsed)
    except (OverflowError, ValueError):
        return None


def _format(moment: _dt.datetime) -> str:
    # isoformat is several times faster than strftime; "+00:00" becomes "Z".
    return moment.astimezone(_UTC).isoformat(timespec="microseconds")[:-6] + "Z"


@documented(("Client arguments (keyword; each falls back to its environment variable):",
             CLIENT_ARGS_DOC),
            ('Shipping options (keyword; docs/configuration.md: why each default):',
             SHIPPING_OPTIONS_DOC))
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

    __slots__ = ("_put",)  # flush, close, stats: FrontEnd's

    def __init__(self, dataset: str | None = None, *, client: Client | None = None,
                 shipper: Shipper | None = None, **options: Any) -> None:
        self.shipper = make_shipper(dataset, client, shipper, options)
        self._owns_shipper = shipper is None
        self._put = self.shipper._ledger.offer

    def __call__(self, logger: Any, method_name: str, event_dict: Any) -> Any:
        try:
            if _get_ident() in _SENDERS and own_record(None):  # logged by our on_error
                self.shipper._suppress()
            elif isinstance(event_dict, Mapping):
                custom = self.shipper.options.json_default
                if custom is None:
                    event, size = event_dict_to_event(method_name, event_dict)
                else:
                    with using_default(custom):
                        event, size = event_dict_to_event(method_name, event_dict)
                if _context_on or "opentelemetry.trace" in _modules:
                    snap = _snapshot(self.shipper.options.trace_context)
                    if snap:
                        event[_CONTEXT] = snap
                    hold = self.shipper._hold
                    if hold is not None:
                        event[_SIZE] = size
                        if hold.take(event, size, level_number(event.get("level"))):
                            return event_dict
                event[_SIZE] = size
                self._put(event, size)
            else:
                self.shipper._ledger.drop(Fate.DROPPED_INVALID)
        except Exception:
            try:
                self.shipper._ledger.drop(Fate.DROPPED_INVALID)
            except Exception:
                pass  # never break the application's logging chain
        return event_dict

    def __repr__(self) -> str:
        return f"<IngestProcessor dataset={shown(self.shipper.dataset)}>"

    def __enter__(self) -> IngestProcessor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
