"""The compiled paths of structlog's processor, loguru's sink and the OpenTelemetry processor
against their Python paths (tests/test_speedups.py does the same for the handler).

Each front end runs beside a twin whose compiled path is turned off (``_wire_path`` gives none:
its Python path, the reference, runs); both get the very same events, and what each queues
ships as the same bytes: the wire items the compiled calls write on the caller's thread are
the JSON the flusher makes of the Python path's event dicts (the context's fields, the span's
ids, fields=, exclusions and field_names included).
"""

from __future__ import annotations

import json
import logging
import os
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_speedups import (
    CONTEXTS,
    PARKED,
    PLAIN_VALUES,
    SPANS,
    WIRE_SHIPPERS,
    caller_context,
    shipped,
)

from loghandler import IngestProcessor, IngestSink
from loghandler._engine import compiled as _compiled

PURE = os.environ.get("LOGHANDLER_PURE_PYTHON", "") not in ("", "0")


class PythonProcessor(IngestProcessor):
    """The processor with its Python path only (the reference)."""

    def _wire_path(self) -> None:
        return None


class PythonSink(IngestSink):
    def _wire_path(self) -> None:
        return None


def last(front: Any) -> Any:
    return front.shipper.intake.queue[-1]


def same_shipped(a: Any, fa: Any, b: Any, fb: Any, now: bool = False) -> None:
    """Equal bytes; ``now``: the events' _time is "now" (taken twice, a moment apart): equal
    but for it, in the same order."""
    x, y = shipped(a, fa), shipped(b, fb)
    if not now:
        assert x == y
        return
    ex, ey = json.loads(x), json.loads(y)
    assert list(ex) == list(ey)
    ex.pop("_time", None)
    ey.pop("_time", None)
    assert ex == ey


@pytest.fixture(scope="module")
def processors() -> Iterator[dict[str, tuple[IngestProcessor, IngestProcessor]]]:
    opts = {k: v for k, v in PARKED.items()}
    made = {name: (IngestProcessor("ds", **opts, **o), PythonProcessor("ds", **opts, **o))
            for name, o in WIRE_SHIPPERS.items()}
    yield made
    for pair in made.values():
        for p in pair:
            p.close()


STRUCTLOG_KEYS = st.one_of(st.text(min_size=1, max_size=8), st.sampled_from(
    ["event", "level", "logger", "timestamp", "_time", "trace_id", "span_id", "message",
     "host", "region", "request_id", "password", "module", "exc_info", "é", "a\"b"]))
STAMPS = st.one_of(st.none(), st.just("2024-05-01T12:00:00.123456Z"),
                   st.just("2024-05-01T12:00:00+02:00"), st.floats(0, 2e9), st.just(17))


@settings(max_examples=700, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(event=st.dictionaries(STRUCTLOG_KEYS, PLAIN_VALUES, max_size=7), stamp=STAMPS,
       method=st.sampled_from(["info", "warning", "warn", "exception", "msg", "notice"]),
       contexts=CONTEXTS, span=SPANS, shipper=st.sampled_from(sorted(WIRE_SHIPPERS)))
def test_processor_ships_what_its_python_path_ships(
        processors: dict[str, tuple[IngestProcessor, IngestProcessor]],
        event: dict[str, Any], stamp: Any, method: str, contexts: list[dict[str, Any]],
        span: tuple[int, int] | None, shipper: str) -> None:
    """structlog event dicts of every shape (a timestamp in the form, in another, none; a
    level or none; clashing keys; exc_info): the compiled call queues what ships as the
    Python path's event does, and returns the event dict unchanged."""
    fast, twin = processors[shipper]
    if stamp is not None:
        event["timestamp"] = stamp
    before = dict(event)
    with caller_context(contexts, span):
        assert fast(None, method, event) is event
        assert event == before
        a = last(fast)
        assert twin(None, method, dict(event)) == before
        b = last(twin)
    same_shipped(a, fast, b, twin, now="_time" not in event and stamp is None)


def test_processor_queues_wire_items(
        processors: dict[str, tuple[IngestProcessor, IngestProcessor]]) -> None:
    """structlog's usual event (a level, an ISO timestamp) is queued as its final JSON."""
    fast, _ = processors["defaults"]
    fast(None, "info", {"event": "paid", "level": "info", "user": 7,
                        "timestamp": "2024-05-01T12:00:00.123456Z"})
    item = last(fast)
    assert (type(item) is bytes) is (not PURE)
    assert json.loads(shipped(item, fast))["_time"] == "2024-05-01T12:00:00.123456Z"


LOGURU_LEVELS = ["DEBUG", "INFO", "SUCCESS", "WARNING", "ERROR", "CRITICAL"]


@pytest.fixture(scope="module")
def loguru_sinks() -> Iterator[Any]:
    loguru = pytest.importorskip("loguru")
    logger = loguru.logger
    made = {}
    ids = []
    for name, o in WIRE_SHIPPERS.items():
        pair = (IngestSink("ds", **PARKED, **o), PythonSink("ds", **PARKED, **o))
        made[name] = pair
    yield logger, made, ids
    for pair in made.values():
        for s in pair:
            s.close()


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(extra=st.dictionaries(STRUCTLOG_KEYS, PLAIN_VALUES, max_size=5),
       level=st.sampled_from(LOGURU_LEVELS), text=st.text(max_size=20), contexts=CONTEXTS,
       span=SPANS, shipper=st.sampled_from(sorted(WIRE_SHIPPERS)))
def test_sink_ships_what_its_python_path_ships(
        loguru_sinks: Any, extra: dict[str, Any], level: str, text: str,
        contexts: list[dict[str, Any]], span: tuple[int, int] | None, shipper: str) -> None:
    """loguru records (bound extras of every kind, its own levels): the compiled sink queues
    what ships as the Python path's event does."""
    logger, made, _ = loguru_sinks
    fast, twin = made[shipper]
    logger.remove()
    logger.add(fast, level="DEBUG")
    logger.add(twin, level="DEBUG")
    try:
        with caller_context(contexts, span):
            logger.bind(**extra).log(level, "{}", text)
        same_shipped(last(fast), fast, last(twin), twin)
    finally:
        logger.remove()


def otel_pair(**o: Any) -> tuple[Any, Any, Any]:
    """A provider feeding a compiled IngestLogRecordProcessor and its Python twin."""
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk._logs import LoggerProvider

    from loghandler.opentelemetry import IngestLogRecordProcessor

    class PythonOtel(IngestLogRecordProcessor):
        def _wire_path(self) -> None:
            return None

    provider = LoggerProvider()
    fast = IngestLogRecordProcessor("ds", **PARKED, **o)
    twin = PythonOtel("ds", **PARKED, **o)
    provider.add_log_record_processor(fast)
    provider.add_log_record_processor(twin)
    return provider, fast, twin


@pytest.fixture(scope="module")
def otel_pairs() -> Iterator[dict[str, tuple[Any, Any, Any]]]:
    made = {name: otel_pair(**o) for name, o in WIRE_SHIPPERS.items()}
    yield made
    for _, fast, twin in made.values():
        fast.shutdown()
        twin.shutdown()


OTEL_KEYS = st.one_of(st.text(min_size=1, max_size=8), st.sampled_from(
    ["code.filepath", "code.function", "code.lineno", "code.file.path", "exception.type",
     "level", "message", "logger", "trace_id", "host", "service", "region", "password"]))


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(attributes=st.dictionaries(OTEL_KEYS, st.one_of(
           PLAIN_VALUES, st.lists(st.integers(), max_size=2)), max_size=5),
       body=st.one_of(st.none(), st.text(max_size=20), st.integers(), st.just({"k": "v"})),
       text=st.one_of(st.none(), st.sampled_from(["INFO", "Warn", "fatal", "notice", ""])),
       number=st.one_of(st.none(), st.integers(0, 30)),
       ids=st.one_of(st.none(), st.tuples(st.integers(1, 2**128 - 1),
                                          st.integers(1, 2**64 - 1))),
       stamp=st.one_of(st.none(), st.just(0), st.integers(10**18, 2 * 10**18)),
       event_name=st.one_of(st.none(), st.just(""), st.just("user.login")),
       contexts=CONTEXTS, shipper=st.sampled_from(sorted(WIRE_SHIPPERS)))
def test_otel_processor_ships_what_its_python_path_ships(
        otel_pairs: dict[str, tuple[Any, Any, Any]], attributes: dict[str, Any], body: Any,
        text: Any, number: Any, ids: Any, stamp: Any, event_name: Any,
        contexts: list[dict[str, Any]], shipper: str) -> None:
    """OpenTelemetry log records of every shape (bodies, severities by text and by number,
    code and exception attributes, their own span, a resource with attributes of its own):
    the compiled reading queues what ships as otel_event's event does."""
    from opentelemetry._logs import LogRecord, SeverityNumber
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, set_span_in_context

    provider, fast, twin = otel_pairs[shipper]
    context = None
    if ids is not None:
        context = set_span_in_context(NonRecordingSpan(SpanContext(
            trace_id=ids[0], span_id=ids[1], is_remote=False, trace_flags=TraceFlags(1))))
    severity = None if number is None else next(
        (s for s in SeverityNumber if s.value == number), None)
    record = LogRecord(timestamp=stamp, observed_timestamp=10**18, context=context,
                       severity_text=text, severity_number=severity, body=body,
                       attributes=attributes or None, event_name=event_name)
    with caller_context(contexts, None), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        provider.get_logger("scope.name").emit(record)
    same_shipped(last(fast), fast, last(twin), twin)


def test_otel_processor_queues_wire_items(otel_pairs: dict[str, tuple[Any, Any, Any]]) -> None:
    """A record from logging through LoggingHandler, as OpenTelemetry's SDK makes it, is queued
    as its final JSON, its resource's attributes in it."""
    from opentelemetry.sdk._logs import LoggingHandler

    provider, fast, twin = otel_pairs["defaults"]
    log = logging.getLogger("otel.fronts")
    log.propagate = False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        log.handlers[:] = [LoggingHandler(logger_provider=provider)]
    log.setLevel(logging.INFO)
    log.info("user %s logged in", 7, extra={"request_id": "r-1"})
    item = last(fast)
    assert (type(item) is bytes) is (_compiled.otel_put is not None)
    event = json.loads(shipped(item, fast))
    assert event["message"] == "user 7 logged in" and event["request_id"] == "r-1"
    assert "resource" in event and event["level"] == "info"
    same_shipped(item, fast, last(twin), twin)
