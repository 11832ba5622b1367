"""The per-minute counts the store keeps at ingest (rollups.py): the page's histogram and level
counts answered from them are the scan's answer, exactly, whatever the range's edges; other
queries still scan; trimming, deleting and opening a file of an earlier version keep them true.
"""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import store_db

from loghandler._local import rollups
from loghandler._local.apl import format_time
from loghandler._local.store import Store

DAY = 86_400_000_000
BASE = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z
LEVELS: list[Any] = ["info", "error", "debug", "warning", "", 3, True, 1.5, None, "ÉRROR",
                     "Error"]

SHAPES = [
    "['d'] | summarize count() by bin(_time, 15m), level",
    "['d'] | where _time >= datetime('2026-01-01T06:00:00.5Z') | summarize count() by "
    "bin(_time, 15m), level",
    "['d'] | where _time >= datetime('2026-01-01T01:00:07Z') and _time < "
    "datetime('2026-01-01T05:30:00.000001Z') | summarize c = count() by level, bin(_time, 5m)",
    "['d'] | summarize count() by level",
    "['d'] | summarize n = count() by level",
    "['d'] | summarize count()",
    "['d'] | summarize count() by bin(_time, 1h)",
    "['d'] | summarize count() by bin_auto(_time), level",
    "['d'] | where level =~ \"ERROR\" | summarize count() by bin(_time, 15m), level",
    "['d'] | where not(level =~ \"debug\") | summarize count() by bin(_time, 15m), level",
    "['d'] | where not(level =~ \"Debug\") | where not(level =~ \"info\") "
    "| summarize count() by level",
    "['d'] | where level =~ \"3\" | summarize count()",
    "['d'] | where level =~ \"érror\" | summarize count() by level",
    "['d'] | where level =~ \"1\" | summarize count() by level",
    "['d'] | where level =~ \"1.5\" | summarize count() by level",
    "['d'] | where _time >= datetime('2026-01-01T06:00:00.5Z') | where level =~ \"\" "
    "| summarize count() by level",
    "['empty'] | summarize count() by level",
    "['empty'] | summarize count()",
]


def _events(n: int, seed: int = 7) -> list[dict[str, Any]]:
    r = random.Random(seed)
    out = []
    for i in range(n):
        event: dict[str, Any] = {"_time": format_time(BASE + r.randrange(0, DAY)), "n": i}
        level = r.choice(LEVELS)
        if level is not None or r.random() < 0.5:
            event["level"] = level
        out.append(event)
    return out


@pytest.fixture
def store() -> Iterator[Store]:
    s = Store()
    s.add_events("d", _events(6000))
    s.add_events("other", [{"_time": format_time(BASE + 5), "level": "error"}])
    yield s
    s.close()


def _scan(store: Store, monkeypatch: pytest.MonkeyPatch, *args: Any) -> dict[str, Any]:
    with monkeypatch.context() as m:
        m.setattr(rollups, "answer_rows", lambda *a, **k: None)
        return _clean(store.query(*args))


def _clean(answer: dict[str, Any]) -> dict[str, Any]:
    answer["status"].pop("elapsedTime")
    return answer


def _ranges() -> list[tuple[str | None, str]]:
    return [(None, format_time(BASE + DAY)),
            (format_time(BASE + 3_600_000_123), format_time(BASE + 20 * 3_600_000_000 + 59)),
            (format_time(BASE + 60_000_000), format_time(BASE + 120_000_000)),
            (format_time(BASE + 61_000_000), format_time(BASE + 62_000_000))]


@pytest.mark.parametrize("text", SHAPES)
def test_the_counts_answer_as_the_scan_does(store: Store, monkeypatch: pytest.MonkeyPatch,
                                            text: str) -> None:
    used = []
    real = rollups.answer_rows

    def spy(*args: Any) -> Any:
        got = real(*args)
        used.append(got is not None)
        return got

    for start, end in _ranges():
        for fmt in ("tabular", "legacy"):
            monkeypatch.setattr(rollups, "answer_rows", spy)
            fast = _clean(store.query(text, start, end, fmt))
            assert fast == _scan(store, monkeypatch, text, start, end, fmt), (text, start, end)
    # Over a day and over hours the counts answer (bin_auto over a minute bins by seconds).
    assert all(used[:4]), "the counts were not used"


@pytest.mark.parametrize("text", [
    "['d'] | where level == 'error' | summarize count() by bin(_time, 15m), level",
    "['d'] | where level =~ 'error' or level =~ 'info' | summarize count() by level",
    "['d'] | where level !~ 'error' | summarize count() by level",
    "['d'] | where message =~ 'error' | summarize count() by level",
    "['d'] | search 'x' | summarize count() by level",
    "['d'] | summarize count() by bin(_time, 30s), level",
    "['d'] | summarize count() by level | sort by count_",
    "['d'] | summarize count(), sum(n) by level",
    "['d'] | where _time > todatetime(n) | summarize count() by level",
    "['d'] | where _time > ago(1h) or n > 3 | summarize count() by level",
    "['d'] | summarize count() by service",
])
def test_other_shapes_scan(store: Store, text: str) -> None:
    from loghandler._local import apl, aplsql

    compiled = aplsql.compile_query(text, start_us=BASE, end_us=BASE + DAY)
    # a connection of our own to the store's file, as the readers open it.
    with sqlite3.connect(store.reader._uri or "", uri=True) as db:  # type: ignore[attr-defined]  # noqa: SLF001
        assert rollups.answer_rows(db, apl.parse_query(text), compiled, BASE,
                                   BASE + DAY) is None


def test_an_object_level_falls_back_to_the_scan(store: Store,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    store.add_events("d", [{"_time": format_time(BASE + 7), "level": {"name": "x"}}])
    text = SHAPES[3]
    assert _clean(store.query(text, None, format_time(BASE + DAY))) == _scan(
        store, monkeypatch, text, None, format_time(BASE + DAY), "legacy")


def test_trim_delete_and_clear_keep_the_counts_true(store: Store,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    end = format_time(BASE + DAY)
    # A trim inside a minute: the minute is counted again from what is left of it.
    assert store.dataset_trim("d", BASE + 6 * 3_600_000_000 + 30_000_001)
    for text in SHAPES[:4]:
        assert _clean(store.query(text, None, end)) == _scan(store, monkeypatch, text, None,
                                                             end, "legacy")
    assert store.dataset_delete("d")
    store.add_events("d", [{"_time": format_time(BASE + 9), "level": "info"}])
    got = store.query(SHAPES[3], None, end, "tabular")["tables"][0]["columns"]
    assert got == [["info"], [1]]
    store.clear_events()
    got = store.query(SHAPES[3], None, end, "tabular")["tables"][0]["columns"]
    assert got == [[], []]


def test_a_file_of_an_earlier_version_gets_its_counts(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(tmp_path / "events.sqlite")
    s = Store(path)
    s.add_events("d", _events(2000, seed=3))
    s.close()
    with sqlite3.connect(path) as db:
        db.execute("DROP TABLE rollup_minutes")  # as an earlier version wrote it
    s = Store(path)
    try:
        end = format_time(BASE + DAY)
        for text in SHAPES[:4]:
            assert _clean(s.query(text, None, end)) == _scan(s, monkeypatch, text, None, end,
                                                             "legacy")
        (n,) = store_db(s).execute("SELECT sum(n) FROM rollup_minutes").fetchone()
        assert n == 2000
    finally:
        s.close()


def test_the_benchmark_runs() -> None:
    """``python -m benchmarks.rollups`` end to end, tiny: every figure printed, with the load."""
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run([sys.executable, "-m", "benchmarks.rollups", "--events", "3000",
                           "--repeat", "1"], cwd=root, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    # The level counts' three, the value counts' two, the number counts' three.
    assert sum("counts" in line and "scan" in line and "load" in line for line in lines) == 8
    assert any(line.startswith("ingest of 3,000 events") for line in lines)
    assert any(line.strip().startswith("the numbers' counts: ") and " MB of " in line
               for line in lines)
