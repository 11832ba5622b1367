"""The index of the events' text (words.py): a search for a word read through it gives the
scan's answer, exactly (its events, its histogram, its fields' sample, its count), for words
in messages, in other fields' values and in field names, in any case, with punctuation,
LIKE's own wildcards and non-ASCII text, rare and common, and after new ingests, a trim, a
delete, a restart, and on a file of an earlier version (the index made from its events).
"""

from __future__ import annotations

import json
import random
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from countcheck import BASE, DAY, spied_and_scan
from helpers import store_db

from loghandler._local import words
from loghandler._local.apl import format_time
from loghandler._local.search import histogram_query, page_query
from loghandler._local.store import Store

# Rare enough (each in well under a tenth of the events) for the index to be used.
RARE = ["deadlock", "DEADLOCK", "DeadLock", "eadloc", "dead lock", "card declined",
        "Card Declined", "user_id", "USER_ID", "ord-42", "a%b", "50%", "x_y", "q\"uote",
        "back\\slash", "path/to", "café", "CAFÉ", "日本語", "日本", "🙂", "naïve",
        "\"status\":503", "503", ":503", "checkout", "Checkout", "zzzz-never", "tab\there",
        "{\"nested\"", "retrying;", "é", "\"message\":"]
# Every event has these (a tenth or more): the scan is the faster way.
COMMON = ["fine", "level", "message", "info", "essag", "Fine"]
# Fewer than three characters as stored: no trigram, always scanned.
SHORT = ["ab", "%", "_", "\"", "x"]
SEARCHES = RARE + COMMON + SHORT


def _events(n: int, seed: int = 11, start: int = BASE) -> list[dict[str, Any]]:
    r = random.Random(seed)
    rare = ["deadlock detected; retrying;", "Card DECLINED for ord-42", "café naïve 日本語 🙂",
            "a%b and 50% off", "x_y=1 q\"uote back\\slash path/to/file", "tab\there",
            "DeadLock again", "dead lock split"]
    out = []
    for _ in range(n):
        event: dict[str, Any] = {"_time": format_time(start + r.randrange(0, DAY)),
                                 "level": r.choice(["info", "error", "debug", "Info"]),
                                 "message": r.choice(rare) if r.random() < 0.02 else "fine"}
        if r.random() < 0.03:
            event["service"] = r.choice(["Checkout", "checkout", "CHECKOUT"])
        if r.random() < 0.02:
            event["status"] = 503
        if r.random() < 0.02:
            event["user_id"] = r.randrange(100)
        if r.random() < 0.01:
            event["nested"] = {"user": "CAFÉ", "deep": ["日本", "é"]}
        out.append(event)
    return out


def indexed_and_scan(store: Store, monkeypatch: pytest.MonkeyPatch, text: str,
                     start: str | None, end: str, sample: int | None = None
                     ) -> tuple[dict[str, Any], dict[str, Any], bool]:
    """The answer through the index, by the scan, and whether the index was read."""
    return spied_and_scan(monkeypatch, words, "match_for", lambda: store.reader.query(
        text, start, end, "tabular", timeout=60, sample=sample))


def _ranges() -> list[tuple[str | None, str]]:
    return [(None, format_time(BASE + 2 * DAY)),
            (format_time(BASE + 3_600_000_123), format_time(BASE + 20 * 3_600_000_000 + 59))]


def check(store: Store, monkeypatch: pytest.MonkeyPatch, searches: list[str],
          indexed: bool | None) -> None:
    """Each search's rows, histogram, count and fields' sample in dataset "d": the scan's
    answer; through the index exactly when ``indexed`` (None: not checked)."""
    for term in searches:
        found = "['d'] | search " + json.dumps(term)
        for text, sample in ((found + " | summarize count() by bin(_time, 15m), level", None),
                             (found + " | sort by _time desc, _rowId desc | take 200", None),
                             (found + " | take 5000", 7), (found + " | count", None)):
            for start, end in _ranges():
                fast, scan, used = indexed_and_scan(store, monkeypatch, text, start, end,
                                                    sample)
                assert fast == scan, (text, start, end)
                if indexed is not None:
                    assert used == indexed, (text, used)


@pytest.fixture(autouse=True)
def _rare_below_a_fifth(monkeypatch: pytest.MonkeyPatch) -> None:
    # These events are few: the rare words are in a few percent of them, the common ones in
    # nine tenths or more.
    monkeypatch.setattr(words, "COMMON_SHARE", 0.2)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(str(tmp_path / "events.sqlite"))
    s.add_events("d", _events(3000))
    yield s
    s.close()


def _found(store: Store, term: str) -> int:
    answer = store.reader.query("['d'] | search " + json.dumps(term)
                                + " | count", None, format_time(BASE + 2 * DAY), "tabular")
    return int(answer["tables"][0]["columns"][0][0])


def test_rare_words_are_read_through_the_index_and_give_the_scans_answer(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    check(store, monkeypatch, [t for t in RARE if len(words.trigrams(t))], True)
    # Found at all, in every form (else the equality above proves little).
    for term in ("deadlock", "DEADLOCK", "card declined", "a%b", "café", "日本語", "🙂",
                 "user_id", ":503", "x_y", "q\"uote", "back\\slash", "CAFÉ"):
        assert _found(store, term) > 0, term
    assert _found(store, "zzzz-never") == 0
    # LIKE's wildcards are literals: "a%b" is not "a...b".
    assert _found(store, "a%b") < _found(store, "a")


def test_common_and_short_words_are_scanned(store: Store,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    check(store, monkeypatch, COMMON + SHORT, False)
    # A long pasted line: a bounded number of its trigrams looked up, the answer the scan's.
    line = "level fine message info " * 12 + "deadlock"
    assert len(words.trigrams(line)) > words.MAX_TRIGRAMS
    check(store, monkeypatch, [line], None)


def test_every_word_through_the_index_gives_the_scans_answer(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    # The index however common the word: its trigrams must never leave out an event.
    monkeypatch.setattr(words, "COMMON_SHARE", 1.0)
    check(store, monkeypatch, COMMON + [t for t in RARE if words.trigrams(t)], True)
    check(store, monkeypatch, SHORT, False)


def test_two_words_and_a_field_term_together(store: Store,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    for search in ("deadlock retrying", "level:error deadlock", "deadlock -level:info",
                   "checkout status:503", "café 日本"):
        for text in (histogram_query("d", search, None, 900_000_000),
                     page_query("d", search, None)):
            fast, scan, used = indexed_and_scan(store, monkeypatch, text, None,
                                                format_time(BASE + 2 * DAY))
            assert fast == scan and used, search


def test_a_search_after_another_operator_is_scanned(store: Store,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # After a project the text searched is the projected one; after a take, the few rows.
    for text in ("['d'] | project level, message | search \"deadlock\" | count",
                 "['d'] | take 100 | search \"deadlock\" | count",
                 "['d'] | project-away message | search \"deadlock\" | count"):
        fast, scan, used = indexed_and_scan(store, monkeypatch, text, None,
                                            format_time(BASE + 2 * DAY))
        assert fast == scan and not used, text
    # A where before it filters the same stored events: the index is read.
    fast, scan, used = indexed_and_scan(
        store, monkeypatch, "['d'] | where level == 'error' | search \"deadlock\" | count",
        None, format_time(BASE + 2 * DAY))
    assert fast == scan and used


def _integrity(path: str) -> None:
    db = sqlite3.connect(path)
    try:
        # External content: the index against the events it was made from (rank 1: the
        # content compared too, not only the index's own structure).
        db.execute(f"INSERT INTO {words.TABLE} ({words.TABLE}, rank) "
                   f"VALUES ('integrity-check', 1)")
    finally:
        db.close()


def test_the_index_follows_ingest_trim_delete_and_restart(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(tmp_path / "events.sqlite")
    store = Store(path)
    try:
        store.add_events("d", _events(1500))
        store.add_events("other", _events(500, seed=3))
        store.add_events("d", _events(1500, seed=5))
        check(store, monkeypatch, ["deadlock", "café", "Checkout"], True)
        # A few events trimmed (taken out of the index one by one), then more than a third
        # (the index made again from those left).
        assert store.dataset_trim("d", BASE + DAY // 20)
        check(store, monkeypatch, ["deadlock", "café", "Checkout"], True)
        assert store.dataset_trim("d", BASE + DAY // 2)
        check(store, monkeypatch, ["deadlock", "café", "Checkout"], True)
        store.dataset_delete("other")
    finally:
        store.close()
    _integrity(path)
    store = Store(path)  # a restart: the index is the file's
    try:
        check(store, monkeypatch, ["deadlock", "card declined"], True)
        store.clear_events()
        assert _found(store, "deadlock") == 0
        _integrity(path)
        store.add_events("d", _events(800, seed=9))
        check(store, monkeypatch, ["deadlock"], True)
    finally:
        store.close()
    _integrity(path)


def test_a_file_of_an_earlier_version_gets_its_index(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(tmp_path / "events.sqlite")
    store = Store(path)
    store.add_events("d", _events(2000))
    store.close()
    db = sqlite3.connect(path)
    for name in ("events_words_delete", "events_words_update"):
        db.execute(f"DROP TRIGGER {name}")
    db.execute(f"DROP TABLE {words.TABLE}")
    db.commit()
    db.close()
    store = Store(path)
    try:
        check(store, monkeypatch, ["deadlock", "café", "日本語"], True)
    finally:
        store.close()
    _integrity(path)


def test_without_the_trigram_tokenizer_every_search_scans(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A SQLite without FTS5's trigram tokenizer (before 3.34): no index, the same answers.
    # the index's schema swapped for one SQLite without trigrams would reject.
    real = words._SCHEMA  # noqa: SLF001
    monkeypatch.setattr(words, "_SCHEMA", [real[0].replace("trigram", "no_such_tokenizer"),
                                           *real[1:]])
    store = Store(str(tmp_path / "events.sqlite"))
    try:
        store.add_events("d", _events(1000))
        assert not words.exists(store_db(store))
        assert _found(store, "deadlock") > 0
        check(store, monkeypatch, ["deadlock", "café"], False)
    finally:
        store.close()


def test_the_pages_after_a_words_first_through_the_index(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    # The page's next pages (after the last row shown) and the API's cursor: the scan's rows.
    end = format_time(BASE + 2 * DAY)
    first = store.reader.query(page_query("d", "deadlock", None, 7), None, end, "tabular")
    table = first["tables"][0]
    names = [f["name"] for f in table["fields"]]
    last = {n: table["columns"][names.index(n)][-1] for n in ("_time", "_rowId")}
    text = page_query("d", "deadlock", None, 7, (last["_time"], last["_rowId"]))
    fast, scan, used = indexed_and_scan(store, monkeypatch, text, None, end)
    assert fast == scan and used and fast["tables"][0]["columns"][0]
    found = "['d'] | search \"deadlock\""
    for include in (False, True):
        answers = []
        for off in (False, True):
            with monkeypatch.context() as m:
                if off:
                    m.setattr(words, "match_for", lambda *a, **k: None)
                answer = store.reader.query(found, None, end, "tabular", cursor=last["_rowId"],
                                            include_cursor=include)
            answer["status"].pop("elapsedTime")
            answers.append(answer)
        assert answers[0] == answers[1]
        assert answers[0]["tables"][0]["columns"][0]
