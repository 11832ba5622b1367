"""The query API of the local service (POST /v1/datasets/_apl), its APL subset, client.query,
and the event store under it: real HTTP on loopback, the answers read by our client and by
axiom-py (the service's official SDK)."""

from __future__ import annotations

import json
import sqlite3
import threading
import urllib.request
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loghandler._errors import ApiError, ConfigurationError
from loghandler._local import apl, aplsql
from loghandler._local.service import Store
from loghandler._output import service_message
from loghandler.testing import LocalService

TOKEN = "query-test-token"


def stamp(minute: int, second: int = 0) -> str:
    return f"2026-05-01T12:{minute:02d}:{second:02d}Z"  # the stored form


# Ten events, one a minute, arriving out of time order (the query orders by _time).
EVENTS: list[dict[str, Any]] = [
    {"_time": stamp(3), "level": "info", "message": "User signed in", "n": 3, "user": "ann"},
    {"_time": stamp(0), "level": "debug", "message": "cache warm", "n": 0},
    {"_time": stamp(1), "level": "info", "message": "request served", "n": 1, "user": "bob"},
    {"_time": stamp(2), "level": "error", "message": "Payment declined", "n": 2, "user": "ann",
     "ctx": {"code": 402}},
    {"_time": stamp(4), "level": "warning", "message": "slow query", "n": 4, "ok": False},
    {"_time": stamp(5), "level": "error", "message": "db timeout", "n": 5, "user": "cy"},
    {"_time": stamp(6), "level": "info", "message": "request served", "n": 6, "user": "bob"},
    {"_time": stamp(7), "level": "INFO", "message": "it's done", "n": 7, "ok": True},
    {"_time": stamp(8), "level": "info", "message": "request served", "n": 8, "tags": ["a"]},
    {"_time": stamp(9), "level": "critical", "message": "disk full", "n": 9, "user": "dee"},
]


@pytest.fixture(scope="module")
def svc() -> Iterator[LocalService]:
    with LocalService(token=TOKEN) as service:
        service.client().ingest("app", EVENTS)
        service.client().ingest("other", [{"_time": stamp(0), "n": 100}])
        yield service


def ns(rows: list[dict[str, Any]]) -> list[Any]:
    return [r.get("n") for r in rows]


# (query, the expected value of field n in each row, in order). Without a sort, newest first.
N_TABLE = [
    ("['app']", [9, 8, 7, 6, 5, 4, 3, 2, 1, 0]),
    ("app", [9, 8, 7, 6, 5, 4, 3, 2, 1, 0]),
    ("['app'] | take 3", [9, 8, 7]),
    ("['app'] | limit 2", [9, 8]),
    ("['app'] | sort by _time asc | take 3", [0, 1, 2]),
    ("['app'] | order by n desc | take 2", [9, 8]),
    ("['app'] | sort by user asc, n desc | take 4", [8, 7, 4, 0]),  # nulls first
    ("['app'] | where level == 'error'", [5, 2]),
    ("['app'] | where level != 'info' | sort by n asc", [0, 2, 4, 5, 7, 9]),
    ("['app'] | where level =~ 'INFO' | sort by n asc", [1, 3, 6, 7, 8]),
    ("['app'] | where level !~ 'info' | sort by n asc", [0, 2, 4, 5, 9]),
    ("['app'] | where n > 7", [9, 8]),
    ("['app'] | where n >= 7 and n < 9", [8, 7]),
    ("['app'] | where n <= 1 or n == 9", [9, 1, 0]),
    ("['app'] | where n * 2 == 8", [4]),
    ("['app'] | where message contains 'REQUEST'", [8, 6, 1]),
    ("['app'] | where message contains_cs 'REQUEST'", []),
    ("['app'] | where message !contains 'e'", [9]),
    ("['app'] | where message startswith 'user'", [3]),
    ("['app'] | where message startswith_cs 'user'", []),
    ("['app'] | where message !startswith 'r' | where n < 3", [2, 0]),
    ("['app'] | where message endswith 'FULL'", [9]),
    ("['app'] | where message endswith_cs 'full'", [9]),
    ("['app'] | where message !endswith 'd' | sort by n asc", [0, 3, 4, 5, 7, 9]),
    ("['app'] | where message contains \"it's\"", [7]),
    ("['app'] | where user in ('ann', 'cy')", [5, 3, 2]),
    ("['app'] | where user !in ('ann', 'cy') | sort by n asc", [0, 1, 4, 6, 7, 8, 9]),
    ("['app'] | where user in~ ('ANN')", [3, 2]),
    ("['app'] | where not(level == 'info') and n < 3", [2, 0]),
    ("['app'] | where isnull(user) | sort by n asc", [0, 4, 7, 8]),
    ("['app'] | where isnotnull(ok)", [7, 4]),
    ("['app'] | where isnotempty(user) | take 1", [9]),
    ("['app'] | where ok == true", [7]),
    ("['app'] | where ok == false", [4]),
    ("['app'] | where ctx.code == 402", [2]),
    ("['app'] | where ['ctx'].code >= 400", [2]),
    ("['app'] | where ['ctx']['code'] == 402 | project n", [2]),
    ("['app'] | where _time > datetime(2026-05-01T12:07:00Z)", [9, 8]),
    ("['app'] | where _time >= datetime('2026-05-01T12:08:00Z')", [9, 8]),
    ("['app'] | where _time < datetime(\"2026-05-01T12:02:00.5Z\")", [2, 1, 0]),
    ("['app'] | where _time between_x_unused == 1", None),  # error row, see ERRORS
    ("['app'] | where _time > datetime(2026-05-01T12:00:00Z) + 8m", [9]),
    ("['app'] | where _time >= ago(3650d)", [9, 8, 7, 6, 5, 4, 3, 2, 1, 0]),
    ("['app'] | where _time > now()", []),
    ("['app'] | where _time > now() - 1h", []),
    ("['app'] | where tolower(level) == 'info' | count", None),
    ("['app'] // a comment\n| where n == 1", [1]),
    ("['app'] | where n == 1 or n == 2 | project n, message", [2, 1]),
    ("['app'] | sort by n asc | project n | take 2", [0, 1]),
    ("['app'] | project n, user | where isnull(user) | take 1", [8]),
]


@pytest.mark.parametrize("query, expected", [t for t in N_TABLE if t[1] is not None])
def test_query_table(svc: LocalService, query: str, expected: list[int]) -> None:
    """Each query of the subset gives exactly these rows, in this order."""
    with svc.client() as client:
        assert ns(client.query(query)) == expected


# (query, expected rows exactly)
ROWS_TABLE = [
    ("['app'] | count", [{"count": 10}]),
    ("['app'] | where level == 'error' | count", [{"count": 2}]),
    ("['app'] | where tolower(level) == 'info' | count", [{"count": 5}]),
    ("['app'] | summarize count()", [{"count_": 10}]),
    ("['app'] | summarize count() by level",
     [{"level": "INFO", "count_": 1}, {"level": "critical", "count_": 1},
      {"level": "debug", "count_": 1}, {"level": "error", "count_": 2},
      {"level": "info", "count_": 4}, {"level": "warning", "count_": 1}]),
    ("['app'] | where n < 4 | summarize count() by bin(_time, 2m)",
     [{"_time": "2026-05-01T12:00:00Z", "count_": 2},
      {"_time": "2026-05-01T12:02:00Z", "count_": 2}]),
    ("['app'] | where n < 4 | summarize count() by bin(_time, 2m), level",
     [{"_time": "2026-05-01T12:00:00Z", "level": "debug", "count_": 1},
      {"_time": "2026-05-01T12:00:00Z", "level": "info", "count_": 1},
      {"_time": "2026-05-01T12:02:00Z", "level": "error", "count_": 1},
      {"_time": "2026-05-01T12:02:00Z", "level": "info", "count_": 1}]),
    ("['app'] | summarize total = sum(n), top = max(n), users = dcount(user), "
     "errors = countif(level == 'error')",
     [{"total": 45, "top": 9, "users": 4, "errors": 2}]),
    ("['app'] | summarize count() by user | where count_ > 1 and isnotnull(user) "
     "| sort by user asc",
     [{"user": "ann", "count_": 2}, {"user": "bob", "count_": 2}]),
    ("['app'] | where n == 2 | project message, code = ctx.code, ctx",
     [{"message": "Payment declined", "code": 402, "ctx": {"code": 402}}]),
    ("['app'] | where n == 8 | project tags, missing",
     [{"tags": ["a"], "missing": None}]),
    ("['app'] | where n == 3 | project _time, level",
     [{"_time": stamp(3), "level": "info"}]),
    ("['app'] | where n == 2 | extend twice = n * 2, who = toupper(user) | project n, twice, who",
     [{"n": 2, "twice": 4, "who": "ANN"}]),
    ("['app'] | where n == 2 | project n, user | extend big = n > 1, ctx = user",
     [{"n": 2, "user": "ann", "big": True, "ctx": "ann"}]),
    ("['app'] | top 2 by n | project n", [{"n": 9}, {"n": 8}]),
    ("['app'] | top 2 by n asc | project n", [{"n": 0}, {"n": 1}]),
    ("['app'] | distinct level | where level startswith 'i'",
     [{"level": "INFO"}, {"level": "info"}]),
    ("['app'] | where n < 2 | summarize count() by bin_auto(_time)",
     [{"_time": "2026-05-01T12:00:00Z", "count_": 1},
      {"_time": "2026-05-01T12:01:00Z", "count_": 1}]),
    ("['app'] | where n == 2 | project-away _sysTime, _rowId, message, ctx, user",
     [{"_time": stamp(2), "level": "error", "n": 2}]),
    ("['app'] | where n == 2 | project n, user, level | project-away user",
     [{"n": 2, "level": "error"}]),
    ("['other']", None),
]


@pytest.mark.parametrize("query, expected", [t for t in ROWS_TABLE if t[1] is not None])
def test_query_rows(svc: LocalService, query: str, expected: list[dict[str, Any]]) -> None:
    """Counts, summaries and projections give exactly these rows."""
    with svc.client() as client:
        assert client.query(query) == expected


def test_whole_events_carry_system_fields(svc: LocalService) -> None:
    """Whole events come back as the service answers them (API reference, "Query data":
    tabular rows): _time and _sysTime first, then the event's own fields, a nested object as
    dotted fields; times without trailing zeros; no _rowId unless the query names it."""
    with svc.client() as client:
        [row] = client.query("['app'] | where n == 2")
        [keyed] = client.query("['app'] | where n == 2 | sort by _rowId")
    assert list(row)[:2] == ["_time", "_sysTime"] and "_rowId" not in row
    assert row["_time"] == "2026-05-01T12:02:00Z" and row["ctx.code"] == 402 and "ctx" not in row
    assert not row["_sysTime"].endswith("0Z") and apl.parse_time(row["_sysTime"]) is not None
    expected = {k: v for k, v in EVENTS[3].items() if k != "ctx"} | {"ctx.code": 402}
    assert {k: v for k, v in row.items() if k != "_sysTime"} == expected
    assert list(keyed)[:3] == ["_time", "_sysTime", "_rowId"] and int(keyed["_rowId"], 16) > 0


def test_start_and_end_bound_the_time(svc: LocalService) -> None:
    """startTime is inclusive, endTime exclusive; datetimes and strings both work."""
    with svc.client() as client:
        rows = client.query("['app']", start=datetime(2026, 5, 1, 12, 2, tzinfo=timezone.utc),
                            end="2026-05-01T12:05:00Z")
        assert ns(rows) == [4, 3, 2]
        assert ns(client.query("['app']", start=datetime(2026, 5, 1, 12, 8))) == [9, 8]


# (query, words the 400 answer must contain)
ERRORS = [
    ("['app'] | mv-apply x", ["unsupported operator 'mv-apply'", "column 11"]),
    ("['app'] | mv-expand tags", ["unsupported operator 'mv-expand'"]),
    ("['app'] | where École == 1", ["unexpected character 'É'", "['É...']"]),
    ("['app'] | take ²", ["unexpected character '²'"]),
    ("['app'] | extend n + 1", ["name the computed column"]),
    ("['app'] | top 3", ["expected 'by'"]),
    ("['app'] | where message hasprefix 'x'", ["unsupported operator 'hasprefix'"]),
    ("['app'] | where message !hasprefix 'x'", ["unsupported operator '!hasprefix'"]),
    ("['app'] | where message like 'x'", ["unsupported operator 'like'"]),
    ("['app'] | where message matches 'x'", ["expected 'regex' after 'matches'"]),
    ("['app'] | where message matches regex '(a'", ["regex at line 1, column 25 is not valid"]),
    ("['app'] | where parse_json(a) == 'x'", ["unsupported function 'parse_json()'"]),
    ("['app'] | summarize stdev(n)", ["unsupported aggregation 'stdev'"]),
    ("['app'] | summarize count() by bin(n, 10)", ["bin()", "_time"]),
    ("['app'] | where _time between_x_unused == 1", ["unexpected 'between_x_unused'"]),
    ("['app'] | where", ["expected a value or a field", "end of the query"]),
    ("['app'] | take many", ["expected a number of rows"]),
    ("['app'] where n == 1", ["unexpected 'where'", "'|'"]),
    ("['app'] | where message == 'x", ["unterminated string"]),
    ("['app'] | where _time > ago(1y)", ["unknown timespan unit 'y'"]),
    ("['app'] | where _time > datetime(yesterday)", ["'yesterday' is not a time"]),
    ("['app'] | where ago(n) > 1", ["ago() takes a timespan"]),
    ("['app'] | where count() > 1", ["aggregation"]),
    ("| where n == 1", ["starts with a dataset"]),
    ("   ", ["empty"]),
]


def post_query(svc: LocalService, body: Any, fmt: str | None = "legacy",
               token: str = TOKEN) -> tuple[int, Any]:
    url = svc.url + "/v1/datasets/_apl" + (f"?format={fmt}" if fmt else "")
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST", headers={
        "Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_strict_datasets_answer_404_for_others() -> None:
    """With datasets=[...] (serve --dataset), a query of another dataset is the real 404; one of
    a named dataset runs (no rows yet)."""
    with LocalService(token=TOKEN, datasets=["app"]) as strict:
        status, body = post_query(strict, {"apl": "['other'] | take 5"})
        assert status == 404 and body["message"].startswith("dataset 'other' not found")
        status, body = post_query(strict, {"apl": "['app'] | take 5"})
        assert status == 200 and body["matches"] == []
        status, body = post_query(strict, {"apl": "['app'] | parse x"})
        assert status == 400 and "parse" in service_message(body)


@pytest.mark.parametrize("query, words", ERRORS)
def test_unsupported_and_invalid_queries_are_400_naming_the_part(
        svc: LocalService, query: str, words: list[str]) -> None:
    """Anything outside the subset is a 400 whose message names the unsupported part."""
    status, body = post_query(svc, {"apl": query})
    assert status == 400
    message = service_message(body)
    assert message is not None
    for word in words:
        assert word in message, message


def test_client_query_raises_api_error_with_the_message(svc: LocalService) -> None:
    """client.query raises ApiError carrying the service's explanation."""
    with svc.client() as client, pytest.raises(ApiError) as info:
        client.query("['app'] | mv-expand tags")
    assert info.value.status == 400 and "mv-expand" in str(info.value)
    with svc.client() as client, pytest.raises(ConfigurationError):
        client.query("")


@pytest.mark.parametrize("body, words", [
    ({"apl": 3}, '"apl"'),
    ([], '"apl"'),
    ({"apl": "['app']", "startTime": "last tuesday"}, "not a time"),
])
def test_bad_request_bodies(svc: LocalService, body: Any, words: str) -> None:
    """A body that is not a query request, or a bad time, is a 400 that says so."""
    status, answer = post_query(svc, body)
    assert status == 400 and words in (service_message(answer) or "")


def test_bad_format_and_token(svc: LocalService) -> None:
    """An unknown format is a 400; a wrong token a 403, and nothing is answered."""
    status, body = post_query(svc, {"apl": "['app']"}, fmt="csv")
    assert status == 400 and "format" in (service_message(body) or "")
    status, body = post_query(svc, {"apl": "['app']"}, token="wrong")
    assert status == 403 and "matches" not in body


def test_legacy_answer(svc: LocalService) -> None:
    """format=legacy (also the default): matches with _time/_sysTime/_rowId and data."""
    for fmt in ("legacy", None):
        status, body = post_query(svc, {"apl": "['app'] | where n >= 8"}, fmt=fmt)
        assert status == 200
        assert [m["data"]["n"] for m in body["matches"]] == [9, 8]
        first = body["matches"][0]
        assert first["_time"] == stamp(9) and "_time" not in first["data"]
        assert int(first["_rowId"], 16) > int(body["matches"][1]["_rowId"], 16)
        assert body["status"]["rowsMatched"] == 2 and body["status"]["rowsExamined"] == 10
        assert body["datasetNames"] == ["app"]
    status, body = post_query(svc, {"apl": "['app'] | summarize count() by level"})
    totals = {t["group"]["level"]: t["aggregations"][0]["value"]
              for t in body["buckets"]["totals"]}
    assert totals["info"] == 4 and body["matches"] == []
    status, body = post_query(
        svc, {"apl": "['app'] | summarize count() by bin(_time, 5m)"})
    series = body["buckets"]["series"]
    assert [s["startTime"] for s in series] == ["2026-05-01T12:00:00Z",
                                                "2026-05-01T12:05:00Z"]
    assert series[0]["endTime"] == "2026-05-01T12:05:00Z"
    assert [s["groups"][0]["aggregations"][0]["value"] for s in series] == [5, 5]


def test_tabular_answer(svc: LocalService) -> None:
    """format=tabular: one table, its fields with types, one column per field."""
    status, body = post_query(svc, {"apl": "['app'] | where n <= 1 | project n, message"},
                              fmt="tabular")
    assert status == 200
    [table] = body["tables"]
    assert [f["name"] for f in table["fields"]] == ["n", "message"]
    assert [f["type"] for f in table["fields"]] == ["integer", "string"]
    assert table["columns"] == [[1, 0], ["request served", "cache warm"]]
    assert table["sources"] == [{"name": "app"}]
    status, body = post_query(svc, {"apl": "['app'] | summarize count() by level"},
                              fmt="tabular")
    fields = body["tables"][0]["fields"]
    assert fields[1]["name"] == "count_" and fields[1]["agg"]["name"] == "count"
    assert body["tables"][0]["groups"] == [{"name": "level"}]


def test_axiom_py_reads_the_answers(svc: LocalService) -> None:
    """axiom-py 0.15.0 (the official SDK, which asks for format=tabular) parses our answer."""
    axiom_py = pytest.importorskip("axiom_py")
    client = axiom_py.Client(token=TOKEN, url=svc.url)
    try:
        result = client.query("['app'] | where level == 'error'")
        rows = list(result.tables[0].events())
        assert [r["n"] for r in rows] == [5, 2]
        assert result.status.rowsMatched == 2
        counted = client.query("['app'] | summarize count() by level")
        assert {r["level"]: r["count_"] for r in counted.tables[0].events()}["info"] == 4
    finally:
        client.session.close()


# --------------------------------------------------------------------------- the store

class TestStore:
    def test_rows_get_sys_time_and_increasing_row_ids(self) -> None:
        """Each stored event gets _sysTime and a _rowId greater than any before."""
        store = Store()
        try:
            store.add_events("a", [{"_time": stamp(1), "n": 1}, {"_time": stamp(0), "n": 2}])
            store.add_events("a", [{"_time": stamp(0), "n": 3}])
            store.add_events("a", [])
            answer = store.query("['a'] | sort by _rowId asc", fmt="legacy")
            ids = [m["_rowId"] for m in answer["matches"]]
            assert [m["data"]["n"] for m in answer["matches"]] == [1, 2, 3]
            assert ids == sorted(ids) and len(set(ids)) == 3
            assert all(apl.parse_time(m["_sysTime"]) for m in answer["matches"])
            assert store.events("a") == [{"_time": stamp(1), "n": 1},
                                         {"_time": stamp(0), "n": 2},
                                         {"_time": stamp(0), "n": 3}]
            assert store.count("a") == 3 and store.datasets() == {"a": 3}
            store.clear_events()
            store.add_events("a", [{"_time": stamp(0), "n": 4}])
            after = store.query("['a']")["matches"][0]["_rowId"]
            assert after > ids[-1]  # row ids are never reused, even after clear()
        finally:
            store.close()

    def test_a_db_of_the_previous_layout_is_migrated(self, tmp_path: Path) -> None:
        """A --db file with the earlier one-row-per-batch table is read and converted."""
        path = str(tmp_path / "old.sqlite")
        db = sqlite3.connect(path)
        db.executescript("""
            CREATE TABLE batches (seq INTEGER PRIMARY KEY AUTOINCREMENT,
                dataset TEXT NOT NULL, count INTEGER NOT NULL, body BLOB NOT NULL);
        """)
        db.execute("INSERT INTO batches (dataset, count, body) VALUES (?, ?, ?)",
                   ("app", 2, json.dumps([{"_time": stamp(0), "n": 1}, {"n": 2}])))
        db.commit()
        db.close()
        store = Store(path)
        try:
            assert store.events("app") == [{"_time": stamp(0), "n": 1}, {"n": 2}]
            assert store.count("app") == 2
            assert ns([m["data"] for m in store.query("['app'] | sort by n asc")["matches"]]
                      ) == [1, 2]
        finally:
            store.close()
        reopened = Store(path)  # the data stays, and is not migrated twice
        try:
            assert reopened.count("app") == 2
        finally:
            reopened.close()

    def test_with_a_file_queries_see_each_ingest_and_do_not_hold_it_up(
            self, tmp_path: Path) -> None:
        """With --db FILE, queries read through their own connection: each sees what was
        stored before it, and ingest goes on while a query holds that connection."""
        store = Store(str(tmp_path / "q.sqlite"))
        try:
            for n in range(1, 4):
                store.add_events("a", [{"_time": stamp(n), "n": n}])
                answer = store.query("['a'] | count", fmt="tabular")
                assert answer["tables"][0]["columns"] == [[n]]
            done = threading.Event()
            # a reader connection held as a long query holds it.
            held = store.reader._connection(_no_stop())  # noqa: SLF001
            with held as conn:  # as a long query does, from start to end
                conn.execute("BEGIN")
                conn.execute("SELECT count(*) FROM events").fetchone()  # a read snapshot
                worker = threading.Thread(target=lambda: (
                    store.add_events("a", [{"_time": stamp(9), "n": 9}]), done.set()))
                worker.start()
                assert done.wait(10), "ingest waited for a query"
                conn.execute("COMMIT")
            worker.join(10)
            assert store.query("['a'] | count")["buckets"]["totals"][0]["aggregations"][0][
                "value"] == 4
        finally:
            store.close()

    def test_a_long_query_is_stopped(self) -> None:
        """A query that runs past its time limit is stopped with a 400 that says so."""
        from loghandler._local.service import HttpError

        store = Store()
        try:
            store.add_events("a", [{"_time": stamp(0), "m": "x" * 50, "n": i}
                                   for i in range(20_000)])
            with pytest.raises(HttpError) as info:
                store.query("['a'] | summarize count() by m, n | sort by n asc", timeout=0)
            assert info.value.status == 400 and "longer than" in info.value.message
            assert store.query("['a'] | count")["buckets"]["totals"][0]["aggregations"][0][
                "value"] == 20_000  # the store still works
        finally:
            store.close()


# --------------------------------------------------------------------------- the parser

@pytest.mark.parametrize("text, expected", [
    ("2026-05-01T12:00:00Z", 1777636800_000000),
    ("2026-05-01T12:00:00.123456789Z", 1777636800_123456),
    ("2026-05-01T14:00:00+02:00", 1777636800_000000),
    ("2026-05-01T12:00:00", 1777636800_000000),
    ("1969-12-31T23:59:59.5Z", -500_000),
    ("yesterday", None),
    (12, None),
])
def test_parse_time(text: Any, expected: int | None) -> None:
    """RFC 3339 strings (nanoseconds cut to microseconds, offsets applied) and nothing else."""
    assert apl.parse_time(text) == expected
    if expected is not None and expected >= 0:
        assert apl.parse_time(apl.format_time(expected)) == expected


def test_relative_times() -> None:
    """startTime/endTime take now and now-SPAN as the real service does."""
    now = 1_000_000_000_000
    assert apl.parse_relative_time("now", now) == now
    assert apl.parse_relative_time("now-1h", now) == now - 3_600_000_000
    assert apl.parse_relative_time("now - 30m", now) == now - 1_800_000_000
    with pytest.raises(apl.AplError):
        apl.parse_relative_time("soon", now)


def test_the_filter_runs_in_sql() -> None:
    """A where right after the source is part of the indexed scan, not a Python loop."""
    sql = aplsql.compile_query("['a'] | where level == 'error' | count").sql
    assert "json_extract(body, '$.\"level\"') = 'error'" in sql
    assert "dataset = 'a'" in sql
    # The text pre-filter only applies to the stored JSON, not to a projected body.
    projected = aplsql.compile_query("['a'] | project level | where level == 'error'").sql
    assert projected.count("instr(body") == 0


TRICKY = ["50% off", "a_b", "ab", 'say "hi"', "naïve café", "back\\slash", "tab\there",
          "x" * 3, "", "under_score%", "line\nbreak", "emoji 🎉 party", "A_B"]
NEEDLES = ["%", "_", "50%", "a_b", '"hi"', "café", "\\", "\t", "xx", "", "🎉", "A_B", "B",
           "line\nb", "naïve", "nomatch"]


def test_text_operators_agree_with_python_on_awkward_strings() -> None:
    """LIKE wildcards, quotes, backslashes, control and non-ASCII characters: the SQL (with
    its text pre-filter on the stored JSON) gives the rows plain Python string tests give."""
    with LocalService(token=TOKEN) as service, service.client() as client:
        client.ingest("t", [{"i": i, "s": s} for i, s in enumerate(TRICKY)])

        def matching(op: str, needle: str) -> list[int]:
            literal = json.dumps(needle)  # a double-quoted APL string with JSON escapes
            rows = client.query(f"['t'] | where s {op} {literal} | sort by i asc | project i")
            return [r["i"] for r in rows]

        for needle in NEEDLES:
            low = needle.lower()
            expect = {
                "contains": [i for i, s in enumerate(TRICKY) if low in s.lower()],
                "contains_cs": [i for i, s in enumerate(TRICKY) if needle in s],
                "startswith": [i for i, s in enumerate(TRICKY) if s.lower().startswith(low)],
                "endswith_cs": [i for i, s in enumerate(TRICKY) if s.endswith(needle)],
                "==": [i for i, s in enumerate(TRICKY) if s == needle],
                "!contains": [i for i, s in enumerate(TRICKY) if low not in s.lower()],
            }
            for op, expected in expect.items():
                assert matching(op, needle) == expected, (op, needle)


def test_the_query_benchmark_runs() -> None:
    """A tiny run of ``python -m benchmarks.local_query``: every query answers its rows."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    proc = subprocess.run([sys.executable, "-m", "benchmarks.local_query", "--events", "3000",
                           "--repeat", "1"], cwd=root, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = {line[:36].strip(): line[36:].split() for line in proc.stdout.splitlines()[2:]}
    assert lines["tail of 100"][0] == "100"
    assert lines["filtered count (level == error)"][0] == "1"
    assert lines["count by level (all events)"][0] == "4"
    assert "stored 3,000 events" in proc.stdout


def test_equality_pre_filter_needs_the_key_at_the_top() -> None:
    """`level == 'error'` matches the event's own level, not a nested one, nor the value under
    another key; odd keys (quotes, non-ASCII) match too."""
    with LocalService(token=TOKEN) as service, service.client() as client:
        client.ingest("k", [
            {"i": 0, "level": "error"},
            {"i": 1, "level": "info", "ctx": {"level": "error"}},
            {"i": 2, "kind": "error"},
            {"i": 3, "level": "error", "ctx": {"level": "info"}},
            {"i": 4, 'we"ird': "é", "niveau": "élevé"},
        ])

        def ids(apl_text: str) -> list[int]:
            return sorted(r["i"] for r in client.query(apl_text + " | project i"))

        assert ids("['k'] | where level == 'error'") == [0, 3]
        assert ids("['k'] | where ctx.level == 'error'") == [1]
        with pytest.raises(ApiError, match="double quote"):
            ids("['k'] | where ['we\"ird'] == 'é'")
        assert ids("['k'] | where niveau == 'élevé'") == [4]
        assert ids("['k'] | where level != 'error'") == [1, 2, 4]


# --------------------------------------------------------------------------- a property

_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_CHARS = "aAbBcC_% \"\\'éÉ🎉\n.:"


def _lower(s: str) -> str:
    return s.translate(_ASCII_LOWER)  # SQLite's lower(): ASCII letters only


_TEXT = st.text(alphabet=_CHARS, max_size=6)


@st.composite
def _values_and_needle(draw: Any) -> tuple[list[str | None], str]:
    values = draw(st.lists(st.one_of(_TEXT, st.none()), min_size=1, max_size=6))
    present = [v for v in values if v]
    if present and draw(st.booleans()):
        # A piece of one of the values, its case maybe swapped: the cases that must match.
        v = draw(st.sampled_from(present))
        a = draw(st.integers(0, len(v)))
        needle = v[a:draw(st.integers(a, len(v)))]
        if draw(st.booleans()):
            needle = needle.swapcase()
    else:
        needle = draw(_TEXT)
    return values, needle


@settings(max_examples=200, deadline=None)
@given(case=_values_and_needle())
def test_the_text_pre_filter_never_changes_an_answer(
        case: tuple[list[str | None], str]) -> None:
    """Property: with the pre-filter on the stored JSON text (the fast path), each string
    operator selects exactly the events plain Python string tests select."""
    values, needle = case
    store = Store()  # in memory: a fresh one per example costs about a millisecond
    try:
        store.add_events("p", [{"i": i, "s": v} if v is not None else {"i": i}
                               for i, v in enumerate(values)])
        literal = json.dumps(needle)

        def got(op: str) -> list[int]:
            answer = store.query(f"['p'] | where s {op} {literal} | project i", fmt="tabular")
            return sorted(answer["tables"][0]["columns"][0])

        strings = [(i, v) for i, v in enumerate(values) if v is not None]
        # Folding is SQLite's (ASCII) for an ASCII literal, every letter's for another.
        fold = _lower if needle.isascii() else str.lower
        low = fold(needle)
        expected = {
            "==": [i for i, v in strings if v == needle],
            "!=": [i for i, v in enumerate(values) if v != needle],
            "=~": [i for i, v in strings if fold(v) == low],
            "contains": [i for i, v in strings if low in fold(v)],
            "!contains": [i for i, v in enumerate(values) if v is None or low not in fold(v)],
            "contains_cs": [i for i, v in strings if needle in v],
            "startswith": [i for i, v in strings if fold(v).startswith(low)],
            "endswith": [i for i, v in strings if fold(v).endswith(low)],
            "startswith_cs": [i for i, v in strings if v.startswith(needle)],
        }
        for op, want in expected.items():
            assert got(op) == want, (op, values, needle)
    finally:
        store.close()


_PIECES = ["['p']", "p", "|", "where", "project", "extend", "summarize", "count", "count()",
           "by", "bin(_time, 1h)", "bin_auto(_time)", "sort", "order", "top", "take", "limit",
           "distinct", "project-away", "s", "i", "_time", "_rowId", "==", "!=", "<", ">=", "=~",
           "contains", "!contains", "startswith_cs", "in", "in~", "!in", "(", ")", ",", "=",
           "and", "or", "not(", "isnull(", "ago(1h)", "now()", "datetime(2026-01-01)", "1",
           "-", "+", "*", "/", "%", "1.5", "1d", "'x'", '"y"', "true", "null", "asc", "desc",
           "[", "]", ".", "!", "~", "//", "\n", "'", "datetime(", "sum(i)", "tolower(s)",
           # issue 24's additions
           "between", "..", "(1 .. 2)", "project-rename", "a = s", "parse", "with", "s:int",
           ":", "*", "i*", "matches", "regex", "'a+'", "percentile(i, 50)",
           "percentiles(i, 5, 95)", "arg_max(i, s)", "arg_min(i, *)", "toupper(s)", "'É'"]


@settings(max_examples=300, deadline=None)
@given(pieces=st.lists(st.sampled_from(_PIECES), max_size=14))
def test_any_query_text_is_answered_or_refused_with_a_400(pieces: list[str]) -> None:
    """Fuzz: whatever the query text, the service answers it or says 400; it never fails."""
    from loghandler._local.service import HttpError

    store = Store()
    try:
        store.add_events("p", [{"_time": stamp(1), "i": 1, "s": "a"}, {"i": 2}])
        try:
            answer = store.query(" ".join(pieces), fmt="tabular")
        except HttpError as exc:
            assert exc.status == 400 and exc.message
        else:
            assert isinstance(answer["tables"][0]["columns"], list)
    finally:
        store.close()


@pytest.mark.parametrize("text", [
    "['p'] | where " + "(" * 500 + "i" + ")" * 500,
    "['p'] | where i == " + "-" * 500 + "1",
    "['p'] | where " + " or ".join(["i == 1"] * 1000),
])
def test_deep_or_long_expressions_are_a_400(text: str) -> None:
    """Nesting and operator counts are bounded: a hostile query is a 400, not a crash."""
    store = Store()
    try:
        from loghandler._local.service import HttpError

        with pytest.raises(HttpError) as info:
            store.query(text)
        assert info.value.status == 400
        assert "nests more than" in info.value.message or "operators" in info.value.message
    finally:
        store.close()


def _no_stop() -> object:
    """A reader's stop condition that never stops (for holding one of its connections)."""
    from loghandler._local.reader import _Stop

    return _Stop(float("inf"), None)
