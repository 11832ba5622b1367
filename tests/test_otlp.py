"""OTLP/HTTP at ``/v1/logs`` and ``/v1/traces`` (issue 24), with OpenTelemetry's own exporters
(``opentelemetry-exporter-otlp-proto-http``: protobuf, and gzip) and the OTLP/JSON encoding.

The service's documentation: OpenTelemetry data is sent to ``/v1/logs`` and ``/v1/traces`` with
the dataset in the ``X-Axiom-Dataset`` header; spans are stored with ``trace_id``, ``span_id``,
``parent_span_id``, ``name``, ``kind``, ``duration``, ``error``, ``status.code``,
``service.name`` and ``attributes.*``.
"""

from __future__ import annotations

import gzip
import json
import logging
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind, Status, StatusCode
from test_service import TOKEN, call

from loghandler._local import otlp
from loghandler.testing import LocalService

RESOURCE = Resource.create({"service.name": "checkout", "deployment.environment": "test"})


def headers(dataset: str = "otel") -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKEN}", "X-Axiom-Dataset": dataset}


def rows(svc: LocalService, apl: str) -> list[dict[str, Any]]:
    with svc.client() as client:
        return client.query(apl)


class TestExporters:
    def test_spans_from_the_real_exporter(self, svc: LocalService) -> None:
        """A parent and a child span, with attributes, an event and an error status, arrive as
        one event each: ids in hex, the child linked to its parent, kind, duration, error."""
        exporter = OTLPSpanExporter(endpoint=f"{svc.url}/v1/traces", headers=headers())
        provider = TracerProvider(resource=RESOURCE)
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        tracer = provider.get_tracer("shop.orders", "1.2")
        with tracer.start_as_current_span("POST /orders", kind=SpanKind.SERVER) as parent:
            parent.set_attribute("http.method", "POST")
            with tracer.start_as_current_span("charge card") as child:
                child.add_event("declined", {"code": 402})
                child.set_status(Status(StatusCode.ERROR, "card declined"))
        provider.shutdown()
        got = {r["name"]: r for r in rows(svc, "['otel']")}
        assert set(got) == {"POST /orders", "charge card"}
        p, c = got["POST /orders"], got["charge card"]
        ctx = parent.get_span_context()
        assert p["trace_id"] == f"{ctx.trace_id:032x}" == c["trace_id"]
        assert p["span_id"] == f"{ctx.span_id:016x}" == c["parent_span_id"]
        assert p["kind"] == "server" and c["kind"] == "internal"
        assert p["attributes.http.method"] == "POST" and p["service.name"] == "checkout"
        assert p["resource.deployment.environment"] == "test" and p["scope.name"] == "shop.orders"
        assert p["error"] is False and p["status.code"] == "UNSET"
        assert c["error"] is True and c["status.code"] == "ERROR"
        assert c["status.message"] == "card declined"
        assert c["events"][0]["name"] == "declined" and c["events"][0]["attributes"] == {
            "code": 402}
        assert 0 < c["duration"] <= p["duration"]
        # Queried as the service's trace views query them.
        assert rows(svc, "['otel'] | where error == true | project name") == [
            {"name": "charge card"}]

    @pytest.mark.filterwarnings("ignore::DeprecationWarning")  # the SDK's own LoggingHandler
    @pytest.mark.parametrize("compression", [Compression.NoCompression, Compression.Gzip])
    def test_logs_from_the_real_exporter(self, svc: LocalService,
                                         compression: Compression) -> None:
        """Log records through the SDK's LoggingHandler: body, severity, attributes, the span
        they were logged in; gzip bodies too. The exporter is told SUCCESS."""
        exporter = OTLPLogExporter(endpoint=f"{svc.url}/v1/logs", headers=headers(),
                                   compression=compression)
        results: list[Any] = []
        export = exporter.export

        def counting_export(batch: Any) -> Any:
            results.append(export(batch))
            return results[-1]

        exporter.export = counting_export  # type: ignore[method-assign]
        provider = LoggerProvider(resource=RESOURCE)
        provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
        log = logging.getLogger("test_otlp.shop")
        log.propagate = False
        handler = LoggingHandler(level=logging.DEBUG, logger_provider=provider)
        log.addHandler(handler)
        log.setLevel(logging.DEBUG)
        tracer = TracerProvider(resource=RESOURCE).get_tracer("t")
        try:
            with tracer.start_as_current_span("request") as span:
                log.warning("card declined for order %s", 17, extra={"order_id": 17})
            log.info("done")
        finally:
            log.removeHandler(handler)
            provider.shutdown()
        assert [r.name for r in results] == ["SUCCESS", "SUCCESS"]
        got = rows(svc, "['otel'] | sort by _time asc")
        assert [r["body"] for r in got] == ["card declined for order 17", "done"]
        first = got[0]
        assert first["severity"] == "WARN" and first["severity_number"] == 13
        assert first["attributes.order_id"] == 17 and first["service.name"] == "checkout"
        assert first["trace_id"] == f"{span.get_span_context().trace_id:032x}"
        assert rows(svc, "['otel'] | where severity_number >= 13 | count") == [{"count": 1}]


class TestJson:
    REQUEST = {"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name",
                                     "value": {"stringValue": "my.service"}}]},
        "scopeSpans": [{"scope": {"name": "my.library", "version": "1.0.0"}, "spans": [{
            "traceId": "5B8EFFF798038103D269B633813FC60C", "spanId": "EEE19B7EC3C1B174",
            "parentSpanId": "EEE19B7EC3C1B173", "name": "I'm a server span",
            "startTimeUnixNano": "1544712660000000000", "endTimeUnixNano": "1544712661000000000",
            "kind": 2, "attributes": [
                {"key": "n", "value": {"intValue": "7"}},
                {"key": "tags", "value": {"arrayValue": {"values": [{"stringValue": "a"}]}}},
                {"key": "ok", "value": {"boolValue": True}}]}]}]}]}

    def test_the_specs_example(self, svc: LocalService) -> None:
        """OTLP/JSON (the specification's own example trace): hex ids lowercased, 64-bit
        integers from strings; the answer is an empty ExportTraceServiceResponse, as JSON."""
        status, body, hdrs = call(svc, "POST", "/v1/traces", raw=json.dumps(
            self.REQUEST).encode(), headers={"X-Axiom-Dataset": "otel"})
        assert (status, body) == (200, {})
        assert hdrs["Content-Type"] == "application/json"
        [row] = rows(svc, "['otel'] | where _time > datetime(2018-01-01)")
        assert row["_time"] == "2018-12-13T14:51:00Z" and row["duration"] == 1_000_000_000
        assert row["trace_id"] == "5b8efff798038103d269b633813fc60c"
        assert row["attributes.n"] == 7 and row["attributes.tags"] == ["a"]
        assert row["attributes.ok"] is True and row["kind"] == "server"

    def test_refused_events_are_a_partial_success(self) -> None:
        """Events the service turns down (here: past the dataset's field limit) are counted
        in the answer's partialSuccess, as OTLP says, not answered as taken."""
        with LocalService(token=TOKEN, max_fields=8) as svc:
            status, body, _ = call(svc, "POST", "/v1/traces", raw=json.dumps(
                self.REQUEST).encode(), headers={"X-Axiom-Dataset": "otel"})
        assert status == 200
        assert body["partialSuccess"]["rejectedSpans"] == "1"
        assert "field limit" in body["partialSuccess"]["errorMessage"]


def test_protobuf_partial_success_reads_with_the_real_messages() -> None:
    """The protobuf answer, read with OpenTelemetry's own generated messages: the spans the
    service turned down are counted in partial_success."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceResponse,
    )
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=RESOURCE)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("t")
    for i in range(3):
        with tracer.start_as_current_span(f"s{i}") as span:
            span.set_attributes({f"a{j}": j for j in range(i * 4)})
    body = encode_spans(memory.get_finished_spans()).SerializeToString()
    with LocalService(token=TOKEN, max_fields=16) as svc:
        host, port = svc.url.removeprefix("http://").rsplit(":", 1)
        import http.client

        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        conn.request("POST", "/v1/traces", body=body, headers={
            **headers(), "Content-Type": "application/x-protobuf"})
        resp = conn.getresponse()
        answer = ExportTraceServiceResponse.FromString(resp.read())
        conn.close()
        stored = {r["name"] for r in rows(svc, "['otel']")}
    assert resp.status == 200 and resp.getheader("Content-Type") == "application/x-protobuf"
    assert answer.partial_success.rejected_spans == 3 - len(stored) >= 1
    assert "field limit" in answer.partial_success.error_message and "s0" in stored


class TestBadRequests:
    @pytest.mark.parametrize("raw, said", [
        (b"\x0a\xff\xff", "runs past the end"),           # a length beyond the body
        (b"\x0f", "wire type 7"),                          # a wire type OTLP never uses
        (b"\x0a\x02\x12\x80", "varint runs past"),        # a cut varint, nested
    ])
    def test_bad_protobuf_is_a_400(self, svc: LocalService, raw: bytes, said: str) -> None:
        status, body, _ = call(svc, "POST", "/v1/logs", raw=raw, headers={
            "Content-Type": "application/x-protobuf", "X-Axiom-Dataset": "otel"})
        assert status == 400 and said in body["message"]
        assert "not an OTLP logs request" in body["message"]

    def test_deep_nesting_is_refused_not_a_crash(self, svc: LocalService) -> None:
        value: dict[str, Any] = {"stringValue": "x"}
        for _ in range(200):
            value = {"arrayValue": {"values": [value]}}
        request = {"resourceLogs": [{"scopeLogs": [{"logRecords": [
            {"body": value}]}]}]}
        status, body, _ = call(svc, "POST", "/v1/logs", raw=json.dumps(request).encode(),
                               headers={"X-Axiom-Dataset": "otel"})
        assert status == 400 and "nest deeper" in body["message"]

    def test_no_dataset_header(self, svc: LocalService) -> None:
        status, body, _ = call(svc, "POST", "/v1/logs", raw=b"{}")
        assert status == 400 and "X-Axiom-Dataset" in body["message"]

    def test_other_media_types_are_a_415(self, svc: LocalService) -> None:
        status, body, _ = call(svc, "POST", "/v1/traces", raw=b"x", headers={
            "Content-Type": "text/plain", "X-Axiom-Dataset": "otel"})
        assert status == 415 and "application/x-protobuf" in body["message"]

    def test_needs_the_token(self, svc: LocalService) -> None:
        status, _, _ = call(svc, "POST", "/v1/traces", raw=gzip.compress(b"{}"), token="nope",
                            headers={"X-Axiom-Dataset": "otel"})
        assert status == 403
        assert rows(svc, "['otel'] | count") == [{"count": 0}]

    def test_wrong_shape_json(self, svc: LocalService) -> None:
        status, body, _ = call(svc, "POST", "/v1/logs", raw=b'{"resourceLogs": {}}',
                               headers={"X-Axiom-Dataset": "otel"})
        assert status == 400 and "resourceLogs must be a JSON array" in body["message"]


def test_tail_shows_a_log_records_body(svc: LocalService) -> None:
    """`loghandler tail` reads OpenTelemetry log records as events: the severity is the level,
    the body the message."""
    import subprocess
    import sys

    request = {"resourceLogs": [{"scopeLogs": [{"logRecords": [{
        "timeUnixNano": "1714564800000000000", "severityText": "ERROR",
        "body": {"stringValue": "card declined"}}]}]}]}
    status, _, _ = call(svc, "POST", "/v1/logs", raw=json.dumps(request).encode(),
                        headers={"X-Axiom-Dataset": "otel"})
    assert status == 200
    proc = subprocess.run([sys.executable, "-m", "loghandler", "tail", "otel", "-n", "5"],
                          capture_output=True, text=True, timeout=60,
                          env={"LOGHANDLER_URL": svc.url, "LOGHANDLER_TOKEN": TOKEN,
                               "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    assert "ERROR" in proc.stdout and "card declined" in proc.stdout
    assert "body=" not in proc.stdout and "severity=" not in proc.stdout


@given(st.binary(max_size=300))
@settings(max_examples=600, deadline=None)
def test_any_bytes_are_a_request_or_an_otlp_error(body: bytes) -> None:
    """Property: whatever the bytes, the decoder gives events or OtlpError (a 400), never
    another exception (a 500) and never a crash."""
    for signal in ("logs", "traces"):
        try:
            events = otlp.decode_request(body, "application/x-protobuf", signal)
        except otlp.OtlpError:
            continue
        assert isinstance(events, list) and all(isinstance(e, dict) for e in events)
        json.dumps(events, allow_nan=False)


def _wrap(field: int, payload: bytes) -> bytes:
    return bytes([field << 3 | 2, len(payload)]) + payload


@given(st.lists(st.tuples(st.integers(1, 15), st.sampled_from([0, 1, 2, 5]),
                          st.binary(max_size=12)), max_size=8))
@settings(max_examples=600, deadline=None)
def test_well_framed_fields_of_any_type_are_handled(fields: list[tuple[int, int, bytes]]) -> None:
    """Property: a well-framed message whose fields have any number and wire type, nested
    where a log record or span belongs, decodes or is refused with OtlpError."""
    inner = b""
    for number, wire, data in fields:
        key = bytes([number << 3 | wire])
        if wire == 0:
            inner += key + b"\x01"
        elif wire == 1:
            inner += key + (data + bytes(8))[:8]
        elif wire == 5:
            inner += key + (data + bytes(4))[:4]
        else:
            inner += key + bytes([len(data)]) + data
    body = _wrap(1, _wrap(2, _wrap(2, inner)))  # resource…, scope…, the record
    for signal in ("logs", "traces"):
        try:
            events = otlp.decode_request(body, "application/x-protobuf", signal)
        except otlp.OtlpError:
            continue
        json.dumps(events, allow_nan=False)  # storable as they are
