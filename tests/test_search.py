"""The page's search syntax (loghandler/_local/search.py), translated to APL and run."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import loghandler
from loghandler._local.search import SearchError, page_query, search_apl
from loghandler.testing import LocalService

TOKEN = "search-test-token"
EVENTS = [
    {"message": "Payment DECLINED", "level": "ERROR", "user_id": 17, "status": 502,
     "path": "/api/pay", "geo": {"city": "Rome"}},
    {"message": "ok", "level": "info", "user_id": "17", "status": 200, "path": "/home"},
    {"message": "debug stuff", "level": "debug", "status": 200},
]


@pytest.fixture(scope="module")
def client() -> Iterator[loghandler.Client]:
    with LocalService(token=TOKEN) as svc:
        c = loghandler.Client(token=TOKEN, url=svc.url)
        c.ingest("app", EVENTS)
        yield c
        c.close()


@pytest.mark.parametrize("text,apl,messages", [
    ("declined", '| search "declined"', ["Payment DECLINED"]),
    ('"payment declined"', '| search "payment declined"', ["Payment DECLINED"]),
    ("level:error", '| where level =~ "error"', ["Payment DECLINED"]),
    ("user_id:17", '| where (user_id == 17 or user_id == "17")', ["Payment DECLINED", "ok"]),
    ("path:/api/*", '| where path startswith "/api/"', ["Payment DECLINED"]),
    ("status>=500", "| where status >= 500", ["Payment DECLINED"]),
    ("-level:debug", '| where not(level =~ "debug")', ["Payment DECLINED", "ok"]),
    ("-ok", '| where not(message contains "ok")', ["Payment DECLINED", "debug stuff"]),
    ("geo.city:rome", '| where geo.city =~ "rome"', ["Payment DECLINED"]),
    ("status:200 -level:debug", '| where (status == 200 or status == "200") | '
                                'where not(level =~ "debug")', ["ok"]),
    ("", "", ["Payment DECLINED", "debug stuff", "ok"]),
    # Comparisons typed with spaces are comparisons, not three words (issue 38).
    ("status >= 500", "| where status >= 500", ["Payment DECLINED"]),
    ("status> 500", "| where status > 500", ["Payment DECLINED"]),
    ("status <300", "| where status < 300", ["debug stuff", "ok"]),
    ("level: error", '| where level =~ "error"', ["Payment DECLINED"]),
    ("level=error", '| where level =~ "error"', ["Payment DECLINED"]),
    ("status!=200", '| where not((status == 200 or status == "200"))', ["Payment DECLINED"]),
    ("-status > 300", "| where not(status > 300)", ["debug stuff", "ok"]),
    ('"a > b"', '| search "a > b"', []),
])
def test_search_runs_as_apl(client: loghandler.Client, text: str, apl: str,
                            messages: list[str]) -> None:
    query = search_apl("['app']", text, "| project message")
    assert query == "['app'] " + (apl + " " if apl else "") + "| project message"
    assert sorted(r["message"] for r in client.query(query)) == sorted(messages)


@pytest.mark.parametrize("text,said", [
    ("status>abc", "a comparison needs a number"),
    ('"open quote', "a quote is not closed"),
    (":value", "name a field before the colon"),
    (" ".join(["w"] * 33), "at most 32 terms"),
])
def test_what_cannot_run_says_why(text: str, said: str) -> None:
    with pytest.raises(SearchError, match=said):
        search_apl("['app']", text)


def test_page_query_adds_the_range_and_the_page() -> None:
    assert page_query("app", "level:error", "1h") == (
        "['app'] | where _time >= ago(1h) | where level =~ \"error\" "
        "| sort by _time desc, _rowId desc | take 200")
    assert page_query("o'k", "", None) == (
        "['o\\'k'] | sort by _time desc, _rowId desc | take 200")
    with pytest.raises(SearchError, match="unknown range"):
        page_query("app", "", "3y")
    with pytest.raises(SearchError, match="not one this service gave"):
        page_query("app", "", None, before=("2024-05-01T00:00:00Z", "x') or true"))


def test_pages_follow_each_other_none_twice_none_skipped(client: loghandler.Client) -> None:
    """The next page starts after the last row shown, by time then row id: events at one
    instant are neither shown twice nor skipped."""
    client.ingest("paging", [{"n": i, "_time": "2024-05-01T00:00:00Z"} for i in range(7)])
    seen: list[int] = []
    after = None
    for _ in range(5):
        rows = client.query(page_query("paging", "", None, 3, after))
        if not rows:
            break
        seen += [r["n"] for r in rows]
        after = (rows[-1]["_time"], rows[-1]["_rowId"])
    assert seen == [6, 5, 4, 3, 2, 1, 0]


def test_facets_count_what_one_filters_on(client: loghandler.Client) -> None:
    """Top values per field, the fields most present first; long texts, objects and the
    message are not counted."""
    from loghandler._local.search import facets

    answer = client.send("POST", "/v1/datasets/_apl?format=tabular",
                         b'{"apl": "[\'app\']"}', headers={"Content-Type": "application/json"})
    got = facets(answer.body["tables"])
    assert got["rows"] == 3
    by_name = {f["name"]: f for f in got["fields"]}
    assert "message" not in by_name and "geo" not in by_name
    assert by_name["status"]["values"] == [[200, 2], [502, 1]]
    assert by_name["status"]["present"] == 3 and by_name["path"]["present"] == 2
    assert [f["name"] for f in got["fields"]][:2] == ["level", "status"]


def test_bin_auto_makes_about_a_hundred_bins() -> None:
    """bin_auto's span for a range: the round span whose count of bins is nearest 100
    (issue 38: an hour is 30-second bins, a day 15-minute ones), never over 200."""
    from loghandler._local.aplsql import auto_span

    hour = 3_600_000_000
    assert auto_span(0, hour) == 30_000_000
    assert auto_span(0, 24 * hour) == 15 * 60_000_000
    assert auto_span(0, hour // 4) == 10_000_000
    assert auto_span(0, 7 * 24 * hour) == 2 * hour
    for width in (60_000_000, hour, 5 * hour, 24 * hour, 30 * 24 * hour):
        assert 40 <= width / auto_span(0, width) <= 200


def test_an_aggregation_in_parts_answers_as_in_one(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    """An aggregation over many events runs in parts of its time range on two connections;
    merged, the answer is the one a single pass gives (counts and sums added, minimums and maximums
    kept, the groups in the same order, a number stored as a float in one part and as an int in
    another one group)."""
    from datetime import datetime, timedelta, timezone

    from loghandler._local import reader
    from loghandler._local.store import Store

    first = datetime(2026, 1, 1, tzinfo=timezone.utc)
    store = Store()
    try:
        # 6,000 events 7 s apart (nearly 12 hours): each part of the range holds some.
        store.add_events("a", [{"_time": (first + timedelta(seconds=i * 7)).isoformat(),
                                "level": ["x", "y", "z"][i % 3], "n": i % 101,
                                "s": f"v{i % 13}", "m": float(i % 3) if i < 3_000 else i % 3}
                               for i in range(6_000)])
        queries = ["['a'] | summarize count(), sum(n), min(n), max(s) by level",
                   "['a'] | summarize countif(n > 50) by bin(_time, 1h), level",
                   "['a'] | where n > 10 | summarize count() by level, bin_auto(_time)",
                   "['a'] | where level == 'y' | count",
                   "['a'] | summarize min(_time), max(_time)",
                   "['a'] | summarize count() by m"]

        def answer(q: str) -> tuple[object, object]:
            table = store.query(q, "2026-01-01T00:00:00Z", "2026-01-01T12:00:00Z",
                                fmt="tabular")["tables"][0]
            return table["fields"], table["columns"]

        whole = [answer(q) for q in queries]
        ran: list[tuple[int, int]] = []
        # spied on: that the query ran in parts and that their rows were merged.
        real = reader._merge_groups  # noqa: SLF001

        def spy(compiled: object, raw: list[object], deadline: float | None = None
                ) -> list[object]:
            out = real(compiled, raw, deadline)
            ran.append((len(raw), len(out)))
            return out

        monkeypatch.setattr(reader, "SPLIT_MIN_ROWS", 1_000)
        monkeypatch.setattr(reader, "WORKERS", 2)
        monkeypatch.setattr(reader, "PART_ROWS", 700)
        monkeypatch.setattr(reader, "_merge_groups", spy)
        # The narrow table answered these whole (narrow.py): the parts are what is tested.
        monkeypatch.setattr(reader.Reader, "_narrow", lambda *a, **k: None)
        halves, merges = [], {}
        for q in queries:
            before = len(ran)
            halves.append(answer(q))
            merges[q] = ran[before:]
        # A group seen in several parts is one row (by level; by m, 0.0 and 0 alike).
        for q in (queries[0], queries[-1]):
            ((rows, groups),) = merges[q]
            assert rows > groups == 3, (q, rows, groups)
        assert halves == whole
    finally:
        store.close()
