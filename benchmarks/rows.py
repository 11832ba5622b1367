"""The rows of the benchmark table: one way each of turning the benchmark's call into shipping.

A row is built inside the child process. ``log(i)`` is the application's call; ``flush(t)`` asks
the row to deliver what it holds, the way its users would; ``stats()`` is what the row counts of
itself; ``delivered()`` is set for rows whose delivery is not seen by the receiver.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

ROWS = ("null", "queue", "copy", "ingest", "ingest-nogzip", "ingest-fields", "ingest-context",
        "ingest-after", "ingest-span", "ingest-sampling", "ingest-hold", "ingest-repeat",
        "ingest-policies", "ingest-names", "ingest-bare", "structlog", "processor", "otel",
        "otel-nothing", "otel-ingest", "loguru", "loguru-sink", "logtail")
SHIPPING = ("ingest", "ingest-nogzip", "processor", "otel", "otel-ingest", "loguru-sink",
            "logtail")
# Variants of the ingest row (issue 16): measured in scenarios 1 and 2 only, beside it.
VARIANTS = ("ingest-fields", "ingest-context", "ingest-after", "ingest-span", "ingest-sampling",
            "ingest-hold", "ingest-repeat", "ingest-policies", "ingest-names", "ingest-bare")
# Each row's floor: the same call into the same ecosystem, nothing shipped (issue 36 pairs every
# row with it). Floors have nothing to deliver: scenario 2 reports their call rate.
FLOOR = {"processor": "structlog", "loguru-sink": "loguru", "otel-ingest": "otel-nothing"}
FLOORS = ("null", "structlog", "loguru", "otel-nothing")
LABELS = {
    "null": "logging.NullHandler (floor)",
    "queue": "stdlib QueueHandler + QueueListener (floor)",
    "copy": "copy + JSON on a thread, nothing else (floor of any shipper)",
    "ingest": "loghandler IngestHandler (gzip)",
    "ingest-nogzip": "loghandler IngestHandler (compression=None)",
    "ingest-fields": "loghandler IngestHandler, fields= of four keys",
    "ingest-context": "loghandler IngestHandler in a loghandler.context of two keys",
    "ingest-after": "loghandler IngestHandler, a context entered before, now outside it",
    "ingest-sampling": "loghandler IngestHandler, sampling (info at 0.5)",
    "ingest-hold": "loghandler IngestHandler, hold-until-error inside a context (held)",
    "ingest-repeat": "loghandler IngestHandler, repeat suppression",
    "ingest-names": "loghandler IngestHandler, field_names",
    "ingest-span": "loghandler IngestHandler in an OpenTelemetry span",
    "ingest-bare": "loghandler IngestHandler, scrub=False, identity=False",
    "ingest-policies": "loghandler IngestHandler, every policy at once, inside a context",
    "structlog": "structlog's chain, ending in a processor that drops the event (floor)",
    "processor": "loghandler IngestProcessor (structlog)",
    "otel": "OpenTelemetry LoggingHandler + BatchLogRecordProcessor + OTLP/HTTP",
    "otel-nothing": "OpenTelemetry LoggingHandler, a processor that does nothing (floor)",
    "otel-ingest": "OpenTelemetry LoggingHandler + loghandler IngestLogRecordProcessor",
    "loguru": "loguru with a sink that does nothing (floor)",
    "loguru-sink": "loguru + loghandler IngestSink",
    "logtail": "logtail-python LogtailHandler",
}
# Precomputed so that building the arguments costs every row the same, and almost nothing.
REQUEST_IDS = [f"req-{i:08x}-{(i * 2654435761) % 2**32:08x}" for i in range(1024)]


_KEEP: list[Any] = []


class Unavailable(Exception):
    """The row's library is not installed: skipped with this reason."""


@dataclass
class Row:
    name: str
    log: Callable[[int], None]
    flush: Callable[[float], Any] = lambda timeout: None
    stats: Callable[[], dict[str, Any]] = dict
    delivered: Callable[[], int] | None = None  # rows delivering to something else
    options: dict[str, Any] = field(default_factory=dict)
    # How many of ``calls`` events are to arrive (after flush): all, but what a policy drops
    # or holds as configured (counted in stats()).
    expected: Callable[[int], int] = lambda calls: calls


def _stdlib_logger(handler: logging.Handler, name: str) -> Callable[[int], None]:
    logger = logging.getLogger(f"bench.{name}")
    if logger.handlers:  # a floor paired with itself in one process: a logger of its own
        logger = logging.getLogger(f"bench.{name}-floor")
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(logging.INFO)
    info = logger.info
    ids = REQUEST_IDS

    def log(i: int) -> None:
        info("user %s logged in", i, extra={"request_id": ids[i & 1023],
                                             "latency_ms": (i * 0.25) % 500})

    return log


def _null(base: str, opts: dict[str, Any]) -> Row:
    return Row("null", _stdlib_logger(logging.NullHandler(), "null"))


class _Counting(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def handle(self, record: logging.LogRecord) -> bool:
        self.count += 1  # only the listener's thread calls this
        return True


def _queue(base: str, opts: dict[str, Any]) -> Row:
    import queue
    from logging.handlers import QueueHandler, QueueListener

    q: queue.SimpleQueue[Any] = queue.SimpleQueue()
    sink = _Counting()
    listener = QueueListener(q, sink)
    listener.start()
    return Row("queue", _stdlib_logger(QueueHandler(q), "queue"), delivered=lambda: sink.count)


class _CopyFloor(logging.Handler):
    """The least any shipper in Python can do, to compare against: copy the record's fields
    (extras too, by reference) on the caller's thread; on another thread, build each event and
    encode the batch. No timestamps or levels formatted, no checks, bounds, counts, gzip or
    HTTP: every one of those is work a real shipper adds to this."""

    KEYS = ("_time", "level", "message", "logger", "module", "function", "line", "file",
            "process", "thread")
    N_INIT = len(logging.LogRecord("", 0, "", 0, "", (), None).__dict__)

    def __init__(self) -> None:
        import collections
        import threading

        super().__init__()
        self.queue: Any = collections.deque()
        self.count = 0
        self.wake = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def handle(self, record: logging.LogRecord) -> bool:
        d = record.__dict__
        q = self.queue
        q.append(((d["created"], d["levelname"], d["msg"] % d["args"], d["name"], d["module"],
                   d["funcName"], d["lineno"], d["pathname"], d["process"], d["threadName"]),
                  list(islice(d.items(), self.N_INIT, None))))
        if len(q) >= 5000:
            self.wake.set()
        return True

    def _run(self) -> None:
        try:
            from orjson import dumps
        except ImportError:
            from json import dumps  # type: ignore[assignment]
        keys, q = self.KEYS, self.queue
        while True:
            self.wake.wait(0.05)
            self.wake.clear()
            while q:
                popleft = q.popleft
                batch = []
                for _ in range(min(len(q), 5000)):
                    fields, extras = popleft()
                    event = dict(zip(keys, fields, strict=True))
                    event.update(extras)
                    batch.append(event)
                dumps(batch)
                self.count += len(batch)


def _copy(base: str, opts: dict[str, Any]) -> Row:
    handler = _CopyFloor()
    return Row("copy", _stdlib_logger(handler, "copy"), delivered=lambda: handler.count)


def _ingest_options(opts: dict[str, Any], **more: Any) -> dict[str, Any]:
    out = {k: v for k, v in opts.items() if v is not None}
    out.update(more)
    return out


def _stats(obj: Any) -> Callable[[], dict[str, Any]]:
    import dataclasses

    return lambda: dataclasses.asdict(obj.stats())


def _ingest(base: str, opts: dict[str, Any], **more: Any) -> Row:
    import loghandler

    options = _ingest_options(opts, **more)
    handler = loghandler.IngestHandler("bench", token="bench-token", url=base, **options)
    return Row("ingest", _stdlib_logger(handler, "ingest"), flush=handler.flush,
               stats=_stats(handler), options=dict(handler.shipper.options.__dict__))


def _ingest_nogzip(base: str, opts: dict[str, Any]) -> Row:
    row = _ingest(base, opts, compression=None)
    row.name = "ingest-nogzip"
    return row


def _ingest_fields(base: str, opts: dict[str, Any]) -> Row:
    row = _ingest(base, opts, fields={"service": "checkout", "env": "prod", "version": "1.4.2",
                                      "host": "web-7"})
    row.name = "ingest-fields"
    return row


def _ingest_context(base: str, opts: dict[str, Any]) -> Row:
    import loghandler

    row = _ingest(base, opts)
    row.name = "ingest-context"
    # Entered for good on the thread that makes the calls (scenarios 1 and 2: one thread).
    loghandler.context(user_id=7, tenant="acme").__enter__()
    return row


def _ingest_after(base: str, opts: dict[str, Any]) -> Row:
    import loghandler

    row = _ingest(base, opts)
    row.name = "ingest-after"
    with loghandler.context(user_id=7, tenant="acme"):
        pass  # entered once: every later call is made outside any context
    return row


def _dropped(row: Row, *reasons: str) -> Callable[[int], int]:
    stats = row.stats
    return lambda calls: calls - sum(stats().get(reason, 0) for reason in reasons)


def _ingest_sampling(base: str, opts: dict[str, Any]) -> Row:
    row = _ingest(base, opts, sample_levels={"debug": 0.1, "info": 0.5},
                  sample_loggers={"noisy": 0.5})
    row.name = "ingest-sampling"
    row.expected = _dropped(row, "dropped_sampled")
    return row


def _ingest_hold(base: str, opts: dict[str, Any]) -> Row:
    import loghandler

    # Every call is held (info, inside a context, hold_level="info"), the buffers large
    # enough that none is dropped: the cost of holding. Nothing is delivered while the context
    # lasts: scenario 2 reports the call rate.
    row = _ingest(base, opts, hold_level="info", hold_size=10**6, hold_total=10**6)
    row.name = "ingest-hold"
    loghandler.context(user_id=7, tenant="acme").__enter__()
    row.expected = lambda calls: 0
    return row


def _ingest_repeat(base: str, opts: dict[str, Any]) -> Row:
    row = _ingest(base, opts, repeat_limit=100)  # every call's message differs: none dropped
    row.name = "ingest-repeat"
    return row


def _ingest_names(base: str, opts: dict[str, Any]) -> Row:
    row = _ingest(base, opts, field_names={"message": "msg", "level": "severity",
                                           "logger": "logger.name"})
    row.name = "ingest-names"
    return row


def _ingest_bare(base: str, opts: dict[str, Any]) -> Row:
    # The defaults scrub secrets and add the sender's identity on the flusher thread: this row
    # is the engine without them (what the ingest row measured before they existed).
    row = _ingest(base, opts, scrub=False, identity=False)
    row.name = "ingest-bare"
    return row


def _ingest_policies(base: str, opts: dict[str, Any]) -> Row:
    # Every policy configured, none of them dropping the benchmark's events (each call's
    # message differs, nothing is sampled out, no context holds).
    import loghandler

    row = _ingest(base, opts, sample_levels={"debug": 0.1}, sample_loggers={"noisy": 0.5},
                  repeat_limit=100, exclude_fields=["module", "function", "file"],
                  hold_level="debug", scrub_keys=["patient_id"])
    row.name = "ingest-policies"
    # Inside a context (entered after the shipper exists, so that hold sees it): hold's level
    # test runs for every call, and passes it.
    loghandler.context(user_id=7, tenant="acme").__enter__()
    return row


def _ingest_span(base: str, opts: dict[str, Any]) -> Row:
    try:
        from opentelemetry import trace
    except ImportError as exc:
        raise Unavailable(f"opentelemetry-api not installed ({exc})") from None
    row = _ingest(base, opts)
    row.name = "ingest-span"
    span = trace.NonRecordingSpan(trace.SpanContext(
        trace_id=0x4BF92F3577B34DA6A3CE929D0E0E4736, span_id=0x00F067AA0BA902B7,
        is_remote=False, trace_flags=trace.TraceFlags(1)))
    active = trace.use_span(span)
    active.__enter__()
    _KEEP.append(active)  # a generator dropped unfinished would leave the span at once
    return row


def _structlog(base: str, opts: dict[str, Any], processor: Any = None) -> Row:
    try:
        import structlog
    except ImportError as exc:
        raise Unavailable(f"structlog not installed ({exc})") from None

    def drop(logger: Any, method: str, event_dict: Any) -> Any:
        raise structlog.DropEvent

    # structlog's default chain, with the ISO stamper its docs advise for JSON; the floor ends
    # in a processor that drops the event, IngestProcessor goes before it.
    procs: list[Any] = [structlog.contextvars.merge_contextvars,
                        structlog.processors.add_log_level,
                        structlog.processors.StackInfoRenderer(), structlog.dev.set_exc_info,
                        structlog.processors.TimeStamper(fmt="iso", utc=True)]
    if processor is not None:
        procs.append(processor)
    procs.append(drop)
    log_ = structlog.wrap_logger(structlog.ReturnLogger(), processors=procs,
                                 wrapper_class=structlog.make_filtering_bound_logger(logging.INFO))
    info = log_.info
    ids = REQUEST_IDS

    def log(i: int) -> None:
        info("user logged in", user=i, request_id=ids[i & 1023], latency_ms=(i * 0.25) % 500)

    return Row("structlog", log)


def _processor(base: str, opts: dict[str, Any]) -> Row:
    import loghandler

    proc = loghandler.IngestProcessor("bench", token="bench-token", url=base,
                                      **_ingest_options(opts))
    row = _structlog(base, opts, proc)
    row.name, row.flush, row.stats = "processor", proc.flush, _stats(proc)
    return row


def _otel(base: str, opts: dict[str, Any]) -> Row:
    try:
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
        from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
        from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
    except ImportError as exc:
        raise Unavailable(f"opentelemetry-sdk / opentelemetry-exporter-otlp-proto-http not "
                          f"installed ({exc})") from None
    provider = LoggerProvider()
    provider.add_log_record_processor(
        BatchLogRecordProcessor(OTLPLogExporter(endpoint=base + "/v1/logs")))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        handler = LoggingHandler(logger_provider=provider)
    return Row("otel", _stdlib_logger(handler, "otel"),
               flush=lambda t: provider.force_flush(int(t * 1000)))


class _Nothing:
    """An OpenTelemetry log record processor that does nothing (the floor of otel-ingest)."""

    def on_emit(self, record: Any) -> None:
        pass

    def emit(self, record: Any) -> None:
        pass

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 0) -> bool:
        return True


def _otel_nothing(base: str, opts: dict[str, Any]) -> Row:
    try:
        from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
    except ImportError as exc:
        raise Unavailable(f"opentelemetry-sdk not installed ({exc})") from None
    provider = LoggerProvider()
    provider.add_log_record_processor(_Nothing())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        handler = LoggingHandler(logger_provider=provider)
    return Row("otel-nothing", _stdlib_logger(handler, "otel-nothing"))


def _otel_ingest(base: str, opts: dict[str, Any]) -> Row:
    try:
        from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
    except ImportError as exc:
        raise Unavailable(f"opentelemetry-sdk not installed ({exc})") from None
    from loghandler.opentelemetry import IngestLogRecordProcessor

    provider = LoggerProvider()
    proc = IngestLogRecordProcessor("bench", token="bench-token", url=base,
                                    **_ingest_options(opts))
    provider.add_log_record_processor(proc)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        handler = LoggingHandler(logger_provider=provider)
    return Row("otel-ingest", _stdlib_logger(handler, "otel-ingest"), flush=proc.flush,
               stats=_stats(proc))


def _loguru(base: str, opts: dict[str, Any], sink: Any = None) -> Row:
    try:
        from loguru import logger as root
    except ImportError as exc:
        raise Unavailable(f"loguru not installed ({exc})") from None
    import copy

    # loguru has one global logger: a row and its floor in one process (scenarios 1 and 2)
    # would share its sinks. Its documented way to independent loggers: remove the handlers,
    # then a deep copy each, with its own sinks.
    root.remove()
    logger = copy.deepcopy(root)
    logger.add(sink if sink is not None else (lambda message: None), level="INFO")
    ids = REQUEST_IDS

    def log(i: int) -> None:
        logger.bind(request_id=ids[i & 1023], latency_ms=(i * 0.25) % 500).info(
            "user {} logged in", i)

    return Row("loguru", log)


def _loguru_sink(base: str, opts: dict[str, Any]) -> Row:
    import loghandler

    sink = loghandler.IngestSink("bench", token="bench-token", url=base, **_ingest_options(opts))
    row = _loguru(base, opts, sink)
    row.name, row.flush, row.stats = "loguru-sink", sink.flush, _stats(sink)
    return row


def _logtail(base: str, opts: dict[str, Any]) -> Row:
    try:
        from logtail import LogtailHandler
    except ImportError as exc:
        raise Unavailable(f"logtail-python not installed ({exc})") from None
    handler = LogtailHandler(source_token="bench-token", host=base + "/logtail")

    def flush(timeout: float) -> None:
        if handler.flush_thread is not None:
            handler.flush_thread.flush(timeout)

    return Row("logtail", _stdlib_logger(handler, "logtail"), flush=flush,
               stats=lambda: {"dropped": handler.dropcount})


BUILDERS: dict[str, Callable[[str, dict[str, Any]], Row]] = {
    "null": _null, "queue": _queue, "copy": _copy, "ingest": _ingest,
    "ingest-nogzip": _ingest_nogzip, "ingest-fields": _ingest_fields,
    "ingest-context": _ingest_context, "ingest-span": _ingest_span,
    "ingest-after": _ingest_after, "ingest-sampling": _ingest_sampling,
    "ingest-hold": _ingest_hold, "ingest-repeat": _ingest_repeat, "ingest-names": _ingest_names,
    "ingest-bare": _ingest_bare, "ingest-policies": _ingest_policies,
    "structlog": _structlog, "processor": _processor, "otel": _otel, "logtail": _logtail,
    "otel-nothing": _otel_nothing,
    "otel-ingest": _otel_ingest, "loguru": _loguru, "loguru-sink": _loguru_sink,
}


def build(name: str, base: str, opts: dict[str, Any]) -> Row:
    return BUILDERS[name](base, opts)
