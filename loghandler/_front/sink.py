"""``IngestSink``: a loguru sink that ships loguru's records through the same engine.

loguru is never imported here: the sink reads the record loguru hands it
(``message.record``), so ``import loghandler`` stays light and any loguru version with that
record works. The sink is a plain callable (no ``write``), so loguru calls it once per message
and never calls a ``flush`` after each one; with ``enqueue=True`` loguru calls it from its own
worker thread, which is no different for the engine.
"""

from __future__ import annotations

import time
import traceback
from typing import TYPE_CHECKING, Any

from .._config import SEND_DOC, SHIPPING_OPTIONS_DOC, documented
from .._encoding import free_name, using_default
from .._engine import compiled
from .._engine.events import add_fields, exception_fields, loguru_head
from .._engine.guard import SENDERS, own_record
from .._engine.model import (
    FAST_EVENT_SIZE,
    FAST_EXTRA_SIZE,
    FIELD_SIZE,
    HEAD,
    PLAIN,
    RECORD_EVENT_SIZE,
)
from .._engine.shipper import Shipper
from .._output import shown
from .._time import format_epoch
from .._wire.client import Client
from .._wire.settings import CLIENT_ARGS_DOC
from .base import FrontEnd

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from .._options import FrontEndOptions

__all__ = ["IngestSink", "loguru_event"]

# The head's fields loguru_event copies as they are read (model.HEAD's loguru columns): all but
# _time, level and message, which it makes.
_SOURCE = tuple((key, lk, la) for key, _, lk, la in HEAD
                if key not in ("_time", "level", "message"))


def _get(record: Any, key: str, attr: str | None = None) -> Any:
    try:
        value = record[key]
        return getattr(value, attr) if attr and value is not None else value
    except Exception:
        return None


def _exception(exc: Any) -> dict[str, Any] | None:
    # loguru's RecordException (type, value, traceback). With enqueue=True the traceback may
    # not survive the trip between processes: the type and message still do.
    try:
        etype, value, tb = exc
    except Exception:
        return None
    if etype is None:
        return None
    if tb is None:
        info = exception_fields((etype, value, None),
                                "".join(traceback.format_exception_only(etype, value)))
    else:
        info = exception_fields((etype, value, tb))
    return info


def loguru_event(record: Any) -> tuple[dict[str, Any], int]:
    """The event for a loguru record (``message.record``), and its rough size.

    ``_time`` from the record's time, ``level`` its level's name lowercased (custom levels
    too), ``message``, the source fields the handler ships, every ``extra`` (``bind()``,
    ``contextualize()``, ``opt``'s) as a field, and ``exception`` as ``{type, message,
    stacktrace}``. Never raises: a field that cannot be read is left out.
    """
    event: dict[str, Any] = {}
    when = _get(record, "time")
    try:
        event["_time"] = format_epoch(when.timestamp())
    except Exception:
        event["_time"] = format_epoch(time.time())
    level = _get(record, "level", "name")
    event["level"] = level.lower() if isinstance(level, str) else "info"
    message = _get(record, "message")
    event["message"] = message if isinstance(message, str) else str(message)
    size = RECORD_EVENT_SIZE + len(event["message"])
    source = [(key, _get(record, lk, la)) for key, lk, la in _SOURCE]
    size += add_fields(event, [(k, v) for k, v in source if v is not None])
    extra = _get(record, "extra")
    if extra:
        try:
            size += add_fields(event, list(extra.items()))
        except Exception:
            pass
    exc = _get(record, "exception")
    if exc is not None:
        info = _exception(exc)
        if info is not None:
            if "exception" in event:  # an extra named "exception": renamed, never lost
                event[free_name("exception", event)] = event.pop("exception")
            event["exception"] = info
            size += len(info["stacktrace"]) + FIELD_SIZE
    return event, size


@documented(("Client arguments (keyword; each falls back to its environment variable):",
             CLIENT_ARGS_DOC),
            ('Shipping options (keyword; docs/configuration.md: why each default):',
             SHIPPING_OPTIONS_DOC.rstrip() + "\n" + SEND_DOC))
class IngestSink(FrontEnd):
    """A loguru sink: ``logger.add(IngestSink("my-dataset"))``.

    Each message's record is shipped with its structure: ``extra`` (what ``bind()`` and
    ``contextualize()`` add) as fields, the level, the message, the exception as the same
    ``{type, message, stacktrace}`` object ``IngestHandler`` ships, and the record's own time.
    The call queues and returns (no I/O); the engine batches, retries, spools and delivers
    what is queued at exit, as for the handler. Works with ``enqueue=True`` or without.

    Args:
        dataset (str | None): the dataset to ship to. Default: ``LOGHANDLER_DATASET``.
        client (Client | None): a ``Client`` to ship through, instead of the Client arguments.
        shipper (Shipper | None): a ``Shipper`` to share with other front ends, instead of
            ``dataset``, ``client`` and the options; it is flushed, not closed, by ``close()``.

    Raises:
        ConfigurationError: a missing token, address or dataset, an unknown option (with a
            suggestion), an invalid value.
    """

    __slots__ = ("_fast_path",)

    def _refresh(self) -> None:
        self._fast_path = self._wire_path()

    def __init__(self, dataset: str | None = None, *, client: Client | None = None,
                 shipper: Shipper | None = None, **options: Unpack[FrontEndOptions]) -> None:
        self._attach(dataset, client, shipper, dict(options))
        # The compiled fast path (its events queued as their final JSON), or None: read by
        # the compiled __call__.
        self._fast_path = self._wire_path()

    def _put(self, message: Any, sampled: bool = False) -> None:
        """loguru's call in Python: the reference the compiled ``__call__`` stands in for
        (``sampled``: its sampling kept the event already). O(1), never blocks, never
        raises."""
        try:
            r = message.record
            if SENDERS and own_record(r["name"]):
                self._intake.suppress()
                return
            level = r["level"]
            if r["exception"] is None and self.shipper.options.json_default is None:
                # The fast path, as the handler's: a record with plain extras becomes its event
                # here, but for _time and level, which the flusher formats (RECORD).
                text = r["message"]
                event = loguru_head(r, text)
                size = FAST_EVENT_SIZE + len(text)
                for key, value in r["extra"].items():
                    t = type(value)
                    if key in event or t not in PLAIN or type(key) is not str:
                        break  # a clash or a value to copy: the careful path
                    event[key] = value
                    size += FAST_EXTRA_SIZE + len(value) if t is str else FAST_EXTRA_SIZE
                else:
                    self._queue(event, size, level.no, True, sampled)
                    return
            self._careful(r, level, sampled)
        except Exception:
            self._invalid()

    # What compiled.py decided (the compiled call, told its Python twin), once, here.
    __call__ = compiled.front_method("sink_call", _put)

    def _careful(self, record: Any, level: Any, sampled: bool = False) -> None:
        custom = self.shipper.options.json_default
        if custom is None:
            event, size = loguru_event(record)
        else:
            with using_default(custom):
                event, size = loguru_event(record)
        levelno = getattr(level, "no", None)
        self._queue(event, size, levelno if type(levelno) is int else event.get("level"), True,
                    sampled)

    def __repr__(self) -> str:
        return f"<IngestSink dataset={shown(self.shipper.dataset)}>"
