"""``IngestHandler``: a ``logging.Handler`` that ships records through a ``Shipper``."""

from __future__ import annotations

import itertools
import logging
import sys
from typing import Any

from ._context import on_first_use as _on_first_use
from ._context import snapshot as _snapshot
from .client import Client
from .events import (
    FAST_EVENT_SIZE,
    FAST_EXTRA_SIZE,
    INIT_KEYS,
    PLAIN,
    RECORD,
    RESERVED,
    STANDARD,
    record_message,
    record_to_event,
)
from .guard import _SENDERS, _get_ident
from .shipper import FAST_ITEM_BYTES as _FAST_ITEM
from .shipper import Shipper, make_shipper
from .stats import Stats

__all__ = ["RESERVED", "IngestHandler", "record_to_event"]

# Module globals for emit()'s inlined fast path (one dict lookup each); the event model itself,
# record_to_event included, is events.py's.
_LogRecord = logging.LogRecord
_modules = sys.modules
_INIT_SET = frozenset(INIT_KEYS)
_N_INIT = len(INIT_KEYS)
_islice = itertools.islice
_PLAIN = PLAIN
# Extras the fast path leaves to record_to_event: event keys (renamed there), a record's own
# attributes out of place; and the attributes formatters set, which are no extras at all.
_SPECIAL = STANDARD | RESERVED
_FORMATTER = STANDARD - _INIT_SET
_ITEM_SIZE = FAST_EVENT_SIZE  # sizes: events.py, "the memory model"
_EXTRA_SIZE = FAST_EXTRA_SIZE
_message = record_message
_HANDLE_RETURNS_RECORD = sys.version_info >= (3, 12)
# True once a loghandler.context was entered anywhere: a module global, the cheapest test emit()
# can make (_context sets it through _context_used).
_context_on = False


def _context_used() -> None:
    global _context_on
    _context_on = True


_on_first_use(_context_used)


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
                if _context_on or "opentelemetry.trace" in _modules:
                    # A context was entered once, or the application uses OpenTelemetry: the
                    # caller's context and span go with the event (out of line: the plain path
                    # pays these two checks only).
                    self._put_in_context(event, size)
                    return
                shipper = self.shipper
                q = shipper._queue
                if len(q) < shipper._fast_len and size <= _FAST_ITEM:
                    q.append((event, size, RECORD))
                else:
                    shipper._put_locked((event, size, RECORD), size)
            else:
                self._put_event(record)
        except Exception:
            self._put_event(record)

    def _put_in_context(self, event: dict[str, Any], size: int) -> None:
        # The fast path's event, with the snapshot of the caller's context (events.py "Queue
        # items"), taken here on the caller's thread; the flusher merges it.
        shipper = self.shipper
        snap = _snapshot(shipper.options.trace_context)
        shipper._put((event, size, RECORD, snap) if snap else (event, size, RECORD), size)

    def _put_event(self, record: logging.LogRecord) -> None:
        try:
            event, size = record_to_event(record)
            shipper = self.shipper
            snap = None
            if _context_on or "opentelemetry.trace" in _modules:
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
