"""``IngestHandler``: a ``logging.Handler`` that ships records through a ``Shipper``.

Its ``handle`` is what ``_engine/compiled.py`` decided: the compiled one (``_speedups.c``)
or ``_handle_python``, the reference it stands in for, which it hands every record it does not
take itself. The class reads that decision in its body; nothing patches it later.
"""

from __future__ import annotations

import itertools
import logging
import sys
from typing import TYPE_CHECKING, Any

from .._config import SEND_DOC, SHIPPING_OPTIONS_DOC, documented
from .._encoding import using_default
from .._engine import compiled
from .._engine.context import in_use
from .._engine.events import fast_head, record_to_event
from .._engine.fastpath import FastPath
from .._engine.guard import SENDERS, own_record
from .._engine.model import (
    FAST_EVENT_SIZE,
    FAST_EXTRA_SIZE,
    FORMATTER,
    INIT_KEYS,
    PLAIN,
    SIZE,
    SPECIAL,
)
from .._engine.sampling import ABSENT
from .._engine.shipper import Shipper
from .._engine.stats import Fate
from .._output import shown
from .._wire.client import Client
from .._wire.settings import CLIENT_ARGS_DOC
from .base import FrontEnd

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from .._options import FrontEndOptions

__all__ = ["IngestHandler"]

# Module globals for the hot path (one dict lookup each, where an attribute or a computed set
# would cost more); the event model itself is _engine/model.py's and events.py's.
_LogRecord = logging.LogRecord
_record_put: Any = compiled.record_put
_N_INIT = len(INIT_KEYS)
DROPPED_SAMPLED = Fate.DROPPED_SAMPLED
_islice = itertools.islice
_HANDLE_RETURNS_RECORD = sys.version_info >= (3, 12)


@documented(("Client arguments (keyword; each falls back to its environment variable):",
             CLIENT_ARGS_DOC),
            ('Shipping options (keyword; docs/configuration.md: why each default):',
             SHIPPING_OPTIONS_DOC.rstrip() + "\n" + SEND_DOC))
class IngestHandler(FrontEnd, logging.Handler):
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
        **options: Unpack[FrontEndOptions],
    ) -> None:
        # The shipper first: logging.Handler.__init__ registers the handler for
        # logging.shutdown(), which would find a half-built one (a second, misleading traceback
        # at exit) if a ConfigurationError came after it.
        self._attach(dataset, client, shipper, dict(options))
        self._custom: bool | None = None
        # The compiled fast path of this handler (fastpath.FastPath), or None: read by the
        # compiled handle from this instance's __dict__.
        self._fast_path: Any = None
        try:
            logging.Handler.__init__(self, _level(level))
            self._update_custom()
        except BaseException:  # a bad level: leave nothing behind either
            if self._owns_shipper:
                self.shipper.close(0)
            raise

    def __repr__(self) -> str:
        level = logging.getLevelName(self.level)
        return f"<IngestHandler dataset={shown(self.shipper.dataset)} ({level})>"

    def _handle_python(self, record: logging.LogRecord) -> Any:
        """``handle()`` in Python: the reference the compiled one stands in for."""
        # No handler lock: emit() is thread-safe by itself, and not taking the lock is what keeps
        # logging.shutdown() (which holds it while calling flush) from deadlocking against a
        # flusher thread that logs. Records our own sending causes are never shipped (SENDERS is
        # empty but while such a call runs: one test, as the compiled handle makes it).
        if SENDERS and own_record(record.name):
            return self._intake.suppress()
        if self.filters:
            rv = self.filter(record)
            if isinstance(rv, logging.LogRecord):  # Python 3.12+: a filter may return a record
                record = rv
            if not rv:
                return rv
        fast = self._fast_path
        if fast is not None and type(record) is _LogRecord:
            self._put_compiled(record, fast)
        else:
            self.emit(record)
        return record if _HANDLE_RETURNS_RECORD else True

    # What compiled.py decided (the compiled handle, told its Python twin), once, here.
    handle = compiled.front_method("handle", _handle_python)

    def _put_compiled(self, record: logging.LogRecord, fast: FastPath) -> None:
        # The compiled way (record_put: sampling, the item, hold, the queue) for the records
        # the compiled handle leaves here (its filters passed them).
        try:
            if not _record_put(self, record, fast):
                self._put_event(record)
        except Exception:
            self._put_event(record)

    def emit(self, record: logging.LogRecord) -> None:
        """Queue the record; O(1), never blocks, never raises."""
        sampled = False
        try:
            # The fast path: this runs for every record on the caller's thread. A plain record
            # (no exception, no stack, extras of plain JSON types) becomes its event here, but
            # for _time and level, which the flusher formats (events.py "Queue items");
            # anything else goes through record_to_event.
            d = record.__dict__
            msg = d["msg"]
            if (type(record) is _LogRecord and type(msg) is str and not d["exc_info"]
                    and not d["stack_info"] and self._custom is None):
                sampler = self._sampler
                if sampler is not None:
                    # Sampling before the event is built, when the level and logger decide
                    # alone (a rate of 1), or with the trace id when no context or span can
                    # give one (the record's own, else fields='s); else _queue decides.
                    rate = sampler.record_rates.get((d["levelname"], d["name"]))
                    if rate is None:
                        rate = sampler.record_rate(d["levelname"], d["name"])
                    if rate >= 1.0:
                        sampled = True
                    elif not in_use():
                        if not sampler.decide(None, None, d.get("trace_id", ABSENT), rate=rate):
                            self._intake.drop(DROPPED_SAMPLED)
                            return
                        sampled = True
                args = d["args"]
                if args:
                    try:
                        message = msg % args
                    except Exception:  # record_to_event writes the error into the message
                        self._put_event(record, sampled)
                        return
                else:
                    message = msg
                size = FAST_EVENT_SIZE + len(message)
                event = fast_head(d, message)
                if len(d) > _N_INIT:
                    # makeRecord() adds extras after __init__'s attributes: only the tail can
                    # hold them. A non-plain value (to be copied now, JSON-safe), an event key
                    # (to be renamed) or a record attribute out of place takes the slow path; a
                    # formatter's attributes ("message", "asctime") are no extras.
                    for key in _islice(d, _N_INIT, None):
                        if key in SPECIAL:
                            if key in FORMATTER:
                                continue
                            self._put_event(record, sampled)
                            return
                        value = d[key]
                        t = type(value)
                        if t is str:
                            size += FAST_EXTRA_SIZE + len(value)
                        elif t in PLAIN:
                            size += FAST_EXTRA_SIZE
                        else:
                            self._put_event(record, sampled)
                            return
                        event[key] = value
                if self._sampler is not None or in_use():
                    # A context was entered once, or the application uses OpenTelemetry: the
                    # caller's context and span go with the event; or sampling decides (out
                    # of line: the plain path pays these three checks only).
                    self._queue(event, size, d["levelno"], True, sampled)
                    return
                event[SIZE] = size
                self._intake.offer(event, size)
            else:
                self._put_event(record, sampled)
        except Exception:
            self._put_event(record, sampled)

    def _put_event(self, record: logging.LogRecord, sampled: bool = False) -> None:
        # The careful path (``sampled``: the compiled path's sampling kept it already).
        try:
            if self._custom is None:
                event, size = record_to_event(record)
            else:
                event, size = self._custom_event(record)
            if self._sampler is not None or in_use():
                self._queue(event, size, getattr(record, "levelno", 20), True, sampled)
                return
            event[SIZE] = size
            self._intake.offer(event, size)
        except Exception:
            # record_to_event does not raise; this is a bug of ours, and still an account.
            self._invalid()
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

    def setLevel(self, level: int | str) -> None:
        """As ``logging.Handler.setLevel``; a level name in any case (``"info"``) too."""
        super().setLevel(_level(level))

    def setFormatter(self, fmt: logging.Formatter | None) -> None:
        """Use ``fmt``'s output as each event's ``message`` (fields stay structured)."""
        super().setFormatter(fmt)
        self._update_custom()

    def _refresh(self) -> None:
        # Built (not yet while _attach runs)? Asked without reading self.__dict__, which would
        # make the instance's attributes a dict of their own: every attribute read of the
        # handler on each call (filters, level, ...) is then some 150 instructions dearer.
        if hasattr(self, "formatter"):
            self._update_custom()

    def _update_custom(self) -> None:
        custom = self.formatter is not None or self.shipper.options.json_default is not None
        self._custom = True if custom else None
        # The compiled path stands in for emit(): not when a subclass has its own, nor with a
        # formatter or a json_default (the careful path's). Its events are queued as their
        # final JSON when the shipper has nothing to do per event (Shipper.item_plan).
        if type(self).emit is IngestHandler.emit and not custom and compiled.ACTIVE:
            self._fast_path = self._compiled_path(self._put_event, self.shipper.item_plan())
        else:
            self._fast_path = None

    def flush(self, timeout: float | None = None) -> bool:  # type: ignore[override]
        """Send what is queued and wait (at most ``timeout``, default ``shutdown_timeout``).

        True when everything queued at the call was delivered.
        """
        return self.shipper.flush(timeout)

    def close(self) -> None:  # type: ignore[override]
        """Flush and stop the shipper (bounded by ``shutdown_timeout``); idempotent."""
        try:
            FrontEnd.close(self)
        finally:
            logging.Handler.close(self)


def _level(level: Any) -> Any:
    """A level name in any case as logging knows it (``"info"``: ``"INFO"``); else as given
    (logging's own error for an unknown one)."""
    if isinstance(level, str) and isinstance(logging.getLevelName(level.upper()), int):
        return level.upper()
    return level
