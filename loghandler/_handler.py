"""``IngestHandler``: a ``logging.Handler`` that ships records through a ``Shipper``."""

from __future__ import annotations

import itertools
import logging
import sys
from typing import Any

from . import _compiled
from ._config import SHIPPING_OPTIONS_DOC, documented
from ._encoding import using_default
from ._engine.context import on_first_use as _on_first_use
from ._engine.context import snapshot as _snapshot
from ._engine.events import (
    CONTEXT,
    FAST_EVENT_SIZE,
    FAST_EXTRA_SIZE,
    INIT_KEYS,
    PLAIN,
    RECORD,
    RESERVED,
    SIZE,
    STANDARD,
    record_to_event,
)
from ._engine.guard import _SENDERS, _get_ident, own_record
from ._engine.hold import level_number
from ._engine.ledger import FAST_ITEM_BYTES as _FAST_ITEM
from ._engine.ledger import Fate
from ._engine.shipper import Shipper, make_shipper
from ._engine.stats import Stats
from ._output import shown
from ._wire.client import Client
from ._wire.settings import CLIENT_ARGS_DOC

__all__ = ["RESERVED", "IngestHandler", "record_to_event"]

# Module globals for emit()'s inlined fast path (one dict lookup each, where an attribute or a
# computed set would cost more); the event model itself, record_to_event and the sizes
# ("the memory model") included, is events.py's.
_LogRecord = logging.LogRecord
_record_put = _compiled.record_put
_modules = sys.modules
_INIT_SET = frozenset(INIT_KEYS)
_N_INIT = len(INIT_KEYS)
_islice = itertools.islice
# Extras the fast path leaves to record_to_event: event keys (renamed there), a record's own
# attributes out of place; and the attributes formatters set, which are no extras at all.
_SPECIAL = STANDARD | RESERVED
_FORMATTER = STANDARD - _INIT_SET
_HANDLE_RETURNS_RECORD = sys.version_info >= (3, 12)
# True once a loghandler.context was entered anywhere: a module global, the cheapest test emit()
# can make (_context sets it through _context_used).
_context_on = False


def _context_used() -> None:
    global _context_on
    _context_on = True


_on_first_use(_context_used)


@documented(("Client arguments (keyword; each falls back to its environment variable):",
             CLIENT_ARGS_DOC),
            ('Shipping options (keyword; docs/configuration.md: why each default):',
             SHIPPING_OPTIONS_DOC))
class IngestHandler(logging.Handler):
    """Ship log records to a dataset, in the background.

    ``emit()`` takes what the event needs from the record on the caller's thread and queues it:
    no I/O, no lock, never raises. A background thread batches and posts; at exit what is queued
    is delivered within ``shutdown_timeout``. Every argument is a plain value, so
    ``logging.config.dictConfig`` can build it.

    Args:
        dataset (str | None): the dataset to ship to. Default: ``LOGHANDLER_DATASET``.
        level (int | str): the handler's level, as for any ``logging.Handler``. Default NOTSET.
        client (Client | None): a ``Client`` to ship through, instead of the Client arguments.
        shipper (Shipper | None): a ``Shipper`` to share with other front ends, instead of
            ``dataset``, ``client`` and the options; it is flushed, not closed, by ``close()``.

    Raises:
        ConfigurationError: a missing token, address or dataset, an unknown option (with a
            suggestion), an invalid value. Nothing is left behind (no half-built handler).
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
        # The shipper first: logging.Handler.__init__ registers the handler for
        # logging.shutdown(), which would find a half-built one (a second, misleading traceback
        # at exit) if a ConfigurationError came after it.
        self.shipper = make_shipper(dataset, client, shipper, options)
        self._ledger = self.shipper._ledger
        self._hold = self.shipper._hold
        self._owns_shipper = shipper is None
        self._custom: bool | None = None
        self._compiled_put: Any = None
        self._wire: Any = None
        try:
            super().__init__(level)
            self._update_custom()
        except BaseException:  # a bad level: leave nothing behind either
            if self._owns_shipper:
                self.shipper.close(0)
            raise

    def __repr__(self) -> str:
        level = logging.getLevelName(self.level)
        return f"<IngestHandler dataset={shown(self.shipper.dataset)} ({level})>"

    def handle(self, record: logging.LogRecord) -> Any:
        # No handler lock: emit() is thread-safe by itself, and not taking the lock is what keeps
        # logging.shutdown() (which holds it while calling flush) from deadlocking against a
        # flusher thread that logs. Records our own sending causes are never shipped.
        if _get_ident() in _SENDERS and own_record(record.name):
            return self.shipper._suppress()
        if self.filters:
            rv = self.filter(record)
            if isinstance(rv, logging.LogRecord):  # Python 3.12+: a filter may return a record
                record = rv
            if not rv:
                return rv
        put = self._compiled_put
        if put is not None and type(record) is _LogRecord:
            # emit(), compiled and inlined here (one Python call less per record).
            ledger = self._ledger
            context = _context_on or "opentelemetry.trace" in _modules
            try:
                got = put(record.__dict__, ledger.queue, 0 if context else ledger.fast_len,
                          None if context else self._wire)
                if got is not True:
                    self._put_compiled(record, got, context)
            except Exception:
                self._put_event(record)
            return record if _HANDLE_RETURNS_RECORD else True
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
                    and not d["stack_info"] and self._custom is None):
                args = d["args"]
                if args:
                    try:
                        message = msg % args
                    except Exception:  # record_to_event writes the error into the message
                        self._put_event(record)
                        return
                else:
                    message = msg
                size = FAST_EVENT_SIZE + len(message)
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
                    RECORD: True,
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
                            size += FAST_EXTRA_SIZE + len(value)
                        elif t in PLAIN:
                            size += FAST_EXTRA_SIZE
                        else:
                            self._put_event(record)
                            return
                        event[key] = value
                if _context_on or "opentelemetry.trace" in _modules:
                    # A context was entered once, or the application uses OpenTelemetry: the
                    # caller's context and span go with the event (out of line: the plain path
                    # pays these two checks only).
                    self._put_in_context(event, size, d["levelno"])
                    return
                # Ledger.offer, inlined: the cached ledger stays valid across fork (reset in place).
                ledger = self._ledger
                q = ledger.queue
                event[SIZE] = size
                if len(q) < ledger.fast_len and size <= _FAST_ITEM:
                    q.append(event)
                else:
                    ledger.put(event, size)
            else:
                self._put_event(record)
        except Exception:
            self._put_event(record)

    def _put_compiled(self, record: logging.LogRecord,
                      got: tuple[Any, int] | None, context: bool) -> None:
        # What _speedups.record_put did not queue itself: the careful path's records, and its
        # items (events, or wire items out of context) for the context or the locked slow
        # path.
        if got is None:
            self._put_event(record)
        elif context:
            self._put_in_context(got[0], got[1], record.levelno)
        else:
            self._ledger.put(*got)

    def _put_in_context(self, event: dict[Any, Any], size: int, levelno: Any) -> None:
        # The fast path's event, with the snapshot of the caller's context (events.py "Queue
        # items"), taken here on the caller's thread; the flusher merges it. Inside a context,
        # hold-until-error (hold.py) may keep the event back.
        snap = _snapshot(self.shipper.options.trace_context)
        if snap:
            event[CONTEXT] = snap
        event[SIZE] = size
        hold = self._hold
        if hold is not None and hold.take(event, size, level_number(levelno)):
            return
        self._ledger.offer(event, size)

    def _put_event(self, record: logging.LogRecord) -> None:
        try:
            if self._custom is None:
                event, size = record_to_event(record)
            else:
                event, size = self._custom_event(record)
            if _context_on or "opentelemetry.trace" in _modules:
                self._put_in_context(event, size, getattr(record, "levelno", 20))
                return
            event[SIZE] = size
            self._ledger.offer(event, size)
        except Exception:
            # record_to_event does not raise; this is a bug of ours, and still an account.
            self._ledger.drop(Fate.DROPPED_INVALID)
            self.handleError(record)

    def _custom_event(self, record: logging.LogRecord) -> tuple[dict[Any, Any], int]:
        # A formatter set on the handler, or the shipper's json_default: the careful path,
        # with the user's converter applied and the formatter's text as the message.
        with using_default(self.shipper.options.json_default):
            event, size = record_to_event(record)
        formatter = self.formatter
        if formatter is not None:
            try:
                text = formatter.format(record)
            except Exception:
                text = None  # the event keeps getMessage()'s text
            if type(text) is str:
                size += len(text)
                if "message" in event:
                    event["message"] = text
                else:  # structlog's event dict routed through stdlib: beside its keys
                    event.setdefault("formatted", text)
        return event, size

    def setFormatter(self, fmt: logging.Formatter | None) -> None:
        """Use ``fmt``'s output as each event's ``message`` (fields stay structured)."""
        super().setFormatter(fmt)
        self._update_custom()

    def _update_custom(self) -> None:
        custom = self.formatter is not None or self.shipper.options.json_default is not None
        self._custom = True if custom else None
        # handle()'s compiled path stands in for emit(): not when a subclass has its own.
        own_emit = type(self).emit is IngestHandler.emit
        self._compiled_put = _record_put if own_emit and not custom else None
        # Its events queued as their final JSON when the shipper has nothing to do per event
        # (events.py "Wire items"; the compiled path only).
        self._wire = (self.shipper._sender.wire()
                      if self._compiled_put is not None and _compiled.ACTIVE else None)

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


def _compile_handle() -> None:
    # handle() in C (_speedups.handle) for the common record: the same fast path without its
    # bytecode; it calls the Python handle above for anything else (tests/test_speedups.py).
    module = _compiled.speedups
    if module is None:
        return
    python = IngestHandler.handle
    from ._engine.ledger import Ledger

    module.configure_handle(python, _SENDERS, globals(), _modules, _LogRecord,
                            _HANDLE_RETURNS_RECORD, Ledger, Ledger.__dict__.get("queue"),
                            Ledger.__dict__.get("fast_len"))
    compiled = module.as_method(module.handle)
    IngestHandler.handle = compiled  # type: ignore[method-assign]
    IngestHandler._python_handle = python  # type: ignore[attr-defined]


_compile_handle()
