"""The narrow table of each event's few grouped and aggregated fields (narrow.py): an
aggregation over its kept fields answered from it is the scan's answer, exactly (a
percentile's seeded sample too, past its bound), whatever the values' types, over ranges, in
both formats, after more ingests, a trim, a delete, a clear, a restart and on a file of an
earlier version; a query reading anything else is left to the scan; what is kept is bounded.
"""

from __future__ import annotations

import math
import random
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from countcheck import BASE, DAY, ranges, spied_and_scan
from helpers import narrow_kept

from loghandler._local import aplsql_run, narrow, reader, sqlfunctions
from loghandler._local.apl import format_time
from loghandler._local.store import Store

ROUTES = ["/", "/api/cart", "/api/pay", "/login", "", "/a'b", "/é", "/x\\y"]
# A duration of reals and integers, now and then a text, a boolean or a null.
ODD: list[Any] = [0, 2.5, 1000, 1000.0, 0.1 + 0.2, -3, "slow", "1500", True, False, None,
                  1e14, 12345678901, 2 ** 70, "[1]", "{x"]

# Read only kept fields (path, duration_ms, status, method) and _time: from the table.
FAST = [
    "['d'] | where isnotempty(path) "
    "| summarize percentile(duration_ms, 95) by path, bin_auto(_time)",
    "['d'] | summarize percentiles(duration_ms, 50, 99), count() by path",
    "['d'] | summarize avg(duration_ms), sum(duration_ms), min(duration_ms), "
    "max(duration_ms), dcount(path) by bin(_time, 1h)",
    "['d'] | where status >= 500 | summarize count() by path, status",
    "['d'] | where path in ('/', '/login') and duration_ms > 100 "
    "| summarize countif(status == 200), count() by method",
    "['d'] | where path startswith '/api' | summarize percentile(duration_ms, 50) by path "
    "| where percentile_duration_ms_50 > 10 | sort by path desc",
    "['d'] | where path has 'cart' or path contains 'PAY' | summarize count()",
    "['d'] | where _time > datetime(2026-01-01T05:00:00Z) "
    "| summarize max(status) by bin(_time, 15m), path",
    "['d'] | where path == '/a\\'b' | summarize count() by duration_ms",
]
# Read a field not kept, the event's JSON, or come after another operator: the scan.
SCANNED = [
    "['d'] | summarize count() by message",
    "['d'] | summarize count() by user",
    "['d'] | where * has 'cart' | summarize count() by path",
    "['d'] | search 'cart' | summarize count() by path",
    "['d'] | summarize arg_max(duration_ms, path) by status",
    "['d'] | summarize count() by _time",
    "['d'] | where isnotnull(_sysTime) | summarize count() by path",
    "['d'] | take 10 | summarize count() by path",
    "['d'] | where path == '/' | project path, duration_ms",
    "['d'] | summarize count() by late",
]


def _events(n: int, seed: int = 5, start: int = BASE, first: bool = True,
            lookalike: bool = True) -> list[dict[str, Any]]:
    """Events of a web service; ``lookalike``: some texts look like JSON ("[/]"), which
    json_extract gives as texts (a file of an earlier version cannot tell them apart from
    an array's JSON in the column: its field scans)."""
    r = random.Random(seed)
    out = []
    for i in range(n):
        event: dict[str, Any] = {"_time": format_time(start + r.randrange(0, DAY)),
                                 "level": r.choice(["info", "error"]),
                                 "message": f"m{r.randrange(1000)}",
                                 "user": f"u{r.randrange(100_000)}"}
        if r.random() < 0.8 or (first and i == 0):
            event["path"] = r.choice(ROUTES)
            event["method"] = r.choice(["GET", "POST"])
            event["status"] = r.choice([200, 200, 302, 404, 500, 503])
            event["duration_ms"] = (round(r.lognormvariate(4, 1.5), r.choice((0, 1, 3)))
                                    if r.random() < 0.9 or (first and i == 0)
                                    else r.choice(ODD))
            if not lookalike and str(event["duration_ms"])[:1] in "[{":
                event["duration_ms"] = 1
            if r.random() < 0.02:  # a route of another kind now and then
                event["path"] = r.choice([None, 7, 2.5, True, "[/]" if lookalike else "/"])
        if not first and r.random() < 0.3:
            event["late"] = r.randrange(5)  # first seen after the dataset's first batch
        out.append(event)
    return out


def fast_and_scan(store: Store, monkeypatch: pytest.MonkeyPatch, text: str,
                  start: str | None, end: str, fmt: str = "tabular"
                  ) -> tuple[dict[str, Any], dict[str, Any], bool]:
    """The answer with the narrow table, the scan's, and whether the table answered."""
    return spied_and_scan(monkeypatch, reader.Reader, "_narrow",
                          lambda: store.query(text, start, end, fmt))


def check(store: Store, monkeypatch: pytest.MonkeyPatch, texts: list[str], narrowed: bool,
          fmt: str = "tabular") -> None:
    for text in texts:
        for start, end in ranges():
            fast, scan, used = fast_and_scan(store, monkeypatch, text, start, end, fmt)
            assert fast == scan, (text, start, end)
            assert used == narrowed, (text, used)


def _rows(store: Store) -> tuple[int, int]:
    db = sqlite3.connect(store.path or "")
    try:
        (n,) = db.execute(f"SELECT count(*) FROM {narrow.TABLE}").fetchone()
        (e,) = db.execute("SELECT count(*) FROM events").fetchone()
    finally:
        db.close()
    return int(n), int(e)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(str(tmp_path / "events.sqlite"))
    s.add_events("d", _events(3000))
    s.add_events("d", _events(1000, seed=6, first=False))
    s.add_events("other", [{"_time": format_time(BASE), "path": "/", "duration_ms": 1}])
    yield s
    s.close()


def test_the_kept_fields_are_the_datasets_grouped_and_numeric_ones(store: Store) -> None:
    kept = narrow_kept(store)["d"]
    # The ids (user), the message and the level are not kept; late came after the choice.
    assert set(kept) == {"path", "method", "status", "duration_ms"}
    assert _rows(store) == (4001, 4001)


@pytest.mark.parametrize("fmt", ["tabular", "legacy"])
def test_aggregations_of_kept_fields_are_the_scans_answer(
        store: Store, monkeypatch: pytest.MonkeyPatch, fmt: str) -> None:
    check(store, monkeypatch, FAST, True, fmt)


def test_other_queries_are_scanned(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    check(store, monkeypatch, SCANNED, False)


def test_a_percentile_past_its_sample_is_the_scans(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    # Groups of hundreds of values over a sample of 20: the seeded reservoir replaces values
    # in the events' order, which both read alike.
    monkeypatch.setattr(sqlfunctions, "PERCENTILE_SAMPLE", 20)
    check(store, monkeypatch, FAST[:3], True)
    fast, _, _ = fast_and_scan(store, monkeypatch, FAST[1], None, format_time(BASE + 2 * DAY))
    assert fast["status"]["rowsMatched"] > 20 * len(ROUTES)


@pytest.mark.parametrize("bound", ["none", "sample", "bytes"])
def test_a_summarize_by_time_bin_in_parts_is_the_scans_answer(
        store: Store, monkeypatch: pytest.MonkeyPatch, bound: str) -> None:
    # The dataset's 4,000 events counted as many: the queries by a time bin run in parts of
    # a few bins (each group in one part), their rows put in the query's order. A percentile
    # past its sample (its values' order counts) or parts past the answer's bytes (a partial
    # answer keeps the query's first rows) give way to one query: the same answer again.
    monkeypatch.setattr(reader, "NARROW_PART_ROWS", 300)
    if bound == "sample":
        monkeypatch.setattr(sqlfunctions, "PERCENTILE_SAMPLE", 3)
    if bound == "bytes":
        monkeypatch.setattr(aplsql_run, "MAX_ANSWER_BYTES", 3000)
    parts: list[Any] = []
    real = reader.Reader._bin_parts  # noqa: SLF001

    def spy(self: reader.Reader, *args: Any) -> Any:
        got = real(self, *args)
        parts.append(got)
        return got

    monkeypatch.setattr(reader.Reader, "_bin_parts", spy)
    check(store, monkeypatch, FAST, True)
    # Both queries by a bin of counts, minimums, maximums and percentiles ran in parts.
    assert sum(1 for p in parts if p is not None and len(p) >= 3) >= 2 * len(ranges()) - 2
    fast, _, _ = fast_and_scan(store, monkeypatch, FAST[0], None, format_time(BASE + 2 * DAY))
    assert fast["status"]["isPartial"] == (bound == "bytes")


def _reference_percentile(values: list[Any], p: float) -> Any:
    """The percentile as the service defines it, written plainly: the nearest rank over the
    numbers (text and nulls skipped), from a reservoir sample of PERCENTILE_SAMPLE seeded
    with 0 once there are more."""
    sample: list[Any] = []
    rng = random.Random(0)
    seen = 0
    for v in values:
        if not isinstance(v, (int, float)):
            continue
        seen += 1
        if len(sample) < sqlfunctions.PERCENTILE_SAMPLE:
            sample.append(v)
        else:
            j = rng.randrange(seen)
            if j < sqlfunctions.PERCENTILE_SAMPLE:
                sample[j] = v
    if not sample:
        return None
    sample.sort()
    return sample[min(max(1, math.ceil(p / 100 * len(sample))), len(sample)) - 1]


@pytest.mark.parametrize("size", [1, 7, 20, 100_000])
def test_the_percentile_is_the_nearest_rank_of_its_sample(
        size: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # The step is a lean closure while the sample fills, then the sampling one: the answers
    # are the plain definition's, for groups under, at and past the sample's size, of ints,
    # reals, text and nulls (a group of exactly ``size`` numbers too).
    monkeypatch.setattr(sqlfunctions, "PERCENTILE_SAMPLE", size)
    rng = random.Random(size)
    db = sqlite3.connect(":memory:")
    sqlfunctions.add_functions(db)
    db.execute("CREATE TABLE t (g, x)")
    groups: dict[int, list[Any]] = {}
    for g in range(40):
        values: list[Any] = [rng.choice([rng.randint(-9, 10 ** 6), rng.random() * 1e3, None,
                                         "text", 2 ** 62 + rng.randint(0, 9)])
                             for _ in range(rng.randint(0, 60))]
        if g == 0:
            values = [float(i) for i in range(min(size, 60))]  # exactly the sample's size
        groups[g] = values
        db.executemany("INSERT INTO t VALUES (?, ?)", [(g, v) for v in values])
    for p in (0.0, 1.0, 50.0, 95.0, 99.9, 100.0):
        got = dict(db.execute(f"SELECT g, apl_percentile(x, {p!r}) FROM t GROUP BY g"))
        for g, values in groups.items():
            want = _reference_percentile(values, p)
            assert got.get(g) == want and type(got.get(g)) is type(want), (g, p)
    db.close()


def test_trim_delete_and_clear_keep_the_table_right(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    assert store.dataset_trim("d", BASE + DAY // 3 + 123) is not None
    n, e = _rows(store)
    assert n == e < 4001
    check(store, monkeypatch, FAST[:2], True)
    store.dataset_delete("d")
    assert _rows(store) == (1, 1)
    # Made again with other fields: decided again from its new first batch.
    store.add_events("d", [{"_time": format_time(BASE + i), "route": f"/{i % 3}", "ms": i}
                           for i in range(100)])
    assert set(narrow_kept(store)["d"]) == {"route", "ms"}
    check(store, monkeypatch, ["['d'] | summarize percentile(ms, 90), count() by route"], True)
    check(store, monkeypatch, FAST[:1], False)  # path is no longer kept
    store.clear_events()
    assert _rows(store) == (0, 0)
    assert narrow_kept(store) == {}


def test_the_table_survives_a_restart_and_follows_new_ingests(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(tmp_path / "events.sqlite")
    store = Store(path)
    store.add_events("d", _events(1000))
    store.close()
    store = Store(path)
    try:
        store.add_events("d", _events(1000, seed=9, start=BASE + DAY // 2, first=False))
        assert _rows(store) == (2000, 2000)
        check(store, monkeypatch, FAST[:2], True)
    finally:
        store.close()


def _stored_then_edited(tmp_path: Path, n: int, edit: Callable[[sqlite3.Connection], Any]
                        ) -> str:
    """A file with ``n`` events of dataset "d" stored, then edited behind the store's back
    (as an earlier version left it): its path."""
    path = str(tmp_path / "events.sqlite")
    store = Store(path)
    store.add_events("d", _events(n, lookalike=False))
    store.close()
    db = sqlite3.connect(path)
    try:
        edit(db)
        db.commit()
    finally:
        db.close()
    return path


def test_a_file_of_an_earlier_version_gets_its_table(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _stored_then_edited(tmp_path, 2000, lambda db: db.executescript(
        f"DROP TRIGGER narrow_delete; DROP TABLE {narrow.TABLE}; DROP TABLE narrow_fields;"))
    store = Store(path)  # decided from the first events, every event's values copied
    try:
        assert set(narrow_kept(store)["d"]) == {"path", "method", "status", "duration_ms"}
        assert _rows(store) == (2000, 2000)
        check(store, monkeypatch, FAST, True)
        store.dataset_trim("d", BASE + DAY // 2)
        n, e = _rows(store)
        assert n == e < 2000
    finally:
        store.close()


def test_a_field_that_takes_an_object_or_an_array_is_scanned(
        store: Store, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # json_extract gives an object as JSON (an object in the answer), the column as its
    # text: from then on the field's queries scan.
    more = _events(200, seed=11, first=False)
    more[5]["path"] = {"p": "/"}
    more[7]["duration_ms"] = [1, 2]
    store.add_events("d", more)
    check(store, monkeypatch, FAST[:3], False)
    check(store, monkeypatch, ["['d'] | summarize count() by method, status"], True)
    # And so it is after a restart, and in a file of an earlier version.
    path = store.path or ""
    store.close()
    for earlier in (False, True):
        if earlier:
            db = sqlite3.connect(path)
            db.executescript(f"DROP TRIGGER narrow_delete; DROP TABLE {narrow.TABLE}; "
                             "DROP TABLE narrow_fields;")
            db.close()
        again = Store(path)
        try:
            check(again, monkeypatch, FAST[:3], False)
            check(again, monkeypatch, ["['d'] | summarize count() by method, status"], True)
        finally:
            again.close()
    store.__init__(path)  # type: ignore[misc]  # the fixture closes it


def test_an_event_sqlite_cannot_read_leaves_its_dataset_to_the_scan(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    # Stored as JSON's Infinity, which SQLite's json_extract refuses: the ingest stores it,
    # the dataset's queries scan (and fail or answer as the scan does).
    store.add_events("d", [{"_time": format_time(BASE + 5), "path": "/", "duration_ms": 1},
                           {"_time": format_time(BASE + 6), "duration_ms": float("inf")}])
    assert store.count("d") == 4002
    used: list[bool] = []
    # The reader's narrow-table step, spied on: whether it answered.
    real = reader.Reader._narrow  # noqa: SLF001
    monkeypatch.setattr(reader.Reader, "_narrow",
                        lambda self, *a: used.append((got := real(self, *a)) is not None) or got)
    for text in FAST[:2]:
        try:
            store.query(text, None, format_time(BASE + 2 * DAY))
        except Exception:  # the scan's own failure, whatever it is
            pass
    assert used == [False, False]
    check(store, monkeypatch, ["['other'] | summarize count() by path"], True)


def test_events_stored_by_an_earlier_version_since_make_the_table_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # As an earlier version stores an event: no row of its own.
    path = _stored_then_edited(tmp_path, 500, lambda db: db.execute(
        "INSERT INTO events (dataset, time, sys, body) VALUES ('d', ?, ?, ?)",
        (BASE + 5, "2026-01-01T00:00:00Z",
         '{"_time":"2026-01-01T00:00:00.000005Z","path":"/new","duration_ms":5}')))
    store = Store(path)
    try:
        assert _rows(store) == (501, 501)
        check(store, monkeypatch, FAST[:2], True)
    finally:
        store.close()


def test_what_is_kept_is_bounded() -> None:
    event: dict[str, Any] = {f"f{i}": i for i in range(20)}
    event.update(level="info", message="x", _time="2026-01-01T00:00:00Z", flag=True,
                 obj={"a": 1}, arr=[1], dotted={"b": 2})
    event["a.b"] = 3
    events = [event] + [{**event, "id": f"id{i}", "route": f"/{i % 4}"} for i in range(99)]
    chosen = narrow.choose(events)
    assert len(chosen) == narrow.MAX_COLUMNS
    # The most often present first, then the first seen; never a boolean, an object, an
    # array, a dotted name, the level, the message, an id.
    assert chosen == [f"f{i}" for i in range(narrow.MAX_COLUMNS)]
    few = narrow.choose([{"route": f"/{i % 4}", "id": f"id{i}", "n": 1.5} for i in range(40)])
    assert few == ["route", "n"]
    assert narrow.choose([]) == []
