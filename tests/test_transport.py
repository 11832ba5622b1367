"""The transport seam: ``HttpTransport`` (the default, over the client's pool), the public
``loghandler.testing.MemoryTransport``, and ``transport=`` on ``Shipper`` and every front end."""

from __future__ import annotations

import gzip
import json
import logging
from typing import Any

import pytest
from faultserver import FaultServer, status
from helpers import TOKEN, closed_port_url

import loghandler
from loghandler import ConfigurationError, IngestHandler, IngestProcessor, Shipper, TransportError
from loghandler._engine.policy import status_bound
from loghandler._engine.transport import HttpTransport
from loghandler.testing import MemoryTransport, SentRequest

# --------------------------------------------------------------------------- HttpTransport


class TestHttpTransport:
    def test_sends_through_the_client_and_hands_back_an_answer(self) -> None:
        """The body and headers as given, the client's token and agent added; the answer's
        status, parsed body and wait (read once, from Retry-After)."""
        with FaultServer([]) as srv:
            transport = HttpTransport(loghandler.Client(TOKEN, url=srv.url), batch_size=10)
            answer = transport.send("POST", "/v1/datasets/ds/ingest",
                                    gzip.compress(b'[{"a":1}]'),
                                    headers={"Content-Encoding": "gzip"}, timeout=5)
            (request,) = srv.requests
        assert answer.status == 200 and answer.complete and answer.wait is None
        assert request.headers["content-encoding"] == "gzip"
        assert request.headers["authorization"] == f"Bearer {TOKEN}"
        assert request.headers["user-agent"].startswith("loghandler/")
        assert srv.stored() == [None]  # the event arrived (it has no "id")

    def test_a_2xx_is_read_up_to_the_status_bound(self) -> None:
        """An ingest status may list a failure per event: a 2xx is read up to
        status_bound(batch_size), beyond the client's 1 MiB for other answers; cut there, the
        answer says it is not complete (and is then never counted delivered).

        Served by FaultServer, which keeps connections alive as the service does (werkzeug's
        single-threaded server of pytest-httpserver answered HTTP/1.0 with Connection: close
        and failed now and then under load with "Remote end closed connection without
        response"): the first answer, read whole, leaves its connection to the second; the
        second, cut, drops it."""
        bound = status_bound(1000)
        assert bound > 1024 * 1024 + 512 * 1024
        fits, big = 1024 * 1024 + 512 * 1024, bound + 10
        # Each body a JSON string of exactly that many bytes (its two quotes included).
        with FaultServer([status(200, "y" * (fits - 2)), status(200, "y" * (fits - 2)),
                          status(200, "x" * (big - 2))]) as srv:
            client = loghandler.Client(TOKEN, url=srv.url)
            transport = HttpTransport(client, batch_size=1000)
            assert transport.send("POST", "/fits", b"[]").complete is True
            assert client.send("POST", "/fits", b"[]").complete is False  # the client's bound
            assert transport.send("POST", "/big", b"[]").complete is False
            assert srv.accepted == 2
            client.close()

    def test_no_answer_is_a_transport_error(self) -> None:
        client = loghandler.Client(TOKEN, url=closed_port_url())
        with pytest.raises(TransportError, match="connection refused"):
            HttpTransport(client, batch_size=1).send("POST", "/v1/datasets/ds/ingest", b"[]")


# --------------------------------------------------------------------------- MemoryTransport

def send(transport: MemoryTransport, events: list[Any], *, dataset: str = "ds",
         gzip_it: bool = False) -> Any:
    body = json.dumps(events).encode()
    headers = {"Content-Type": "application/json"}
    if gzip_it:
        body, headers["Content-Encoding"] = gzip.compress(body), "gzip"
    return transport.send("POST", f"/v1/datasets/{dataset}/ingest", body, headers=headers)


class TestMemoryTransport:
    def test_records_requests_and_answers_a_full_ingest_status(self) -> None:
        t = MemoryTransport()
        answer = send(t, [{"a": 1}, {"a": 2}], gzip_it=True)
        assert answer.status == 200
        assert answer.body == {"ingested": 2, "failed": 0, "failures": [],
                               "processedBytes": len(b'[{"a": 1}, {"a": 2}]'),  # unzipped
                               "blocksCreated": 0, "walLength": 2}
        (request,) = t.requests
        assert isinstance(request, SentRequest)
        assert (request.method, request.path, request.dataset, request.status) == (
            "POST", "/v1/datasets/ds/ingest", "ds", 200)
        assert request.headers["Content-Encoding"] == "gzip"
        assert request.events == [{"a": 1}, {"a": 2}]  # decoded: gunzipped, parsed
        assert t.events() == t.events("ds") == [{"a": 1}, {"a": 2}] and t.events("other") == []

    def test_ndjson_and_a_single_object_are_decoded(self) -> None:
        t = MemoryTransport()
        t.send("POST", "/v1/datasets/ds/ingest", b'{"a":1}\n{"a":2}\n',
               headers={"Content-Type": "application/x-ndjson"})
        t.send("POST", "/v1/datasets/ds/ingest", b'{"a":3}')
        assert t.events() == [{"a": 1}, {"a": 2}, {"a": 3}]

    def test_a_script_of_answers_then_200(self) -> None:
        """Statuses, (status, headers) with the wait read from them, an exception for no
        answer; after the script, 200."""
        t = MemoryTransport([503, (429, {"Retry-After": "7"}), TransportError("reset"), 200])
        assert send(t, [{"i": 0}]).status == 503
        limited = send(t, [{"i": 1}])
        assert (limited.status, limited.wait) == (429, 7.0)
        with pytest.raises(TransportError, match="reset"):
            send(t, [{"i": 2}])
        assert [send(t, [{"i": i}]).status for i in (3, 4)] == [200, 200]
        assert [r.status for r in t.requests] == [503, 429, None, 200, 200]
        assert [e["i"] for e in t.events()] == [3, 4]  # only what a 2xx took
        assert send(MemoryTransport([404]), [{}]).body["code"] == 404  # the service's error

    def test_a_callable_answers_every_request(self) -> None:
        def answer(request: SentRequest) -> Any:
            return 400 if any(e.get("bad") for e in request.events) else 200

        t = MemoryTransport(answer)
        assert send(t, [{"bad": True}]).status == 400
        assert send(t, [{"ok": 1}]).status == 200
        assert t.events() == [{"ok": 1}]

    def test_a_scripted_partial_status_keeps_only_what_it_took(self) -> None:
        t = MemoryTransport([(200, {}, {"ingested": 1, "failed": 2, "failures": []})])
        send(t, [{"i": 0}, {"i": 1}, {"i": 2}])
        assert t.events() == [{"i": 0}]

    def test_clear_and_bad_scripts(self) -> None:
        t = MemoryTransport()
        send(t, [{"i": 0}])
        t.clear()
        assert t.requests == [] and t.events() == []
        with pytest.raises(ConfigurationError, match="list of answers"):
            MemoryTransport(503)  # type: ignore[arg-type]
        with pytest.raises(ConfigurationError, match="scripted answer"):
            send(MemoryTransport(["200"]), [{}])  # type: ignore[list-item]


# --------------------------------------------------------------------------- transport=

class TestTransportArgument:
    def test_a_shipper_needs_a_client_or_a_transport(self) -> None:
        with pytest.raises(ConfigurationError, match="transport="):
            Shipper(dataset="ds")
        with pytest.raises(ConfigurationError, match="send"):
            Shipper(dataset="ds", transport=object())  # type: ignore[arg-type]
        s = Shipper(dataset="ds", transport=MemoryTransport())
        assert s.client is None and "MemoryTransport" in repr(s)
        s.close()

    def test_with_a_client_the_transport_still_carries_the_requests(self) -> None:
        """A client and a transport: the transport sends; nothing reaches the client's
        address (a closed port here)."""
        t = MemoryTransport()
        s = Shipper(loghandler.Client(TOKEN, url=closed_port_url()), "ds", transport=t)
        s.submit({"a": 1})
        assert s.flush(5) and t.events() == [{"a": 1}]
        s.close()

    def test_handler(self) -> None:
        """No token and no url: the transport is all a handler needs."""
        t = MemoryTransport()
        handler = IngestHandler("app", transport=t)
        log = logging.getLogger("test.transport.handler")
        log.handlers[:] = [handler]
        log.propagate = False
        log.warning("hello %s", "there", extra={"order": 7})
        assert handler.flush(5)
        handler.close()
        (event,) = t.events("app")
        assert (event["message"], event["order"], event["level"]) == ("hello there", 7,
                                                                      "warning")

    def test_structlog_processor(self) -> None:
        t = MemoryTransport()
        processor = IngestProcessor("app", transport=t)
        processor(None, "info", {"event": "paid", "amount": 3})
        assert processor.flush(5)
        processor.close()
        assert [(e["event"], e["amount"]) for e in t.events()] == [("paid", 3)]

    def test_loguru_sink(self) -> None:
        from loguru import logger

        t = MemoryTransport()
        sink = loghandler.IngestSink("app", transport=t)
        handler_id = logger.add(sink)
        try:
            logger.bind(order=9).info("shipped")
            assert sink.flush(5)
        finally:
            logger.remove(handler_id)
            sink.close()
        (event,) = t.events()
        assert (event["message"], event["order"]) == ("shipped", 9)

    def test_opentelemetry_processor(self) -> None:
        from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler

        from loghandler.opentelemetry import IngestLogRecordProcessor

        t = MemoryTransport()
        provider = LoggerProvider()
        processor = IngestLogRecordProcessor("app", transport=t)
        provider.add_log_record_processor(processor)
        log = logging.getLogger("test.transport.otel")
        log.handlers[:] = [LoggingHandler(logger_provider=provider)]
        log.propagate = False
        log.error("refused")
        assert processor.force_flush(5000)
        provider.shutdown()
        (event,) = t.events()
        assert (event["message"], event["level"]) == ("refused", "error")

    def test_one_transport_serves_several_datasets(self) -> None:
        t = MemoryTransport()
        a = Shipper(dataset="a", transport=t)
        b = Shipper(dataset="b/with slash", transport=t)
        a.submit({"x": 1})
        b.submit({"x": 2})
        assert a.flush(5) and b.flush(5)
        a.close()
        b.close()
        assert t.events("a") == [{"x": 1}] and t.events("b/with slash") == [{"x": 2}]


# --------------------------------------------------------------------------- Client(transport=)


class TestClientTransport:
    """``Client(transport=)``: the client's own calls go through it, not over the network (the
    address is a closed port: a request that reached it would fail)."""

    def test_views_datasets_and_queries_return_what_is_scripted(self) -> None:
        view = {"id": "v1", "name": "errors", "aplQuery": "['app'] | where level == 'error'",
                "datasets": ["app"], "description": "", "sharedByOrg": ""}
        table = {"tables": [{"name": "0", "fields": [{"name": "n"}], "columns": [[3]]}]}
        t = MemoryTransport(answers=[(200, {}, [view]), (200, {}, [{"name": "app"}]),
                                     (200, {}, table), (201, {}, dict(view, id="v2"))])
        client = loghandler.Client(TOKEN, url=closed_port_url(), transport=t)
        assert client.transport is t and "MemoryTransport" in repr(client)
        (listed,) = client.views.list()
        assert (listed.id, listed.name, listed.datasets) == ("v1", "errors", ["app"])
        assert client.datasets.list() == [{"name": "app"}]
        assert client.query("['app'] | count", start="2026-01-01T00:00:00Z") == [{"n": 3}]
        created = client.views.create(loghandler.View(name="errors", apl_query="x"))
        assert created.id == "v2"
        requests = t.requests
        assert [(r.method, r.path.split("?")[0], r.status) for r in requests] == [
            ("GET", "/v2/views", 200), ("GET", "/v1/datasets", 200),
            ("POST", "/v1/datasets/_apl", 200), ("POST", "/v2/views", 201)]
        assert requests[2].body == {"apl": "['app'] | count",
                                    "startTime": "2026-01-01T00:00:00Z"}
        assert requests[3].body["name"] == "errors" and requests[3].events == []
        # The token's header is never recorded; the client's own headers are there.
        assert all("authorization" not in {k.lower() for k in r.headers} for r in requests)
        assert requests[2].headers["Content-Type"] == "application/json"
        assert t.events() == []  # no ingest: nothing stored as events

    def test_errors_are_the_answers_errors(self) -> None:
        t = MemoryTransport(answers=[404, 403, TransportError("scripted: no answer")])
        client = loghandler.Client(TOKEN, url=closed_port_url(), transport=t)
        with pytest.raises(loghandler.NotFoundError, match="no view with id 'nope'"):
            client.views.get("nope")
        with pytest.raises(loghandler.ApiError):
            client.datasets.list()
        with pytest.raises(TransportError, match="scripted: no answer"):
            client.query("['app']")
        assert [r.status for r in t.requests] == [404, 403, None]

    def test_ingest_and_a_shipper_through_the_client_use_its_transport(self) -> None:
        """``client.ingest`` and a Shipper given only the client ship into the client's
        transport: the events are the transport's."""
        t = MemoryTransport()
        client = loghandler.Client(TOKEN, url=closed_port_url(), transport=t)
        assert client.ingest("ds", [{"a": 1}])["ingested"] == 1
        s = Shipper(client, "ds")
        s.submit({"b": 2})
        assert s.flush(5)
        s.close()
        assert t.events("ds") == [{"a": 1}, {"b": 2}]

    def test_a_front_ends_transport_is_its_shipper_s_and_its_built_client_s(self) -> None:
        """A front end's ``transport=`` is the shipper's (as before); with Client arguments the
        client it builds goes through it too; without, there is no client."""
        t = MemoryTransport(answers=[(200, {}, [])])
        handler = IngestHandler("app", transport=t, token=TOKEN, url=closed_port_url())
        try:
            client = handler.shipper.client
            assert client is not None and client.transport is t
            assert client.views.list() == []
            assert handler.shipper.transport is t
        finally:
            handler.close()
        alone = IngestHandler("app", transport=t)
        assert alone.shipper.client is None and alone.shipper.transport is t
        alone.close()

    def test_a_bad_transport_is_refused(self) -> None:
        with pytest.raises(ConfigurationError, match="send"):
            loghandler.Client(TOKEN, transport=object())  # type: ignore[arg-type]
