"""Issue 45, findings 6-10: the local service under hostile input, over real HTTP on loopback.

Capabilities exactly as the real service's API reference names them (a table: token x
endpoint x expected status, each row citing the reference), the same depth rule at ingest and
at read, files created 600, nosniff and a Server header without the Python version, one
dataset-name rule for every path, the page's token kept for the tab's life, and two answers as
the reference and the official JavaScript client give them. Also the checks the issue found
holding (a request without a token the service accepts: 403 on every endpoint), so they keep
holding.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import sqlite3
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import service_store

from loghandler.testing import LocalService

TOKEN = "hostile-caps-token"
REF = "https://axiom.co/docs/restapi/endpoints/"
# The dataset capabilities' allowed actions (trim: update) as the official Go client documents
# them (axiom-go, axiom/rbac.go RoleDatasetCapabilities).
GO_CAPS = "axiom-go rbac.go (Trim: Allowed ActionUpdate)"
NOW = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def call(svc: LocalService, method: str, path: str, body: Any = None, *,
         token: str | None = TOKEN, auth: str | None = None, raw: bytes | None = None,
         headers: dict[str, str] | None = None) -> tuple[int, Any, dict[str, str]]:
    """One request on a fresh connection: (status, JSON answer or None, headers)."""
    host, port = svc.url.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    hdrs = {"Content-Type": "application/json", **(headers or {})}
    if auth is not None:
        hdrs["Authorization"] = auth
    elif token is not None:
        hdrs["Authorization"] = f"Bearer {token}"
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    try:
        conn.request(method, path, body=data, headers=hdrs)
        resp = conn.getresponse()
        payload = resp.read()
        try:
            answer = json.loads(payload) if payload else None
        except ValueError:
            answer = payload
        return resp.status, answer, {k.lower(): v for k, v in resp.getheaders()}
    finally:
        conn.close()


def make_token(svc: LocalService, caps: dict[str, Any], *, by: str = TOKEN
               ) -> tuple[int, Any]:
    status, body, _ = call(svc, "POST", "/v2/tokens", {"name": "t", **caps}, token=by)
    return status, body


# ---------------------------------------------------------------------------- the table

# The tokens of the table: what each was created with.
TOKENS: dict[str, dict[str, Any]] = {
    "none": {},
    "tokens-cr": {"orgCapabilities": {"apiTokens": ["create", "read"]}},
    "datasets-c": {"orgCapabilities": {"datasets": ["create"]}},
    "trim-app": {"datasetCapabilities": {"app": {"trim": ["update"]}}},
    "reader-app": {"datasetCapabilities": {"app": {"query": ["read"],
                                                   "starredQueries": ["read", "create"]}},
                   "orgCapabilities": {"datasets": ["read"]}},
    "ingest-app": {"datasetCapabilities": {"app": {"ingest": ["create"]}}},
    "org-all": {"orgCapabilities": {name: ["create", "read", "update", "delete"] for name in (
        "annotations", "apiTokens", "dashboards", "datasets", "monitors", "notifiers", "users",
        "views")}},
}

OTLP = {"resourceLogs": []}
LEGACY = {"startTime": "2000-01-01T00:00:00Z", "endTime": "2100-01-01T00:00:00Z"}

# (method, path, body, what it needs: (capability, action, dataset or None) or None for any
# token, the status when allowed, the reference). Every endpoint family of routes.ROUTES; the
# mutating rows aim at what does not exist (allowed: 404) or send a bad body (allowed: 400),
# so the table's order does not matter.
ROWS: list[tuple[str, str, Any, tuple[str, str, str | None] | None, int, str]] = [
    ("POST", "/v1/datasets/_apl?format=legacy", {"apl": "['app'] | count"},
     ("query", "read", "app"), 200, REF + "queryApl"),
    ("POST", "/v1/query/_apl?format=tabular", {"apl": "['app'] | count"},
     ("query", "read", "app"), 200, REF + "queryApl"),
    ("POST", "/v1/datasets/app/ingest", [{"row": 1}], ("ingest", "create", "app"), 200,
     REF + "ingestIntoDataset"),
    ("POST", "/v1/ingest/app", [{"row": 1}], ("ingest", "create", "app"), 200,
     REF + "ingestToDataset"),
    ("POST", "/v1/logs", OTLP, ("ingest", "create", "app"), 200, REF + "ingestIntoDataset"),
    ("POST", "/v1/datasets/app/query", LEGACY, ("query", "read", "app"), 200,
     REF + "queryDataset"),
    ("GET", "/v1/datasets", None, ("datasets", "read", None), 200, REF + "getDatasets"),
    ("GET", "/v2/datasets", None, ("datasets", "read", None), 200, REF + "getDatasets"),
    ("POST", "/v1/datasets", {"name": ""}, ("datasets", "create", None), 400,
     REF + "createDataset"),
    ("GET", "/v1/datasets/app", None, ("datasets", "read", None), 200, REF + "getDataset"),
    ("PUT", "/v1/datasets/nope", {"description": "x"}, ("datasets", "update", None), 404,
     REF + "updateDataset"),
    ("DELETE", "/v1/datasets/nope", None, ("datasets", "delete", None), 404,
     REF + "deleteDataset"),
    ("POST", "/v1/datasets/app/trim", {"maxDuration": "100000d"}, ("trim", "update", "app"),
     200, REF + "trimDataset; " + GO_CAPS),
    ("POST", "/v2/datasets/other/trim", {"maxDuration": "100000d"},
     ("trim", "update", "other"), 204, REF + "trimDataset; " + GO_CAPS),
    ("GET", "/v2/datasets/app/fields", None, ("datasets", "read", None), 200,
     REF + "getFieldsForDataset"),
    ("GET", "/v2/datasets/app/mapfields", None, ("datasets", "read", None), 200,
     REF + "getMapFields"),
    ("POST", "/local/search", {"dataset": "app", "q": ""}, ("query", "read", "app"), 200,
     "local page (as queryApl)"),
    ("POST", "/local/facets", {"dataset": "app", "q": ""}, ("query", "read", "app"), 200,
     "local page (as queryApl)"),
    ("GET", "/local/datasets", None, ("datasets", "read", None), 200,
     "local page (as getDatasets)"),
    ("GET", "/v2/tokens", None, ("apiTokens", "read", None), 200, REF + "getTokens"),
    ("POST", "/v2/tokens", {}, ("apiTokens", "create", None), 400, REF + "createToken"),
    ("GET", "/v2/tokens/nope", None, ("apiTokens", "read", None), 404, REF + "getToken"),
    ("POST", "/v2/tokens/nope/regenerate", {}, ("apiTokens", "update", None), 404,
     REF + "regenerateToken"),
    ("DELETE", "/v2/tokens/nope", None, ("apiTokens", "delete", None), 404,
     REF + "deleteToken"),
    ("GET", "/v2/annotations", None, ("annotations", "read", None), 200,
     REF + "getAnnotations"),
    ("POST", "/v2/annotations", {}, ("annotations", "create", None), 400,
     REF + "createAnnotation"),
    ("GET", "/v2/views", None, ("views", "read", None), 200, "views (org capability views)"),
    ("GET", "/v2/monitors", None, ("monitors", "read", None), 200, REF + "getMonitors"),
    ("DELETE", "/v2/monitors/nope", None, ("monitors", "delete", None), 404,
     REF + "deleteMonitor"),
    ("GET", "/v2/notifiers", None, ("notifiers", "read", None), 200, REF + "getNotifiers"),
    ("POST", "/v2/apl-starred-queries", {"name": "x", "dataset": "app",
                                         "query": {"apl": "['app']"}},
     ("starredQueries", "create", "app"), 200, REF + "createStarred"),
    ("GET", "/v2/dashboards", None, ("dashboards", "read", None), 200,
     REF + "listDashboards"),
    ("GET", "/v2/users", None, ("users", "read", None), 200, REF + "getUsers"),
    ("GET", "/v2/user", None, None, 200, REF + "getCurrentUser"),
    ("GET", "/v2/orgs", None, None, 200, REF + "getOrgs"),
]


def holds(caps: dict[str, Any], need: tuple[str, str, str | None] | None) -> bool:
    """What the reference says a token created with ``caps`` may do (the test's own reading,
    not the service's code)."""
    if need is None:
        return True
    capability, action, dataset = need
    if dataset is None:
        return action in (caps.get("orgCapabilities") or {}).get(capability, [])
    per = (caps.get("datasetCapabilities") or {}).get(dataset) or {}
    return action in per.get(capability, [])


@pytest.fixture(scope="module")
def table_svc() -> Iterator[tuple[LocalService, dict[str, str]]]:
    with LocalService(token=TOKEN, datasets=["app", "other"], create_datasets=False) as svc:
        secrets = {}
        for name, caps in TOKENS.items():
            status, body = make_token(svc, caps)
            assert status == 200, body
            secrets[name] = body["token"]
        yield svc, secrets


@pytest.mark.parametrize("token", ["root", *TOKENS])
@pytest.mark.parametrize("row", ROWS, ids=[f"{r[0]} {r[1]}" for r in ROWS])
def test_capability_table(table_svc: tuple[LocalService, dict[str, str]], row: Any,
                          token: str) -> None:
    """Token x endpoint x expected status: a token created with some capabilities gets 403
    from every endpoint whose reference needs another, and the endpoint's own answer from
    the others; the service's own token may do everything."""
    svc, secrets = table_svc
    method, path, body, need, allowed, ref = row
    headers = {"X-Axiom-Dataset": "app"} if path == "/v1/logs" else None
    secret = TOKEN if token == "root" else secrets[token]
    may = token == "root" or holds(TOKENS[token], need)
    status, answer, _ = call(svc, method, path, body, token=secret, headers=headers)
    assert status == (allowed if may else 403), (token, method, path, ref, answer)


# ---------------------------------------------------------------------------- finding 6

@pytest.fixture
def svc_options() -> dict[str, Any]:
    return {"token": TOKEN, "datasets": ["app", "other"], "create_datasets": False}


class TestTokensGrantNoMoreThanTheirMaker:
    def test_a_token_cannot_mint_a_token_that_reads_what_it_cannot(self, svc: LocalService
                                                                   ) -> None:
        """Finding 6: apiTokens create+read minted a token reading a dataset it could not."""
        _, maker = make_token(svc, TOKENS["tokens-cr"])
        status, body = make_token(svc, {"datasetCapabilities": {"app": {"query": ["read"]}}},
                                  by=maker["token"])
        assert status == 403 and "query: read in dataset 'app'" in body["message"]
        status, body = make_token(svc, {"orgCapabilities": {"apiTokens": ["update"]}},
                                  by=maker["token"])
        assert status == 403 and "apiTokens: update" in body["message"]
        # What it holds, it may grant.
        status, body = make_token(svc, {"orgCapabilities": {"apiTokens": ["read"]}},
                                  by=maker["token"])
        assert status == 200 and body["orgCapabilities"] == {"apiTokens": ["read"]}
        # A reader of app may not hand out ingest into app, nor query of other.
        _, reader = make_token(svc, {"orgCapabilities": {"apiTokens": ["create"]},
                                     "datasetCapabilities": {"app": {"query": ["read"]}}})
        for caps in ({"app": {"ingest": ["create"]}}, {"other": {"query": ["read"]}}):
            status, _ = make_token(svc, {"datasetCapabilities": caps}, by=reader["token"])
            assert status == 403, caps
        status, _ = make_token(svc, {"datasetCapabilities": {"app": {"query": ["read"]}}},
                               by=reader["token"])
        assert status == 200

    def test_regenerate_needs_update_and_grants_no_more(self, svc: LocalService) -> None:
        """Finding 6: regenerating another token's secret needs apiTokens update (reference:
        regenerateAPIToken, apiTokens|update), and only of a token holding no more than the
        caller."""
        _, victim = make_token(svc, {"datasetCapabilities": {"app": {"query": ["read"]}}})
        path = f"/v2/tokens/{victim['id']}/regenerate"
        body = {"existingTokenExpiresAt": NOW, "newTokenExpiresAt": "2100-01-01T00:00:00Z"}
        _, cr = make_token(svc, TOKENS["tokens-cr"])
        status, answer, _ = call(svc, "POST", path, body, token=cr["token"])
        assert status == 403 and "may not update apiTokens" in answer["message"]
        # The old secret still works: nothing was regenerated.
        assert call(svc, "POST", "/v1/datasets/app/query", LEGACY,
                    token=victim["token"])[0] == 200
        _, updater = make_token(svc, {"orgCapabilities": {"apiTokens": ["update"]}})
        status, answer, _ = call(svc, "POST", path, body, token=updater["token"])
        assert status == 403 and "query: read in dataset 'app'" in answer["message"]
        status, answer, _ = call(svc, "POST", path, body, token=TOKEN)
        assert status == 200 and answer["token"] != victim["token"]

    def test_trim_needs_the_datasets_trim(self, svc: LocalService) -> None:
        """Finding 6: a token with only datasets create trimmed another dataset to 0 events;
        trim is the dataset's own capability (trim: update)."""
        svc.client().ingest("other", [{"keep": i, "_time": "2001-01-01T00:00:00Z"}
                                      for i in range(3)])
        svc.wait_for_events("other", 3)
        _, creator = make_token(svc, TOKENS["datasets-c"])
        status, _, _ = call(svc, "POST", "/v1/datasets/other/trim", {"maxDuration": "1h"},
                            token=creator["token"])
        assert status == 403 and len(svc.events("other")) == 3
        _, trimmer = make_token(svc, TOKENS["trim-app"])
        status, _, _ = call(svc, "POST", "/v1/datasets/other/trim", {"maxDuration": "1h"},
                            token=trimmer["token"])
        assert status == 403 and len(svc.events("other")) == 3
        _, trimmer = make_token(svc, {"datasetCapabilities": {"other": {"trim": ["update"]}}})
        status, answer, _ = call(svc, "POST", "/v1/datasets/other/trim",
                                 {"maxDuration": "1h"}, token=trimmer["token"])
        assert status == 200 and answer == {"numDeleted": 3} and svc.events("other") == []


# Headers that carry no token the service accepts (the preamble: all 403, held).
BAD_AUTH = [None, "Bearer wrong", f"Basic {TOKEN}", f"Bearer {TOKEN}x", "Bearer ",
            f"Token {TOKEN}"]


@pytest.mark.parametrize("auth", BAD_AUTH, ids=["none", "wrong", "basic", "longer", "empty",
                                                "scheme"])
def test_every_endpoint_refuses_a_request_without_a_good_token(
        table_svc: tuple[LocalService, dict[str, str]], auth: str | None) -> None:
    """Every endpoint of the table (every family the service has), 403 without a token the
    service accepts; nothing stored."""
    svc, _ = table_svc
    before = len(svc.events("app"))
    for method, path, body, *_ in ROWS:
        status, _, _ = call(svc, method, path, body, token=None, auth=auth,
                            headers={"X-Axiom-Dataset": "app"})
        assert status == 403, (auth, method, path)
    assert len(svc.events("app")) == before


def test_what_held_keeps_holding(svc: LocalService) -> None:
    """The issue's preamble, cheap parts: 10,000-deep JSON refused (400) wherever a body is
    read; a body claiming 1 GB refused (413) before it is sent; SQL in values and names
    matches nothing and leaks nothing."""
    deep = ("[" * 10_000 + "]" * 10_000).encode()
    for path in ("/v1/datasets/app/ingest", "/v1/datasets/_apl", "/v2/tokens",
                 "/local/search", "/v2/annotations"):
        status, answer, _ = call(svc, "POST", path, raw=deep)
        assert status == 400, (path, answer)
    host, port = svc.url.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.putrequest("POST", "/v1/datasets/app/ingest")
        for name, value in (("Authorization", f"Bearer {TOKEN}"),
                            ("Content-Type", "application/json"),
                            ("Content-Length", str(1 << 30))):
            conn.putheader(name, value)
        conn.endheaders()
        assert conn.getresponse().status == 413
    finally:
        conn.close()
    svc.client().ingest("app", [{"message": "fine"}])
    svc.wait_for_events("app", 1)
    for apl in ("['app'] | where message == \"x' OR 1=1 --\"",
                "['app'] | where message == 'x\\' OR 1=1 --'",
                "['app'] | where ['x\"); DROP TABLE events; --'] == 1"):
        status, answer, _ = call(svc, "POST", "/v1/datasets/_apl?format=legacy", {"apl": apl})
        assert status in (200, 400), (apl, answer)
        if status == 200:
            assert answer["matches"] == [], (apl, answer)
        assert "sqlite" not in json.dumps(answer).lower(), answer
    assert len(svc.events("app")) == 1


# ---------------------------------------------------------------------------- finding 7

def nested(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


class TestDepth:
    def test_what_ingest_accepts_reads_back(self, svc: LocalService) -> None:
        """Finding 7: an event nested 980 deep was accepted and then failed every read with
        500. One rule (depth.MAX_EVENT_DEPTH): deeper is turned down at ingest, in the
        ingest status; as deep is stored and reads back."""
        from loghandler._local.depth import MAX_EVENT_DEPTH

        for depth in (980, MAX_EVENT_DEPTH + 1):
            status, answer, _ = call(svc, "POST", "/v1/datasets/app/ingest",
                                     raw=("[" + nested(depth) + ', {"ok": 1}]').encode())
            assert status == 200 and answer["ingested"] == 1 and answer["failed"] == 1
            assert "nests more than" in answer["failures"][0]["error"]
        status, answer, _ = call(svc, "POST", "/v1/datasets/app/ingest",
                                 raw=("[" + nested(MAX_EVENT_DEPTH) + "]").encode())
        assert status == 200 and answer["ingested"] == 1
        status, answer, _ = call(svc, "POST", "/v1/datasets/_apl?format=legacy",
                                 {"apl": "['app'] | where isnotnull(a)"})
        assert status == 200 and len(answer["matches"]) == 1
        for path, body in (("/local/search", {"dataset": "app", "q": ""}),
                           ("/local/facets", {"dataset": "app", "q": ""}),
                           ("/v1/datasets/app/query", LEGACY)):
            assert call(svc, "POST", path, body)[0] == 200, path

    def test_a_bad_stored_event_never_fails_a_read(self, tmp_path: Path) -> None:
        """An event stored before the rule (or a file edited by hand), 980 deep: the page's
        search, facets, the legacy query and APL answer 200, the event shown as unreadable."""
        db = str(tmp_path / "events.sqlite")
        with LocalService(token=TOKEN, db=db, datasets=["app"]) as svc:
            svc.client().ingest("app", [{"fine": 1}])
            svc.wait_for_events("app", 1)
        con = sqlite3.connect(db)
        con.execute("INSERT INTO events (dataset, time, sys, body) VALUES (?, ?, ?, ?)",
                    ("app", time.time_ns() // 1000, NOW, nested(980)))
        con.commit()
        con.close()
        with LocalService(token=TOKEN, db=db) as svc:
            status, answer, _ = call(svc, "POST", "/v1/datasets/_apl?format=legacy",
                                     {"apl": "['app']"})
            assert status == 200 and len(answer["matches"]) == 2, answer
            shown = [m["data"] for m in answer["matches"]]
            assert {"fine": 1} in shown
            assert any("cannot be shown" in str(d.get("unreadable")) for d in shown), shown
            for path, body in (("/local/search", {"dataset": "app", "q": ""}),
                               ("/local/facets", {"dataset": "app", "q": ""}),
                               ("/v1/datasets/app/query", LEGACY)):
                status, answer, _ = call(svc, "POST", path, body)
                assert status == 200, (path, answer)
            status, answer, _ = call(svc, "POST", "/v1/datasets/_apl?format=tabular",
                                     {"apl": "['app'] | sort by _time desc | take 200"})
            assert status == 200
            assert len(svc.events("app")) == 2


# ---------------------------------------------------------------------------- finding 8

def mode(path: str | Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_files_are_private(tmp_path: Path) -> None:
    """Finding 8: --db's database and its -wal/-shm were 644 under the usual umask; now 600,
    whatever the umask; the scratch folder (no --db) is 700 and its database 600."""
    old = os.umask(0o022)
    try:
        db = tmp_path / "logs.sqlite"
        with LocalService(token=TOKEN, db=str(db), datasets=["app"]) as svc:
            svc.client().ingest("app", [{"secret": "x"}])
            svc.wait_for_events("app", 1)
            files = sorted(p.name for p in tmp_path.iterdir())
            assert files == ["logs.sqlite", "logs.sqlite-shm", "logs.sqlite-wal"]
            assert {name: oct(mode(tmp_path / name)) for name in files} == {
                name: "0o600" for name in files}
        with LocalService(token=TOKEN, datasets=["app"]) as svc:
            # the store's scratch directory: its mode is what is checked.
            scratch = service_store(svc)._scratch  # noqa: SLF001
            assert scratch is not None and mode(scratch) == 0o700
            assert mode(os.path.join(scratch, "events.sqlite")) == 0o600
    finally:
        os.umask(old)


# ---------------------------------------------------------------------------- finding 9

def test_answers_carry_nosniff_and_no_python_version(svc: LocalService) -> None:
    """Finding 9: every answer (JSON, error, the page's files, http.server's own errors)
    carries X-Content-Type-Options: nosniff; Server names no Python version."""
    answers = [call(svc, "GET", "/v1/datasets")[2],
               call(svc, "GET", "/v1/nothing")[2],
               call(svc, "GET", "/v1/datasets", token=None)[2],
               call(svc, "GET", "/", token=None)[2],
               call(svc, "GET", "/app.js", token=None)[2]]
    for headers in answers:
        assert headers["x-content-type-options"] == "nosniff", headers
        assert "python" not in headers["server"].lower(), headers
    host, port = svc.url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"BREW / HTTP/1.1\r\nHost: x\r\n\r\n")  # http.server's own 501
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = sock.recv(4096)
            if not chunk:
                break
            head += chunk
    text = head.decode("latin-1").lower()
    assert text.startswith("http/1.") and "x-content-type-options: nosniff" in text
    assert "python" not in text


BAD_NAMES = ["bad%00name", "x" * 10_000, "..%2Fescape", "..", "my%20logs", "-lead"]


@pytest.mark.parametrize("name", BAD_NAMES, ids=["nul", "10000", "dotdot-slash", "dotdot",
                                                 "space", "lead-dash"])
def test_one_dataset_name_rule_for_every_path(name: str) -> None:
    """Finding 9: ingest with --create-datasets accepted names POST /v1/datasets refuses
    (NUL, 10,000 characters, ../). One rule: both refuse, nothing is created."""
    from urllib.parse import unquote

    with LocalService(token=TOKEN, create_datasets=True) as svc:
        status, answer, _ = call(svc, "POST", "/v1/datasets", {"name": unquote(name)})
        assert status == 400, answer
        status, answer, _ = call(svc, "POST", f"/v1/datasets/{name}/ingest", [{"a": 1}])
        assert status == 400 and "name" in answer["message"], answer
        status, answer, _ = call(svc, "POST", f"/v1/ingest/{name}", [{"a": 1}])
        assert status == 400, answer
        assert call(svc, "GET", "/v1/datasets")[1] == []
        # A good name is created by its first ingest, as before.
        assert call(svc, "POST", "/v1/datasets/good-name_1.x/ingest", [{"a": 1}])[0] == 200
    with pytest.raises(Exception, match="dataset"):
        LocalService(token=TOKEN, datasets=[unquote(name)])


# ---------------------------------------------------------------------------- finding 10

STARRED = {"kind": "apl", "name": "errors", "dataset": "app",
           "query": {"apl": "['app'] | where level == 'error'"}, "metadata": {}}


def test_starred_queries_listed_with_who_all(svc: LocalService) -> None:
    """Finding 10: the JavaScript client's list call (GET /v2/apl-starred-queries?limit=100&
    who=all) answered [] right after a create. Reference getStarredQueries: who undefined,
    the caller's own; a user's id, that user's; team, the team's but the caller's; all, all."""
    status, _, _ = call(svc, "POST", "/v2/apl-starred-queries", STARRED)
    assert status == 200
    status, _, _ = call(svc, "POST", "/v2/apl-starred-queries",
                        {**STARRED, "name": "theirs", "who": "someone"})
    assert status == 200

    def names(query: str) -> list[str]:
        status, listed, _ = call(svc, "GET", "/v2/apl-starred-queries" + query)
        assert status == 200
        return [q["name"] for q in listed]

    assert names("?limit=100&who=all") == ["errors", "theirs"]
    assert names("") == ["errors"]
    assert names("?who=team") == ["theirs"]
    assert names("?who=someone") == ["theirs"]
    assert names("?who=local") == ["errors"]


def test_the_references_todatetime_example_returns_todays_events(svc: LocalService) -> None:
    """Finding 10: the APL reference's todatetime example returned 0 rows over events of
    today (a column set by extend from todatetime was compared with _time as text)."""
    svc.client().ingest("app", [{"n": 1}, {"n": 2}])
    svc.wait_for_events("app", 2)
    apl = ("['app'] | extend log_date = todatetime('2024-06-24') "
           "| extend is_recent = _time >= log_date | where is_recent == true")
    status, answer, _ = call(svc, "POST", "/v1/datasets/_apl?format=legacy", {"apl": apl})
    assert status == 200
    rows = [m["data"] for m in answer["matches"]]
    assert sorted(r["n"] for r in rows) == [1, 2] and all(r["is_recent"] for r in rows)
    # And the other way round: a date after today keeps none.
    apl = ("['app'] | extend d = todatetime('2999-01-01') | where _time >= d")
    status, answer, _ = call(svc, "POST", "/v1/datasets/_apl?format=legacy", {"apl": apl})
    assert status == 200 and answer["matches"] == []


# ---------------------------------------------------------------------------- the page's token

from test_web import driver, wait_until  # noqa: E402,F401  (the browser fixture, shared)

STORED_JS = """
return {session: sessionStorage.getItem("loghandler-token"),
        local: localStorage.getItem("loghandler-token"),
        remember: localStorage.getItem("loghandler-remember"),
        signedIn: !document.getElementById("app").hidden,
        login: !document.getElementById("login").hidden};
"""


@pytest.mark.slow
def test_the_page_keeps_the_token_for_the_tabs_life(driver: Any) -> None:  # noqa: F811
    """Finding 9: the token stayed in localStorage after the tab closed (a program served
    later on the same origin could read it). Now: sessionStorage for the tab's life; in
    localStorage only when the user ticks "remember"; a token an older page left there
    without asking is removed."""
    from selenium.webdriver.common.by import By

    with LocalService(token=TOKEN, datasets=["app"]) as svc:
        def state() -> dict[str, Any]:
            return dict(driver.execute_script(STORED_JS))

        def fresh_tab(hash_: str = "") -> None:
            # A new tab: sessionStorage gone, localStorage kept (same origin).
            driver.get(svc.url + "/style.css")
            driver.execute_script("sessionStorage.clear();")
            driver.get(svc.url + "/" + hash_)

        driver.get(svc.url + "/style.css")
        driver.execute_script("localStorage.clear(); sessionStorage.clear();"
                              "localStorage.setItem('loghandler-token', 'left-by-old-page');")
        driver.get(f"{svc.url}/#token={TOKEN}&dataset=app")
        wait_until(driver, lambda d: state()["session"] == TOKEN, "the token in the session")
        now = state()
        assert now["signedIn"] and now["local"] is None and now["remember"] is None, now

        fresh_tab()  # the tab closed: nothing remembered, the page asks for the token
        wait_until(driver, lambda d: state()["login"], "the login form")
        assert state()["local"] is None

        # Signed in without "remember": still only for the tab.
        driver.find_element(By.ID, "login-token").send_keys(TOKEN)
        driver.find_element(By.CSS_SELECTOR, "#login-form button[type=submit]").click()
        wait_until(driver, lambda d: state()["signedIn"] and state()["session"] == TOKEN,
                   "signed in")
        assert state()["local"] is None
        fresh_tab()
        wait_until(driver, lambda d: state()["login"], "the login form again")

        # With "remember": kept across tabs, until the user signs in without it.
        driver.find_element(By.ID, "login-remember").click()
        driver.find_element(By.ID, "login-token").send_keys(TOKEN)
        driver.find_element(By.CSS_SELECTOR, "#login-form button[type=submit]").click()
        wait_until(driver, lambda d: state()["signedIn"], "signed in, remembered")
        assert state()["local"] == TOKEN and state()["remember"] == "1"
        fresh_tab()
        wait_until(driver, lambda d: state()["signedIn"] and state()["session"] == TOKEN,
                   "signed in from the remembered token")
        driver.execute_script("localStorage.clear(); sessionStorage.clear();")
