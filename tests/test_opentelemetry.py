"""OpenTelemetry logs: ``IngestLogRecordProcessor`` in a real SDK ``LoggerProvider``, against
the local service: the data model mapped onto the event shape, the SDK's calls and timeouts."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
from opentelemetry.sdk.resources import Resource

from loghandler.opentelemetry import IngestLogRecordProcessor
from loghandler.testing import LocalService

# The SDK's own LoggingHandler (deprecated in favour of the instrumentation package's) is still
# the bridge most applications have.
pytestmark = pytest.mark.filterwarnings("ignore:.*LoggingHandler.*:DeprecationWarning")

TOKEN = "otel-token-7a8b"


@pytest.fixture
def pipeline(svc: LocalService) -> Iterator[Any]:
    made: list[tuple[LoggerProvider, logging.Logger, LoggingHandler]] = []

    def make(**options: Any) -> tuple[logging.Logger, IngestLogRecordProcessor]:
        provider = LoggerProvider(resource=Resource.create(
            {"service.name": "checkout", "service.version": "1.4.2",
             "deployment.environment": "prod", "team": "payments"}))
        processor = IngestLogRecordProcessor("app", url=svc.url, token=TOKEN, **options)
        provider.add_log_record_processor(processor)
        handler = LoggingHandler(level=logging.DEBUG, logger_provider=provider)
        log = logging.getLogger(f"otel.test.{len(made)}")
        log.handlers[:] = [handler]
        log.propagate = False
        log.setLevel(logging.DEBUG)
        made.append((provider, log, handler))
        return log, processor

    yield make
    for provider, _, _ in made:
        provider.shutdown()


def by_message(svc: LocalService) -> dict[str, dict[str, Any]]:
    return {e.get("message"): e for e in svc.events("app")}


def span(trace_id: int, span_id: int) -> Any:
    ctx = trace.SpanContext(trace_id=trace_id, span_id=span_id, is_remote=False,
                            trace_flags=trace.TraceFlags(1))
    return trace.use_span(trace.NonRecordingSpan(ctx), end_on_exit=False)


class TestMapping:
    def test_body_severity_attributes_resource_scope(self, svc, pipeline):
        """Body → message, severity → level, attributes → fields, resource and scope mapped."""
        log, proc = pipeline()
        log.warning("card declined", extra={"order_id": "A-17", "amount": 12.5})
        assert proc.force_flush(5000)
        e = by_message(svc)["card declined"]
        assert e["level"] == "warning" and e["order_id"] == "A-17" and e["amount"] == 12.5
        assert e["service"] == "checkout" and e["version"] == "1.4.2"
        assert e["environment"] == "prod" and e["resource"]["team"] == "payments"
        assert e["logger"] == log.name
        assert e["function"] == "test_body_severity_attributes_resource_scope"
        assert isinstance(e["line"], int) and e["file"].endswith("test_opentelemetry.py")
        assert not any(k.startswith("telemetry.sdk") for k in e.get("resource", {}))

    def test_trace_and_span_ids(self, svc, pipeline):
        """The record's span gives trace_id and span_id in lowercase hex."""
        log, proc = pipeline()
        with span(0x4BF92F3577B34DA6A3CE929D0E0E4736, 0x00F067AA0BA902B7):
            log.info("in a span")
        log.info("no span")
        assert proc.force_flush(5000)
        events = by_message(svc)
        assert events["in a span"]["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736"
        assert events["in a span"]["span_id"] == "00f067aa0ba902b7"
        assert "trace_id" not in events["no span"]

    def test_exception_object(self, svc, pipeline):
        """exception.* attributes become the {type, message, stacktrace} object."""
        log, proc = pipeline()
        try:
            raise KeyError("missing")
        except KeyError:
            log.exception("lookup failed")
        assert proc.force_flush(5000)
        exc = by_message(svc)["lookup failed"]["exception"]
        assert exc["type"] == "KeyError" and "missing" in exc["message"]
        assert "raise KeyError" in exc["stacktrace"]

    def test_structured_body_and_otel_logger_api(self, svc):
        """A mapping body gives its keys as fields; an event name and a numeric severity."""
        from opentelemetry._logs import SeverityNumber

        try:
            from opentelemetry._logs import LogRecord  # the API's record (SDK 1.35 and later)
        except ImportError:  # older SDKs
            from opentelemetry.sdk._logs import LogRecord  # type: ignore[no-redef]

        provider = LoggerProvider()
        proc = IngestLogRecordProcessor("app", url=svc.url, token=TOKEN)
        provider.add_log_record_processor(proc)
        otel_logger = provider.get_logger("billing", "2.0")
        otel_logger.emit(LogRecord(timestamp=time.time_ns(), body={"invoice": 9, "paid": True},
                                   severity_number=SeverityNumber.ERROR,
                                   attributes={"region": "eu"}, event_name="invoice.paid"))
        assert proc.force_flush(5000)
        provider.shutdown()
        (e,) = svc.events("app")
        assert e["invoice"] == 9 and e["paid"] is True and e["region"] == "eu"
        assert e["level"] == "error" and e["logger"] == "billing"
        assert e["event_name"] == "invoice.paid"


class TestEngine:
    def test_stats_and_accounting(self, svc, pipeline):
        log, proc = pipeline()
        for i in range(100):
            log.info("n %d", i)
        assert proc.force_flush(5000)
        st = proc.stats()
        assert st.delivered == 100 and st.submitted == 100

    def test_shutdown_honours_its_bound(self):
        """Service down: shutdown() returns within shutdown_timeout, the events counted."""
        provider = LoggerProvider()
        proc = IngestLogRecordProcessor("app", url="http://127.0.0.1:9", token=TOKEN,
                                        shutdown_timeout=1.0, max_retries=1)
        provider.add_log_record_processor(proc)
        handler = LoggingHandler(logger_provider=provider)
        log = logging.getLogger("otel.down")
        log.handlers[:] = [handler]
        log.propagate = False
        log.warning("nobody listens")
        assert proc.force_flush(200) is False  # the timeout is kept, not ignored
        started = time.monotonic()
        provider.shutdown()
        assert time.monotonic() - started < 2.5
        st = proc.stats()
        assert st.submitted == 1 and st.delivered == 0 and st.dropped + st.failed == 1

    def test_spool_when_down(self, tmp_path):
        proc = IngestLogRecordProcessor("app", url="http://127.0.0.1:9", token=TOKEN,
                                        spool_dir=str(tmp_path), max_retries=0,
                                        shutdown_timeout=2)
        provider = LoggerProvider()
        provider.add_log_record_processor(proc)
        log = logging.getLogger("otel.spool")
        log.handlers[:] = [LoggingHandler(logger_provider=provider)]
        log.propagate = False
        for i in range(10):
            log.warning("offline %d", i)
        provider.shutdown()
        assert proc.stats().spooled == 10


def test_import_loghandler_never_imports_opentelemetry():
    code = ("import sys, loghandler; "
            "print([m for m in sys.modules if m.startswith('opentelemetry')])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert out.strip() == "[]"


def test_exit_delivers_without_shutdown(svc):
    """An application that never calls shutdown(): the engine's exit hook delivers."""
    code = textwrap.dedent(f"""
        import logging
        from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
        from loghandler.opentelemetry import IngestLogRecordProcessor
        provider = LoggerProvider()
        provider.add_log_record_processor(
            IngestLogRecordProcessor("app", url={svc.url!r}, token={TOKEN!r}))
        log = logging.getLogger("exit")
        log.addHandler(LoggingHandler(logger_provider=provider))
        log.setLevel(logging.INFO)
        for i in range(300):
            log.info("bye %d", i)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert len(svc.events("app")) == 300
