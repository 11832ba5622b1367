"""The HTTP client: error mapping, transport failures, ingest, path quoting, token hygiene."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import pickle
import re
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Iterator
from email.utils import format_datetime
from pathlib import Path

import pytest
from helpers import self_signed_certificate
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from loghandler import (
    ApiError,
    AuthenticationError,
    Client,
    ConfigurationError,
    Error,
    NotFoundError,
    RateLimitError,
    TransportError,
)
from loghandler._output import redact
from loghandler._wire.answer import parse_retry_after
from loghandler._wire.client import MAX_RESPONSE_BYTES, dataset_path, shared_client

TOKEN = "xaat-CLIENTSECRET-93c2f1"


@pytest.fixture
def client(httpserver: HTTPServer) -> Iterator[Client]:
    with Client(TOKEN, url=httpserver.url_for("/"), timeout=5.0) as c:
        yield c


def assert_clean(error: BaseException) -> None:
    """The token appears in no text an error produces."""
    for text in (str(error), repr(error), json.dumps(getattr(error, "body", None), default=str)):
        assert TOKEN not in text and "CLIENTSECRET" not in text, text


def raw_uri(request: Request) -> str:
    return request.environ.get("RAW_URI") or request.environ["REQUEST_URI"]


class TestErrorMapping:
    @pytest.mark.parametrize("status", [401, 403])
    def test_authentication_error_with_service_message(
        self, httpserver: HTTPServer, client: Client, status: int
    ) -> None:
        """401/403 -> AuthenticationError carrying the service's own error message."""
        httpserver.expect_request("/v2/views").respond_with_json(
            {"message": "token lacks permission views:read"}, status=status
        )
        with pytest.raises(AuthenticationError) as info:
            client.views.list()
        err = info.value
        assert err.status == status
        assert err.body == {"message": "token lacks permission views:read"}
        assert "token lacks permission views:read" in str(err)
        assert "LOGHANDLER_TOKEN" in str(err)
        assert isinstance(err, ApiError) and isinstance(err, Error)
        assert_clean(err)

    def test_authentication_error_echoing_token_is_redacted(
        self, httpserver: HTTPServer, client: Client
    ) -> None:
        """A service that echoes the token back never gets it into our message or body."""
        httpserver.expect_request("/v2/views").respond_with_json(
            {"error": f"invalid token {TOKEN}", "echo": [f"Bearer {TOKEN}"]}, status=403
        )
        with pytest.raises(AuthenticationError) as info:
            client.views.list()
        assert "invalid token ***" in str(info.value)
        assert info.value.body["echo"] == ["Bearer ***"]
        assert_clean(info.value)

    def test_html_body_echoing_token_is_redacted(
        self, httpserver: HTTPServer, client: Client
    ) -> None:
        """A non-JSON body echoing the token is scrubbed too."""
        httpserver.expect_request("/v2/views").respond_with_data(
            f"<html><body>bad header Authorization: Bearer {TOKEN}</body></html>",
            status=400, content_type="text/html",
        )
        with pytest.raises(ApiError) as info:
            client.views.list()
        assert info.value.status == 400
        assert "Bearer ***" in str(info.value)
        assert_clean(info.value)

    def test_rate_limit_seconds(self, httpserver: HTTPServer, client: Client) -> None:
        """429 -> RateLimitError with retry_after from delta-seconds."""
        httpserver.expect_request("/v2/views").respond_with_json(
            {"message": "slow down"}, status=429, headers={"Retry-After": "7"}
        )
        with pytest.raises(RateLimitError) as info:
            client.views.list()
        assert info.value.retry_after == 7.0
        assert info.value.status == 429
        assert "slow down" in str(info.value)
        assert_clean(info.value)

    def test_rate_limit_http_date(self, httpserver: HTTPServer, client: Client) -> None:
        """429 -> RateLimitError with retry_after computed from an HTTP date."""
        when = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=120)
        httpserver.expect_request("/v2/views").respond_with_json(
            {}, status=429, headers={"Retry-After": format_datetime(when, usegmt=True)}
        )
        with pytest.raises(RateLimitError) as info:
            client.views.list()
        assert info.value.retry_after is not None
        assert 100 <= info.value.retry_after <= 121

    def test_rate_limit_without_header(self, httpserver: HTTPServer, client: Client) -> None:
        """429 without Retry-After gives retry_after None."""
        httpserver.expect_request("/v2/views").respond_with_json({}, status=429)
        with pytest.raises(RateLimitError) as info:
            client.views.list()
        assert info.value.retry_after is None

    def test_not_found(self, httpserver: HTTPServer, client: Client) -> None:
        """404 -> NotFoundError."""
        httpserver.expect_request("/v1/datasets/nope/ingest").respond_with_json(
            {"message": "dataset not found"}, status=404
        )
        with pytest.raises(NotFoundError) as info:
            client.ingest("nope", [{"a": 1}])
        assert info.value.status == 404
        assert str(info.value) == ("dataset 'nope' not found (HTTP 404): create it (loghandler "
                                   "datasets create nope) or check the name and url=")
        assert_clean(info.value)

    @pytest.mark.parametrize("status", [500, 502, 503])
    def test_html_error_page(self, httpserver: HTTPServer, client: Client, status: int) -> None:
        """A proxy's HTML error page -> ApiError with a short text excerpt, no JSON error."""
        page = ("<!DOCTYPE html><html><head><title>502 Bad Gateway</title></head><body>"
                "<h1>Bad Gateway</h1>" + "<p>upstream went away</p>" * 500 + "</body></html>")
        httpserver.expect_request("/v2/views").respond_with_data(
            page, status=status, content_type="text/html"
        )
        with pytest.raises(ApiError) as info:
            client.views.list()
        err = info.value
        assert type(err) is ApiError
        assert err.status == status
        message = str(err)
        assert "Bad Gateway" in message
        assert "<h1>" not in message
        assert len(message) < 400
        assert "Expecting value" not in message and "JSONDecode" not in message
        assert isinstance(err.body, str) and len(err.body) <= 2000
        assert err.__cause__ is None and err.__context__ is None

    def test_other_status_with_json_body(self, httpserver: HTTPServer, client: Client) -> None:
        """Any other non-2xx -> ApiError with .status and the parsed .body."""
        httpserver.expect_request("/v2/views/1", method="PUT").respond_with_json(
            {"error": "invalid body", "field": "aplQuery"}, status=422
        )
        with pytest.raises(ApiError) as info:
            client.request("PUT", "/v2/views/1", {"name": "x"})
        assert info.value.status == 422
        assert info.value.body == {"error": "invalid body", "field": "aplQuery"}
        assert "invalid body" in str(info.value)

    def test_redirect_not_followed(self, httpserver: HTTPServer, client: Client) -> None:
        """A redirect is an ApiError; the client does not follow it (the token would go along)."""
        httpserver.expect_request("/v2/views").respond_with_data(
            "", status=301, headers={"Location": httpserver.url_for("/elsewhere")}
        )
        httpserver.expect_request("/elsewhere").respond_with_json([])
        with pytest.raises(ApiError) as info:
            client.views.list()
        assert info.value.status == 301
        assert "redirect" in str(info.value)
        assert [raw_uri(req) for req, _ in httpserver.log] == ["/v2/views"]

    def test_huge_response_is_bounded(self, httpserver: HTTPServer, client: Client) -> None:
        """A huge answer is read only up to a bound."""
        httpserver.expect_request("/v2/views").respond_with_data(
            b"x" * (3 * MAX_RESPONSE_BYTES), status=500, content_type="text/plain"
        )
        with pytest.raises(ApiError) as info:
            client.views.list()
        assert len(info.value.body) <= 2000
        assert len(str(info.value)) < 400

    def test_huge_success_response_is_bounded(
        self, httpserver: HTTPServer, client: Client
    ) -> None:
        """send() never keeps more than MAX_RESPONSE_BYTES of an answer."""
        httpserver.expect_request("/big").respond_with_data(b"[" + b"1," * MAX_RESPONSE_BYTES)
        resp = client.send("GET", "/big")
        assert resp.status == 200
        assert isinstance(resp.body, str) and len(resp.body) <= 2000

    def test_deeply_nested_json_answer(self, httpserver: HTTPServer, client: Client) -> None:
        """An absurdly nested JSON answer is not a RecursionError."""
        httpserver.expect_request("/v2/views").respond_with_data(
            "[" * 100_000 + "]" * 100_000, status=500, content_type="application/json"
        )
        with pytest.raises(ApiError):
            client.views.list()

    def test_deeply_nested_echo_is_redacted(self, client: Client) -> None:
        """redact reaches a token however deep the service buried it in its body."""
        body: object = {"token": TOKEN}
        for _ in range(100):
            body = [body]
        assert_clean(ApiError(400, body))

    def test_errors_pickle(self) -> None:
        """ApiError subclasses survive pickling (multiprocessing, futures) with their fields."""
        err = RateLimitError(429, {"message": "m"}, "rate limited", retry_after=3.0)
        copy = pickle.loads(pickle.dumps(err))
        assert type(copy) is RateLimitError
        assert (copy.status, copy.body, copy.retry_after, str(copy)) == (
            429, {"message": "m"}, 3.0, "rate limited"
        )


@pytest.fixture
def closed_port() -> int:
    """A loopback port where nothing listens."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def slow_server() -> Iterator[tuple[HTTPServer, threading.Event]]:
    """A server whose handler waits until the test ends (set at teardown), so a client times out."""
    release = threading.Event()
    server = HTTPServer(host="127.0.0.1", port=0, threaded=True)

    def handler(request: Request) -> Response:
        release.wait(10)
        return Response("[]", content_type="application/json")

    server.expect_request("/v2/views").respond_with_handler(handler)
    server.start()
    try:
        yield server, release
    finally:
        release.set()
        server.stop()


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[HTTPServer]:
    """An https server on loopback with a self-signed certificate no CA vouches for."""
    cert, key = self_signed_certificate(tmp_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server = HTTPServer(host="127.0.0.1", port=0, ssl_context=context)
    server.expect_request("/v2/views").respond_with_json([])
    server.start()
    try:
        yield server
    finally:
        server.stop()


class TestTransport:
    def test_tls_is_verified(self, tls_server: HTTPServer) -> None:
        """An untrusted certificate is a TransportError: TLS verification is always on."""
        client = Client(TOKEN, url=tls_server.url_for("/"), timeout=5)
        assert client.url.startswith("https://")
        with pytest.raises(TransportError, match="TLS") as info:
            client.views.list()
        assert_clean(info.value)
        assert tls_server.log == []  # the request (and its token) never got through

    def test_refused_connection(self, closed_port: int) -> None:
        """A closed port -> TransportError that says the connection was refused."""
        client = Client(TOKEN, url=f"http://127.0.0.1:{closed_port}")
        with pytest.raises(TransportError) as info:
            client.views.list()
        message = str(info.value)
        assert "refused" in message
        assert "in time" not in message
        assert "object at 0x" not in message
        assert f"127.0.0.1:{closed_port}" in message
        assert_clean(info.value)

    def test_time_out(self, slow_server: tuple[HTTPServer, threading.Event]) -> None:
        """No answer within the client's timeout -> TransportError, promptly."""
        server, _ = slow_server
        client = Client(TOKEN, url=server.url_for("/"), timeout=0.3)
        start = time.monotonic()
        with pytest.raises(TransportError) as info:
            client.views.list()
        assert time.monotonic() - start < 5
        assert str(info.value) == f"no answer from {client.url} within 0.3 s"
        assert_clean(info.value)

    def test_per_request_timeout(self, slow_server: tuple[HTTPServer, threading.Event]) -> None:
        """send(timeout=) shortens the client's timeout for one request."""
        server, _ = slow_server
        client = Client(TOKEN, url=server.url_for("/"), timeout=30)
        start = time.monotonic()
        with pytest.raises(TransportError):
            client.send("GET", "/v2/views", timeout=0.2)
        assert time.monotonic() - start < 5

    def test_send_returns_non_2xx(self, httpserver: HTTPServer, client: Client) -> None:
        """send() returns any answer (an Answer, its wait read), leaving the error mapping to
        raise_for_status."""
        httpserver.expect_request("/x").respond_with_json(
            {"m": 1}, status=503, headers={"Retry-After": "2"}
        )
        resp = client.send("GET", "/x")
        assert (resp.status, resp.body, resp.wait) == (503, {"m": 1}, 2.0)

    def test_keep_alive_pool_reused(self) -> None:
        """One pool serves every request of a client: three requests, one connection; close()
        ends it, and the next request opens another."""
        from faultserver import FaultServer

        with FaultServer() as srv:
            client = Client(TOKEN, url=srv.url)
            for i in range(3):
                client.ingest("ds", [{"i": i}])
            assert srv.accepted == 1
            client.close()
            assert srv.wait_connections(0, 5), "close() left the connection open"
            client.ingest("ds", [{"i": 3}])
            assert srv.accepted == 2
            client.close()

    def test_close_then_reuse(self, httpserver: HTTPServer, client: Client) -> None:
        """close() drops the connections; the client reconnects when used again."""
        httpserver.expect_request("/v2/views").respond_with_json([])
        client.views.list()
        client.close()
        assert client.views.list() == []


class TestIngest:
    def test_one_post_with_json_array(self, httpserver: HTTPServer, client: Client) -> None:
        """ingest() makes one POST whose body is a JSON array of the events."""
        bodies: list[bytes] = []

        def handler(request: Request) -> Response:
            bodies.append(request.get_data())
            return Response('{"ingested": 2}', content_type="application/json")

        httpserver.expect_request("/v1/datasets/logs/ingest", method="POST").respond_with_handler(
            handler
        )
        answer = client.ingest("logs", [{"a": 1}, {"b": "two"}])
        assert answer == {"ingested": 2}
        assert len(bodies) == 1
        assert json.loads(bodies[0]) == [{"a": 1}, {"b": "two"}]

    def test_generator_of_events(self, httpserver: HTTPServer, client: Client) -> None:
        """Any iterable of events works, including an empty one (an empty array)."""
        bodies: list[bytes] = []
        httpserver.expect_request("/v1/datasets/logs/ingest").respond_with_handler(
            lambda r: (bodies.append(r.get_data()), Response("{}"))[1]
        )
        client.ingest("logs", ({"i": i} for i in range(3)))
        client.ingest("logs", [])
        assert [json.loads(b) for b in bodies] == [[{"i": 0}, {"i": 1}, {"i": 2}], []]

    @pytest.mark.parametrize(
        ("name", "quoted"),
        [("a/b", "a%2Fb"), ("my logs", "my%20logs"), ("x?y=1", "x%3Fy%3D1"), ("h#f", "h%23f"),
         ("../v2/views", "..%2Fv2%2Fviews"), ("ü", "%C3%BC"), ("%41", "%2541")],
    )
    def test_dataset_is_percent_quoted(
        self, httpserver: HTTPServer, client: Client, name: str, quoted: str
    ) -> None:
        """'/', spaces, '?' and '#' in a dataset name cannot change the path."""
        httpserver.expect_request(re.compile(r"^/.*$")).respond_with_json({})
        client.ingest(name, [{"a": 1}])
        assert [raw_uri(req) for req, _ in httpserver.log] == [f"/v1/datasets/{quoted}/ingest"]
        assert dataset_path(name) == f"/v1/datasets/{quoted}/ingest"

    @pytest.mark.parametrize("name", ["", None, 3])
    def test_empty_dataset_name(self, client: Client, name: object) -> None:
        """An empty (or non-string) dataset name is a ConfigurationError, before any request."""
        with pytest.raises(ConfigurationError):
            client.ingest(name, [{"a": 1}])  # type: ignore[arg-type]

    @pytest.mark.parametrize("events", [{"a": 1}, "text", b"bytes"])
    def test_events_must_be_a_list(self, client: Client, events: object) -> None:
        """One dict (or a string) instead of a list of events is a ConfigurationError."""
        with pytest.raises(ConfigurationError):
            client.ingest("logs", events)  # type: ignore[arg-type]

    def test_non_json_values_encoded(self, httpserver: HTTPServer, client: Client) -> None:
        """Values JSON cannot carry are sent per the encoder's rules, never refused."""
        bodies: list[bytes] = []
        httpserver.expect_request("/v1/datasets/logs/ingest").respond_with_handler(
            lambda r: (bodies.append(r.get_data()), Response("{}"))[1]
        )
        cyclic: dict = {"name": "c"}
        cyclic["self"] = cyclic
        event = {
            "when": dt.datetime(2024, 5, 1, 12, 30, tzinfo=dt.timezone.utc),
            "day": dt.date(2024, 5, 1),
            "price": decimal.Decimal("1.10"),
            "id": uuid.UUID(int=1),
            "raw": b"\xffok",
            "tags": {"x"},
            "pair": (1, 2),
            "nan": float("nan"),
            "cyclic": cyclic,
            5: "int key",
        }
        client.ingest("logs", [event])
        (sent,) = json.loads(bodies[0])
        assert sent == {
            "when": "2024-05-01T12:30:00+00:00",
            "day": "2024-05-01",
            "price": "1.10",
            "id": "00000000-0000-0000-0000-000000000001",
            "raw": "\\xffok",
            "tags": ["x"],
            "pair": [1, 2],
            "nan": None,
            "cyclic": {"name": "c", "self": "<cycle>"},
            "5": "int key",
        }


class TestRetryAfter:
    @pytest.mark.parametrize(
        ("value", "expected"),
        [(None, None), ("", None), ("3", 3.0), (" 2.5 ", 2.5), ("-4", None), ("0", None),
         ("-0", None), ("nan", None), ("inf", None), ("-inf", None), ("1e12", None),
         ("31622400", 31622400.0), ("31622401", None), ("soon", None),
         ("Wed, 21 Oct 2015 07:28:00 GMT", None)],
    )
    def test_parse(self, value: str | None, expected: float | None) -> None:
        """Retry-After: delta-seconds or an HTTP date; what is no real wait (negative, zero,
        past, non-finite, more than a year) and garbage -> None, as if absent."""
        assert parse_retry_after(value) == expected

    def test_future_date(self) -> None:
        """An HTTP date in the future gives the seconds until then."""
        now = 1_700_000_000.0
        when = format_datetime(dt.datetime.fromtimestamp(now + 30, dt.timezone.utc), usegmt=True)
        assert parse_retry_after(when, now=now) == pytest.approx(30, abs=1)


class TestTokenHygiene:
    def test_redact_scrubs_registered_tokens(self) -> None:
        """output.redact removes every token a Client was built with."""
        Client(TOKEN, url="https://api.example")
        assert redact(f"a {TOKEN} b {TOKEN}") == "a *** b ***"

    def test_redact_longest_first(self) -> None:
        """A token containing another registered one is removed whole."""
        Client("abcd", url="https://api.example")
        Client("abcd-LONGER-SECRET", url="https://api.example")
        assert redact("x abcd-LONGER-SECRET y") == "x *** y"

    def test_shared_client_is_shared(self) -> None:
        """shared_client() returns one Client per configuration, with the token hidden."""
        a = shared_client(token=TOKEN, url="https://api.example")
        b = shared_client(token=TOKEN, url="https://api.example/")
        c = shared_client(token=TOKEN, url="https://other.example")
        assert a is b and a is not c
        assert TOKEN not in repr(a)


def test_a_client_works_in_a_forked_child(httpserver: HTTPServer) -> None:
    """The package's one at-fork hook renews the client's watchdog and pools: with the
    watchdog's lock held at fork (as a thread arming a request may hold it), a request from the
    forked child still goes through instead of waiting for that lock forever."""
    import os
    import signal

    from loghandler._wire import watchdog

    httpserver.expect_request("/v1/datasets/ds/ingest").respond_with_json({"ingested": 1})
    client = Client(TOKEN, url=httpserver.url_for("").rstrip("/"))
    client.ingest("ds", [{"i": 0}])  # the parent's pool and watchdog now exist
    # the watchdog's lock held across the fork: the state the child must recover from, made on
    # purpose.
    with watchdog.watchdog._cond:  # noqa: SLF001
        pid = os.fork()
        if pid == 0:  # the child: exit status 0 only when its request got through
            code = 1
            try:
                signal.alarm(10)  # a child stuck on the parent's lock dies instead
                client.ingest("ds", [{"i": 1}])
                code = 0
            finally:
                os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert len(httpserver.log) == 2
    client.close()
