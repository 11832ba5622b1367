"""The local service, endpoint by endpoint, and LocalService with Client round-trips."""

from __future__ import annotations

import gzip
import http.client
import json
import logging
import sys
import time
from typing import Any

import pytest
from helpers import service_store

import loghandler
from loghandler.testing import LocalService

TOKEN = "svc-test-token"
VIEW = {
    "id": "v1",
    "name": "Errors",
    "aplQuery": "['app'] | where level == 'error'",
    "datasets": ["app"],
    "description": "all errors",
    "sharedByOrg": "org-1",
    "sharedByOrgName": "Org One",
}


@pytest.fixture
def svc_options() -> dict[str, Any]:
    return {"token": TOKEN, "views": [VIEW], "max_body_bytes": 4096}


def call(svc: LocalService, method: str, path: str, body: Any = None, *,
         token: str | None = TOKEN, headers: dict[str, str] | None = None,
         raw: bytes | None = None) -> tuple[int, Any, dict[str, str]]:
    """One request on a fresh connection; (status, parsed JSON body, headers)."""
    host, port = svc.url.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    hdrs = {"Content-Type": "application/json"}
    if token is not None:
        hdrs["Authorization"] = f"Bearer {token}"
    hdrs.update(headers or {})
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    try:
        conn.request(method, path, body=data, headers=hdrs)
        resp = conn.getresponse()
        payload = resp.read()
        return resp.status, json.loads(payload), dict(resp.getheaders())
    finally:
        conn.close()


def ingest_path(dataset: str = "app") -> str:
    return f"/v1/datasets/{dataset}/ingest"


def sent(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events as a client sent them: without the ``_time`` the service gave them."""
    return [{k: v for k, v in e.items() if k != "_time"} for e in events]


class TestIngest:
    def test_stores_events_in_arrival_order(self, svc: LocalService) -> None:
        """Two posts are stored in order, and the answer counts what was ingested."""
        status, body, _ = call(svc, "POST", ingest_path(), [{"n": 1}, {"n": 2}])
        assert status == 200
        assert body["ingested"] == 2 and body["failed"] == 0
        call(svc, "POST", ingest_path(), [{"n": 3}])
        assert [e["n"] for e in svc.events("app")] == [1, 2, 3]
        assert svc.events("other") == []

    def test_gzip_body(self, svc: LocalService) -> None:
        """A gzip body with Content-Encoding: gzip is decompressed."""
        raw = gzip.compress(json.dumps([{"zipped": True}]).encode())
        status, body, _ = call(svc, "POST", ingest_path(), raw=raw,
                               headers={"Content-Encoding": "gzip"})
        assert (status, body["ingested"]) == (200, 1)
        assert sent(svc.events("app")) == [{"zipped": True}]

    def test_broken_gzip_is_400(self, svc: LocalService) -> None:
        """A body that claims gzip but is not gzip is a 400 naming gzip."""
        status, body, _ = call(svc, "POST", ingest_path(), raw=b"not gzip at all",
                               headers={"Content-Encoding": "gzip"})
        assert status == 400 and "gzip" in body["message"]
        truncated = gzip.compress(json.dumps([{"a": 1}] * 50).encode())[:-12]
        status, body, _ = call(svc, "POST", ingest_path(), raw=truncated,
                               headers={"Content-Encoding": "gzip"})
        assert status == 400 and "gzip" in body["message"]
        assert svc.events("app") == []

    @pytest.mark.parametrize(("raw", "words"), [
        (b"{not json", "not valid JSON"),
        (b'{"a": 1} {"b": ', "not valid JSON"),
        (b'[{"a": NaN}]', "not valid JSON"),
        (b"", "empty"),
        (b"\xff\xfe\x00garbage", "not valid JSON"),
    ])
    def test_bad_bodies_are_400_and_store_nothing(self, svc: LocalService, raw: bytes,
                                                   words: str) -> None:
        """Each kind of bad body gets a 400 whose JSON error names the problem."""
        status, body, _ = call(svc, "POST", ingest_path(), raw=raw)
        assert status == 400
        assert words in body["message"] and body["code"] == 400
        assert svc.events("app") == []

    def test_empty_array_is_fine(self, svc: LocalService) -> None:
        """[] is a valid (empty) batch."""
        status, body, _ = call(svc, "POST", ingest_path(), [])
        assert (status, body["ingested"]) == (200, 0)

    def test_body_over_limit_is_413(self, svc: LocalService) -> None:
        """A body over max_body_bytes is refused by its Content-Length, nothing stored."""
        events = [{"pad": "x" * 100}] * 60
        status, body, _ = call(svc, "POST", ingest_path(), events)
        assert status == 413 and "limit" in body["message"]
        assert svc.events("app") == []

    def test_gzip_bomb_is_413(self, svc: LocalService) -> None:
        """A small gzip body that expands over the limit is a 413 too."""
        raw = gzip.compress(json.dumps([{"pad": "x" * 100_000}]).encode())
        assert len(raw) < 4096
        status, _, _ = call(svc, "POST", ingest_path(), raw=raw,
                            headers={"Content-Encoding": "gzip"})
        assert status == 413
        assert svc.events("app") == []

    def test_unknown_content_encoding_is_415(self, svc: LocalService) -> None:
        """Only gzip, zstd and identity are understood."""
        status, body, _ = call(svc, "POST", ingest_path(), [{"a": 1}],
                               headers={"Content-Encoding": "br"})
        assert status == 415 and "Content-Encoding" in body["message"]

    def test_dataset_name_is_url_decoded(self, svc: LocalService) -> None:
        """A quoted dataset name is stored under its real name; one that decodes to a name
        the datasets API refuses (a space) is refused here too (issue 45)."""
        assert call(svc, "POST", ingest_path("my%2Dlogs"), [{"a": 1}])[0] == 200
        assert sent(svc.events("my-logs")) == [{"a": 1}]
        assert call(svc, "POST", ingest_path("my%20logs"), [{"a": 1}])[0] == 400

    def test_wrong_method_is_405(self, svc: LocalService) -> None:
        """GET on the ingest path is not allowed."""
        status, body, _ = call(svc, "GET", ingest_path())
        assert status == 405 and "POST" in body["message"]


class TestAuth:
    @pytest.mark.parametrize("token", [None, "wrong", ""])
    def test_missing_or_wrong_token_is_403(self, svc: LocalService, token: str | None) -> None:
        """No token, a wrong one or an empty one: 403 with a JSON error, nothing stored."""
        status, body, _ = call(svc, "POST", ingest_path(), [{"a": 1}], token=token)
        assert status == 403 and body["code"] == 403 and "token" in body["message"]
        assert call(svc, "GET", "/v2/views", token=token)[0] == 403
        assert svc.events("app") == []

    def test_basic_scheme_is_refused(self, svc: LocalService) -> None:
        """Only the bearer scheme is accepted."""
        status, _, _ = call(svc, "GET", "/v2/views", token=None,
                            headers={"Authorization": f"Basic {TOKEN}"})
        assert status == 403


class TestViews:
    def test_list(self, svc: LocalService) -> None:
        """GET /v2/views lists the seeded view with its id and six fields."""
        status, body, headers = call(svc, "GET", "/v2/views")
        assert status == 200
        assert headers["Content-Type"] == "application/json"
        assert body == [VIEW]

    def test_put_replaces_the_view(self, svc: LocalService) -> None:
        """A full PUT replaces the view and answers it with its id."""
        new = {**VIEW, "name": "Renamed", "datasets": ["a", "b"]}
        del new["id"]
        status, body, _ = call(svc, "PUT", "/v2/views/v1", new)
        assert status == 200
        assert body == {**new, "id": "v1"}
        assert svc.views[0].name == "Renamed"

    @pytest.mark.parametrize("field", ["aplQuery", "name"])
    def test_put_missing_required_field_is_400(self, svc: LocalService, field: str) -> None:
        """name and aplQuery are required; the error names the missing one."""
        partial = {k: v for k, v in VIEW.items() if k not in ("id", field)}
        status, body, _ = call(svc, "PUT", "/v2/views/v1", partial)
        assert status == 400 and field in body["message"] and body["code"] == 400
        assert svc.views[0].to_dict() == VIEW

    def test_put_with_only_the_required_fields(self, svc: LocalService) -> None:
        """A PUT of name and aplQuery replaces the view; the other fields become empty."""
        status, body, _ = call(svc, "PUT", "/v2/views/v1", {"name": "N", "aplQuery": "q"})
        assert status == 200
        assert body == {"id": "v1", "name": "N", "aplQuery": "q", "datasets": [],
                        "description": "", "sharedByOrg": "", "sharedByOrgName": ""}
        assert svc.views[0].to_dict() == body

    @pytest.mark.parametrize(("field", "value"), [
        ("name", 3), ("datasets", "app"), ("datasets", ["a", 1]), ("description", 5),
        ("aplQuery", ["x"]), ("sharedByOrg", True),
    ])
    def test_put_wrong_type_is_400(self, svc: LocalService, field: str, value: Any) -> None:
        """A field of the wrong JSON type is refused and nothing changes."""
        status, body, _ = call(svc, "PUT", "/v2/views/v1", {**VIEW, field: value})
        assert status == 400 and field in body["message"]
        assert svc.views[0].to_dict() == VIEW

    def test_put_body_not_an_object_is_400(self, svc: LocalService) -> None:
        """The PUT body must be a JSON object."""
        assert call(svc, "PUT", "/v2/views/v1", [VIEW])[0] == 400
        assert call(svc, "PUT", "/v2/views/v1", raw=b"{oops")[0] == 400

    def test_put_unknown_id_is_404(self, svc: LocalService) -> None:
        """Updating a view that does not exist is a 404."""
        status, body, _ = call(svc, "PUT", "/v2/views/nope", VIEW)
        assert status == 404 and "nope" in body["message"]


class TestProtocol:
    def test_unknown_path_is_404_json(self, svc: LocalService) -> None:
        """Unknown paths get a JSON 404."""
        status, body, _ = call(svc, "GET", "/v1/nothing")
        assert status == 404 and body["code"] == 404 and "/v1/nothing" in body["message"]

    def test_bad_content_length_is_400(self, svc: LocalService) -> None:
        """A Content-Length that is not a number is a 400."""
        status, _, _ = call(svc, "POST", ingest_path(), raw=b"[]",
                            headers={"Content-Length": "abc"})
        assert status == 400

    def test_keep_alive_survives_a_rejected_body(self, svc: LocalService) -> None:
        """After a 403 or 413 the same connection still answers the next request."""
        host, port = svc.url.removeprefix("http://").rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        try:
            for token, body, expected in (
                ("bad", b'[{"a": 1}]', 403),
                (TOKEN, json.dumps([{"p": "x" * 5000}]).encode(), 413),
                (TOKEN, b'[{"a": 1}]', 200),
            ):
                conn.request("POST", ingest_path(), body=body,
                             headers={"Authorization": f"Bearer {token}"})
                resp = conn.getresponse()
                resp.read()
                assert resp.status == expected
        finally:
            conn.close()
        assert sent(svc.events("app")) == [{"a": 1}]

    def test_a_small_answer_comes_in_one_segment(self, svc: LocalService) -> None:
        """An ingest answer's head and body leave in one write, as a real service writes a
        small answer: the first receive after the request holds all of it (written in two,
        the head came alone and a client paid a second receive: docs/performance.md)."""
        import socket

        body = b'[{"a": 1}]'
        request = (f"POST {ingest_path()} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                   f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n"
                   f"Content-Length: {len(body)}\r\n\r\n").encode() + body
        port = int(svc.url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            for _ in range(3):  # each request of a kept-alive connection
                s.sendall(request)
                first = s.recv(65536)
                head, sep, rest = first.partition(b"\r\n\r\n")
                assert head.startswith(b"HTTP/1.1 200") and sep
                length = int(next(line.split(b":", 1)[1] for line in head.split(b"\r\n")
                                  if line.lower().startswith(b"content-length:")))
                assert length > 0 and len(rest) == length and json.loads(rest)["ingested"] == 1
        assert len(svc.events("app")) == 3

    def test_expect_100_continue_is_answered_before_the_body(self, svc: LocalService) -> None:
        """A client that waits for ``100 Continue`` before sending its body gets it at once,
        not held back with the answer in the buffered writer."""
        import socket

        body = b'[{"a": 1}]'
        head = (f"POST {ingest_path()} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n"
                f"Expect: 100-continue\r\nContent-Length: {len(body)}\r\n\r\n").encode()
        port = int(svc.url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(head)
            assert s.recv(65536).startswith(b"HTTP/1.1 100")  # before any byte of the body
            s.sendall(body)
            answer = b""
            while b"ingested" not in answer:
                chunk = s.recv(65536)
                assert chunk
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 200") and len(svc.events("app")) == 1

    def test_requests_are_recorded(self, svc: LocalService) -> None:
        """svc.requests records method, path, status, dataset and event count."""
        call(svc, "POST", ingest_path(), [{"a": 1}, {"b": 2}])
        call(svc, "GET", "/v2/views", token="bad")
        first, second = svc.requests
        assert (first.method, first.path, first.status, first.dataset, first.events) == (
            "POST", "/v1/datasets/app/ingest", 200, "app", 2)
        assert (second.status, second.events) == (403, 0) and second.error
        svc.clear()
        assert svc.requests == [] and svc.events("app") == []


class TestLocalServiceWithClient:
    def test_ingest_and_views_round_trip(self, svc: LocalService) -> None:
        """Client.ingest, views.list and views.update (full and merged) work against it."""
        with svc.client() as client:
            assert client.ingest("app", [{"a": 1}])["ingested"] == 1
            views = client.views.list()
            assert [v.to_dict() for v in views] == [VIEW]
            merged = client.views.update("v1", description="changed")
            assert merged.description == "changed" and merged.name == "Errors"
            full = loghandler.View(name="N", apl_query="q", datasets=["x"], description="d",
                                   shared_by_org="o", shared_by_org_name="O")
            replaced = client.views.update("v1", full)
            assert replaced.id == "v1" and replaced.datasets == ["x"]
            assert svc.views[0].name == "N"
            with pytest.raises(loghandler.NotFoundError):
                client.views.update("missing", full)
        assert sent(svc.events("app")) == [{"a": 1}]

    def test_wrong_token_raises_authentication_error(self, svc: LocalService) -> None:
        """A client with another token gets AuthenticationError."""
        with loghandler.Client("another-token", url=svc.url) as client, pytest.raises(
                loghandler.AuthenticationError):
            client.views.list()

    def test_handler_ships_to_it(self, svc: LocalService) -> None:
        """An IngestHandler pointed at the service delivers its records (gzip, batched)."""
        handler = loghandler.IngestHandler("app", url=svc.url, token=svc.token)
        log = logging.getLogger("test_service.handler")
        log.propagate = False
        log.addHandler(handler)
        try:
            for i in range(50):
                log.warning("event %d", i, extra={"i": i})
            assert handler.flush(5.0)
        finally:
            log.removeHandler(handler)
            handler.close()
        events = svc.events("app")
        assert [e["i"] for e in events] == list(range(50))
        assert events[0]["message"] == "event 0" and events[0]["level"] == "warning"

    def test_engine_splits_on_413(self) -> None:
        """With a small body limit the engine's 413 split still delivers everything."""
        with LocalService(max_body_bytes=2000) as svc:
            shipper = loghandler.Shipper(svc.client(), "app", compression=None)
            try:
                for i in range(40):
                    shipper.submit({"i": i, "pad": "y" * 80})
                assert shipper.flush(5.0)
            finally:
                shipper.close()
            assert [e["i"] for e in svc.events("app")] == list(range(40))
            assert any(r.status == 413 for r in svc.requests)

    def test_views_accept_view_objects_and_dicts(self) -> None:
        """Seeds may be View objects or dicts; views without id get one."""
        with LocalService(views=[loghandler.View(name="a"), {**VIEW}]) as svc:
            views = svc.views
        assert [(v.id, v.name) for v in views] == [("1", "a"), ("v1", "Errors")]

    def test_bad_seed_view_is_a_configuration_error(self) -> None:
        """A seed view with a field of the wrong type is refused at construction."""
        with pytest.raises(loghandler.ConfigurationError, match="datasets"):
            LocalService(views=[{"name": "x", "datasets": "not-a-list"}])
        with LocalService(views=[{"name": "only a name"}]) as svc:
            assert svc.views[0].to_dict() == {**VIEW, "id": "1", "name": "only a name",
                                              "aplQuery": "", "datasets": [], "description": "",
                                              "sharedByOrg": "", "sharedByOrgName": ""}

    def test_db_file_survives_restart(self, tmp_path: Any) -> None:
        """With db=FILE, events and view updates survive a restart; seeds do not overwrite."""
        db = str(tmp_path / "data.sqlite")
        with LocalService(db=db, views=[VIEW]) as svc, svc.client() as client:
            client.ingest("app", [{"kept": True}])
            client.views.update("v1", name="Updated")
        with LocalService(db=db, views=[VIEW]) as svc:
            assert sent(svc.events("app")) == [{"kept": True}]
            assert [v.name for v in svc.views] == ["Updated"]

    def test_wait_for_events(self, svc: LocalService) -> None:
        """wait_for_events returns once the events are there, and times out otherwise."""
        call(svc, "POST", ingest_path(), [{"a": 1}])
        assert sent(svc.wait_for_events("app", 1, timeout=1)) == [{"a": 1}]
        with pytest.raises(TimeoutError):
            svc.wait_for_events("app", 2, timeout=0.05)

    def test_stop_is_idempotent_and_repr_hides_token(self) -> None:
        """stop() twice is fine; repr never shows the token."""
        svc = LocalService(token="hidden-token-xyz")
        assert "hidden-token-xyz" not in repr(svc)
        svc.stop()
        svc.stop()
        with pytest.raises(loghandler.TransportError), loghandler.Client(
                "hidden-token-xyz", url=svc.url, timeout=2) as client:
            client.views.list()


def test_pytest_fixture(loghandler_service: LocalService) -> None:
    """The plugin's loghandler_service fixture is a started LocalService."""
    with loghandler_service.client() as client:
        client.ingest("fixture", [{"ok": 1}])
    assert sent(loghandler_service.events("fixture")) == [{"ok": 1}]
    assert loghandler_service.url.startswith("http://127.0.0.1:")


# --------------------------------------------------------------------------- faithful ingest

def raw_request(svc: LocalService, head: bytes, body: bytes = b"") -> tuple[int, Any]:
    """Send bytes as they are (framing the stdlib client would not send); (status, JSON)."""
    host, port = svc.url.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    conn.connect()
    assert conn.sock is not None
    try:
        conn.sock.sendall(head + b"\r\n" + body)
        resp = http.client.HTTPResponse(conn.sock, method="POST")
        resp.begin()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def ingest_head(*headers: str, path: str = "/v1/datasets/app/ingest") -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: x", f"Authorization: Bearer {TOKEN}", *headers]
    return "".join(line + "\r\n" for line in lines).encode("latin-1")


STATUS_KEYS = {"ingested", "failed", "failures", "processedBytes", "blocksCreated", "walLength"}


class TestIngestShapes:
    @pytest.mark.parametrize(("raw", "ctype"), [
        (b'[{"n": 1}, {"n": 2}]', "application/json"),
        (b'{"n": 1}\n{"n": 2}\n', "application/x-ndjson"),
        (b'{"n": 1}\n{"n": 2}', "application/json"),
        (b"n\n1\n2\n", "text/csv"),
    ])
    def test_formats(self, svc: LocalService, raw: bytes, ctype: str) -> None:
        """JSON array, NDJSON (both content types) and CSV each store two events."""
        status, body, _ = call(svc, "POST", ingest_path(), raw=raw,
                               headers={"Content-Type": ctype})
        assert status == 200 and set(body) == STATUS_KEYS
        assert (body["ingested"], body["failed"], body["failures"]) == (2, 0, [])
        assert body["processedBytes"] == len(raw)
        assert [str(e["n"]) for e in svc.events("app")] == ["1", "2"]

    def test_single_object(self, svc: LocalService) -> None:
        """One JSON object is one event."""
        status, body, _ = call(svc, "POST", ingest_path(), {"one": True})
        assert (status, body["ingested"]) == (200, 1)
        assert sent(svc.events("app")) == [{"one": True}]

    def test_gzip_ndjson(self, svc: LocalService) -> None:
        """NDJSON compressed with gzip (what axiom-py sends)."""
        raw = gzip.compress(b'{"a": 1}\n{"a": 2}')
        status, body, _ = call(svc, "POST", ingest_path(), raw=raw, headers={
            "Content-Type": "application/x-ndjson", "Content-Encoding": "gzip"})
        assert (status, body["ingested"], body["processedBytes"]) == (200, 2, 17)

    def test_zstd(self, svc: LocalService) -> None:
        """A zstd body is read when the zstandard package is installed."""
        zstandard = pytest.importorskip("zstandard")
        raw = zstandard.ZstdCompressor().compress(b'[{"z": 1}]')
        status, body, _ = call(svc, "POST", ingest_path(), raw=raw,
                               headers={"Content-Encoding": "zstd"})
        assert (status, body["ingested"]) == (200, 1)
        assert sent(svc.events("app")) == [{"z": 1}]

    def test_zstd_without_the_package_is_415(self, svc: LocalService,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
        """Without zstandard, a zstd body is a 415 that says what to install."""
        monkeypatch.setitem(sys.modules, "zstandard", None)  # import now raises ImportError
        status, body, _ = call(svc, "POST", ingest_path(), raw=b"\x28\xb5\x2f\xfd",
                               headers={"Content-Encoding": "zstd"})
        assert status == 415 and "pip install zstandard" in body["message"]

    def test_chunked(self, svc: LocalService) -> None:
        """A chunked body (no Content-Length) is read whole, also gzip-compressed."""
        host, port = svc.url.removeprefix("http://").rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        packed = gzip.compress(b'{"c": 3}')
        try:
            for chunks, headers in (
                ([b'[{"c": 1}', b', {"c": 2}', b"]"], {}),
                ([packed[:5], packed[5:]], {"Content-Encoding": "gzip"}),
            ):
                conn.request("POST", ingest_path(), body=iter(chunks), encode_chunked=True,
                             headers={"Authorization": f"Bearer {TOKEN}", **headers})
                resp = conn.getresponse()
                assert resp.status == 200, resp.read()
                resp.read()
        finally:
            conn.close()
        assert [e["c"] for e in svc.events("app")] == [1, 2, 3]

    def test_chunked_with_extensions_and_trailers(self, svc: LocalService) -> None:
        """Chunk extensions and trailer fields are allowed."""
        body = b'5;ext=1\r\n[{"a"\r\n6\r\n: 1}]\n\r\n0\r\nX-Trailer: 1\r\n\r\n'
        status, answer = raw_request(svc, ingest_head("Transfer-Encoding: chunked"), body)
        assert (status, answer["ingested"]) == (200, 1)

    @pytest.mark.parametrize("body", [b"zz\r\n[]\r\n0\r\n\r\n", b"1\r\n[]\r\n0\r\n\r\n"])
    def test_bad_chunked_is_400(self, svc: LocalService, body: bytes) -> None:
        """A malformed chunk size or a chunk longer than its size is a 400."""
        status, answer = raw_request(svc, ingest_head("Transfer-Encoding: chunked"), body)
        assert status == 400 and "chunked" in answer["message"]
        assert svc.events("app") == []

    def test_chunked_over_the_limit_is_413(self, svc: LocalService) -> None:
        """A chunked body over max_body_bytes is a 413 without reading it all."""
        chunk = b"x" * 3000
        body = b"%x\r\n%s\r\n" % (len(chunk), chunk) * 2 + b"0\r\n\r\n"
        status, answer = raw_request(svc, ingest_head("Transfer-Encoding: chunked"), body)
        assert status == 413 and answer["code"] == 413

    def test_rejected_chunked_body_keeps_the_connection(self, svc: LocalService) -> None:
        """A chunked body refused before it is read (403, 404) is skipped; the connection
        then answers the next request."""
        host, port = svc.url.removeprefix("http://").rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        big = [b'[{"p": "' + b"x" * 60_000 + b'"}, {"a": 1}]']
        try:
            for token, path, chunks, expected in (
                ("bad", ingest_path(), big, 403),
                (TOKEN, "/v9/none", big, 404),
                (TOKEN, ingest_path(), [b'[{"a": 1}]'], 200),
            ):
                conn.request("POST", path, body=iter(chunks), encode_chunked=True,
                             headers={"Authorization": f"Bearer {token}"})
                resp = conn.getresponse()
                resp.read()
                assert resp.status == expected
        finally:
            conn.close()
        assert sent(svc.events("app")) == [{"a": 1}]

    def test_other_transfer_encoding_is_501(self, svc: LocalService) -> None:
        """Transfer codings other than chunked are not implemented."""
        status, answer = raw_request(svc, ingest_head("Transfer-Encoding: gzip, chunked"),
                                     b"0\r\n\r\n")
        assert status == 501 and "Transfer-Encoding" in answer["message"]

    @pytest.mark.parametrize("value", ["²", "1²", "-1", "0x10", "1e3"])
    def test_non_ascii_digit_content_length_is_400(self, svc: LocalService, value: str) -> None:
        """Content-Length: ² (a digit to str.isdigit, not to int) is a 400, not a crash."""
        status, answer = raw_request(svc, ingest_head(f"Content-Length: {value}"), b"[]")
        assert status == 400 and "Content-Length" in answer["message"]

    def test_axiom_identity_encoding(self, svc: LocalService) -> None:
        """Content-Encoding: 1 (axiom-py's name for identity) is an uncompressed body."""
        status, body, _ = call(svc, "POST", ingest_path(), [{"a": 1}],
                               headers={"Content-Encoding": "1"})
        assert (status, body["ingested"]) == (200, 1)


class TestIngestStatus:
    def test_per_event_failures(self, svc: LocalService) -> None:
        """Bad times and non-objects are counted in failed with a reason; the rest stored."""
        batch = [{"n": 1, "_time": "2024-05-01T12:00:00+02:00"}, {"n": 2, "_time": "noon"},
                 "text", {"n": 3, "_time": 1714564800}, {"n": 4}]
        status, body, _ = call(svc, "POST", ingest_path(), batch)
        assert status == 200
        assert (body["ingested"], body["failed"], body["walLength"]) == (3, 2, 3)
        first, second = body["failures"]
        assert "noon" in first["error"] and "_time" in first["error"]
        assert "JSON object" in second["error"] and "a string" in second["error"]
        assert first["timestamp"].endswith("Z")
        events = svc.events("app")
        assert [e["n"] for e in events] == [1, 3, 4]
        assert events[0]["_time"] == "2024-05-01T10:00:00.000000Z"
        assert events[1]["_time"] == "2024-05-01T12:00:00.000000Z"
        assert events[2]["_time"] == first["timestamp"]  # the ingest time
        assert svc.requests[-1].failed == 2 and svc.requests[-1].events == 3

    def test_all_failed_is_still_200(self, svc: LocalService) -> None:
        """A body of only bad events is a 200 with failed == len(batch), nothing stored."""
        status, body, _ = call(svc, "POST", ingest_path(), [1, 2])
        assert (status, body["ingested"], body["failed"]) == (200, 0, 2)
        assert svc.events("app") == []

    def test_timestamp_parameters(self, svc: LocalService) -> None:
        """timestamp-field and timestamp-format choose and read the time."""
        path = ingest_path() + "?timestamp-field=ts&timestamp-format=2006-01-02+15:04:05"
        status, body, _ = call(svc, "POST", path, [{"ts": "2024-05-01 08:00:00"}])
        assert (status, body["ingested"]) == (200, 1)
        assert svc.events("app")[0]["_time"] == "2024-05-01T08:00:00.000000Z"
        host, port = svc.url.removeprefix("http://").rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        try:  # refused before its body is read: the body is skipped, the connection kept
            for query, expected in (("?timestamp-format=7", 400), ("", 200)):
                conn.request("POST", ingest_path() + query, body=b'[{"a": 1}]',
                             headers={"Authorization": f"Bearer {TOKEN}"})
                resp = conn.getresponse()
                answer = json.loads(resp.read())
                assert resp.status == expected and ("code" in answer) == (expected == 400)
        finally:
            conn.close()
        assert "timestamp-format" in call(
            svc, "POST", ingest_path() + "?timestamp-format=7", [{}])[1]["message"]

    def test_client_ingest_returns_the_status(self, svc: LocalService) -> None:
        """Client.ingest returns the whole status, failures included."""
        with svc.client() as client:
            status = client.ingest("app", [{"ok": 1}, {"bad": 1, "_time": "not a time"}])
        assert set(status) == STATUS_KEYS
        assert (status["ingested"], status["failed"]) == (1, 1)
        assert "not a time" in status["failures"][0]["error"]


class TestStrictDatasets:
    def test_only_declared_datasets_exist(self) -> None:
        """With datasets=[...] other names are the real service's 404."""
        with LocalService(token=TOKEN, datasets=["app"]) as svc:
            assert call(svc, "POST", ingest_path("app"), [{"a": 1}])[0] == 200
            status, body, _ = call(svc, "POST", ingest_path("typo"), [{"a": 1}])
            assert status == 404 and body["code"] == 404
            assert body["message"].startswith("dataset 'typo' not found: create it first")
            assert "loghandler datasets create typo" in body["message"]
            with svc.client() as client, pytest.raises(loghandler.NotFoundError,
                                                       match="'typo' not found"):
                client.ingest("typo", [{"a": 1}])
            assert svc.datasets() == {"app": 1}

    def test_without_datasets_any_name_is_created(self, svc: LocalService) -> None:
        """By default a dataset is created by its first ingest."""
        assert call(svc, "POST", ingest_path("new"), [{"a": 1}])[0] == 200
        assert svc.datasets() == {"new": 1}


class TestRateLimit:
    def test_headers_and_429(self) -> None:
        """rate_limit=N: every answer carries X-RateLimit-*; request N+1 in the minute is 429."""
        with LocalService(token=TOKEN, rate_limit=3) as svc:
            remaining = []
            for _ in range(3):
                status, _, headers = call(svc, "GET", "/v2/views")
                assert status == 200 and headers["X-RateLimit-Limit"] == "3"
                remaining.append(int(headers["X-RateLimit-Remaining"]))
            assert remaining == [2, 1, 0]
            status, body, headers = call(svc, "POST", ingest_path(), [{"a": 1}])
            assert status == 429 and body["code"] == 429 and "3 requests per minute" in (
                body["message"])
            assert headers["X-RateLimit-Remaining"] == "0"
            reset = int(headers["X-RateLimit-Reset"])
            assert time.time() < reset <= time.time() + 61
            assert svc.events("app") == []
            with svc.client() as client, pytest.raises(loghandler.RateLimitError):
                client.views.list()

    def test_no_limit_no_headers(self, svc: LocalService) -> None:
        """Without a limit there are no rate-limit headers."""
        _, _, headers = call(svc, "GET", "/v2/views")
        assert not any(h.lower().startswith("x-ratelimit") for h in headers)

    def test_window_resets(self) -> None:
        """A new window starts once the old one is over (fake clock)."""
        from loghandler._local.service import RateLimiter

        now = [1000.0]
        limiter = RateLimiter(2, clock=lambda: now[0])
        assert [limiter.take()[0] for _ in range(3)] == [True, True, False]
        assert limiter.take()[2] == 1060
        now[0] = 1060.0
        assert limiter.take() == (True, 1, 1120)
        with pytest.raises(ValueError):
            RateLimiter(0)


class TestErrorBodies:
    @pytest.mark.parametrize(("method", "path", "body", "token", "status"), [
        ("POST", "/v1/datasets/app/ingest", b"{bad", TOKEN, 400),
        ("POST", "/v1/datasets/app/ingest", b"[]", "wrong", 403),
        ("GET", "/nowhere", None, TOKEN, 404),
        ("GET", "/v2/views/none", None, TOKEN, 404),
        ("PATCH", "/v2/views", b"{}", TOKEN, 405),
        ("POST", "/v1/datasets/app/ingest", b"x" * 5000, TOKEN, 413),
    ])
    def test_code_and_message(self, svc: LocalService, method: str, path: str,
                              body: bytes | None, token: str, status: int) -> None:
        """Every error is {"code": <status>, "message": "..."} and nothing else."""
        got, answer, headers = call(svc, method, path, raw=body, token=token)
        assert got == status
        assert set(answer) == {"code", "message"} and answer["code"] == status
        assert answer["message"] and headers["Content-Type"] == "application/json"

    def test_http_server_own_errors_are_json_too(self, svc: LocalService) -> None:
        """A request line http.server refuses gets the same JSON shape."""
        status, answer = raw_request(svc, b"BREW /pot HTTP/1.1\r\nHost: x\r\n")
        assert status == 501 and answer["code"] == 501 and answer["message"]

    def test_internal_error_is_a_json_500(self, svc: LocalService,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
        """A failure inside the service is answered (500, JSON), not a dropped connection."""
        def broken(dataset: str, events: list[dict[str, Any]], *times: Any) -> None:
            raise RuntimeError("disk on fire")

        monkeypatch.setattr(service_store(svc), "add_events", broken)
        status, answer, _ = call(svc, "POST", ingest_path(), [{"a": 1}])
        assert status == 500 and answer["code"] == 500 and "disk on fire" in answer["message"]

    def test_client_error_shows_the_message(self, svc: LocalService) -> None:
        """loghandler's ApiError text carries the service's message."""
        with svc.client() as client, pytest.raises(loghandler.ApiError) as info:
            client.request("POST", "/v2/views", {"name": "no query"})
        assert info.value.status == 400 and "aplQuery" in str(info.value)


# --------------------------------------------------------------------------- views in full

class TestViewsCrud:
    def test_create_get_delete(self, svc: LocalService) -> None:
        """POST assigns an id; GET by id; DELETE is 204 and then the id is a 404."""
        status, created, _ = call(svc, "POST", "/v2/views",
                                  {"name": "Slow", "aplQuery": "['web']", "id": "mine"})
        assert status == 200 and created["id"] not in ("mine", "v1")
        assert created == {"id": created["id"], "name": "Slow", "aplQuery": "['web']",
                           "datasets": [], "description": "", "sharedByOrg": "",
                           "sharedByOrgName": ""}
        assert call(svc, "GET", f"/v2/views/{created['id']}")[:2] == (200, created)
        assert [v["id"] for v in call(svc, "GET", "/v2/views")[1]] == ["v1", created["id"]]
        host, port = svc.url.removeprefix("http://").rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        try:
            conn.request("DELETE", f"/v2/views/{created['id']}",
                         headers={"Authorization": f"Bearer {TOKEN}"})
            resp = conn.getresponse()
            assert (resp.status, resp.read()) == (204, b"")
        finally:
            conn.close()
        status, body, _ = call(svc, "GET", f"/v2/views/{created['id']}")
        assert status == 404 and body["code"] == 404
        assert call(svc, "DELETE", f"/v2/views/{created['id']}")[0] == 404
        again = call(svc, "POST", "/v2/views", {"name": "N", "aplQuery": "q"})[1]
        assert again["id"] != created["id"]  # ids are never reused

    @pytest.mark.parametrize("body", [{"name": "x"}, {"aplQuery": "q"}, [], {"name": "x",
                                      "aplQuery": "q", "datasets": "one"}])
    def test_create_needs_name_and_query(self, svc: LocalService, body: Any) -> None:
        """name and aplQuery are required, types are checked; nothing is created."""
        status, answer, _ = call(svc, "POST", "/v2/views", body)
        assert status == 400 and answer["code"] == 400
        assert len(svc.views) == 1

    def test_client_views_get_create_delete(self, svc: LocalService) -> None:
        """client.views.get/create/delete against the service."""
        with svc.client() as client:
            assert client.views.get("v1").to_dict() == VIEW
            made = client.views.create(loghandler.View(name="N", apl_query="['a']",
                                                       datasets=["a"], id="ignored"))
            assert made.id not in (None, "ignored") and made.datasets == ["a"]
            assert client.views.get(made.id).name == "N"  # type: ignore[arg-type]
            client.views.delete(made.id)  # type: ignore[arg-type]
            with pytest.raises(loghandler.NotFoundError, match="views list"):
                client.views.get(made.id)  # type: ignore[arg-type]
            with pytest.raises(loghandler.NotFoundError):
                client.views.delete(made.id)  # type: ignore[arg-type]
            with pytest.raises(loghandler.ConfigurationError):
                client.views.create(loghandler.View(name="no query"))
            with pytest.raises(loghandler.ConfigurationError):
                client.views.get("")
        assert [v.id for v in svc.views] == ["v1"]


def test_gzip_body_of_two_members_is_read_whole() -> None:
    """`cat a.gz b.gz` is valid gzip (RFC 1952: a file of several members): every member is
    ingested, never the first alone acknowledged as the whole (issue 24)."""
    import gzip
    import json as _json

    import urllib3

    first = "\n".join(_json.dumps({"n": i}) for i in range(500)).encode() + b"\n"
    second = "\n".join(_json.dumps({"n": i}) for i in range(500, 1000)).encode() + b"\n"
    with LocalService(token="gzip-members-token") as svc:
        resp = urllib3.request(
            "POST", f"{svc.url}/v1/datasets/members/ingest",
            body=gzip.compress(first) + gzip.compress(second),
            headers={"Authorization": "Bearer gzip-members-token",
                     "Content-Type": "application/x-ndjson", "Content-Encoding": "gzip"})
        answer = _json.loads(resp.data)
        assert resp.status == 200 and answer["ingested"] == 1000 and answer["failed"] == 0
        assert sorted(e["n"] for e in svc.events("members")) == list(range(1000))


class TestHardening:
    """Issue 24's serving items: the auth scheme's case, disagreeing lengths, _time forms."""

    def test_bearer_scheme_is_case_insensitive(self) -> None:
        with LocalService(token="case-token-1234") as svc:
            conn = http.client.HTTPConnection("127.0.0.1", int(svc.url.rsplit(":", 1)[1]),
                                              timeout=10)
            conn.request("GET", "/v1/datasets", headers={
                "Authorization": "bearer case-token-1234"})
            assert conn.getresponse().status == 200
            conn.close()

    def test_two_content_lengths_that_disagree_are_refused(self) -> None:
        import socket

        with LocalService(token="cl-token-12345") as svc:
            port = int(svc.url.rsplit(":", 1)[1])
            request = (b"POST /v1/datasets/x/ingest HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                       b"Authorization: Bearer cl-token-12345\r\n"
                       b"Content-Type: application/json\r\n"
                       b"Content-Length: 2\r\nContent-Length: 30\r\n\r\n[]")
            answer = b""
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                s.sendall(request)
                while chunk := s.recv(4096):  # the service closes the connection after it
                    answer += chunk
            assert answer.startswith(b"HTTP/1.1 400")
            assert b"Content-Length headers that disagree" in answer
            assert svc.events("x") == []

    @pytest.mark.parametrize(("given", "stored"), [
        ("2024-05-01T12:00:00", "2024-05-01T12:00:00.000000Z"),  # no offset: UTC
        ("2024-05-01 12:00:00", "2024-05-01T12:00:00.000000Z"),
        ("2024-05-01", "2024-05-01T00:00:00.000000Z"),
        ("2024-05-01T12:00:00+02:00", "2024-05-01T10:00:00.000000Z"),
    ])
    def test_iso_8601_times_without_an_offset_are_utc(self, given: str, stored: str) -> None:
        with LocalService(token="time-token-1234") as svc:
            from loghandler import Client

            answer = Client(token="time-token-1234", url=svc.url).ingest("t", [{"_time": given}])
            assert answer["failed"] == 0
            assert svc.events("t")[0]["_time"] == stored
