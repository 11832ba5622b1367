"""The local service, endpoint by endpoint, and LocalService with Client round-trips."""

from __future__ import annotations

import gzip
import http.client
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest

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
def svc() -> Iterator[LocalService]:
    with LocalService(token=TOKEN, views=[VIEW], max_body_bytes=4096) as service:
        yield service


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
        """A quoted dataset name is stored under its real name."""
        assert call(svc, "POST", ingest_path("my%20logs"), [{"a": 1}])[0] == 200
        assert sent(svc.events("my logs")) == [{"a": 1}]

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
