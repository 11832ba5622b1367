"""The front ends: thin faces over the engine, one per logging ecosystem.

    handler.py    IngestHandler              the stdlib's logging (loghandler.IngestHandler)
    processor.py  IngestProcessor            structlog (loghandler.IngestProcessor)
    sink.py       IngestSink                 loguru (loghandler.IngestSink)
    otel.py       IngestLogRecordProcessor   OpenTelemetry's log SDK
                                             (loghandler.opentelemetry.IngestLogRecordProcessor)
    base.py       FrontEnd                   what they share: the shipper they own or share,
                                             queueing a built event (context, hold-until-error,
                                             the ledger's intake), flush / close / stats

Each turns its ecosystem's record into an event (``_engine/events.py`` and its tables) and hands
it to the shipper's public faces: ``Shipper.intake`` (the ledger's intake face), ``Shipper.hold``
and ``Shipper.item_plan()``; nothing here reaches into the engine's private state. The compiled
path is ``_engine/compiled.py``'s decision, read as it stands; what a front end hands the C code
is ``_engine/fastpath.py``'s ``FastPath``. The public import paths are the
package's own (``loghandler.IngestHandler``, ``loghandler.opentelemetry``); nothing is imported
here, so that importing one front end never imports another's ecosystem.
"""
