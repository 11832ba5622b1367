"""``IngestHandler``: a ``logging.Handler`` that ships records through a ``Shipper``."""

from __future__ import annotations

import itertools
import logging
import sys
from typing import Any

from ._context import OTEL_TRACE as _OTEL_TRACE
from ._context import USED as _CONTEXT_USED
from ._context import snapshot as _snapshot
from .client import Client
from .encoding import to_jsonable
from .events import (
    INIT_KEYS,
    LEVELS,
    RECORD,
    RESERVED,
    STANDARD,
    add_exception,
    add_fields,
    exception_fields,
    free_name,
    rfc3339,
)
from .guard import _SENDERS, _get_ident
from .shipper import FAST_ITEM_BYTES as _FAST_ITEM
from .shipper import Shipper, make_shipper
from .stats import Stats

__all__ = ["RESERVED", "IngestHandler", "record_to_event"]

_LogRecord = logging.LogRecord
_modules = sys.modules
_INIT_KEYS = INIT_KEYS
_INIT_SET = frozenset(_INIT_KEYS)
_N_INIT = len(_INIT_KEYS)
_islice = itertools.islice
# Immutable JSON values an extra can be passed through as (floats: NaN is handled by the encoder).
_PLAIN = frozenset({str, int, float, bool, type(None)})
_STANDARD = STANDARD
# Extras the fast path leaves to record_to_event: event keys (renamed there), a record's own
# attributes out of place; and the attributes formatters set, which are no extras at all.
_SPECIAL = STANDARD | RESERVED
_FORMATTER = STANDARD - _INIT_SET
_LEVELS = LEVELS
_HANDLE_RETURNS_RECORD = sys.version_info >= (3, 12)
# Rough memory costs (see Shipper max_queue_bytes), measured with tracemalloc and RSS: an event
# built by record_to_event; one from the fast path (its dict of ten fields, the queue item, the
# created float, the process int, the message's header); one extra field (the dict grows past
# ten keys, and the value: a float is new, a str is counted by its length too).
_BASE_SIZE = 900
_ITEM_SIZE = 600
_EXTRA_SIZE = 100


def _message(record: logging.LogRecord) -> str:
    try:
        return record.getMessage()
    except Exception as exc:
        # Broken %-arguments must not cost the event: ship the template and the arguments.
        try:
            return f"{record.msg!s} % {record.args!r} (message formatting failed: " \
                   f"{type(exc).__name__}: {exc})"
        except Exception:
            return f"<unformattable message: {type(exc).__name__}>"


def _add_extras(event: dict[str, Any], d: dict[str, Any], tail: dict[str, Any]) -> int:
    """Extras the fast path could not take as they are: a clash, a non-plain value, or a
    formatter's attributes ("message", "asctime") among them. Returns their rough size."""
    size = 0
    displaced = False
    for key, value in tail.items():
        if key in _STANDARD:
            displaced = displaced or key in _INIT_SET
            continue
        if key in event:  # only the event's own keys can be there yet: rename, not lose
            key = free_name(event, key)
        t = type(value)
        if t is str:
            size += 80 + len(value)
        elif t not in _PLAIN:
            # Copied JSON-safe now: the caller may change or free it after the call.
            value = to_jsonable(value)
            size += 144
        else:
            size += 80
        event[key] = value
    if displaced:
        # A custom record factory set attributes before LogRecord.__init__ did: extras may
        # sit anywhere. Rare; look at every key.
        size += add_fields(event, [(k, v) for k, v in d.items()
                                   if k not in _STANDARD and k not in event], RESERVED)
    return size


def record_to_event(record: logging.LogRecord) -> tuple[dict[str, Any], int]:
    """The event for a LogRecord, and a rough size for the queue's byte bound.

    The record itself is never modified.
    """
    d = record.__dict__
    msg = record.msg
    level = _LEVELS.get(record.levelname) or str(record.levelname).lower()
    if type(msg) is not str and isinstance(msg, dict):
        # structlog routed through stdlib (ProcessorFormatter.wrap_for_formatter): the event
        # dict's keys are the fields, as they are ("event" stays "event"; a "filename",
        # "message" or "level" key is an ordinary field, so nothing collides); the record adds
        # the context the dict lacks. Copied first: the application may reuse the dict.
        event: dict[str, Any] = {}
        fields = dict(msg)
        exc = fields.pop("exc_info", None)
        for key in ("_record", "_from_structlog"):  # ProcessorFormatter's bookkeeping
            fields.pop(key, None)
        size = _BASE_SIZE + add_fields(event, fields.items())
        event.setdefault("_time", rfc3339(record.created))
        event.setdefault("level", level)
        event.setdefault("logger", record.name)
        for key, value in (("module", record.module), ("function", record.funcName),
                           ("line", record.lineno), ("file", record.pathname),
                           ("process", record.process), ("thread", record.threadName)):
            event.setdefault(key, value)
        if exc:
            size += add_exception(event, exc)
    else:
        message = _message(record)
        # The slow path (the handler's fast path builds its events in emit()): attribute access,
        # so that a record class keeping these in properties works too.
        event = {"_time": rfc3339(record.created), "level": level, "message": message,
                 "logger": record.name, "module": record.module,
                 "function": record.funcName, "line": record.lineno,
                 "file": record.pathname, "process": record.process,
                 "thread": record.threadName}
        size = _BASE_SIZE + len(message)
    if len(d) > _N_INIT:
        # makeRecord() adds extras after __init__'s attributes, so only the tail can hold them.
        # Inlined: plain JSON values are taken as they are (the usual case); _add_extras does
        # the rest. (A loop measured cheaper here than a chain of C-level set operations.)
        for key in _islice(d, _N_INIT, None):
            value = d[key]
            if type(value) in _PLAIN and key not in _STANDARD and key not in event:
                event[key] = value
                size += 96
            else:
                size += _add_extras(event, d, {key: value})
    if record.exc_info and "exception" not in event:
        info = exception_fields(record.exc_info, record.exc_text)
        if info:
            event["exception"] = info
            size += len(info["stacktrace"])
    if record.stack_info:
        event["stack"] = record.stack_info
        size += len(record.stack_info)
    return event, size


class IngestHandler(logging.Handler):
    """Ship log records to a dataset, in the background.

    ``IngestHandler(dataset=None, *, level=NOTSET, client=None, shipper=None, **options)``.
    ``options`` are Client arguments (``token``, ``url``, ``org_id``, ``region``, ``timeout``,
    ``allow_http``) and shipping options (README "Options"), all plain values so
    ``logging.config.dictConfig`` can build it. ``emit()`` never blocks on I/O and never raises.
    """

    def __init__(
        self,
        dataset: str | None = None,
        *,
        level: int | str = logging.NOTSET,
        client: Client | None = None,
        shipper: Shipper | None = None,
        **options: Any,
    ) -> None:
        super().__init__(level)
        self.shipper = make_shipper(dataset, client, shipper, options)
        self._owns_shipper = shipper is None

    def __repr__(self) -> str:
        level = logging.getLevelName(self.level)
        return f"<IngestHandler dataset={self.shipper.dataset!r} ({level})>"

    def handle(self, record: logging.LogRecord) -> Any:
        # No handler lock: emit() is thread-safe by itself, and not taking the lock is what keeps
        # logging.shutdown() (which holds it while calling flush) from deadlocking against a
        # flusher thread that logs. Records our own I/O threads emit are never shipped.
        if _get_ident() in _SENDERS:
            return self.shipper._suppress()
        if self.filters:
            rv = self.filter(record)
            if isinstance(rv, logging.LogRecord):  # Python 3.12+: a filter may return a record
                record = rv
            if not rv:
                return rv
        self.emit(record)
        return record if _HANDLE_RETURNS_RECORD else True

    def emit(self, record: logging.LogRecord) -> None:
        """Queue the record; O(1), never blocks, never raises."""
        try:
            # The fast path, inlined: this runs for every record on the caller's thread. A plain
            # record (no exception, no stack, extras of plain JSON types) becomes its event
            # here, but for _time and level, which the flusher formats (events.py "Queue
            # items"); anything else goes through record_to_event.
            d = record.__dict__
            msg = d["msg"]
            if (type(record) is _LogRecord and type(msg) is str and not d["exc_info"]
                    and not d["stack_info"]):
                args = d["args"]
                if args:
                    try:
                        message = msg % args
                    except Exception:
                        message = _message(record)
                else:
                    message = msg
                size = _ITEM_SIZE + len(message)
                # "_time" and "level" hold the raw created and levelname: the flusher formats
                # them (item_events), off the caller's thread.
                event = {
                    "_time": d["created"],
                    "level": d["levelname"],
                    "message": message,
                    "logger": d["name"],
                    "module": d["module"],
                    "function": d["funcName"],
                    "line": d["lineno"],
                    "file": d["pathname"],
                    "process": d["process"],
                    "thread": d["threadName"],
                }
                if len(d) > _N_INIT:
                    # makeRecord() adds extras after __init__'s attributes: only the tail can
                    # hold them. A non-plain value (to be copied now, JSON-safe), an event key
                    # (to be renamed) or a record attribute out of place takes the slow path; a
                    # formatter's attributes ("message", "asctime") are no extras.
                    for key in _islice(d, _N_INIT, None):
                        if key in _SPECIAL:
                            if key in _FORMATTER:
                                continue
                            self._put_event(record)
                            return
                        value = d[key]
                        t = type(value)
                        if t is str:
                            size += _EXTRA_SIZE + len(value)
                        elif t in _PLAIN:
                            size += _EXTRA_SIZE
                        else:
                            self._put_event(record)
                            return
                        event[key] = value
                shipper = self.shipper
                q = shipper._queue
                if _CONTEXT_USED[0] or _OTEL_TRACE in _modules:
                    # The caller's context and span, taken here by reference (two loads
                    # decide it for an application that uses neither); merged on the flusher.
                    snap = _snapshot(shipper.options.trace_context)
                    item: tuple[Any, ...] = ((event, size, RECORD, snap) if snap
                                             else (event, size, RECORD))
                else:
                    item = (event, size, RECORD)
                if len(q) < shipper._fast_len and size <= _FAST_ITEM:
                    q.append(item)
                else:
                    shipper._put_locked(item, size)
            else:
                self._put_event(record)
        except Exception:
            self._put_event(record)

    def _put_event(self, record: logging.LogRecord) -> None:
        try:
            event, size = record_to_event(record)
            shipper = self.shipper
            snap = None
            if _CONTEXT_USED[0] or _OTEL_TRACE in _modules:
                snap = _snapshot(shipper.options.trace_context)
            shipper._put((event, size, False, snap) if snap else (event, size), size)
        except Exception:
            self.handleError(record)

    def flush(self, timeout: float | None = None) -> bool:  # type: ignore[override]
        """Send what is queued and wait (at most ``timeout``, default ``shutdown_timeout``).

        True when everything queued at the call was delivered.
        """
        return self.shipper.flush(timeout)

    def close(self) -> None:
        """Flush and stop the shipper (bounded by ``shutdown_timeout``); idempotent."""
        try:
            if self._owns_shipper:
                self.shipper.close()
            else:
                self.shipper.flush()
        finally:
            super().close()

    def stats(self) -> Stats:
        """The shipper's counters (see ``Shipper.stats``)."""
        return self.shipper.stats()
