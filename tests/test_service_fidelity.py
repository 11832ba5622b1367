"""The local service as the real service documents it (issue 24), item by item.

Each test names what it follows: the service's API reference (ingest, limits, authentication)
or its official SDK (axiom-py 0.15.0), run for real where it exists.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import axiom_py
import pytest
from helpers import service_store
from test_service import TOKEN, call, ingest_path

import loghandler
from loghandler.testing import LocalService

PAT = "xapt-fidelity-personal-token"


@pytest.fixture
def pat_svc() -> Iterator[LocalService]:
    with LocalService(token=PAT) as service:
        yield service


def refused(svc: LocalService, apl: str) -> loghandler.ApiError:
    """The service's 400 for a query it cannot run (its message says why)."""
    with svc.client() as client, pytest.raises(loghandler.ApiError) as info:
        client.query(apl)
    assert info.value.status == 400
    return info.value


class TestHeaders:
    @pytest.mark.parametrize("prefix", ["x-service-", "X-Axiom-"])
    def test_csv_fields_header_names_the_columns(self, svc: LocalService, prefix: str) -> None:
        """API reference, ingest: the CSV-fields header names the columns of a CSV body that
        has no header line, so every line is data. Both spellings (the seed's and the real
        service's, which its official clients send)."""
        status, body, _ = call(svc, "POST", ingest_path(), raw=b"info,hello\nerror,boom\n",
                               headers={"Content-Type": "text/csv",
                                        f"{prefix}CSV-Fields": "level, msg"})
        assert (status, body["ingested"]) == (200, 2), body
        assert [(e["level"], e["msg"]) for e in svc.events("app")] == [
            ("info", "hello"), ("error", "boom")]

    @pytest.mark.parametrize("prefix", ["x-service-", "X-Axiom-"])
    def test_event_labels_are_added_to_every_event(self, svc: LocalService, prefix: str) -> None:
        """API reference, ingest: the event-labels header (a JSON object) adds its fields to
        every event of the request; an event's own field of the same name stays."""
        labels = json.dumps({"region": "eu", "team": "shop"})
        status, body, _ = call(svc, "POST", ingest_path(), [{"a": 1}, {"a": 2, "team": "own"}],
                               headers={f"{prefix}Event-Labels": labels})
        assert (status, body["ingested"]) == (200, 2), body
        got = [(e["a"], e["region"], e["team"]) for e in svc.events("app")]
        assert got == [(1, "eu", "shop"), (2, "eu", "own")]

    def test_event_labels_that_are_no_object_are_a_400(self, svc: LocalService) -> None:
        for bad in ("[1]", "not json"):
            status, body, _ = call(svc, "POST", ingest_path(), [{"a": 1}],
                                   headers={"X-Axiom-Event-Labels": bad})
            assert status == 400 and "event-labels header must be a JSON object" in (
                body["message"])
        assert svc.events("app") == []

    def test_csv_with_bad_utf8_says_csv(self, svc: LocalService) -> None:
        status, body, _ = call(svc, "POST", ingest_path(), raw=b"a,b\n\xff\xfe,1\n",
                               headers={"Content-Type": "text/csv"})
        assert status == 400 and body["message"].startswith("the body is not valid CSV")


class TestLimits:
    def test_reserved_names_are_kept_as_user_fields(self, svc: LocalService) -> None:
        """Reference "Limits and requirements", Reserved field names: a field with a reserved
        name is renamed _user_FIELDNAME ("_sysTime" -> "_user_sysTime"), its value kept; a
        query finds it under that name."""
        sent = {"_sysTime": "mine", "_rowID": 1, "_cursor": "c", "_source": "s",
                "_blockInfo": {"b": 2}, "kept": True}
        assert call(svc, "POST", ingest_path(), [sent])[0] == 200
        (event,) = svc.events("app")
        assert {k: v for k, v in event.items() if k.startswith("_user_")} == {
            "_user_sysTime": "mine", "_user_rowID": 1, "_user_cursor": "c",
            "_user_source": "s", "_user_blockInfo": {"b": 2}}
        assert event["kept"] is True and "_rowID" not in event
        with svc.client() as client:
            rows = client.query("['app'] | project _user_sysTime, _user_source")
        assert rows == [{"_user_sysTime": "mine", "_user_source": "s"}]

    def test_a_value_over_one_megabyte_is_replaced(self, svc: LocalService) -> None:
        """Limits: a string value over 1 MB is stored as <invalid string: too long>, nested
        ones too; the event itself is kept."""
        big = "x" * (1024 * 1024 + 1)
        with LocalService(token=TOKEN, max_body_bytes=8 * 1024 * 1024) as roomy:
            status, body, _ = call(roomy, "POST", ingest_path(),
                                   [{"big": big, "nested": {"big": big}, "small": "ok"}])
            assert (status, body["ingested"]) == (200, 1)
            (event,) = roomy.events("app")
        assert event["big"] == "<invalid string: too long>"
        assert event["nested"]["big"] == "<invalid string: too long>"
        assert event["small"] == "ok"

    def test_more_than_ten_thousand_events_is_refused(self, svc: LocalService) -> None:
        """Limits: at most 10,000 events a request."""
        with LocalService(token=TOKEN, max_body_bytes=8 * 1024 * 1024) as roomy:
            status, body, _ = call(roomy, "POST", ingest_path(), [{"i": i} for i in range(10_001)])
            assert status == 400 and "at most 10,000 events" in body["message"]
            assert roomy.events("app") == []
            assert call(roomy, "POST", ingest_path(), [{"i": i} for i in range(10_000)])[0] == 200


class TestPersonalAccessTokens:
    def test_a_pat_needs_the_org_id_header(self, svc: LocalService,
                                           pat_svc: LocalService) -> None:
        """Authentication, rule 2: with a personal access token, send the org-id header too;
        without it the answer is 403."""
        status, body, _ = call(pat_svc, "GET", "/v1/datasets", token=PAT)
        assert status == 403 and "organization's id" in body["message"]
        for header in ("x-service-org-id", "X-Axiom-Org-Id"):
            assert call(pat_svc, "GET", "/v1/datasets", token=PAT,
                        headers={header: "org-1"})[0] == 200
        assert call(svc, "GET", "/v1/datasets", token=TOKEN)[0] == 200  # an API token: none

    def test_the_package_and_the_official_sdk_send_it(self, pat_svc: LocalService) -> None:
        with loghandler.Client(token=PAT, url=pat_svc.url, org_id="org-1") as client:
            assert client.ingest("app", [{"via": "loghandler"}])["ingested"] == 1
        ax = axiom_py.Client(token=PAT, org_id="org-1", url=pat_svc.url)
        assert ax.ingest_events("app", [{"via": "axiom-py"}]).ingested == 1
        assert sorted(e["via"] for e in pat_svc.events("app")) == ["axiom-py", "loghandler"]


def _apl(svc: LocalService, apl: str, path: str = "/v1/datasets/_apl?format=tabular",
         token: str = TOKEN) -> tuple:
    return call(svc, "POST", path, {"apl": apl}, token=token)[:2]


class TestQueryBounds:
    @pytest.mark.parametrize("apl,named", [
        ("['app'] | take 99999999999999999999999", "take 99999999999999999999999 is out of range"),
        ("['app'] | top 99999999999999999999 by a", "top 99999999999999999999 is out of range"),
        ("['app'] | summarize count() by bin(_time, 99999999999999999999d)",
         "the timespan 99999999999999999999d is out of range"),
        ("['app'] | where _time > ago(1e300s)", "the timespan 1e300s is out of range"),
    ])
    def test_out_of_range_is_a_400_naming_it(self, svc: LocalService, apl: str,
                                              named: str) -> None:
        """A query out of range is a 400 naming the problem, never a 500 (both were 500s with
        a traceback on the service's stderr)."""
        assert call(svc, "POST", ingest_path(), [{"a": 1}])[0] == 200
        status, body = _apl(svc, apl)
        assert status == 400 and named in body["message"], body


class TestEdgeEndpoints:
    def test_ingest_and_query_at_the_edge_paths(self, svc: LocalService) -> None:
        """The official SDK, configured for an edge endpoint, ingests at /v1/ingest/{dataset}
        and queries at /v1/query/_apl: the same service answers both."""
        status, body, _ = call(svc, "POST", "/v1/ingest/app", [{"edge": True}])
        assert (status, body["ingested"]) == (200, 1)
        status, body = _apl(svc, "['app'] | count", "/v1/query/_apl?format=tabular")
        assert status == 200
        assert body["tables"][0]["columns"] == [[1]]


class TestTokensAndAnnotations:
    """/v2/tokens and /v2/annotations as the API reference documents them, driven by the
    official SDK's own clients (axiom_py.tokens, axiom_py.annotations)."""

    def test_annotations_crud(self, svc: LocalService) -> None:
        ax = axiom_py.Client(token=TOKEN, url=svc.url)
        made = ax.annotations.create(axiom_py.AnnotationCreateRequest(
            datasets=["app"], type="deploy", time=None, endTime=None, title="v1.2",
            description=None, url=None))
        assert ax.annotations.get(made.id).title == "v1.2"
        assert [a.id for a in ax.annotations.list(datasets=["app"])] == [made.id]
        assert ax.annotations.list(datasets=["other"]) == []
        updated = ax.annotations.update(made.id, axiom_py.AnnotationUpdateRequest(
            datasets=None, type=None, time=None, endTime=None, title="v1.3", description=None,
            url=None))
        assert (updated.title, updated.type) == ("v1.3", "deploy")
        ax.annotations.delete(made.id)
        status, _, _ = call(svc, "GET", f"/v2/annotations/{made.id}")
        assert status == 404

    def test_a_created_token_does_what_it_may_and_no_more(self, svc: LocalService) -> None:
        """The seed: an API token limits the actions allowed with it, for example only
        querying one particular dataset. Created through the API, it works for that and gets
        403 for the rest."""
        from axiom_py.tokens import CreateTokenRequest, TokenDatasetCapabilities

        assert call(svc, "POST", ingest_path("app"), [{"n": 1}])[0] == 200
        assert call(svc, "POST", ingest_path("other"), [{"n": 2}])[0] == 200
        ax = axiom_py.Client(token=TOKEN, url=svc.url)
        made = ax.tokens.create(CreateTokenRequest(
            name="query app only",
            datasetCapabilities={"app": TokenDatasetCapabilities(query=["read"])}))
        assert made.token.startswith("xaat-") and made.id
        assert [t.name for t in ax.tokens.list()] == ["query app only"]
        assert made.token not in json.dumps(call(svc, "GET", "/v2/tokens")[1])

        status, body = _apl(svc, "['app'] | count", token=made.token)
        assert status == 200 and body["tables"][0]["columns"] == [[1]]
        status, body = _apl(svc, "['other'] | count", token=made.token)
        assert status == 403 and "may not read query in dataset 'other'" in body["message"]
        status, body, _ = call(svc, "POST", ingest_path("app"), [{"n": 3}], token=made.token)
        assert status == 403 and "may not create ingest" in body["message"]
        assert call(svc, "GET", "/v1/datasets", token=made.token)[0] == 403
        assert call(svc, "GET", "/v2/tokens", token=made.token)[0] == 403

        ax.tokens.delete(made.id)
        assert _apl(svc, "['app'] | count", token=made.token)[0] == 403

    def test_where_true_warns_in_the_status(self, svc: LocalService) -> None:
        """The status's messages carry the service's warnings: `where true` includes all."""
        assert call(svc, "POST", ingest_path(), [{"a": 1}])[0] == 200
        status, body = _apl(svc, "['app'] | where true")
        assert status == 200
        assert body["status"]["messages"] == [{
            "priority": "warn", "count": 1,
            "code": "apl_whereclausealwaysevaluatestoTRUEwhichwillincludealldata_1",
            "msg": "where clause always evaluates to TRUE, which will include all data"}]
        assert _apl(svc, "['app'] | where a == 1")[1]["status"]["messages"] == []


class TestQueryRange:
    def test_end_defaults_to_now_and_relative_weeks(self, svc: LocalService) -> None:
        """API reference, query: [startTime, endTime), endTime defaulting to now, so an event
        stamped in the future is outside a query that names no end; relative forms include
        weeks (now-1w)."""
        import time as _time

        now = _time.time()
        events = [{"_time": now - 3 * 86400, "n": "3 days ago"},
                  {"_time": now - 10 * 86400, "n": "10 days ago"},
                  {"_time": now + 3600, "n": "in an hour"}]
        assert call(svc, "POST", ingest_path(), events)[0] == 200

        def names(**range_: str) -> list[str]:
            status, body, _ = call(svc, "POST", "/v1/datasets/_apl?format=tabular",
                                   {"apl": "['app'] | project n", **range_})
            assert status == 200, body
            return sorted(body["tables"][0]["columns"][0])

        assert names() == ["10 days ago", "3 days ago"]
        assert names(startTime="now-1w") == ["3 days ago"]
        assert names(startTime="now-2w", endTime="now+1d") == [
            "10 days ago", "3 days ago", "in an hour"]


class TestQueryAnswerBounds:
    def test_an_answer_is_capped_and_marked_partial(self, svc: LocalService,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
        """A query is bounded as a whole, its answer too (a query over 40 MB of stored events
        took 69.7 s and 2.4 GB): past MAX_ANSWER_BYTES of events read, the answer is partial
        (isPartial), not larger. Lowered here to 20 KB over 100 events of 1 KB."""
        from loghandler._local import aplsql_run

        monkeypatch.setattr(aplsql_run, "MAX_ANSWER_BYTES", 20 * 1024)
        events = [{"i": i, "pad": "x" * 1000} for i in range(100)]
        assert call(svc, "POST", ingest_path(), events)[0] == 200
        status, body = _apl(svc, "['app']")
        assert status == 200
        assert body["status"]["isPartial"] is True
        assert 1 <= len(body["tables"][0]["columns"][0]) < 25
        status, body = _apl(svc, "['app'] | count")  # an aggregate reads little: whole
        assert body["tables"][0]["columns"] == [[100]] and body["status"]["isPartial"] is False


class TestIngestLimits:
    def test_an_ingest_limit_answers_430_with_its_headers(self) -> None:
        """Limits: past the plan's ingest (a monthly amount), 430 with
        X-IngestLimit-Limit/-Remaining/-Reset; the shipper's 430 handling can be rehearsed."""
        import calendar
        import time as _time

        with LocalService(token=TOKEN, ingest_limit=100) as limited:
            status, _, headers = call(limited, "POST", ingest_path(), [{"pad": "x" * 80}])
            assert status == 200 and headers["X-IngestLimit-Limit"] == "100"
            assert int(headers["X-IngestLimit-Remaining"]) < 100
            status, _, headers = call(limited, "POST", ingest_path(), [{"pad": "x" * 80}])
            assert status == 200  # the allowance is checked before, spent after: 100 then 0
            status, body, headers = call(limited, "POST", ingest_path(), [{"a": 1}])
            assert status == 430 and "ingest limit exceeded" in body["message"]
            assert headers["X-IngestLimit-Remaining"] == "0"
            t = _time.gmtime()
            month = (t.tm_year + (t.tm_mon == 12), t.tm_mon % 12 + 1)
            assert int(headers["X-IngestLimit-Reset"]) == calendar.timegm(
                (*month, 1, 0, 0, 0))
            assert len(limited.events("app")) == 2
            with loghandler.Client(token=TOKEN, url=limited.url) as client, pytest.raises(
                    loghandler.RateLimitError) as info:
                client.ingest("app", [{"a": 2}])
            assert info.value.retry_after is not None and info.value.retry_after > 0

    def test_the_field_limit_turns_down_what_would_pass_it(self) -> None:
        """Limits: a dataset holds at most so many fields (nested ones by their dotted path);
        an event that would take it past is turned down in the status, the others stored."""
        with LocalService(token=TOKEN, max_fields=5) as few:  # _time, a, b, geo.city, geo.zip
            status, body, _ = call(few, "POST", ingest_path(), [
                {"a": 1, "b": 2}, {"geo": {"city": "x", "zip": "y"}}, {"c": 3}, {"a": 5}])
            assert (status, body["ingested"], body["failed"]) == (200, 3, 1)
            assert "field limit exceeded" in body["failures"][0]["error"]
            assert [e.get("c") for e in few.events("app")] == [None, None, None]

    def test_rate_limit_headers_name_their_scope(self) -> None:
        with LocalService(token=TOKEN, rate_limit=5) as limited:
            headers = call(limited, "GET", "/v1/datasets")[2]
        assert headers["X-RateLimit-Scope"] == "user" and headers["X-RateLimit-Limit"] == "5"


class TestAplFunctions:
    """Functions of the APL reference that real queries and saved views use, answered as the
    reference documents them (strcat, coalesce, tostring, toint/tolong, todouble/toreal, iff)."""

    @pytest.mark.parametrize("extend,expected", [
        ("strcat(service, '/', code)", "checkout/502"),  # strcat: arguments as text
        ("strcat(missing, 'x')", "x"),  # a missing argument is empty
        ("coalesce(missing, service, 'none')", "checkout"),  # the first that is not null
        ("tostring(code)", "502"),
        ("tostring(code > 500)", "true"),
        ("toint(text_code)", 404),
        ("toint('abc')", None),  # not a number: null, not 0
        ("toint('0')", 0),
        ("todouble(ratio)", 0.25),
        ("iff(code >= 500, 'server', 'client')", "server"),
        ("iif(code < 500, 'client', 'server')", "server"),
    ])
    def test_function(self, svc: LocalService, extend: str, expected: object) -> None:
        event = {"service": "checkout", "code": 502, "text_code": "404", "ratio": "0.25"}
        assert call(svc, "POST", ingest_path(), [event])[0] == 200
        status, body = _apl(svc, f"['app'] | extend x = {extend} | project x")
        assert status == 200, body
        assert body["tables"][0]["columns"] == [[expected]]

    def test_in_a_where(self, svc: LocalService) -> None:
        events = [{"code": "500"}, {"code": "404"}, {"code": "nope"}]
        assert call(svc, "POST", ingest_path(), events)[0] == 200
        status, body = _apl(svc, "['app'] | where toint(code) >= 500 | count")
        assert status == 200 and body["tables"][0]["columns"] == [[1]]


class TestHas:
    """APL `has` (the reference: a whole term, case-insensitive; `has_cs` case-sensitive;
    `!has` its negation)."""

    @pytest.mark.parametrize("query,expected", [
        ("where message has 'error'", ["an error here", "Error: boom"]),
        ("where message has_cs 'error'", ["an error here"]),
        ("where message !has 'error'", ["errors galore", "no match"]),
        ("where message has 'boom'", ["Error: boom"]),
    ])
    def test_whole_terms(self, svc: LocalService, query: str, expected: list[str]) -> None:
        events = [{"message": m} for m in ("an error here", "Error: boom", "errors galore",
                                           "no match")]
        assert call(svc, "POST", ingest_path(), events)[0] == 200
        status, body = _apl(svc, f"['app'] | {query} | project message")
        assert status == 200, body
        assert sorted(body["tables"][0]["columns"][0]) == sorted(expected)


class TestMoreApl:
    """case(), todatetime() and raw strings, as the APL reference writes them."""

    def test_case_todatetime_and_raw_strings(self, svc: LocalService) -> None:
        events = [{"code": 502, "path": "C:\\logs\\a", "when": "2024-05-01T12:00:00Z"},
                  {"code": 404, "path": "x", "when": "not a time"}, {"code": 200, "path": "y"}]
        assert call(svc, "POST", ingest_path(), events)[0] == 200

        def column(apl: str) -> list[object]:
            status, body = _apl(svc, apl)
            assert status == 200, body
            return sorted(body["tables"][0]["columns"][0], key=str)

        assert column("['app'] | extend k = case(code >= 500, 'server', code >= 400, "
                      "'client', 'ok') | project k") == ["client", "ok", "server"]
        assert column("['app'] | where path == @'C:\\logs\\a' | project code") == [502]
        assert column("['app'] | where todatetime(when) < datetime(2024-05-02) "
                      "| project code") == [502]
        assert column("['app'] | where isnull(todatetime(when)) | project code") == [200, 404]


@pytest.fixture(scope="module")
def paged() -> Iterator[LocalService]:
    # 2,500 events over 25 s, arriving out of time order (row ids do not follow time).
    events = [{"_time": f"2026-05-01T12:00:{(i * 7919) % 2500 // 100:02d}."
                        f"{(i * 7919) % 100:02d}Z", "i": (i * 7919) % 2500}
              for i in range(2500)]
    with LocalService(token=TOKEN) as service:
        service.client().ingest("app", events)
        yield service


class TestPaging:
    """API reference, "Run query": with no take or limit, events come a page (1,000 rows) at a
    time; the status's minCursor/maxCursor name the page's oldest and newest event, and a
    query with ``cursor`` (``includeCursor`` to include that event) moves to the next page."""

    def page(self, svc: LocalService, apl: str, **extra: object) -> dict[str, object]:
        from test_query import post_query

        status, body = post_query(svc, {"apl": apl, "startTime": "2026-01-01T00:00:00Z",
                                        **extra}, fmt="tabular", token=TOKEN)
        assert status == 200, body
        return body  # type: ignore[no-any-return]

    def column(self, body: dict[str, object], name: str) -> list[object]:
        table = body["tables"][0]  # type: ignore[index]
        names = [f["name"] for f in table["fields"]]
        return table["columns"][names.index(name)]  # type: ignore[no-any-return]

    def test_pages_newest_first_cover_everything_once(self, paged: LocalService) -> None:
        seen: list[object] = []
        cursor = None
        for _ in range(5):
            body = self.page(paged, "['app']", **({"cursor": cursor} if cursor else {}))
            got = self.column(body, "i")
            seen += got
            status = body["status"]  # type: ignore[index]
            if not status["isPartial"]:
                break
            assert len(got) == 1000
            cursor = status["minCursor"]
        assert seen == sorted(range(2500), reverse=True)

    def test_pages_oldest_first_with_max_cursor(self, paged: LocalService) -> None:
        first = self.page(paged, "['app'] | sort by _time asc")
        second = self.page(paged, "['app'] | sort by _time asc",
                           cursor=first["status"]["maxCursor"])  # type: ignore[index]
        assert self.column(first, "i") == list(range(1000))
        assert self.column(second, "i") == list(range(1000, 2000))

    def test_include_cursor_repeats_that_event(self, paged: LocalService) -> None:
        first = self.page(paged, "['app']")
        cursor = first["status"]["minCursor"]  # type: ignore[index]
        again = self.page(paged, "['app']", cursor=cursor, includeCursor=True)
        assert self.column(again, "i")[0] == self.column(first, "i")[-1] == 1500

    def test_take_is_not_paged(self, paged: LocalService) -> None:
        body = self.page(paged, "['app'] | take 2000")
        assert len(self.column(body, "i")) == 2000
        assert body["status"]["isPartial"] is False  # type: ignore[index]

    @pytest.mark.parametrize("cursor, said", [
        ("zz", "must be a _rowId"), ("0000000000fffff0", "names no event"), (7, "must be")])
    def test_bad_cursor_is_a_400(self, paged: LocalService, cursor: object, said: str) -> None:
        from test_query import post_query

        status, body = post_query(paged, {"apl": "['app']", "cursor": cursor}, token=TOKEN)
        assert status == 400 and said in body["message"]


class TestStatus:
    """API reference, "Run query": the status counts the events matched (``rowsMatched``: of
    an aggregation, the events aggregated; of events, those the answer read),
    a tabular field names its aggregation (``agg.name``, ``agg.fields``, ``agg.args``), and a
    time bin's ``buckets.size`` is in nanoseconds."""

    def run(self, svc: LocalService, apl: str) -> dict[str, object]:
        from test_query import post_query

        status, body = post_query(svc, {"apl": apl, "startTime": "2026-01-01T00:00:00Z"},
                                  fmt="tabular", token=TOKEN)
        assert status == 200, body
        return body  # type: ignore[no-any-return]

    @pytest.mark.parametrize("apl, matched", [
        # Events: those read for the answer (the scan stops once it is whole).
        ("['app'] | where i < 300 | take 10", 10),
        ("['app'] | where i < 300", 300),                 # one page of 1,000 holds them all
        ("['app']", 1000),                                # a page of 1,000 out of 2,500
        # Aggregations: every event in the groups, not the number of groups.
        ("['app'] | where i >= 2000 | summarize avg(i) by bin(_time, 5s)", 500),
        ("['app'] | where i % 2 == 0 | count", 1250),
        ("['app'] | summarize max(i)", 2500),
    ])
    def test_rows_matched(self, paged: LocalService, apl: str, matched: int) -> None:
        assert self.run(paged, apl)["status"]["rowsMatched"] == matched  # type: ignore[index]

    def test_agg_names_its_field_and_args(self, paged: LocalService) -> None:
        body = self.run(paged, "['app'] | summarize total = sum(i), n = count(), "
                               "c = countif(i > 3) by bin(_time, 10s)")
        table = body["tables"][0]  # type: ignore[index]
        aggs = {f["name"]: f.get("agg") for f in table["fields"]}
        assert aggs["total"] == {"name": "sum", "fields": ["i"], "args": []}
        assert aggs["n"] == {"name": "count", "fields": [], "args": []}
        assert aggs["c"]["name"] == "countif" and aggs["_time"] is None
        assert table["buckets"] == {"field": "_time", "size": 10_000_000_000}


@pytest.fixture(scope="module")
def people() -> Iterator[LocalService]:
    events = [{"_time": f"2026-05-01T12:0{i % 5}:00Z", "n": i, "user": u, "user_id": i * 10,
               "geo": {"city": c, "zip": "0150"}, "msg": m}
              for i, (u, c, m) in enumerate([
                  ("ann", "Oslo", "ÉCOLE fermée"), ("bob", "Rome", "école"),
                  ("cy", "Oslo", "Straße"), ("ann", "Paris", "x"), ("bob", "Oslo", "y"),
                  ("dee", "Rome", "z")])]
    with LocalService(token=TOKEN) as service:
        service.client().ingest("p", events)
        yield service


class TestAplReference:
    """The APL reference's operators and functions that saved views use, each answered as
    the reference documents it (between, project-rename, wildcard project-away,
    percentile(s), arg_max/arg_min, Unicode case folding)."""

    def q(self, svc: LocalService, apl: str) -> list[dict[str, object]]:
        with svc.client() as client:
            return client.query(apl, start="2026-01-01T00:00:00Z")

    @pytest.mark.parametrize("apl, expected", [
        ("['p'] | where n between (1 .. 3) | sort by n asc | project n", [1, 2, 3]),
        ("['p'] | where n !between (1 .. 3) | sort by n asc | project n", [0, 4, 5]),
        ("['p'] | where _time between (datetime(2026-05-01T12:01:00Z) .. "
         "datetime(2026-05-01T12:02:00Z)) | sort by n asc | project n", [1, 2]),
        # =~ and tolower fold every letter, not only ASCII ones.
        ("['p'] | where msg =~ 'école FERMÉE' | project n", [0]),
        ("['p'] | where msg contains 'ÉCOLE' | sort by n asc | project n", [0, 1]),
        ("['p'] | where toupper(msg) == 'STRASSE' | project n", [2]),
    ])
    def test_filters(self, people: LocalService, apl: str, expected: list[int]) -> None:
        assert [r["n"] for r in self.q(people, apl)] == expected

    def test_project_away_patterns(self, people: LocalService) -> None:
        [row] = self.q(people, "['p'] | where n == 0 | project-away user*, geo.*, _sysTime")
        assert set(row) == {"_time", "n", "msg"}
        [row] = self.q(people, "['p'] | where n == 0 | project n, user, user_id "
                               "| project-away *_id")
        assert row == {"n": 0, "user": "ann"}

    def test_project_rename(self, people: LocalService) -> None:
        [row] = self.q(people, "['p'] | where n == 0 | project-rename who = user, "
                               "city = geo.city")
        assert row["who"] == "ann" and row["city"] == "Oslo"
        assert "user" not in row and "geo.city" not in row and row["geo.zip"] == "0150"
        assert self.q(people, "['p'] | where n == 1 | project n, user "
                              "| project-rename who = user") == [{"n": 1, "who": "bob"}]
        assert self.q(people, "['p'] | project-rename name = user | where name == 'cy' "
                              "| project n") == [{"n": 2}]

    def test_percentiles(self, people: LocalService) -> None:
        assert self.q(people, "['p'] | summarize percentile(n, 50), p90 = percentile(n, 90)"
                      ) == [{"percentile_n_50": 2, "p90": 5}]
        assert self.q(people, "['p'] | where user == 'ann' | summarize percentiles(n, 25, 75)"
                      ) == [{"percentile_n_25": 0, "percentile_n_75": 3}]

    def test_arg_max_and_arg_min(self, people: LocalService) -> None:
        assert self.q(people, "['p'] | summarize arg_max(n, user, msg) by geo.city") == [
            {"geo.city": "Oslo", "n": 4, "user": "bob", "msg": "y"},
            {"geo.city": "Paris", "n": 3, "user": "ann", "msg": "x"},
            {"geo.city": "Rome", "n": 5, "user": "dee", "msg": "z"}]
        rows = self.q(people, "['p'] | summarize arg_min(n, *) by user")
        ann = next(r for r in rows if r["user"] == "ann")
        assert ann["n"] == 0 and ann["msg"] == "ÉCOLE fermée" and ann["geo.city"] == "Oslo"
        assert list(ann)[:2] == ["user", "n"]

    @pytest.mark.parametrize("apl, said", [
        ("['p'] | summarize percentile(n, 101)", "percentages from 0 to 100"),
        ("['p'] | summarize percentile(n, 5, 9)", "percentiles() takes several"),
        ("['p'] | summarize arg_max(n)", "fields to return"),
        ("['p'] | project-rename _time = n", "system fields"),
        ("['p'] | where n between (1, 3)", "'..'"),
    ])
    def test_bad_uses_say_what(self, people: LocalService, apl: str, said: str) -> None:
        error = refused(people, apl)
        assert said in str(error)


@pytest.fixture(scope="module")
def logs() -> Iterator[LocalService]:
    events = [{"n": 0, "msg": "user=ann took 17ms at 2026-05-01T12:00:00Z ok=true"},
              {"n": 1, "msg": "user=bob took x ms"}, {"n": 2, "msg": "nothing"},
              {"n": 3, "msg": "user=" + "a" * 500_000}]
    with LocalService(token=TOKEN) as service:
        service.client().ingest("l", events)
        yield service


class TestParse:
    """APL reference, parse (simple mode): string constants, typed columns and *; a text the
    pattern does not match gives null columns."""

    def q(self, svc: LocalService, apl: str) -> list[dict[str, object]]:
        with svc.client() as client:
            return client.query(apl + " | sort by n asc")

    def test_typed_columns(self, logs: LocalService) -> None:
        rows = self.q(logs, '[\'l\'] | parse msg with "user=" user " took " ms:int "ms at " '
                            't:datetime " ok=" ok:bool | project n, user, ms, t, ok')
        assert rows[0] == {"n": 0, "user": "ann", "ms": 17, "t": "2026-05-01T12:00:00Z",
                           "ok": True}
        assert all(r["user"] is None and r["ms"] is None for r in rows[1:])

    def test_wildcards_and_the_rest(self, logs: LocalService) -> None:
        assert self.q(logs, '[\'l\'] | parse msg with * "took " ms:long "ms" * '
                            '| where ms > 10 | project n, ms') == [{"n": 0, "ms": 17}]
        rows = self.q(logs, '[\'l\'] | parse msg with "user=" user " " rest '
                            '| where isnotnull(user) | project n, user, rest')
        assert rows == [{"n": 0, "user": "ann",
                         "rest": "took 17ms at 2026-05-01T12:00:00Z ok=true"},
                        {"n": 1, "user": "bob", "rest": "took x ms"}]
        # The last column takes the rest: half a megabyte, read in one pass.
        [row] = self.q(logs, '[\'l\'] | where n == 3 | parse msg with "user=" who '
                             '| project n, size = strlen(who)')
        assert row == {"n": 3, "size": 500_000}

    @pytest.mark.parametrize("apl, said", [
        ("['l'] | parse msg with user rest", "next to each other"),
        ("['l'] | parse msg with \"x\"", "names no column"),
        ("['l'] | parse msg with \"a=\" a:float", "unknown type 'float'"),
        ("['l'] | parse msg \"a=\" a", "expected 'with'"),
    ])
    def test_bad_patterns(self, logs: LocalService, apl: str, said: str) -> None:
        error = refused(logs, apl)
        assert said in str(error)


def test_limit_after_a_time_binned_summarize_keeps_whole_series() -> None:
    """APL reference, limit: after summarize whose first group is a time bin, limit N keeps
    the N groups (series) with the largest totals, each with every one of its time bins, not
    the first N rows."""
    events: list[dict[str, object]] = []
    for minute in range(3):
        for level, n in (("info", 10), ("warn", 50 if minute == 1 else 5), ("error", 1),
                         ("debug", 3)):
            events += [{"_time": f"2026-05-01T12:0{minute}:30Z", "level": level}] * n
    with LocalService(token=TOKEN) as svc:
        svc.client().ingest("s", events)
        with svc.client() as client:
            rows = client.query("['s'] | summarize count() by bin(_time, 1m), level | limit 2",
                                start="2026-01-01T00:00:00Z")
            plain = client.query("['s'] | summarize count() by level | limit 2",
                                 start="2026-01-01T00:00:00Z")
    assert {r["level"] for r in rows} == {"warn", "info"} and len(rows) == 6
    assert [r["count_"] for r in rows if r["level"] == "warn"] == [5, 50, 5]
    assert len(plain) == 2  # without a time bin, limit is the first N rows


class TestMatchesRegex:
    """APL reference, matches regex: a value that matches the regular expression anywhere.
    A pattern that backtracks without end stops at the query's deadline (a 400)."""

    def test_matches(self, people: LocalService) -> None:
        with people.client() as client:
            rows = client.query("['p'] | where msg matches regex @'^[a-zé]+$' "
                                "| sort by n asc | project n", start="2026-01-01T00:00:00Z")
            assert [r["n"] for r in rows] == [1, 3, 4, 5]
            rows = client.query("['p'] | where user matches regex 'n{2}|^cy' "
                                "| sort by n asc | project n", start="2026-01-01T00:00:00Z")
            assert [r["n"] for r in rows] == [0, 2, 3]

    def test_a_runaway_pattern_stops_at_the_deadline(self) -> None:
        """The answer comes at the query's deadline (a 400 that says so), not when the match
        ends. The regex package's own timeout counts CPU time, which a busy host hands out
        slowly (bounded by it alone, 1 s took 5.7-7.3 s at a load of 10-16 on 2 cores, issue
        48): the match goes on in a thread of its own, bounded by that timeout, and the query
        is not kept waiting for it. The test below makes that load itself."""
        import time

        from loghandler._local.ingest import HttpError

        deadline = 1.0  # the query's, instead of the service's 10 s
        # What the answer may take past it: the query's own work after the deadline (a few ms
        # on a quiet host) on a host where every core is busy.
        margin = 4.0
        with LocalService(token=TOKEN) as svc:
            svc.client().ingest("r", [{"s": "a" * 5000 + "!"}] * 3)
            store = service_store(svc)
            timed_out = store.reader.stats.timed_out
            started = time.monotonic()
            with pytest.raises(HttpError) as info:
                store.query("['r'] | where s matches regex '(a|a?)+$'", timeout=deadline)
            took = time.monotonic() - started
            assert info.value.status == 400 and "longer than 1 s" in info.value.message
            assert store.reader.stats.timed_out == timed_out + 1
            assert took < deadline + margin
            # The service goes on answering after it.
            assert svc.client().query("['r'] | count") == [{"count": 3}]

    @pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs CPU affinity")
    def test_a_runaway_pattern_stops_at_the_deadline_on_a_starved_core(self) -> None:
        """The deadline is the clock's, whatever CPU the query gets: the query (and the
        match thread it starts) share one core with five spinning processes, a sixth of it.
        Bounded by the regex package's CPU-time timeout alone, 1 s of CPU took 6 s there."""
        import subprocess
        import sys
        import time

        from cpuload import HOG

        from loghandler._local.ingest import HttpError

        deadline, margin = 1.0, 4.0  # as the test above
        core = min(os.sched_getaffinity(0))
        with LocalService(token=TOKEN) as svc:
            svc.client().ingest("r", [{"s": "a" * 5000 + "!"}] * 3)
            store = service_store(svc)
            mine = os.sched_getaffinity(0)
            hogs = [subprocess.Popen([sys.executable, "-c", HOG, str(os.getpid()), "60"])
                    for _ in range(5)]
            try:
                for hog in hogs:
                    os.sched_setaffinity(hog.pid, {core})
                os.sched_setaffinity(0, {core})  # this thread, and the threads it starts
                started = time.monotonic()
                with pytest.raises(HttpError) as info:
                    store.query("['r'] | where s matches regex '(a|a?)+$'", timeout=deadline)
                took = time.monotonic() - started
            finally:
                os.sched_setaffinity(0, mine)
                for hog in hogs:
                    hog.terminate()
                for hog in hogs:
                    hog.wait(10)
            assert info.value.status == 400 and "longer than 1 s" in info.value.message
            assert took < deadline + margin

    def test_without_the_regex_package_a_default_install_answers(self) -> None:
        """Issue 37: without the regex extra, matches regex still runs (Python's re in a
        helper process the deadline can end: test_service_clients tests that bound)."""
        import subprocess
        import sys

        code = ("import sys; sys.modules['regex'] = None\n"
                "from loghandler.testing import LocalService\n"
                "with LocalService() as s, s.client() as c:\n"
                "    c.ingest('x', [{'a': 'timed out'}, {'a': 'time out'}, {'a': 'in time'}])\n"
                "    print(c.query(\"['x'] | where a matches regex 'time(d)? ?out' | count\"))\n")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=60)
        assert out.stdout.strip() == "[{'count': 2}]", out
