"""The per-minute counts by numeric field value the store keeps at ingest (numbercounts.py): a
comparison's histogram and count answered from them are the scan's answer, exactly, whatever
the range's edges, the values' types (integers, reals, booleans, texts, objects), after new
ingests, a trim, a delete, a restart, and on a file of an earlier version; a field past the
dataset's first MAX_FIELDS numeric ones, or first seen as a text, is left to the scan.
"""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from countcheck import BASE, DAY, check, fast_and_scan
from helpers import number_plan, service_store, store_db

from loghandler._local import numbercounts
from loghandler._local.apl import format_time
from loghandler._local.search import histogram_query
from loghandler._local.store import Store

# A duration of reals and integers, now and then a text, a boolean, an object or a null: SQLite
# orders a text (an object's JSON is one) after every number, and reads true as 1.
DURATIONS: list[Any] = [0, 1, 2.5, 999, 999.5, 1000, 1000.0, 1000.25, 1001, 250, 249.9, -3,
                        "slow", "1500", True, False, None, {"ms": 2000}, [1], 1e14, 12345678901]

SEARCHES = ["duration_ms>1000", "duration_ms>=1000", "duration_ms<1000", "duration_ms<=1",
            "duration_ms>=250 duration_ms<1000", "duration_ms > 999.5 duration_ms <= 1000",
            "duration_ms>-5", "duration_ms>1000 level:error", "-level:debug duration_ms<0",
            "bytes>=5000", "bytes<100", "status>=500", "status<300 status>=200",
            "duration_ms>100000000000000"]
# Not of the counts' shape, or a field not kept: answered by the scan (and equal).
SCANNED = ["duration_ms>1000 bytes<5000", "duration_ms>1000 status:500", "note>3",
           "-duration_ms>1000", "duration_ms>1000 deadlock", "late>1", "f9>1"]


def _events(n: int, seed: int = 7, start: int = BASE) -> list[dict[str, Any]]:
    r = random.Random(seed)
    out = []
    for i in range(n):
        event: dict[str, Any] = {"_time": format_time(start + r.randrange(0, DAY)),
                                 "level": r.choice(["info", "error", "debug", "Error", 3]),
                                 "message": "deadlock" if i % 997 == 0 else "fine"}
        if i == 0:
            event.update(note="first a text",  # first seen as a text: not kept
                         duration_ms=12.5, bytes=10, status=200)
            out.append(event)
            continue
        if r.random() < 0.5:
            event["note"] = r.randrange(10)
        if r.random() < 0.9:
            event["duration_ms"] = r.choice(DURATIONS) if r.random() < 0.5 else round(
                r.lognormvariate(5, 1.5), r.choice((0, 1, 3)))
        if r.random() < 0.7:
            event["bytes"] = r.randrange(0, 10_000)
        if r.random() < 0.5:
            event["status"] = r.choice([200, 201, 302, 404, 500, 503, "500"])
        out.append(event)
    return out


@pytest.fixture
def store() -> Iterator[Store]:
    s = Store()
    s.add_events("d", _events(3000))
    s.add_events("other", [{"_time": format_time(BASE + 5), "duration_ms": 5000}])
    yield s
    s.close()


def test_a_comparison_counted_answers_as_the_scan_does(store: Store,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    check(store, monkeypatch, SEARCHES, True)
    check(store, monkeypatch, SEARCHES[:2], True, "legacy")
    got = store.query("['d'] | where duration_ms > 1000 | summarize count()", None,
                      format_time(BASE + 2 * DAY), "tabular")["tables"][0]["columns"][0][0]
    texts = sum(isinstance(e.get("duration_ms"), (str, dict, list)) for e in store.events("d"))
    assert got > 300 and texts > 30  # the test's data has numbers and texts above 1000
    # Which fields are kept: the numeric ones, in the order first seen, not "note".
    assert set(number_plan(store, "d").kept) == {"duration_ms", "bytes", "status"}


def test_other_searches_scan_and_agree(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    store.add_events("d", [{"_time": format_time(BASE + 10), "late": 5}])  # kept from now
    check(store, monkeypatch, SCANNED[:-2], False)
    check(store, monkeypatch, ["late>1"], True)


def test_at_most_the_first_numeric_fields_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    s = Store()
    try:
        limit = numbercounts.MAX_FIELDS
        s.add_events("d", [{"_time": format_time(BASE + i * 7_000_001), "level": "info",
                            **{f"f{k}": (i * (k + 3)) % 97 + 0.5 * (k % 2)
                               for k in range(limit + 2)}} for i in range(400)])
        plan = number_plan(s, "d")
        assert plan.closed and len(plan.kept) == limit
        kept, left = plan.kept[0], ({f"f{k}" for k in range(limit + 2)} - set(plan.kept)).pop()
        text = histogram_query("d", f"{kept}>40", None, 900_000_000)
        fast, scan, used = fast_and_scan(s, monkeypatch, text, None, format_time(BASE + DAY))
        assert used and fast == scan
        text = histogram_query("d", f"{left}>40", None, 900_000_000)
        fast, scan, used = fast_and_scan(s, monkeypatch, text, None, format_time(BASE + DAY))
        assert not used and fast == scan
        # Closed: a new numeric field is not kept, nor is anything remembered of it.
        s.add_events("d", [{"_time": format_time(BASE + 5), "newer": 3}])
        assert "newer" not in number_plan(s, "d").decided
        assert store_db(s).execute("SELECT count(*) FROM rollup_number_fields WHERE dataset = 'd'"
                             ).fetchone() == (limit + 1,)  # the kept ones and "closed"
        # A value SQLite cannot read back (an infinity): the field is dropped, not answered.
        s.add_events("d", [{"_time": format_time(BASE + 6), kept: float("inf")}])
        assert kept not in number_plan(s, "d").kept
        assert not numbercounts.is_kept(store_db(s), "d", kept)
        assert store_db(s).execute("SELECT count(*) FROM rollup_numbers WHERE field = ?",
                             (kept,)).fetchone() == (0,)
    finally:
        s.close()


def test_new_ingests_a_trim_and_a_delete_keep_them_true(store: Store,
                                                        monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    store.add_events("d", _events(1000, seed=11))
    check(store, monkeypatch, SEARCHES[:5], True)
    assert store.dataset_trim("d", BASE + 6 * 3_600_000_000 + 30_000_001)
    check(store, monkeypatch, SEARCHES[:5], True)
    assert store.dataset_delete("d")
    assert store_db(store).execute("SELECT count(*) FROM rollup_numbers WHERE dataset = 'd'"
                             ).fetchone() == (0,)
    # Anew: "note" is first a number now, "duration_ms" first a text (not kept).
    store.add_events("d", [{"_time": format_time(BASE + 9), "level": "info",
                            "note": 4, "duration_ms": "n/a"}, *_events(300, seed=12)])
    check(store, monkeypatch, ["note>3"], True)
    check(store, monkeypatch, ["duration_ms>1000"], False)
    store.clear_events()
    assert store_db(store).execute("SELECT count(*) FROM rollup_number_fields").fetchone() == (0,)
    store.add_events("d", _events(300, seed=13))
    check(store, monkeypatch, ["duration_ms>1000"], True)


def test_a_restart_and_a_file_of_an_earlier_version(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """What is kept survives a restart; a file's datasets of an earlier version are not
    counted (their comparisons scan, with the same answers) until deleted."""
    path = str(tmp_path / "events.sqlite")
    s = Store(path)
    s.add_events("d", _events(1500, seed=3))
    s.close()
    s = Store(path)  # restarted: the choices and the counts are the file's
    try:
        assert set(number_plan(s, "d").kept) == {"duration_ms", "bytes", "status"}
        s.add_events("d", _events(200, seed=8))
        check(s, monkeypatch, SEARCHES[:3], True)
    finally:
        s.close()
    with sqlite3.connect(path) as db:
        for table in ("rollup_numbers", "rollup_number_fields"):
            db.execute(f"DROP TABLE {table}")  # as an earlier version wrote it
    s = Store(path)
    try:
        check(s, monkeypatch, SEARCHES[:3], False)
        s.add_events("d", _events(100, seed=4))
        check(s, monkeypatch, SEARCHES[:3], False)
        assert store_db(s).execute("SELECT count(*) FROM rollup_numbers").fetchone() == (0,)
        assert s.dataset_delete("d")
        s.add_events("d", _events(500, seed=6))
        check(s, monkeypatch, SEARCHES[:3], True)
    finally:
        s.close()


def test_the_page_counts_a_comparison_exactly() -> None:
    """The fields panel of ``duration_ms>1000`` says how many match, exactly, from the
    counts (no estimate from a probe)."""
    import json
    import time
    import urllib.request

    from loghandler.testing import LocalService

    now = time.time_ns() // 1000
    with LocalService() as svc:
        store = service_store(svc)
        store.add_events("d", _events(3000, start=now - DAY + 60_000_000))
        want = store.query("['d'] | where duration_ms > 1000 | count", None, None,
                           "tabular")["tables"][0]["columns"][0][0]
        req = urllib.request.Request(
            svc.url + "/local/facets", data=json.dumps(
                {"dataset": "d", "q": "duration_ms>1000", "range": "24h"}).encode(),
            headers={"Authorization": f"Bearer {svc.token}",
                     "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as resp:  # 127.0.0.1 only
            got = json.loads(resp.read())
        assert got["exact"] and got["matched"] == want > 100


def test_a_batch_stored_while_another_was_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches are counted before the store's lock is taken: a field another batch made kept
    (or a delete) between one batch's count and its store leaves no count missing."""
    s = Store()
    try:
        first = [{"_time": format_time(BASE + i * 60_000_000), "level": "info",
                  "x": "slow" if i == 0 else i * 100} for i in range(30)]
        other = [{"_time": format_time(BASE + 7), "level": "error", "x": 5000}]
        real = numbercounts.tally
        once: list[bool] = []

        def interleaved(events: list[dict[str, Any]], *args: Any) -> Any:
            got = real(events, *args)
            if events is first and not once:  # between this batch's count and its store
                once.append(True)
                s.add_events("d", other)
            return got

        monkeypatch.setattr(numbercounts, "tally", interleaved)
        s.add_events("d", first)  # "x" first a text here, but kept by the other batch
        monkeypatch.setattr(numbercounts, "tally", real)
        assert number_plan(s, "d").kept == ("x",)
        check(s, monkeypatch, ["x>1000", "x<=500"], True)

        once.clear()

        def deleting(events: list[dict[str, Any]], *args: Any) -> Any:
            got = real(events, *args)
            if events is first and not once:
                once.append(True)
                assert s.dataset_delete("d")
            return got

        monkeypatch.setattr(numbercounts, "tally", deleting)
        first[0]["x"] = 1  # a number first now: after the delete, "x" is kept anew
        s.add_events("d", first)
        monkeypatch.setattr(numbercounts, "tally", real)
        assert number_plan(s, "d").kept == ("x",)
        check(s, monkeypatch, ["x>1000", "x<=500"], True)
    finally:
        s.close()
