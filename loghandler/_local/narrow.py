"""A narrow copy of each event's few grouped and aggregated fields, kept at ingest: an
aggregation over a day's million events (``where isnotempty(path) | summarize
percentile(duration_ms, 95) by path, bin_auto(_time)``) reads these columns instead of parsing
every event's JSON.

The scan spends most of such a query in SQLite's ``json_extract`` of each stored event (about
1.1 s at a million for one field). This keeps, per event, at most ``MAX_COLUMNS`` of its
top-level fields in the columns of a table ordered as the events' own index (dataset, time,
row), each value being ``json_extract`` of the stored event, computed by SQLite in the same
transaction that stores the batch: a query reading a column reads the very value the scan's
``json_extract`` makes, in the scan's order, so its answer (a percentile's seeded sample too)
is the scan's.

Which fields are kept is decided once per dataset, from its first batch (for a file of an
earlier version, from its first ``SAMPLE`` events when it opens): the top-level fields with a
plain name (not ``_time``, ``level``, ``message``) whose first value is a number, or a text
of few values (at most one distinct text in ten of the events holding it: a route, a host, a
method; not an id or a URL), the most often present first, then the first seen, at most
``MAX_COLUMNS``. A field never decided (first seen later) or not kept leaves the query to the
scan; so does one that took an object or an array (json_extract gives it as JSON, an object
in the answer, where the column keeps its text), and every field of a dataset holding an
event SQLite cannot read. Rows go with their events (a trigger); a file whose events are
not all in the table (an earlier version's, or one it stored events in since) has the table
made again when it opens. What one dataset stores is bounded by its events times
``MAX_COLUMNS`` values; an ingest computes at most ``MAX_COLUMNS`` ``json_extract`` per event.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from operator import methodcaller
from typing import Any

from .valuecounts import PLAIN

__all__ = ["MAX_COLUMNS", "SAMPLE", "Narrow", "add_locked", "choose", "columns_for",
           "create_locked", "forget_locked"]

MAX_COLUMNS = 8
SAMPLE = 10_000  # events read to decide an older file's datasets' fields
FEW = 10  # a text field is kept when it has at most one distinct value in FEW of its events
TABLE = "narrow_events"
_SKIP = frozenset({"_time", "_sysTime", "level", "message"})
_NONE = "\x00none"  # the field of a decided dataset's row when none was kept
COLUMNS = [f"n{i}" for i in range(MAX_COLUMNS)]

_SCHEMA = [
    # Ordered as the events' (dataset, time, seq) index: a range reads its rows in the scan's
    # order, one sequential stretch of the table.
    f"CREATE TABLE IF NOT EXISTS {TABLE} (dataset TEXT NOT NULL, time INTEGER NOT NULL, "
    f"seq INTEGER NOT NULL, {', '.join(COLUMNS)}, PRIMARY KEY (dataset, time, seq)) "
    "WITHOUT ROWID",
    # An event's row goes with it, in the statement that deletes it (a trim, a delete, a
    # clear): no reader sees one without the other.
    f"CREATE TRIGGER IF NOT EXISTS narrow_delete AFTER DELETE ON events BEGIN DELETE FROM "
    f"{TABLE} WHERE dataset = old.dataset AND time = old.time AND seq = old.seq; END",
    # ``mixed``: the field took an object or an array, which json_extract gives as JSON (an
    # object in the answer) and the column keeps as its text: its queries scan.
    "CREATE TABLE IF NOT EXISTS narrow_fields (dataset TEXT NOT NULL, field TEXT NOT NULL, "
    "slot INTEGER NOT NULL, mixed INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (dataset, field)) "
    "WITHOUT ROWID",
]


class Narrow:
    """The store's knowledge of each dataset's kept fields (under its lock): field -> column,
    for every decided dataset."""

    def __init__(self) -> None:
        self.kept: dict[str, dict[str, str]] = {}
        self.mixed: set[tuple[str, str]] = set()  # (dataset, field)

    def load_locked(self, db: sqlite3.Connection) -> None:
        self.kept.clear()
        self.mixed.clear()
        for dataset, field, slot, mixed in db.execute(
                "SELECT dataset, field, slot, mixed FROM narrow_fields ORDER BY dataset, slot"):
            columns = self.kept.setdefault(dataset, {})
            if field != _NONE:
                columns[field] = COLUMNS[slot]
            if mixed:
                self.mixed.add((dataset, field))


def choose(events: Iterable[dict[str, Any]]) -> list[str]:
    """The fields kept for a dataset whose first events these are (module docstring)."""
    present: dict[str, int] = {}
    kind: dict[str, str | None] = {}  # "number", "text", or None (not kept)
    texts: dict[str, set[str]] = {}
    for event in events:
        for name, value in event.items():
            if value is None:
                continue
            if name not in present:
                if name in _SKIP or not PLAIN.match(name):
                    kind[name] = None
                elif isinstance(value, (int, float)) and not isinstance(value, bool):
                    kind[name] = "number"
                elif isinstance(value, str):
                    kind[name] = "text"
                    texts[name] = set()
                else:
                    kind[name] = None
                present[name] = 0
            present[name] += 1
            if kind[name] == "text" and isinstance(value, str) and len(texts[name]) <= SAMPLE:
                texts[name].add(value)
    chosen = [name for name in present if kind[name] == "number" or (
        kind[name] == "text" and len(texts[name]) <= max(1, present[name] // FEW))]
    # Most often present first; a tie in the order first seen (sorted is stable).
    chosen.sort(key=lambda name: -present[name])
    return chosen[:MAX_COLUMNS]


def _decide_locked(db: sqlite3.Connection, narrow: Narrow, dataset: str,
                   fields: list[str]) -> dict[str, str]:
    rows = [(dataset, f, i) for i, f in enumerate(fields)] or [(dataset, _NONE, -1)]
    db.executemany("INSERT OR REPLACE INTO narrow_fields (dataset, field, slot) "
                   "VALUES (?, ?, ?)", rows)
    columns = narrow.kept[dataset] = {f: COLUMNS[i] for i, f in enumerate(fields)}
    return columns


def _fill_locked(db: sqlite3.Connection, narrow: Narrow, dataset: str, columns: dict[str, str],
                 where: str, params: tuple[Any, ...]) -> None:
    if not columns:
        return
    from .aplsql_expr import path, quote

    names = ", ".join(columns.values())
    values = ", ".join(f"json_extract(body, {quote(path(f))})" for f in columns)
    fill = (f"INSERT OR REPLACE INTO {TABLE} (dataset, time, seq, {names}) "
            f"SELECT dataset, time, seq, {values} FROM events WHERE {where}")
    try:
        db.execute(fill, params)
    except sqlite3.OperationalError:
        # An event SQLite cannot read (an infinity stored as JSON's Infinity): the scan's
        # json_extract fails on it, so the dataset's queries scan, failing as before; the
        # others' values are kept (only this statement was undone).
        db.execute(fill + " AND json_valid(body)", params)
        for field in columns:
            if (dataset, field) not in narrow.mixed:
                _mix_locked(db, narrow, dataset, field)


def create_locked(db: sqlite3.Connection, narrow: Narrow) -> None:
    """The tables, made when missing; for a file of an earlier version each dataset's fields
    decided from its first events and its events' values copied, in one transaction (about
    a microsecond per event and field: some ten seconds at a million before the service
    answers)."""
    new = not db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                         (TABLE,)).fetchone()
    db.execute("BEGIN")
    try:
        if not new and not _whole_locked(db):
            # Events stored by an earlier version since (the file opened by it again): the
            # table made again, as for a file of that version.
            db.execute("DROP TRIGGER IF EXISTS narrow_delete")
            db.execute(f"DROP TABLE {TABLE}")
            db.execute("DROP TABLE IF EXISTS narrow_fields")
            new = True
        for statement in _SCHEMA:
            db.execute(statement)
        if new:
            import json

            datasets = [d for (d,) in db.execute("SELECT DISTINCT dataset FROM events")]
            for dataset in datasets:
                sample = []
                for (body,) in db.execute("SELECT body FROM events WHERE dataset = ? "
                                          "ORDER BY time, seq LIMIT ?", (dataset, SAMPLE)):
                    try:
                        event = json.loads(body)
                    except (ValueError, RecursionError):  # a bad stored event: not a sample
                        continue
                    if isinstance(event, dict):
                        sample.append(event)
                columns = _decide_locked(db, narrow, dataset, choose(sample))
                _fill_locked(db, narrow, dataset, columns, "dataset = ?", (dataset,))
                for field, column in columns.items():
                    # A text that may be an object's or an array's JSON (or one that only
                    # looks like it: then the field scans, as before).
                    if db.execute(f"SELECT 1 FROM {TABLE} WHERE dataset = ? AND "
                                  f"typeof({column}) = 'text' AND substr({column}, 1, 1) "
                                  f"IN ('[', '{{') LIMIT 1", (dataset,)).fetchone():
                        _mix_locked(db, narrow, dataset, field)
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
    narrow.load_locked(db)


def _whole_locked(db: sqlite3.Connection) -> bool:
    """Whether every event of each dataset with kept fields has its row (a count of each
    table's index: a fraction of a second at a million)."""
    try:
        kept = {d for (d,) in db.execute("SELECT DISTINCT dataset FROM narrow_fields "
                                         "WHERE slot >= 0 AND mixed >= 0")}
        rows = dict(db.execute(f"SELECT dataset, count(*) FROM {TABLE} GROUP BY dataset"))
    except sqlite3.OperationalError:
        return False
    events = dict(db.execute("SELECT dataset, count(*) FROM events GROUP BY dataset"))
    return all(rows.get(d, 0) == events.get(d, 0) for d in kept | set(rows))


def add_locked(db: sqlite3.Connection, narrow: Narrow, dataset: str,
               events: list[dict[str, Any]], after: int) -> None:
    """The batch's events stored after row ``after`` (a dataset's first batch decides its
    fields), inside the insert's transaction: one statement."""
    columns = narrow.kept.get(dataset)
    if columns is None:
        columns = _decide_locked(db, narrow, dataset, choose(events))
    _fill_locked(db, narrow, dataset, columns, "seq > ?", (after,))
    for field in columns:
        if (dataset, field) not in narrow.mixed:
            kinds = set(map(type, map(methodcaller("get", field), events)))
            if dict in kinds or list in kinds:
                _mix_locked(db, narrow, dataset, field)


def _mix_locked(db: sqlite3.Connection, narrow: Narrow, dataset: str, field: str) -> None:
    db.execute("UPDATE narrow_fields SET mixed = 1 WHERE dataset = ? AND field = ?",
               (dataset, field))
    narrow.mixed.add((dataset, field))


def forget_locked(db: sqlite3.Connection, narrow: Narrow, dataset: str | None) -> None:
    """A dataset's choice (None: every dataset's) gone with its events: the next batch
    decides again."""
    if dataset is None:
        db.execute("DELETE FROM narrow_fields")
        narrow.kept.clear()
        narrow.mixed.clear()
    else:
        db.execute("DELETE FROM narrow_fields WHERE dataset = ?", (dataset,))
        narrow.kept.pop(dataset, None)
        narrow.mixed = {m for m in narrow.mixed if m[0] != dataset}


def columns_for(db: sqlite3.Connection, dataset: str) -> dict[str, str]:
    """The kept fields of ``dataset`` and their columns (read by a query's connection), but
    those that took an object or an array."""
    try:
        return {f: COLUMNS[slot] for f, slot in db.execute(
            "SELECT field, slot FROM narrow_fields WHERE dataset = ? AND slot >= 0 "
            "AND mixed = 0",
            (dataset,))}
    except sqlite3.OperationalError:  # no table yet: a file still being opened
        return {}
