"""OpenTelemetry logs through loghandler's engine: ``IngestLogRecordProcessor``.

``LoggerProvider.add_log_record_processor(IngestLogRecordProcessor("my-dataset"))`` gives an
application instrumented with OpenTelemetry's SDK (its ``LoggingHandler``, its log bridges)
loghandler's bounded queue, spool and bounded exit, with OpenTelemetry's data model mapped
onto the event shape:

- ``_time``: the record's timestamp (else when it was observed);
- ``level``: the severity text lowercased, ``warn`` and ``fatal`` as the handler names them
  (``warning``, ``critical``), else named from the severity number;
- ``message``: the body when it is text; a mapping body gives its keys as fields, any other
  body the field ``body``;
- attributes as fields; the semantic conventions' ``exception.*`` become the ``exception``
  object ``{type, message, stacktrace}`` and ``code.*`` the ``file``, ``function`` and
  ``line`` fields, as ``IngestHandler`` ships them;
- ``trace_id`` / ``span_id`` (lowercase hex) when the record has a span;
- ``logger``: the instrumentation scope's name (OpenTelemetry's ``LoggingHandler`` names it
  after the stdlib logger); ``event_name`` when set;
- the resource: ``service.name``, ``service.version`` and ``deployment.environment`` as
  ``service``, ``version`` and ``environment``; its other attributes (but the SDK's own
  ``telemetry.sdk.*``) under ``resource``.

This module imports nothing of OpenTelemetry: the processor reads the records the SDK hands
it, whichever SDK version (``on_emit(ReadWriteLogRecord)`` since 1.35, ``emit(LogData)``
before). ``import loghandler`` does not import this module.
"""

from __future__ import annotations

from ._front.otel import IngestLogRecordProcessor, otel_event

__all__ = ["IngestLogRecordProcessor", "otel_event"]
