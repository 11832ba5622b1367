"""Issue 37: the endpoints the official clients call (the Go client axiom-go and the JS client
@axiomhq/js), each request as those clients send it and each answer as the real service's API
reference documents it (https://axiom.co/docs/restapi/endpoints/<operation>, the operation named
in each test), with tokens' capabilities honoured; and the real service's defaults.
"""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from helpers import service_store

import loghandler
from loghandler.testing import LocalService

TOKEN = "clients-token"
NOW = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def req(svc: LocalService, method: str, path: str, body: Any = None, *,
        token: str = TOKEN, headers: dict[str, str] | None = None
        ) -> tuple[int, Any]:
    """One request on a fresh connection: (status, the JSON answer, or None for no body)."""
    host, port = svc.url.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    hdrs = {"Authorization": f"Bearer {token}", "Content-Type": "application/json",
            **(headers or {})}
    try:
        conn.request(method, path, body=None if body is None else json.dumps(body).encode(),
                     headers=hdrs)
        resp = conn.getresponse()
        payload = resp.read()
        return resp.status, json.loads(payload) if payload else None
    finally:
        conn.close()


@pytest.fixture
def svc_options() -> dict[str, Any]:
    return {"token": TOKEN, "datasets": ["app"], "create_datasets": False}


def limited_token(svc: LocalService, **caps: Any) -> str:
    """A token created through /v2/tokens with only these capabilities."""
    status, body = req(svc, "POST", "/v2/tokens", {"name": "limited", **caps})
    assert status == 200, body
    return str(body["token"])


# ---------------------------------------------------------------------------- monitors

# As axiom-go's MonitorsService.Create sends it (its Monitor struct, zero times included, the
# older notifierIDs spelling) and @axiomhq/js's monitors.create (notifierIds).
GO_MONITOR = {"createdAt": "0001-01-01T00:00:00Z", "createdBy": "", "updatedAt":
              "0001-01-01T00:00:00Z", "name": "errors", "type": "Threshold",
              "description": "too many errors", "aplQuery": "['app'] | count",
              "operator": "Above", "threshold": 10, "alertOnNoData": False,
              "notifyByGroup": False, "resolvable": False, "notifierIDs": [],
              "intervalMinutes": 5, "rangeMinutes": 5, "disabled": False,
              "disabledUntil": "0001-01-01T00:00:00Z", "secondDelay": 10}


class TestMonitors:
    def test_crud_as_the_clients_send_it(self, svc: LocalService) -> None:
        """Reference: createMonitor, getMonitor, getMonitors, updateMonitor, deleteMonitor
        (API v2 /monitors). The definition is stored as sent, with id, createdAt, createdBy
        and updatedAt set by the service; get answers what create answered."""
        status, created = req(svc, "POST", "/v2/monitors", GO_MONITOR)
        assert status == 200
        assert created["id"] and created["createdBy"] == "local"
        assert created["createdAt"] != "0001-01-01T00:00:00Z"
        assert created["notifierIds"] == [] and "notifierIDs" not in created
        for key in ("name", "type", "aplQuery", "operator", "threshold", "intervalMinutes",
                    "rangeMinutes", "secondDelay", "disabledUntil", "description"):
            assert created[key] == GO_MONITOR[key], key
        assert req(svc, "GET", f"/v2/monitors/{created['id']}") == (200, created)
        assert req(svc, "GET", "/v2/monitors") == (200, [created])
        update = {**GO_MONITOR, "name": "errors (prod)", "threshold": 20}
        status, updated = req(svc, "PUT", f"/v2/monitors/{created['id']}", update)
        assert status == 200 and updated["threshold"] == 20
        assert updated["createdAt"] == created["createdAt"] and updated["id"] == created["id"]
        assert req(svc, "DELETE", f"/v2/monitors/{created['id']}") == (204, None)
        assert req(svc, "GET", f"/v2/monitors/{created['id']}")[0] == 404

    def test_history_is_empty_as_no_monitor_runs_here(self, svc: LocalService) -> None:
        """Reference: getMonitorHistory (startTime and endTime required): an array of
        AlertHistory; the local service never runs a monitor, so none."""
        _, created = req(svc, "POST", "/v2/monitors", GO_MONITOR)
        path = f"/v2/monitors/{created['id']}/history"
        assert req(svc, "GET", f"{path}?startTime={NOW}&endTime={NOW}") == (200, [])
        status, body = req(svc, "GET", path)
        assert status == 400 and "startTime" in body["message"]
        assert req(svc, "GET", f"/v2/monitors/nope/history?startTime={NOW}&endTime={NOW}"
                   )[0] == 404

    @pytest.mark.parametrize("change, words", [
        ({"name": None}, '"name"'), ({"type": "Sometimes"}, "unknown monitor type"),
        ({"operator": "Sideways"}, "unknown operator"),
        ({"aplQuery": ""}, "aplQuery or mplQuery"),
        ({"mplQuery": "m:x"}, "aplQuery or mplQuery"),
        ({"intervalMinutes": 0}, "intervalMinutes"),
        ({"disabledUntil": "soon"}, "disabledUntil")])
    def test_what_the_reference_requires(self, svc: LocalService, change: dict[str, Any],
                                         words: str) -> None:
        """Reference: Monitor requires name and type (Threshold, MatchEvent,
        AnomalyDetection); operator is one of five; one of aplQuery or mplQuery."""
        body = {k: v for k, v in {**GO_MONITOR, **change}.items() if v is not None}
        status, answer = req(svc, "POST", "/v2/monitors", body)
        assert status == 400 and words in answer["message"]

    def test_a_token_needs_the_monitors_capability(self, svc: LocalService) -> None:
        """A created token may read monitors with orgCapabilities.monitors read, and not
        create them."""
        reader = limited_token(svc, orgCapabilities={"monitors": ["read"]})
        assert req(svc, "GET", "/v2/monitors", token=reader) == (200, [])
        status, body = req(svc, "POST", "/v2/monitors", GO_MONITOR, token=reader)
        assert status == 403 and "create monitors" in body["message"]
        assert req(svc, "GET", "/v2/notifiers", token=reader)[0] == 403


class TestNotifiers:
    def test_crud(self, svc: LocalService) -> None:
        """Reference: createNotifier, getNotifier, getNotifiers, updateNotifier,
        deleteNotifier (name and properties required; one kind of properties)."""
        sent = {"name": "on-call", "properties": {"email": {"emails": ["a@example.com"]}}}
        status, created = req(svc, "POST", "/v2/notifiers", sent)
        assert status == 200 and created["properties"] == sent["properties"]
        assert created["id"] and created["createdBy"] == "local"
        assert req(svc, "GET", "/v2/notifiers") == (200, [created])
        sent["properties"] = {"slack": {"slackUrl": "https://hooks.example.com/x"}}
        status, updated = req(svc, "PUT", f"/v2/notifiers/{created['id']}", sent)
        assert status == 200 and updated["properties"] == sent["properties"]
        assert req(svc, "GET", f"/v2/notifiers/{created['id']}") == (200, updated)
        assert req(svc, "DELETE", f"/v2/notifiers/{created['id']}") == (204, None)
        assert req(svc, "DELETE", f"/v2/notifiers/{created['id']}")[0] == 404
        status, body = req(svc, "POST", "/v2/notifiers", {"name": "x", "properties": {
            "carrierPigeon": {}}})
        assert status == 400 and "unknown notifier kind" in body["message"]


# ---------------------------------------------------------------------------- fields

class TestFields:
    def test_fields_are_computed_from_what_was_ingested(self, svc: LocalService) -> None:
        """Reference: getFieldsForDataset (name, type, unit, description, hidden),
        getFieldForDataset, updateFieldForDataset; nested objects as dotted fields, a field
        of mixed types as "integer|string"."""
        events = [{"level": "info", "n": 1, "geo": {"city": "Oslo"}, "ok": True},
                  {"level": "error", "n": "two", "ratio": 0.5, "tags": ["a"]}]
        assert req(svc, "POST", "/v1/datasets/app/ingest", events)[0] == 200
        status, fields = req(svc, "GET", "/v2/datasets/app/fields")
        assert status == 200
        types = {f["name"]: f["type"] for f in fields}
        assert types == {"_time": "datetime", "level": "string", "n": "integer|string",
                         "geo.city": "string", "ok": "boolean", "ratio": "float",
                         "tags": "array"}
        assert all(f["unit"] == "" and f["description"] == "" and f["hidden"] is False
                   for f in fields)
        status, one = req(svc, "PUT", "/v2/datasets/app/fields/ratio", {
            "name": "ratio", "type": "float", "unit": "percent", "description": "share",
            "hidden": True})
        assert status == 200 and (one["unit"], one["description"], one["hidden"]) == (
            "percent", "share", True)
        assert req(svc, "GET", "/v2/datasets/app/fields/ratio") == (200, one)
        assert req(svc, "GET", "/v2/datasets/app/fields/nope")[0] == 404
        assert req(svc, "GET", "/v2/datasets/other/fields")[0] == 404

    def test_fields_survive_a_restart_with_a_file(self, tmp_path: Any) -> None:
        """With db=FILE the fields (and their descriptions) are kept with the events."""
        db = str(tmp_path / "f.sqlite")
        with LocalService(token=TOKEN, db=db) as first:
            req(first, "POST", "/v1/datasets/app/ingest", [{"a": 1}])
            req(first, "PUT", "/v2/datasets/app/fields/a", {"description": "kept"})
        with LocalService(token=TOKEN, db=db) as second:
            status, fields = req(second, "GET", "/v2/datasets/app/fields")
        assert status == 200 and {"name": "a", "type": "integer", "unit": "",
                                  "description": "kept", "hidden": False} in fields

    def test_map_fields(self, svc: LocalService) -> None:
        """Reference: getMapFields, createMapField, updateMapFields, deleteMapField; the
        dataset lists them (axiom-go's Dataset.MapFields)."""
        assert req(svc, "GET", "/v2/datasets/app/mapfields") == (200, [])
        assert req(svc, "POST", "/v2/datasets/app/mapfields", {"name": "attrs"}) == (
            200, {"name": "attrs"})
        assert req(svc, "PUT", "/v2/datasets/app/mapfields", ["attrs", "ctx"]) == (
            200, ["attrs", "ctx"])
        assert req(svc, "GET", "/v2/datasets/app")[1]["mapFields"] == ["attrs", "ctx"]
        assert req(svc, "DELETE", "/v2/datasets/app/mapfields/attrs") == (204, None)
        assert req(svc, "GET", "/v2/datasets/app/mapfields") == (200, ["ctx"])


# ---------------------------------------------------------------------------- saved

STARRED = {"kind": "apl", "name": "errors", "dataset": "app",
           "query": {"apl": "['app'] | where level == 'error'"}, "metadata": {}}


class TestStarredQueries:
    def test_crud_and_filters(self, svc: LocalService) -> None:
        """Reference: getStarredQueries (limit, offset, dataset, who, qs), createStarred,
        getStarred, updateStarred, deleteStarred; the JS client's savedQueries.list/get."""
        status, created = req(svc, "POST", "/v2/apl-starred-queries", STARRED)
        assert status == 200 and created["id"] and created["who"] == "local"
        assert {k: created[k] for k in STARRED} == STARRED
        other = {**STARRED, "name": "slow", "dataset": "web",
                 "query": {"apl": "['web'] | where ms > 500"}}
        req(svc, "POST", "/v2/apl-starred-queries", other)
        listed = req(svc, "GET", "/v2/apl-starred-queries")[1]
        assert [q["name"] for q in listed] == ["errors", "slow"]
        assert [q["name"] for q in req(svc, "GET", "/v2/apl-starred-queries?dataset=web"
                                       )[1]] == ["slow"]
        assert [q["name"] for q in req(svc, "GET", "/v2/apl-starred-queries?qs=ERROR"
                                       )[1]] == ["errors"]
        assert [q["name"] for q in req(svc, "GET",
                                       "/v2/apl-starred-queries?limit=1&offset=1")[1]] == [
            "slow"]
        path = f"/v2/apl-starred-queries/{created['id']}"
        assert req(svc, "GET", path) == (200, created)
        status, updated = req(svc, "PUT", path, {**STARRED, "name": "all errors"})
        assert status == 200 and updated["name"] == "all errors"
        assert updated["id"] == created["id"]
        assert req(svc, "DELETE", path) == (204, None)
        assert req(svc, "GET", path)[0] == 404
        status, body = req(svc, "POST", "/v2/apl-starred-queries", {"name": "x"})
        assert status == 400 and "query" in body["message"]

    def test_a_token_sees_the_datasets_it_may(self, svc: LocalService) -> None:
        """A created token holds starredQueries per dataset (datasetCapabilities)."""
        req(svc, "POST", "/v2/apl-starred-queries", STARRED)
        req(svc, "POST", "/v2/apl-starred-queries", {**STARRED, "dataset": "web"})
        token = limited_token(svc, datasetCapabilities={"web": {
            "starredQueries": ["read", "create"]}})
        assert [q["dataset"] for q in req(svc, "GET", "/v2/apl-starred-queries",
                                          token=token)[1]] == ["web"]
        status, body = req(svc, "POST", "/v2/apl-starred-queries", STARRED, token=token)
        assert status == 403 and "starredQueries in dataset 'app'" in body["message"]


# As axiom-go's dashboards integration test sends it (CreateRaw / UpdateRaw).
DASHBOARD = {"name": "raw crud dashboard", "owner": "local", "description": "crud",
             "charts": [{"id": "note-1", "type": "Note", "text": "hello"}],
             "layout": [{"i": "note-1", "x": 0, "y": 0, "w": 4, "h": 4}],
             "refreshTime": 60, "schemaVersion": 2, "timeWindowStart": "qr-now-1h",
             "timeWindowEnd": "qr-now"}


class TestDashboards:
    def test_crud_as_axiom_go_sends_it(self, svc: LocalService) -> None:
        """Reference: createDashboard (201 {status: created, dashboard: DashboardWithMeta}),
        getDashboard, listDashboards, updateDashboard (version checked: 412), deleteDashboard
        (204), under /v2/dashboards/uid/{uid}."""
        status, created = req(svc, "POST", "/v2/dashboards", {
            "uid": "dash-1", "dashboard": DASHBOARD, "overwrite": True, "message": "create"})
        assert status == 201 and created["status"] == "created"
        meta = created["dashboard"]
        assert meta["uid"] == "dash-1" and meta["dashboard"]["uid"] == "dash-1"
        assert meta["version"] == 1 and meta["dashboard"]["charts"] == DASHBOARD["charts"]
        assert req(svc, "GET", "/v2/dashboards/uid/dash-1") == (200, meta)
        assert req(svc, "GET", "/v2/dashboards") == (200, [meta])
        status, updated = req(svc, "PUT", "/v2/dashboards/uid/dash-1", {
            "dashboard": {**DASHBOARD, "name": "updated"}, "version": 1})
        assert status == 200 and updated["status"] == "updated"
        assert updated["dashboard"]["version"] == 2
        assert updated["dashboard"]["dashboard"]["name"] == "updated"
        status, body = req(svc, "PUT", "/v2/dashboards/uid/dash-1", {
            "dashboard": DASHBOARD, "version": 1})
        assert status == 412 and "version" in body["message"]
        assert req(svc, "POST", "/v2/dashboards", {"uid": "dash-1", "dashboard": DASHBOARD}
                   )[0] == 409
        assert req(svc, "DELETE", "/v2/dashboards/uid/dash-1") == (204, None)
        assert req(svc, "GET", "/v2/dashboards/uid/dash-1")[0] == 404
        status, body = req(svc, "POST", "/v2/dashboards", {"dashboard": {"name": "x"}})
        assert status == 400 and "owner" in body["message"]


# ---------------------------------------------------------------------------- account

class TestUserAndOrgs:
    def test_current_user(self, svc: LocalService) -> None:
        """Reference: getCurrentUser (v2: id, name, email, role {id, name}; v1: role as a
        name, permissions), what axiom-go's ValidateCredentials reads for a personal token."""
        status, user = req(svc, "GET", "/v2/user")
        assert status == 200 and set(user) == {"id", "name", "email", "role"}
        assert set(user["role"]) == {"id", "name"}
        status, v1 = req(svc, "GET", "/v1/user")
        assert status == 200 and v1["role"] == "owner" and v1["permissions"] == []
        assert req(svc, "GET", "/v2/users") == (200, [user])
        assert req(svc, "GET", f"/v2/users/{user['id']}") == (200, user)

    def test_orgs_answer_the_org_the_client_names(self) -> None:
        """Reference: getOrgs, getOrg (id, name, plan, planCreated, lastUsageSync,
        paymentStatus, license, primaryEmail required); a personal token's org id header
        names it."""
        with LocalService(token="xapt-clients") as svc:
            headers = {"X-Axiom-Org-Id": "acme"}
            status, orgs = req(svc, "GET", "/v2/orgs", token="xapt-clients", headers=headers)
            assert status == 200 and [o["id"] for o in orgs] == ["acme"]
            for key in ("id", "name", "plan", "planCreated", "lastUsageSync",
                        "paymentStatus", "license", "primaryEmail"):
                assert key in orgs[0], key
            assert req(svc, "GET", "/v2/orgs/acme", token="xapt-clients",
                       headers=headers) == (200, orgs[0])
            assert req(svc, "GET", "/v2/orgs/other", token="xapt-clients",
                       headers=headers)[0] == 404

    def test_a_personal_token_without_org_names_what_each_client_sets(self) -> None:
        """The 403 for a personal token without an org id names the header, our
        LOGHANDLER_ORG_ID and the official clients' orgId (not a serve flag)."""
        with LocalService(token="xapt-clients") as svc:
            status, body = req(svc, "GET", "/v2/user", token="xapt-clients")
        assert status == 403
        for words in ("X-Axiom-Org-Id", "LOGHANDLER_ORG_ID", "orgId"):
            assert words in body["message"]
        assert "--org-id" not in body["message"]  # serve has no such option


# ---------------------------------------------------------------------------- legacy query

LOGS = [{"_time": f"2026-05-01T12:00:{i:02d}Z", "remote_ip": f"10.0.0.{i % 2}",
         "request": "GET /" if i % 3 else "POST /", "response": 200 if i % 2 else 500,
         "bytes": i * 10} for i in range(14)]
RANGE = {"startTime": "2026-05-01T11:00:00Z", "endTime": "2026-05-01T13:00:00Z"}


@pytest.fixture(scope="module")
def logs() -> Iterator[LocalService]:
    with LocalService(token=TOKEN) as service:
        assert req(service, "POST", "/v1/datasets/logs/ingest", LOGS)[0] == 200
        yield service


class TestLegacyQuery:
    def test_events(self, logs: LocalService) -> None:
        """Reference: queryDataset (API v1, "Run query (legacy)"): startTime, endTime,
        resolution; without aggregations the answer's matches are the events (_time,
        _sysTime, _rowId, data), newest first."""
        status, answer = req(logs, "POST", "/v1/datasets/logs/query", {
            **RANGE, "resolution": "auto"})
        assert status == 200
        assert answer["status"]["rowsMatched"] == 14 and len(answer["matches"]) == 14
        first = answer["matches"][0]
        assert set(first) == {"_time", "_sysTime", "_rowId", "data"}
        assert first["_time"] == "2026-05-01T12:00:13Z" and first["data"]["bytes"] == 130
        assert answer["buckets"] == {"series": [], "totals": []}

    def test_aggregations_grouped_with_a_virtual_field(self, logs: LocalService) -> None:
        """axiom-go's integration test's complex legacy query: a virtual field, a filter
        (exists with a contains child), count grouped by two fields, ordered; totals under
        the alias, and series per time bin."""
        status, answer = req(logs, "POST", "/v1/datasets/logs/query", {
            **RANGE, "resolution": "1m0s",
            "aggregations": [{"alias": "event_count", "op": "count", "field": "*"}],
            "groupBy": ["success", "remote_ip"],
            "filter": {"op": "exists", "field": "response", "children": [
                {"op": "contains", "field": "request", "value": "get"}]},
            "order": [{"field": "success", "desc": True}, {"field": "remote_ip",
                                                           "desc": False}],
            "virtualFields": [{"alias": "success", "expr": "toint(response) < 400"}],
            "project": [{"field": "remote_ip", "alias": "ip"}]})
        assert status == 200, answer
        totals = answer["buckets"]["totals"]
        get_requests = [e for e in LOGS if e["request"] == "GET /"]
        expected: dict[tuple[bool, str], int] = {}
        for e in get_requests:
            key = (e["response"] < 400, e["remote_ip"])
            expected[key] = expected.get(key, 0) + 1
        got = {(t["group"]["success"], t["group"]["remote_ip"]): t["aggregations"][0]["value"]
               for t in totals}
        assert got == expected
        assert [t["aggregations"][0]["op"] for t in totals] == ["event_count"] * len(totals)
        assert [t["id"] for t in totals] == list(range(len(totals)))
        assert [k[0] for k in got] == sorted((k[0] for k in got), reverse=True)
        (interval,) = answer["buckets"]["series"]
        assert interval["startTime"] == "2026-05-01T12:00:00Z"
        assert sum(g["aggregations"][0]["value"] for g in interval["groups"]) == len(
            get_requests)

    @pytest.mark.parametrize("flt, n", [
        ({"op": "==", "field": "response", "value": 500}, 7),
        ({"op": "eq", "field": "request", "value": "get /"}, 9),
        ({"op": "eq", "field": "request", "value": "get /", "caseSensitive": True}, 0),
        ({"op": "not", "field": "", "children": [{"op": "starts-with", "field": "request",
                                                 "value": "POST"}]}, 9),
        ({"op": "or", "field": "", "children": [{"op": ">=", "field": "bytes", "value": 120},
                                                {"op": "lt", "field": "bytes", "value": 10}]},
         3),
        ({"op": "not-exists", "field": "nope"}, 14)])
    def test_filters(self, logs: LocalService, flt: dict[str, Any], n: int) -> None:
        """The filter's operators (reference: eq/==, ne, gt/gte/lt/lte, starts-with,
        contains, exists, not-exists, and/or/not, regexp; case folded unless
        caseSensitive)."""
        status, answer = req(logs, "POST", "/v1/datasets/logs/query", {
            **RANGE, "resolution": "auto", "filter": flt})
        assert status == 200, answer
        assert len(answer["matches"]) == n

    def test_what_it_cannot_run_is_a_400(self, logs: LocalService) -> None:
        status, body = req(logs, "POST", "/v1/datasets/logs/query", {
            **RANGE, "aggregations": [{"op": "histogram", "field": "bytes"}]})
        assert status == 400 and "histogram" in body["message"]
        assert req(logs, "POST", "/v1/datasets/logs/query", {"resolution": "auto"})[0] == 400

    def test_a_token_needs_query_on_the_dataset(self, logs: LocalService) -> None:
        token = limited_token(logs, datasetCapabilities={"other": {"query": ["read"]}})
        status, body = req(logs, "POST", "/v1/datasets/logs/query", RANGE, token=token)
        assert status == 403 and "query" in body["message"]


# ---------------------------------------------------------------------------- defaults

class TestDefaults:
    def test_an_unknown_dataset_is_a_404_saying_how_to_create_it(
            self, svc: LocalService) -> None:
        """The real service answers 404 for an ingest into a dataset nobody created;
        create_datasets=False gives the same, and a created dataset then takes events."""
        status, body = req(svc, "POST", "/v1/datasets/typo/ingest", [{"a": 1}])
        assert status == 404 and "loghandler datasets create typo" in body["message"]
        assert req(svc, "POST", "/v1/datasets", {"name": "typo"})[0] == 200
        assert req(svc, "POST", "/v1/datasets/typo/ingest", [{"a": 1}])[0] == 200

    def test_local_service_creates_on_first_ingest_by_default(self) -> None:
        with LocalService(token=TOKEN) as svc:
            assert req(svc, "POST", "/v1/datasets/new/ingest", [{"a": 1}])[0] == 200
            assert [d["name"] for d in req(svc, "GET", "/v1/datasets")[1]] == ["new"]

    def test_v2_trim_is_204_and_v1_keeps_its_trim_result(self, svc: LocalService) -> None:
        """Reference: trimDataset, v2 answers 204 with no body; v1 200 {numDeleted}."""
        req(svc, "POST", "/v1/datasets/app/ingest", [{"_time": "2020-01-01T00:00:00Z"}])
        assert req(svc, "POST", "/v2/datasets/app/trim", {"maxDuration": "1h"}) == (204, None)
        assert req(svc, "POST", "/v1/datasets/app/trim", {"maxDuration": "1h"}) == (
            200, {"numDeleted": 0})

    def test_the_go_clients_dataset_shape(self, svc: LocalService) -> None:
        """axiom-go's Dataset reads created as a time: every dataset has one."""
        for dataset in req(svc, "GET", "/v2/datasets")[1]:
            assert dataset["created"].endswith("Z") and dataset["mapFields"] == []

    def test_the_client_reads_the_404(self, svc: LocalService) -> None:
        with loghandler.Client(TOKEN, url=svc.url) as client, pytest.raises(
                loghandler.NotFoundError, match=r"create it \(loghandler datasets create typo\)"):
            client.ingest("typo", [{"a": 1}])


# ---------------------------------------------------------------------------- APL

APL_EVENTS = [{"_time": "2024-01-31T10:00:00Z", "method": "GET", "uri": "/css/x.css",
               "geo": {"city": "Oslo"}, "user_id": 3, "status": 200, "when": "2024-01-31"},
              {"_time": "2024-01-31T11:00:00Z", "method": "POST", "uri": "/api",
               "geo": {"city": "Lima"}, "user_id": 4, "status": 500, "when": "not a date"}]


@pytest.fixture(scope="module")
def apl_svc() -> Iterator[LocalService]:
    with LocalService(token=TOKEN) as service:
        assert req(service, "POST", "/v1/datasets/x/ingest", APL_EVENTS)[0] == 200
        yield service


def rows(svc: LocalService, apl: str) -> list[dict[str, Any]]:
    with loghandler.Client(TOKEN, url=svc.url) as client:
        return client.query(apl, start="2024-01-01T00:00:00Z")


class TestApl:
    @pytest.mark.parametrize("apl, statuses", [
        ("['x'] | where * has 'GET'", [200]),
        ("['x'] | where * has 'GET' or * has 'api'", [500, 200]),
        ("['x'] | where * has 'css' and status == 200", [200]),
        ("['x'] | where * has 'lima'", [500]),  # nested fields too, case folded
        ("['x'] | where * !has 'oslo'", [500]),
        ("['x'] | where * == 4", [500]),
        ("['x'] | where * contains 'OS'", [500, 200])])
    def test_every_field(self, apl_svc: LocalService, apl: str, statuses: list[int]) -> None:
        """Reference: tabular-operators/where-operator, "where * has": a term in any field."""
        assert [r["status"] for r in rows(apl_svc, apl + " | project status")] == statuses

    def test_project_away_wildcards_anywhere_in_the_list(self, apl_svc: LocalService) -> None:
        """Reference: project-away-operator, `project-away status*, user*, is*, ['geo.']*`."""
        got = rows(apl_svc, "['x'] | project-away status*, ['geo.']*, uri, user* | "
                            "project-away when")
        assert {k for r in got for k in r} == {"_time", "_sysTime", "method"}

    def test_todatetime_of_what_is_no_time_is_null(self, apl_svc: LocalService) -> None:
        """Reference: todatetime: null when the conversion fails; a number is nanoseconds
        since the epoch."""
        got = rows(apl_svc, "['x'] | extend a = todatetime(when), b = todatetime('nope'), "
                            "c = todatetime(1700000000000000000) | project status, a, b, c")
        assert got == [
            {"status": 500, "a": None, "b": None, "c": "2023-11-14T22:13:20.000000Z"},
            {"status": 200, "a": "2024-01-31T00:00:00.000000Z", "b": None,
             "c": "2023-11-14T22:13:20.000000Z"}]

    def test_datetime_add(self, apl_svc: LocalService) -> None:
        """Reference: datetime_add(part, value, datetime): year ... microsecond; a month
        after January 31 is the end of February."""
        got = rows(apl_svc, "['x'] | where status == 200 | extend "
                            "h = datetime_add('hour', 1, _time), "
                            "m = datetime_add('month', 1, _time), "
                            "y = datetime_add('year', -1, todatetime(when)), "
                            "w = datetime_add('week', 2, _time) | project h, m, y, w")
        assert got == [{"h": "2024-01-31T11:00:00.000000Z", "m": "2024-02-29T10:00:00.000000Z",
                        "y": "2023-01-31T00:00:00.000000Z", "w": "2024-02-14T10:00:00.000000Z"}]

    def test_now_with_a_timespan(self, apl_svc: LocalService) -> None:
        """Reference: scalar data types, now(-timespan) is now() - timespan."""
        assert rows(apl_svc, "['x'] | where _time > now(-3650d) | count") == [{"count": 2}]
        assert rows(apl_svc, "['x'] | where _time > now(-1h) | count") == [{"count": 0}]

    def test_matches_regex_without_the_regex_package(
            self, apl_svc: LocalService, monkeypatch: pytest.MonkeyPatch) -> None:
        """A default install (no regex extra) answers matches regex with Python's re in a
        helper process, which the query's deadline ends: a pattern that backtracks without
        end is the query's 400 at the deadline, not a service held for ever."""
        from loghandler._local import sqlfunctions
        from loghandler._local.ingest import HttpError

        # the worker-process search forced in place of the in-process one.
        monkeypatch.setattr(sqlfunctions, "SEARCH", sqlfunctions._search_in_worker)  # noqa: SLF001
        assert [r["status"] for r in rows(
            apl_svc, "['x'] | where uri matches regex '^/c.s/' | project status")] == [200]
        store = service_store(apl_svc)
        req(apl_svc, "POST", "/v1/datasets/x/ingest", [{"s": "a" * 40}])
        started = time.monotonic()
        with pytest.raises(HttpError, match="ran longer than 1 s"):
            store.query("['x'] | where s matches regex '(a+)+b'", timeout=1.0)
        assert time.monotonic() - started < 5  # the deadline (1 s), plus the kill


# ---------------------------------------------------------------------------- ingest speed

class TestIngestPath:
    @pytest.mark.parametrize("stamp", [
        "2024-02-30T00:00:00.000000Z", "2024-01-01T24:00:00.000000Z",
        "2024-01-01T00:60:00.000000Z", "2024-01-01T00:00:60.000000Z"])
    def test_a_stored_form_time_that_does_not_exist_is_turned_down(
            self, svc: LocalService, stamp: str) -> None:
        """The fast path for times already in the stored form still checks the date."""
        status, body = req(svc, "POST", "/v1/datasets/app/ingest",
                           [{"_time": stamp}, {"_time": "2024-01-01T00:00:59.999999Z"}])
        assert status == 200 and (body["ingested"], body["failed"]) == (1, 1)
        assert "not a valid date" in body["failures"][0]["error"]

    def test_ndjson_read_whole_or_line_by_line_gives_the_same(self, svc: LocalService) -> None:
        """An NDJSON body is decoded at once; a blank line or a line that is not one value
        takes the line by line way (which names the bad line)."""
        lines = [json.dumps({"n": i}) for i in range(5)]
        for body, status in ((("\n".join(lines) + "\n").encode(), 200),
                             (("\n".join(lines[:2]) + "\n\n" + "\n".join(lines[2:])).encode(),
                              200),
                             (b'{"n": 0}\n1,2\n', 400)):
            host, port = svc.url.removeprefix("http://").rsplit(":", 1)
            conn = http.client.HTTPConnection(host, int(port), timeout=10)
            conn.request("POST", "/v1/datasets/app/ingest", body=body, headers={
                "Authorization": f"Bearer {TOKEN}", "Content-Type": "application/x-ndjson"})
            resp = conn.getresponse()
            answer = json.loads(resp.read())
            conn.close()
            assert resp.status == status, answer
            if status == 400:
                assert "line 2" in answer["message"]
        assert sorted(e["n"] for e in svc.events("app")) == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]

    def test_the_ingest_benchmark_runs(self) -> None:
        """A small run of ``python -m benchmarks.local_ingest``: every event stored, the
        figures printed beside the floor's."""
        import subprocess
        import sys
        from pathlib import Path

        root = Path(__file__).resolve().parent.parent
        proc = subprocess.run([sys.executable, "-m", "benchmarks.local_ingest", "--events",
                               "20000"], cwd=root, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert "floor: executemany into SQLite" in proc.stdout
        assert "ratio to the floor" in proc.stdout and "the page's count" in proc.stdout
