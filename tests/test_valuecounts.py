"""The per-minute counts by field value the store keeps at ingest (valuecounts.py): a search's
histogram and count answered from them are the scan's answer, exactly, whatever the range's
edges, after new ingests, a trim, a delete and on a file of an earlier version; a field of
many values, or of values that cannot be kept, is left to the scan.
"""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from countcheck import BASE, DAY, check, fast_and_scan
from helpers import known_fields, service_store, store_db

from loghandler._local import valuecounts
from loghandler._local.apl import format_time
from loghandler._local.search import histogram_query
from loghandler._local.store import Store

STATUSES: list[Any] = [200, 200, 200, 500, "500", 500.0, 404, True, None, 1, 0, 2.5, "OK"]
SERVICES: list[Any] = ["checkout", "Checkout", "CHECKOUT", "web", "", "ÉTÉ", "été", 3]

SEARCHES = ["status:500", "status:200", "status:1", "status:2.5", "service:checkout",
            "service:été", "service:3", "level:error status:500",
            "-level:debug service:web", "status:404 level:info level:error", "status==500",
            "service:nothing"]
# Not of the counts' shape, or a field left to the scan: answered by the scan (and equal).
# (A text match on a field with real numbers: SQLite's spelling of a real is not Python's.
# A comparison, ``status>=500``, is numbercounts': tests/test_numbercounts.py.)
SCANNED = ["status:OK", "status:ok", "service:", "request:r1", "status:5*",
           "note:x", "status:500 service:web",
           "-status:500", "deadlock"]


def _events(n: int, seed: int = 7, start: int = BASE) -> list[dict[str, Any]]:
    r = random.Random(seed)
    out = []
    for i in range(n):
        event: dict[str, Any] = {"_time": format_time(start + r.randrange(0, DAY)),
                                 "level": r.choice(["info", "error", "debug", "Error", 3]),
                                 "request": f"r{r.randrange(10_000)}",
                                 "message": "deadlock" if i % 997 == 0 else "fine"}
        if r.random() < 0.9:
            event["status"] = r.choice(STATUSES)
        if r.random() < 0.7:
            event["service"] = r.choice(SERVICES)
        if i == 1500:
            event["note"] = {"an": "object"}  # makes its field wide
        out.append(event)
    return out


@pytest.fixture
def store() -> Iterator[Store]:
    s = Store()
    s.add_events("d", _events(3000))
    s.add_events("other", [{"_time": format_time(BASE + 5), "status": 500}])
    yield s
    s.close()


def test_a_search_counted_answers_as_the_scan_does(store: Store,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    check(store, monkeypatch, SEARCHES, True)
    # The legacy format too.
    fast, scan, used = fast_and_scan(store, monkeypatch, histogram_query("d", "status:500", None,
                                                                 900_000_000),
                             None, format_time(BASE + DAY), "legacy")
    assert used and fast == scan
    got = store.query("['d'] | where status == 500 | summarize count()", None,
                      format_time(BASE + 2 * DAY), "tabular")["tables"][0]["columns"][0][0]
    assert got > 100  # the test's data has what it searches for


def test_other_searches_scan_and_agree(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    check(store, monkeypatch, SCANNED, False)


def test_new_ingests_a_trim_and_a_delete_keep_them_true(store: Store,
                                                        monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    store.add_events("d", _events(1000, seed=11))
    check(store, monkeypatch, SEARCHES[:4], True)
    assert store.dataset_trim("d", BASE + 6 * 3_600_000_000 + 30_000_001)
    check(store, monkeypatch, SEARCHES[:4], True)
    assert store.dataset_delete("d")
    store.add_events("d", [{"_time": format_time(BASE + 9), "level": "info", "status": 500,
                            "note": "now short"}])
    check(store, monkeypatch, ["status:500", "note:now"], True)
    store.clear_events()
    check(store, monkeypatch, ["status:500"], True)


def test_a_field_of_many_values_is_left_to_the_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    s = Store()
    try:
        few = [{"_time": format_time(BASE + i), "id": f"u{i % 10}"} for i in range(100)]
        s.add_events("d", few)
        _check_one = histogram_query("d", "id:u3", None, 900_000_000)
        end = format_time(BASE + DAY)
        fast, scan, used = fast_and_scan(s, monkeypatch, _check_one, None, end)
        assert used and fast == scan
        many = [{"_time": format_time(BASE + 1000 + i), "id": f"v{i}"}
                for i in range(valuecounts.MAX_VALUES)]
        s.add_events("d", many)
        fast, scan, used = fast_and_scan(s, monkeypatch, _check_one, None, end)
        assert not used and fast == scan
        assert store_db(s).execute("SELECT count(*) FROM rollup_values WHERE field = 'id'"
                             ).fetchone() == (0,)
    finally:
        s.close()


def test_a_file_of_an_earlier_version_keeps_the_scan(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Its datasets are not counted (a million events read again would hold the start for
    minutes): their searches scan, with the same answers; a dataset made anew is counted;
    what is known survives a restart."""
    path = str(tmp_path / "events.sqlite")
    s = Store(path)
    s.add_events("d", _events(1500, seed=3))
    s.close()
    with sqlite3.connect(path) as db:
        for table in ("rollup_values", "rollup_wide", "rollup_values_off"):
            db.execute(f"DROP TABLE {table}")  # as an earlier version wrote it
    s = Store(path)
    try:
        check(s, monkeypatch, SEARCHES[:3], False)
        s.add_events("d", _events(100, seed=4))
        check(s, monkeypatch, SEARCHES[:3], False)
        assert store_db(s).execute("SELECT count(*) FROM rollup_values").fetchone() == (0,)
        s.add_events("e", _events(500, seed=5))  # a new dataset: counted
        assert known_fields(s).wide.get("e", frozenset()) >= {"request"}
        assert s.dataset_delete("d")
        s.add_events("d", _events(500, seed=6))
        check(s, monkeypatch, SEARCHES[:3], True)
        s.add_events("d", [{"_time": format_time(BASE + 1000 + i), "note": f"n{i}" * 150}
                           for i in range(3)])  # a long text: the field is wide
        assert known_fields(s).wide["d"] >= {"request", "note"}
    finally:
        s.close()
    s = Store(path)  # the wide fields survive a restart
    try:
        assert known_fields(s).wide["d"] >= {"request", "note"}
        check(s, monkeypatch, ["note:" + "n1" * 150], False)
        check(s, monkeypatch, SEARCHES[:3], True)
    finally:
        s.close()


def _post(svc: Any, path: str, body: Any) -> Any:
    import json
    import urllib.request

    req = urllib.request.Request(svc.url + path, data=json.dumps(body).encode(),
                                 headers={"Authorization": f"Bearer {svc.token}",
                                          "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:  # 127.0.0.1 only
        return json.loads(resp.read())


def test_the_fields_of_a_search_read_a_bounded_sample_and_count_exactly(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The page's fields of ``status:500`` over many events: the events read for the sample
    are bounded (FACET_SCAN), the sample is said as such, and how many match is the counts'
    exact figure, the scan's."""
    from loghandler._local import ep_page
    from loghandler.testing import LocalService

    monkeypatch.setattr(ep_page, "FACET_SCAN", 400)
    now = __import__("time").time_ns() // 1000
    with LocalService() as svc:
        store = service_store(svc)
        store.add_events("d", _events(3000, start=now - DAY + 60_000_000))
        want = store.query("['d'] | where status == 500 or status == '500' | count", None,
                           None, "tabular")["tables"][0]["columns"][0][0]
        got = _post(svc, "/local/facets", {"dataset": "d", "q": "status:500", "range": "24h"})
        assert got["exact"] and got["matched"] == want > 100
        assert got["sampled"] and got["every"] >= 3000 // 400
        assert 0 < got["rows"] < want  # the matches among the events read, not all of them
        status = next(f for f in got["fields"] if f["name"] == "status")
        assert {v for v, _ in status["values"]} <= {500, "500"}
        # A search the counts cannot count: estimated, and said so; still bounded.
        got = _post(svc, "/local/facets", {"dataset": "d", "q": "deadlock", "range": "24h"})
        assert not got["exact"] and got["every"] >= 3000 // 400
