"""``IngestLogRecordProcessor``: OpenTelemetry logs through loghandler's engine (public as
``loghandler.opentelemetry``, whose docstring gives the mapping onto the event shape).

This module imports nothing of OpenTelemetry: the processor reads the records the SDK hands
it, whichever SDK version (``on_emit(ReadWriteLogRecord)`` since 1.35, ``emit(LogData)``
before). ``import loghandler`` does not import this module.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .._config import SEND_DOC, SHIPPING_OPTIONS_DOC, documented
from .._encoding import encode, free_name, using_default
from .._engine import compiled
from .._engine.events import add_fields
from .._engine.model import (
    FAST_EVENT_SIZE,
    FIELD_SIZE,
    OTEL_CODE,
    OTEL_EXCEPTION,
    OTEL_NUMBERS,
    OTEL_SEVERITY,
    OTEL_TEXTS,
    PLAIN,
    RECORD,
)
from .._engine.shipper import Shipper
from .._output import shown
from .._wire.client import Client
from .._wire.settings import CLIENT_ARGS_DOC
from .base import FrontEnd

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from .._options import FrontEndOptions

__all__ = ["IngestLogRecordProcessor", "otel_event"]

# What compiled.py decided: the compiled reading of a record (a pre-encoded item), or None.
_otel_put = compiled.otel_put

# The mapping of an OpenTelemetry log record onto the event (model.py: the one table of each,
# which the compiled path is handed too).
_SEVERITY = OTEL_SEVERITY
_TEXTS = OTEL_TEXTS
_NUMBER = OTEL_NUMBERS
_CODE = OTEL_CODE
_EXCEPTION = OTEL_EXCEPTION
_SPECIAL = _EXCEPTION | _CODE.keys()
_RESOURCE = {"service.name": "service", "service.version": "version",
             "deployment.environment": "environment",
             "deployment.environment.name": "environment"}


def _level(record: Any) -> str:
    text = getattr(record, "severity_text", None)
    if isinstance(text, str) and text:
        text = text.lower()
        return _TEXTS.get(text, text)
    number = getattr(getattr(record, "severity_number", None), "value", None)
    if type(number) is int and number > 0:
        for top, name in _SEVERITY:
            if number <= top:
                return name
    return "info"


Cache = dict[int, tuple[Any, dict[str, Any], tuple[tuple[Any, bytes], ...]]]


def _resource_fields(resource: Any, cache: Cache) -> dict[str, Any]:
    # A provider has one resource: its fields are computed once (kept with the resource, so
    # its id cannot be reused by another while cached).
    key = id(resource)
    hit = cache.get(key)
    if hit is not None and hit[0] is resource:
        return hit[1]
    fields: dict[str, Any] = {}
    rest: dict[str, Any] = {}
    try:
        for name, value in dict(getattr(resource, "attributes", None) or {}).items():
            if name in _RESOURCE:
                fields.setdefault(_RESOURCE[name], value)
            elif not str(name).startswith("telemetry.sdk."):
                rest[name] = value
    except Exception:
        pass
    if rest:
        fields["resource"] = rest
    if len(cache) > 64:
        cache.clear()
    cache[key] = (resource, fields, _encoded(fields))
    return fields


def resource_json(resource: Any, cache: Cache) -> tuple[tuple[Any, bytes], ...]:
    """The JSON of a resource's fields that are no plain values (its other attributes, as
    ``resource``), each with the object it is made of: these objects are the cache's, never
    changed, so the compiled path writes them into wire items as they are (by identity)."""
    _resource_fields(resource, cache)
    hit = cache.get(id(resource))
    return hit[2] if hit is not None and hit[0] is resource else ()


def _encoded(fields: dict[str, Any]) -> tuple[tuple[Any, bytes], ...]:
    out = []
    for value in fields.values():
        if type(value) in PLAIN:
            continue
        data = encode(value)
        # (a lone surrogate sends the encoder to its ASCII form, which a whole event written
        # in UTF-8 would not use: such a value stays the flusher's)
        if not re.search(rb"\\u[dD][89abAB]", data):
            out.append((value, data))
    return tuple(out)


def otel_event(record: Any, resource: Any = None, scope: Any = None,
               cache: Cache | None = None) -> tuple[dict[str, Any], int]:
    """The event for an OpenTelemetry log record (``loghandler.opentelemetry``: the mapping),
    and its rough size. Never raises: what cannot be read is left out.

    ``_time`` stays the record's epoch seconds and is marked ``RECORD``: the flusher writes it
    out, off the caller's thread, as for the handler's events."""
    stamp = record.timestamp or record.observed_timestamp
    event: dict[Any, Any] = {
        "_time": stamp / 1e9 if type(stamp) is int else time.time(),
        "level": _level(record),
        RECORD: True,
    }
    size = FAST_EVENT_SIZE
    body = record.body
    if type(body) is str:
        event["message"] = body
        size += len(body)
    elif isinstance(body, Mapping):
        size += add_fields(event, list(body.items()))
    elif body is not None:
        size += add_fields(event, [("body", body)])
    if scope is not None:
        name = scope.name
        if type(name) is str and name:
            event["logger"] = name
    event_name = getattr(record, "event_name", None)
    if event_name:
        event["event_name"] = event_name
    attributes = record.attributes
    exception: dict[str, Any] | None = None
    if attributes:
        # A BoundedAttributes is read through its public copy(), a plain dict (iterating the
        # mapping takes its lock per key).
        copy = getattr(attributes, "copy", None)
        items = copy() if copy is not None else None
        if not isinstance(items, dict):
            items = dict(attributes)
        plain = PLAIN
        for key, value in items.items():
            if key in _SPECIAL:
                if key in _EXCEPTION:
                    if exception is None:
                        exception = {}
                    exception[key[10:]] = value
                    continue
                key = _CODE[key]
            if type(value) in plain and key not in event:
                event[key] = value
                size += FIELD_SIZE + (len(value) if type(value) is str else 0)
            else:
                size += add_fields(event, [(key, value)])
    exc = getattr(record, "exception", None)
    if exception is None and isinstance(exc, BaseException):
        import traceback

        exception = {"type": type(exc).__name__, "message": str(exc),
                     "stacktrace": "".join(traceback.format_exception(
                         type(exc), exc, exc.__traceback__)).rstrip("\n")}
    if exception:
        if "exception" in event:
            event[free_name("exception", event)] = event.pop("exception")
        event["exception"] = {"type": exception.get("type"), "message": exception.get("message"),
                              "stacktrace": exception.get("stacktrace")}
        size += len(str(exception.get("stacktrace") or "")) + FIELD_SIZE
    trace_id = record.trace_id
    if trace_id and type(trace_id) is int and "trace_id" not in event:
        event["trace_id"] = format(trace_id, "032x")
        span_id = record.span_id
        if span_id and type(span_id) is int and "span_id" not in event:
            event["span_id"] = format(span_id, "016x")
    if resource is not None:
        for key, value in _resource_fields(resource, {} if cache is None else cache).items():
            if key not in event:
                event[key] = value
                size += FIELD_SIZE
    return event, size


def _careful_event(record: Any, resource: Any, scope: Any,
                   cache: Cache) -> tuple[dict[str, Any], int]:
    # A record of an odd shape (an SDK we do not know, a stub): attribute by attribute.
    class _Record:
        def __getattr__(self, name: str) -> Any:
            try:
                return getattr(record, name)
            except Exception:
                return None

    try:
        return otel_event(_Record(), resource, scope, cache)
    except Exception:
        return {"_time": time.time(), "level": "info", RECORD: True,
                "message": "<an OpenTelemetry log record loghandler could not read>"}, 600


@documented(("Client arguments (keyword; each falls back to its environment variable):",
             CLIENT_ARGS_DOC),
            ('Shipping options (keyword; docs/configuration.md: why each default):',
             SHIPPING_OPTIONS_DOC.rstrip() + "\n" + SEND_DOC))
class IngestLogRecordProcessor(FrontEnd):
    """An OpenTelemetry SDK log record processor that ships through loghandler's engine.

    ``provider.add_log_record_processor(IngestLogRecordProcessor("my-dataset"))``. Each record
    is mapped onto the event shape (``loghandler.opentelemetry`` says how) and queued: no I/O on the
    caller's thread. ``force_flush(timeout_millis)`` and ``shutdown()`` keep their timeouts
    (``shutdown`` takes at most ``shutdown_timeout``), and the engine's exit hook delivers what
    is queued at exit even when nobody calls ``shutdown``.

    Args:
        dataset (str | None): the dataset to ship to. Default: ``LOGHANDLER_DATASET``.
        client (Client | None): a ``Client`` to ship through, instead of the Client arguments.
        shipper (Shipper | None): a ``Shipper`` to share with other front ends, instead of
            ``dataset``, ``client`` and the options; it is flushed, not closed, by
            ``shutdown()``.

    Raises:
        ConfigurationError: a missing token, address or dataset, an unknown option (with a
            suggestion), an invalid value.
    """

    __slots__ = ("_fast_path", "_resources")

    def _refresh(self) -> None:
        self._fast_path = self._wire_path()

    def __init__(self, dataset: str | None = None, *, client: Client | None = None,
                 shipper: Shipper | None = None, **options: Unpack[FrontEndOptions]) -> None:
        self._attach(dataset, client, shipper, dict(options))
        self._resources: Cache = {}
        # The compiled fast path (its events queued as their final JSON), or None.
        self._fast_path = self._wire_path()

    def on_emit(self, log_record: Any) -> None:
        """The SDK's call (1.35 and later): ``log_record`` is a ``ReadWriteLogRecord``."""
        self._put(log_record)

    def _put(self, log_record: Any, sampled: bool | None = None) -> None:
        """``on_emit``'s work. ``sampled``: None from ``on_emit`` (the compiled reading is
        tried first); else the compiled path hands the record here (True: its sampling kept
        it already)."""
        try:
            record = getattr(log_record, "log_record", log_record)
            resource = getattr(log_record, "resource", None) or getattr(record, "resource", None)
            scope = getattr(log_record, "instrumentation_scope", None)
            if self._own_logging(getattr(scope, "name", None)):
                return
            fast = self._fast_path
            if fast is not None and sampled is None and _otel_put is not None:
                # The compiled reading of the record (otel_event's twin), queued as its final
                # JSON; False: a record of its careful steps, read below.
                fields = _resource_fields(resource, self._resources) if resource is not None \
                    else None
                if _otel_put(self, log_record, record, scope, fields,
                             resource_json(resource, self._resources), fast):
                    return
            custom = self.shipper.options.json_default
            try:
                if custom is None:
                    event, size = otel_event(record, resource, scope, self._resources)
                else:
                    with using_default(custom):
                        event, size = otel_event(record, resource, scope, self._resources)
            except Exception:
                event, size = _careful_event(record, resource, scope, self._resources)
            # The record carries its own span: only a loghandler.context is looked up.
            self._queue(event, size, _NUMBER.get(event["level"], 20), False, bool(sampled))
        except Exception:
            self._invalid()

    def emit(self, log_data: Any) -> None:
        """The SDK's call before 1.35: ``log_data`` is a ``LogData``."""
        self.on_emit(log_data)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Send what is queued; True when all of it was delivered within the timeout."""
        return self.shipper.flush(max(0.0, timeout_millis / 1000.0))

    def shutdown(self) -> None:
        """Deliver what is queued (within ``shutdown_timeout``) and stop; idempotent."""
        self.close()

    def __repr__(self) -> str:
        return f"<IngestLogRecordProcessor dataset={shown(self.shipper.dataset)}>"
