"""Request and task reports (issue 44): loghandler.asgi / wsgi / django.RequestReports and
loghandler.celery's task reports, with the real frameworks (FastAPI/Starlette, Flask, Django,
Celery eager and a real worker), shipped through the package's MemoryTransport or
LocalService. Each report's fields and level, the request id on the lines logged inside, held
lines of a failed request, excluded paths, streaming, websocket and lifespan pass-through, a
client gone (499), a fault of the middleware's own. The pure path: the same file with
LOGHANDLER_PURE_PYTHON=1.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import TOKEN

import loghandler
from loghandler import ConfigurationError
from loghandler.testing import LocalService, MemoryTransport

HEX32 = re.compile(r"[0-9a-f]{32}")
LOGGERS = ("app", "loghandler.request", "loghandler.task")
REPORT_KEYS = {"http.request.method", "url.path", "http.response.status_code", "duration_ms",
               "http.response.body.size", "request_id"}


class Shipped:
    """A handler on the app's and the reports' loggers, shipping into memory."""

    def __init__(self, **options: Any) -> None:
        self.transport = MemoryTransport()
        self.handler = loghandler.IngestHandler("app", transport=self.transport,
                                                flush_interval=60, **options)
        for name in LOGGERS:
            logger = logging.getLogger(name)
            logger.addHandler(self.handler)
            logger.setLevel(logging.DEBUG)

    def events(self) -> list[dict[str, Any]]:
        assert self.handler.flush(timeout=10) is True
        return [e for e in self.transport.events("app") if e.get("logger") in LOGGERS]

    def reports(self) -> list[dict[str, Any]]:
        return [e for e in self.events() if e["logger"] == "loghandler.request"]

    def close(self) -> None:
        for name in LOGGERS:
            logger = logging.getLogger(name)
            logger.removeHandler(self.handler)
            logger.setLevel(logging.NOTSET)
        self.handler.close()


@pytest.fixture
def shipped() -> Iterator[Any]:
    made: list[Shipped] = []

    def make(**options: Any) -> Shipped:
        made.append(Shipped(**options))
        return made[-1]

    yield make
    for s in made:
        s.close()


log = logging.getLogger("app")


# ------------------------------------------------------------------ ASGI: FastAPI / Starlette

def fastapi_app(**options: Any) -> Any:
    from fastapi import FastAPI
    from fastapi.responses import StreamingResponse

    from loghandler.asgi import RequestReports

    app = FastAPI()
    app.add_middleware(RequestReports, **options)

    @app.get("/items/{item_id}")
    def item(item_id: int) -> dict[str, int]:
        log.info("looking up %d", item_id)
        return {"id": item_id}

    @app.get("/boom")
    async def boom() -> None:
        log.debug("d1")
        log.info("i1")
        raise RuntimeError("boom")

    @app.get("/health")
    def health() -> str:
        log.warning("health asked")
        return "ok"

    @app.get("/internal/stats")
    def stats() -> str:
        return "s"

    @app.get("/stream")
    def stream() -> Any:
        def chunks() -> Iterator[bytes]:
            for i in range(3):
                log.info("chunk %d", i)
                yield b"x" * 10
        return StreamingResponse(chunks())

    return app


def client(app: Any, **options: Any) -> Any:
    from starlette.testclient import TestClient

    return TestClient(app, **options)


class TestASGI:
    def test_report_fields_level_and_request_id(self, shipped):
        """One INFO report with the semantic-convention fields, the route template, no query
        string; the line logged inside carries the same request id, echoed on the response."""
        s = shipped()
        c = client(fastapi_app(headers=("x-tenant",), client_address=True))
        r = c.get("/items/3?token=secret-q", headers={"user-agent": "probe/1",
                                                        "x-tenant": "acme"})
        assert r.status_code == 200
        rid = r.headers["x-request-id"]
        assert HEX32.fullmatch(rid)
        events = s.events()
        assert events[0]["message"] == "looking up 3"
        assert events[0]["request_id"] == rid
        (rep,) = s.reports()
        assert rep["level"] == "info"
        assert re.fullmatch(r"GET /items/\{item_id\} 200 in \d+\.\d ms", rep["message"])
        assert rep["http.request.method"] == "GET"
        assert rep["http.route"] == "/items/{item_id}"
        assert rep["url.path"] == "/items/3"
        assert rep["http.response.status_code"] == 200
        assert rep["http.response.body.size"] == len(r.content)
        assert isinstance(rep["duration_ms"], float) and rep["duration_ms"] > 0
        assert rep["user_agent.original"] == "probe/1"
        assert rep["http.request.header.x-tenant"] == "acme"
        assert rep["client.address"] == "testclient"
        assert rep["request_id"] == rid
        assert "secret-q" not in json.dumps(rep)

    def test_client_address_and_headers_only_when_asked(self, shipped):
        s = shipped()
        client(fastapi_app()).get("/items/1", headers={"x-tenant": "acme"})
        (rep,) = s.reports()
        assert "client.address" not in rep
        assert not any(k.startswith("http.request.header.") for k in rep)

    @pytest.mark.parametrize(("incoming", "kept"), [
        ("req-42", True), ("a" * 128, True), ("with space ok", True),
        ("a" * 129, False), ("caf\u00e9".encode(), False), ("tab\there", False)])
    def test_incoming_id_honoured_when_sane(self, shipped, incoming, kept):
        s = shipped()
        r = client(fastapi_app()).get("/items/1", headers={"x-request-id": incoming})
        rid = r.headers["x-request-id"]
        assert (rid == incoming) is kept
        if not kept:
            assert HEX32.fullmatch(rid)
        assert [e["request_id"] for e in s.events()] == [rid, rid]

    def test_other_header_name(self, shipped):
        s = shipped()
        r = client(fastapi_app(request_id_header="X-Correlation-Id")).get(
            "/items/1", headers={"x-correlation-id": "c-1"})
        assert r.headers["x-correlation-id"] == "c-1" and "x-request-id" not in r.headers
        assert s.reports()[0]["request_id"] == "c-1"

    def test_4xx_is_a_warning_without_a_route(self, shipped):
        s = shipped()
        client(fastapi_app()).get("/nowhere")
        (rep,) = s.reports()
        assert rep["level"] == "warning" and rep["http.response.status_code"] == 404
        assert "http.route" not in rep
        assert rep["message"].startswith("GET /nowhere 404 in ")

    def test_failed_request_ships_held_lines_then_its_report(self, shipped):
        """hold_level="info": the failed request's debug and info lines ship, in order, before
        its ERROR report, which carries the exception; the exception still propagates."""
        s = shipped(hold_level="info")
        c = client(fastapi_app())
        with pytest.raises(RuntimeError, match="boom"):
            c.get("/boom")
        c.get("/items/5")  # a good request: its info line is held and dropped
        events = s.events()
        assert [e["message"] for e in events[:3]] == ["d1", "i1", events[2]["message"]]
        rep = events[2]
        assert rep["logger"] == "loghandler.request" and rep["level"] == "error"
        assert rep["http.response.status_code"] == 500
        assert rep["exception"]["type"] == "RuntimeError"
        assert events[0]["request_id"] == events[1]["request_id"] == rep["request_id"]
        assert [e["message"] for e in events[3:]] == [events[3]["message"]]
        assert events[3]["message"].startswith("GET /items/{item_id} 200")
        assert s.handler.stats().dropped_held == 1

    def test_excluded_paths_have_no_report_but_the_context(self, shipped):
        s = shipped()
        c = client(fastapi_app(exclude_paths=("/health", "/internal/*")))
        assert c.get("/health").status_code == 200
        assert c.get("/internal/stats").status_code == 200
        events = s.events()
        assert [e["message"] for e in events] == ["health asked"]
        assert HEX32.fullmatch(events[0]["request_id"])

    def test_streaming_counted_at_its_last_byte(self, shipped):
        s = shipped()
        r = client(fastapi_app()).get("/stream")
        assert r.content == b"x" * 30
        events = s.events()
        assert [e["message"] for e in events[:3]] == ["chunk 0", "chunk 1", "chunk 2"]
        rep = events[3]
        assert rep["logger"] == "loghandler.request"
        assert rep["http.response.body.size"] == 30
        assert {e["request_id"] for e in events} == {r.headers["x-request-id"]}

    def test_websocket_and_lifespan_pass_through(self, shipped):
        """No report and no request id for a websocket or the lifespan; both work as
        without the middleware."""
        from contextlib import asynccontextmanager

        from starlette.applications import Starlette
        from starlette.middleware import Middleware
        from starlette.routing import WebSocketRoute

        from loghandler.asgi import RequestReports

        @asynccontextmanager
        async def lifespan(app: Any) -> Any:
            log.info("started")
            yield
            log.info("stopped")

        async def echo(ws: Any) -> None:
            await ws.accept()
            text = await ws.receive_text()
            log.info("ws got %s", text)
            await ws.send_text(text.upper())
            await ws.close()

        s = shipped()
        app = Starlette(routes=[WebSocketRoute("/ws", echo)], lifespan=lifespan,
                        middleware=[Middleware(RequestReports)])
        with client(app) as c, c.websocket_connect("/ws") as ws:
            ws.send_text("hi")
            assert ws.receive_text() == "HI"
        events = s.events()
        assert [e["message"] for e in events] == ["started", "ws got hi", "stopped"]
        assert not any("request_id" in e for e in events)

    def test_client_gone_mid_stream_is_499(self, shipped):
        """A client that goes away before the response ends (http.disconnect while
        streaming; Starlette stops the stream): status 499, a warning."""
        s = shipped()
        app = fastapi_app()
        asyncio.run(drive(app, "/stream", disconnect_after_chunks=1))
        (rep,) = s.reports()
        assert rep["http.response.status_code"] == 499 and rep["level"] == "warning"
        assert rep["message"].startswith("GET /stream 499 in ")

    def test_send_failing_is_499_and_propagates(self, shipped):
        """ASGI 2.4: the server's send raises OSError for a client gone; Starlette turns it
        into ClientDisconnect, which propagates as without the middleware."""
        from starlette.requests import ClientDisconnect

        s = shipped()
        with pytest.raises(ClientDisconnect):
            asyncio.run(drive(fastapi_app(), "/stream", fail_send_at=2, spec="2.4"))
        (rep,) = s.reports()
        assert rep["http.response.status_code"] == 499 and rep["level"] == "warning"
        assert "exception" not in rep

    def test_a_fault_of_its_own_leaves_the_response_unchanged(self, shipped, capfd,
                                                              monkeypatch):
        """A filter on the report's logger raises: the response is the same, and stderr says
        so once for two requests."""
        s = shipped()
        monkeypatch.setattr("loghandler._reports._told", set())  # told once per process

        def broken(record: logging.LogRecord) -> bool:
            raise ValueError("filter broke")

        reporter = logging.getLogger("loghandler.request")
        reporter.addFilter(broken)
        try:
            c = client(fastapi_app())
            for _ in range(2):
                r = c.get("/items/9", headers={"x-request-id": "keep"})
                assert (r.status_code, r.json(), r.headers["x-request-id"]) == (
                    200, {"id": 9}, "keep")
        finally:
            reporter.removeFilter(broken)
        assert [e["message"] for e in s.events()] == ["looking up 9", "looking up 9"]
        err = capfd.readouterr().err
        assert err.count("loghandler: the request's report failed (ValueError: filter broke)") \
            == 1, err

    @pytest.mark.parametrize(("options", "words"), [
        ({"exlude_paths": ()}, "unknown option 'exlude_paths'"),
        ({"exclude_paths": "/health"}, "exclude_paths must be a list or tuple"),
        ({"exclude_paths": ("health",)}, "is not a path"),
        ({"headers": ("X Tenant",)}, "is not a lowercase header name"),
        ({"client_address": "yes"}, "client_address must be True or False"),
        ({"logger": 3}, "logger must be"),
        ({"request_id_header": ""}, "request_id_header must be"),
    ])
    def test_wrong_option_is_a_configuration_error(self, options, words):
        from loghandler.asgi import RequestReports

        async def app(scope: Any, receive: Any, send: Any) -> None:
            pass

        with pytest.raises(ConfigurationError, match=re.escape(words)):
            RequestReports(app, **options)
        from loghandler.wsgi import RequestReports as WSGIReports

        with pytest.raises(ConfigurationError, match=re.escape(words)):
            WSGIReports(lambda e, s: [], **options)


async def drive(app: Any, path: str, *, disconnect_after_chunks: int | None = None,
                fail_send_at: int | None = None, spec: str = "2.3") -> list[Any]:
    """An ASGI server's part, in-process: the request, then what the client does."""
    sent: list[Any] = []
    chunks = asyncio.Event()
    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": spec},
             "http_version": "1.1", "method": "GET", "scheme": "http", "path": path,
             "raw_path": path.encode(), "query_string": b"", "root_path": "",
             "headers": [(b"host", b"test")], "client": ("127.0.0.1", 5000),
             "server": ("127.0.0.1", 80)}
    requested = False

    async def receive() -> dict[str, Any]:
        nonlocal requested
        if not requested:
            requested = True
            return {"type": "http.request", "body": b"", "more_body": False}
        if disconnect_after_chunks is not None:
            await chunks.wait()
            return {"type": "http.disconnect"}
        await asyncio.Event().wait()  # never: the client stays
        return {}

    async def send(message: dict[str, Any]) -> None:
        if fail_send_at is not None and len(sent) >= fail_send_at:
            raise OSError("connection reset by peer")
        sent.append(message)
        bodies = sum(1 for m in sent if m["type"] == "http.response.body")
        if disconnect_after_chunks is not None and bodies >= disconnect_after_chunks:
            chunks.set()
            await asyncio.sleep(0)

    await asyncio.wait_for(app(scope, receive, send), 30)
    return sent


# ------------------------------------------------------------------ WSGI: Flask and any app

def flask_app(**options: Any) -> Any:
    from flask import Flask, Response

    from loghandler.wsgi import RequestReports

    app = Flask("reports")

    @app.get("/items/<int:item_id>")
    def item(item_id: int) -> Any:
        log.info("looking up %d", item_id)
        return {"id": item_id}

    @app.get("/boom")
    def boom() -> Any:
        log.debug("d1")
        log.info("i1")
        raise RuntimeError("boom")

    @app.get("/stream")
    def stream() -> Any:
        def chunks() -> Iterator[bytes]:
            for i in range(3):
                log.info("chunk %d", i)
                yield b"y" * 7
        return Response(chunks())

    app.wsgi_app = RequestReports(app.wsgi_app, **options)  # type: ignore[method-assign]
    return app


def call_wsgi(app: Any, path: str, *, chunks: int | None = None,
              headers: dict[str, str] | None = None) -> tuple[str, list[Any], bytes]:
    """A WSGI server's part: the request; ``chunks``: the client goes away after so many."""
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": path, "SCRIPT_NAME": "",
               "QUERY_STRING": "", "SERVER_NAME": "test", "SERVER_PORT": "80",
               "SERVER_PROTOCOL": "HTTP/1.1", "REMOTE_ADDR": "127.0.0.1",
               "wsgi.url_scheme": "http", "wsgi.input": __import__("io").BytesIO(),
               "wsgi.errors": sys.stderr, "wsgi.multithread": False,
               "wsgi.multiprocess": False, "wsgi.run_once": False, "wsgi.version": (1, 0)}
    for k, v in (headers or {}).items():
        environ["HTTP_" + k.upper().replace("-", "_")] = v
    started: list[Any] = []

    def start_response(status: str, hdrs: list[Any], exc_info: Any = None) -> Any:
        started[:] = [status, hdrs]
        return lambda data: None

    body = app(environ, start_response)
    got = b""
    try:
        for i, chunk in enumerate(body):
            got += chunk
            if chunks is not None and i + 1 >= chunks:
                break
    finally:
        close = getattr(body, "close", None)
        if close is not None:
            close()
    return started[0], started[1], got


class TestWSGI:
    def test_flask_report_fields_and_request_id(self, shipped):
        s = shipped()
        c = flask_app(client_address=True).test_client()
        r = c.get("/items/4?token=secret-q", headers={"user-agent": "probe/2"}, buffered=True)
        assert r.status_code == 200
        rid = r.headers["x-request-id"]
        events = s.events()
        assert events[0]["message"] == "looking up 4" and events[0]["request_id"] == rid
        (rep,) = s.reports()
        assert rep["level"] == "info"
        assert re.fullmatch(r"GET /items/<int:item_id> 200 in \d+\.\d ms", rep["message"])
        assert rep["http.route"] == "/items/<int:item_id>"
        assert rep["url.path"] == "/items/4"
        assert rep["http.response.status_code"] == 200
        assert rep["http.response.body.size"] == len(r.data)
        assert rep["user_agent.original"] == "probe/2"
        assert rep["client.address"] == "127.0.0.1"
        assert rep.keys() >= REPORT_KEYS
        assert "secret-q" not in json.dumps(rep)

    def test_incoming_id_honoured_and_echoed(self, shipped):
        s = shipped()
        c = flask_app().test_client()
        assert c.get("/items/1", headers={"x-request-id": "w-1"}, buffered=True).headers[
            "x-request-id"] == "w-1"
        bad = c.get("/items/1", headers={"x-request-id": "x" * 200},
                    buffered=True).headers["x-request-id"]
        assert HEX32.fullmatch(bad)
        assert [e["request_id"] for e in s.events()] == ["w-1", "w-1", bad, bad]

    def test_flask_500_ships_held_lines_then_an_error_report(self, shipped):
        """Flask turns the exception into a 500 (and logs it, inside the context): the held
        lines ship first, then Flask's error line, then the ERROR report."""
        s = shipped(hold_level="info")
        app = flask_app()
        app.logger.addHandler(s.handler)
        try:
            r = app.test_client().get("/boom", buffered=True)
        finally:
            app.logger.removeHandler(s.handler)
        assert r.status_code == 500
        assert s.handler.flush(10) is True
        events = s.transport.events("app")
        assert [e["message"] for e in events[:2]] == ["d1", "i1"]
        assert events[-1]["logger"] == "loghandler.request"
        assert events[-1]["level"] == "error"
        assert events[-1]["http.response.status_code"] == 500
        assert len({e["request_id"] for e in events}) == 1

    def test_app_raising_propagates_with_the_exception_on_the_report(self, shipped):
        from loghandler.wsgi import RequestReports

        def app(environ: Any, start_response: Any) -> Any:
            log.info("held")
            raise KeyError("gone")

        s = shipped(hold_level="info")
        with pytest.raises(KeyError):
            call_wsgi(RequestReports(app), "/x")
        events = s.events()
        assert events[0]["message"] == "held"
        rep = events[1]
        assert rep["level"] == "error" and rep["exception"]["type"] == "KeyError"
        assert rep["http.response.status_code"] == 500 and "http.route" not in rep

    def test_streaming_lines_carry_the_id_and_the_size_counts(self, shipped):
        s = shipped()
        status, headers, body = call_wsgi(flask_app(), "/stream")
        assert status.startswith("200") and body == b"y" * 21
        rid = dict(headers)["x-request-id"]
        events = s.events()
        assert [e["message"] for e in events[:3]] == ["chunk 0", "chunk 1", "chunk 2"]
        assert {e["request_id"] for e in events} == {rid}
        assert events[3]["http.response.body.size"] == 21
        # The thread's own context is as it was: nothing of the request leaks.
        log.info("after")
        assert "request_id" not in s.events()[-1]

    def test_closed_before_its_end_is_499(self, shipped):
        s = shipped()
        call_wsgi(flask_app(), "/stream", chunks=1)
        (rep,) = s.reports()
        assert rep["http.response.status_code"] == 499 and rep["level"] == "warning"
        assert rep["http.response.body.size"] == 7

    def test_write_failing_is_499(self, shipped):
        from loghandler.wsgi import RequestReports

        def app(environ: Any, start_response: Any) -> Any:
            write = start_response("200 OK", [("content-type", "text/plain")])
            write(b"first")
            return []

        def start_response(status: str, hdrs: Any, exc_info: Any = None) -> Any:
            def write(data: bytes) -> None:
                raise BrokenPipeError("client gone")
            return write

        s = shipped()
        with pytest.raises(BrokenPipeError):
            list(RequestReports(app)({"REQUEST_METHOD": "GET", "PATH_INFO": "/w"},
                                     start_response))
        (rep,) = s.reports()
        assert rep["http.response.status_code"] == 499 and "exception" not in rep

    def test_excluded_paths(self, shipped):
        s = shipped()
        call_wsgi(flask_app(exclude_paths=("/items/*",)), "/items/2")
        events = s.events()
        assert [e["message"] for e in events] == ["looking up 2"]
        assert HEX32.fullmatch(events[0]["request_id"])

    def test_a_fault_of_its_own_leaves_the_response_unchanged(self, shipped, capfd,
                                                              monkeypatch):
        s = shipped()
        monkeypatch.setattr("loghandler._reports._told", set())  # told once per process

        def broken(record: logging.LogRecord) -> bool:
            raise ValueError("filter broke")

        reporter = logging.getLogger("loghandler.request")
        reporter.addFilter(broken)
        try:
            c = flask_app().test_client()
            for _ in range(2):
                r = c.get("/items/6", headers={"x-request-id": "same"}, buffered=True)
                assert (r.status_code, r.json, r.headers["x-request-id"]) == (
                    200, {"id": 6}, "same")
        finally:
            reporter.removeFilter(broken)
        assert len(s.events()) == 2
        assert capfd.readouterr().err.count("the request's report failed") == 1


# ------------------------------------------------------------------ Django (its own process)

DJANGO_SCRIPT = '''
import json, logging, sys
import django
from django.conf import settings

settings.configure(
    DEBUG=False, ROOT_URLCONF=__name__, ALLOWED_HOSTS=["*"], SECRET_KEY="x",
    MIDDLEWARE=["loghandler.django.RequestReports"],
    LOGHANDLER_REQUEST_REPORTS=OPTIONS, LOGGING_CONFIG=None,
)
django.setup()
from django.http import HttpResponse, JsonResponse, StreamingHttpResponse
from django.urls import path

import loghandler
from loghandler.testing import MemoryTransport

log = logging.getLogger("app")

def item(request, item_id):
    log.info("looking up %d", item_id)
    return JsonResponse({"id": item_id})

def boom(request):
    log.debug("d1")
    log.info("i1")
    raise RuntimeError("boom")

def stream(request):
    def chunks():
        for i in range(3):
            yield b"z" * 5
    return StreamingHttpResponse(chunks())

def health(request):
    log.warning("health asked")
    return HttpResponse("ok")

urlpatterns = [path("items/<int:item_id>", item), path("boom", boom),
               path("stream", stream), path("health", health)]

transport = MemoryTransport()
handler = loghandler.IngestHandler("app", transport=transport, hold_level="info")
for name in ("app", "loghandler.request", "django.request"):
    logging.getLogger(name).addHandler(handler)
    logging.getLogger(name).setLevel(logging.DEBUG)
    logging.getLogger(name).propagate = False

from django.test import Client
c = Client(raise_request_exception=False)
out = {}
r = c.get("/items/3?token=secret-q", HTTP_USER_AGENT="probe/3", HTTP_X_REQUEST_ID="dj-1")
out["echo"] = r.headers.get("x-request-id")
r = c.get("/boom")
out["boom"] = r.status_code
r = c.get("/stream")
out["stream"] = b"".join(r.streaming_content).decode()
r.close()
r = c.get("/stream")
it = iter(r.streaming_content)
next(it)
r.close()
c.get("/health")
c.get("/nowhere")
import asyncio
from django.test import AsyncClient
async def under_asgi():
    return await AsyncClient().get("/items/5", headers={"x-request-id": "dj-async"})
out["async_echo"] = asyncio.run(under_asgi()).headers.get("x-request-id")
handler.flush()
out["events"] = transport.events("app")
print(json.dumps(out))
'''


def run_django(tmp_path: Path, options: dict[str, Any]) -> dict[str, Any]:
    script = tmp_path / "djapp.py"
    script.write_text(DJANGO_SCRIPT.replace("OPTIONS", repr(options)))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path, env={**os.environ})
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, Any] = json.loads(proc.stdout.splitlines()[-1])
    return result


class TestDjango:
    def test_reports_through_the_middleware_setting(self, tmp_path):
        out = run_django(tmp_path, {"client_address": True})
        events = out["events"]
        reports = [e for e in events if e["logger"] == "loghandler.request"]
        assert out["echo"] == "dj-1"
        first = reports[0]
        assert first["level"] == "info"
        assert first["message"].startswith("GET items/<int:item_id> 200 in ")
        assert first["http.route"] == "items/<int:item_id>"
        assert first["url.path"] == "/items/3"
        assert first["http.response.status_code"] == 200
        assert first["http.response.body.size"] == len(b'{"id": 3}')
        assert first["user_agent.original"] == "probe/3"
        assert first["client.address"] == "127.0.0.1"
        assert first["request_id"] == "dj-1"
        assert "secret-q" not in json.dumps(first)
        # The held line of the good request was dropped; the failed one's shipped, in order,
        # before its report, which carries the view's exception.
        messages = [e["message"] for e in events]
        assert "looking up 3" not in messages
        i = messages.index("d1")
        assert messages[i + 1] == "i1"
        boom = next(e for e in reports if e["url.path"] == "/boom")
        assert events.index(boom) > i + 1
        assert out["boom"] == 500
        assert boom["level"] == "error" and boom["exception"]["type"] == "RuntimeError"
        assert {events[i]["request_id"], events[i + 1]["request_id"]} == {boom["request_id"]}
        streams = [e for e in reports if e["url.path"] == "/stream"]
        assert out["stream"] == "z" * 15
        assert [(e["http.response.status_code"], e["http.response.body.size"])
                for e in streams] == [(200, 15), (499, 5)]
        assert not any(e["url.path"] == "/health" for e in reports)
        health = next(e for e in events if e["message"] == "health asked")
        assert HEX32.fullmatch(health["request_id"])
        nowhere = next(e for e in reports if e["url.path"] == "/nowhere")
        assert nowhere["level"] == "warning" and "http.route" not in nowhere
        # Django's ASGI handler (an async middleware chain): the same report.
        assert out["async_echo"] == "dj-async"
        under_asgi = next(e for e in reports if e["request_id"] == "dj-async")
        assert under_asgi["http.route"] == "items/<int:item_id>"
        assert under_asgi["http.response.status_code"] == 200

    def test_wrong_setting_is_a_configuration_error(self, tmp_path):
        script = tmp_path / "bad.py"
        script.write_text(DJANGO_SCRIPT.replace("OPTIONS", "{'exclude': ()}"))
        proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                              timeout=120, cwd=tmp_path)
        assert proc.returncode != 0
        assert ("ConfigurationError: LOGHANDLER_REQUEST_REPORTS: unknown option 'exclude'"
                in proc.stderr), proc.stderr[-2000:]


# ------------------------------------------------------------------ Celery

CELERY_EAGER = '''
import json, logging
import loghandler, loghandler.celery
from loghandler.testing import MemoryTransport
from celery import Celery

transport = MemoryTransport()
handler = loghandler.IngestHandler("app", transport=transport, hold_level="info")
logging.getLogger().addHandler(handler)
logging.getLogger().setLevel(logging.DEBUG)
loghandler.celery.install(task_reports=True)
app = Celery("eager")
app.conf.task_always_eager = True
log = logging.getLogger("app")

@app.task
def add(x, y):
    log.warning("adding")
    return x + y

@app.task
def fail():
    log.debug("about to fail")
    raise ValueError("no")

@app.task(bind=True, max_retries=1, default_retry_delay=0)
def flaky(self):
    log.warning("flaky try %d", self.request.retries)
    if self.request.retries < 1:
        raise self.retry(exc=OSError("again"))
    return "ok"

assert add.delay(2, 3).get() == 5
r = fail.apply()
assert r.state == "FAILURE"
assert flaky.delay().get() == "ok"
handler.flush()
print(json.dumps([e for e in transport.events("app")
                  if e.get("logger") in ("app", "loghandler.task")]))
'''


class TestCelery:
    def test_eager_tasks_report_and_carry_their_id(self, tmp_path):
        script = tmp_path / "eager.py"
        script.write_text(CELERY_EAGER)
        proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                              timeout=120, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr[-3000:]
        events = json.loads(proc.stdout.splitlines()[-1])
        tasks = [e for e in events if e["logger"] == "loghandler.task"]
        by_state = {(e["celery.task.name"].rsplit(".", 1)[-1], e["celery.task.state"]): e
                    for e in tasks}
        ok = by_state[("add", "SUCCESS")]
        assert ok["level"] == "info" and ok["celery.task.retries"] == 0
        assert re.fullmatch(r"\S+add SUCCESS in \d+\.\d ms", ok["message"])
        assert isinstance(ok["duration_ms"], float)
        adding = next(e for e in events if e["message"] == "adding")
        assert adding["task_id"] == ok["celery.task.id"]
        failed = by_state[("fail", "FAILURE")]
        assert failed["level"] == "error" and failed["exception"]["type"] == "ValueError"
        held = next(e for e in events if e["message"] == "about to fail")
        assert held["task_id"] == failed["celery.task.id"]
        assert events.index(held) < events.index(failed)
        retry = by_state[("flaky", "RETRY")]
        assert retry["level"] == "warning" and retry["celery.task.retries"] == 0
        assert by_state[("flaky", "SUCCESS")]["celery.task.retries"] == 1
        assert "exception" not in ok and "exception" not in retry

    def test_wrong_task_reports_is_a_configuration_error(self):
        import loghandler.celery

        with pytest.raises(ConfigurationError, match="task_reports must be True or False"):
            loghandler.celery.install(task_reports="yes")  # type: ignore[arg-type]

    def test_a_real_worker_reports_every_task(self, tmp_path):
        """A real worker (Redis broker, prefork pool): one report per task, each task's line
        carrying its id, delivered by a warm shutdown."""
        import signal

        from helpers import RedisServer

        app = textwrap.dedent('''
            import logging, os
            import loghandler, loghandler.celery
            from celery import Celery

            handler = loghandler.IngestHandler("celery", url=os.environ["TEST_URL"],
                                               token=os.environ["TEST_TOKEN"])
            logging.getLogger().addHandler(handler)
            logging.getLogger().setLevel(logging.INFO)
            loghandler.celery.install(task_reports=True)
            app = Celery("tasks", broker=os.environ["TEST_REDIS"],
                         backend=os.environ["TEST_REDIS"])

            @app.task
            def job(i):
                logging.getLogger("tasks").info("job %d", i)
                return i
        ''')
        redis_server = RedisServer()
        worker = None
        try:
            (tmp_path / "tasks.py").write_text(app)
            with LocalService(token=TOKEN) as svc:
                env = {**os.environ, "TEST_URL": svc.url, "TEST_TOKEN": TOKEN,
                       "TEST_REDIS": redis_server.url, "PYTHONPATH": str(tmp_path)}
                celery_cli = os.path.join(os.path.dirname(sys.executable), "celery")
                worker = subprocess.Popen(
                    [celery_cli, "-A", "tasks", "worker", "--pool", "prefork", "-c", "2",
                     "--without-gossip", "--without-mingle", "--without-heartbeat"],
                    env=env, cwd=tmp_path, stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE, text=True)
                run = ("import tasks\n"
                       "results = [tasks.job.delay(i) for i in range(10)]\n"
                       "assert sorted(r.get(timeout=60) for r in results) == list(range(10))\n")
                subprocess.run([sys.executable, "-c", run], env=env, cwd=tmp_path, check=True,
                               timeout=90)
                worker.send_signal(signal.SIGTERM)
                _, err = worker.communicate(timeout=30)
                assert worker.returncode == 0, err[-2000:]
                events = svc.events("celery")
                reports = [e for e in events if e.get("logger") == "loghandler.task"]
                lines = {e["message"]: e for e in events if e.get("logger") == "tasks"}
                assert len(reports) == 10, err[-2000:]
                assert {e["celery.task.state"] for e in reports} == {"SUCCESS"}
                assert {e["celery.task.id"] for e in reports} == {
                    lines[f"job {i}"]["task_id"] for i in range(10)}
        finally:
            if worker is not None and worker.poll() is None:
                worker.kill()
            redis_server.stop()


def test_the_benchmark_runs_and_its_accounting_holds() -> None:
    """benchmarks.requests' children (without valgrind): each row runs, and each request
    with the reports logs exactly one event, each without none."""
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.run([sys.executable, "-m", "benchmarks.requests", "--no-valgrind"],
                          cwd=root, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().endswith("ok")
