"""Per-minute event counts by (field, value, level), kept at ingest: a search's histogram and
count without a scan.

The page's histogram of ``status:500`` or ``service:checkout level:error`` is ``count() by
bin(_time, 15m), level`` after a ``where`` on one field; over a million events that was a scan
of every event's JSON (8 s and more on a busy machine). The store keeps, in the same
transaction as each insert, how many events of each dataset had each value of each
top-level field, per minute and level (the level's key is rollups'); ``rollups.answer_rows``
answers such a query from them (the partial minutes at the range's ends counted from the
events themselves), exactly as the scan would.

Only fields of few values are kept: a field is *wide* (not kept, its counts dropped, for good)
once it has more than ``MAX_VALUES`` distinct values in a dataset, or a value that is not a
short text, a number or a boolean (an object, an array, a long text): ids, durations and
messages are searched by the scan as before. A field is kept from its dataset's first event
on, so its counts are whole or it is wide; the wide fields are stored too, and so survive a
restart. The datasets of a file written by an earlier version are not counted (their searches
scan, as before) until deleted: counting a million stored events again would hold the
service's start for minutes. What the store remembers per field (its values seen, at most
``MAX_VALUES``) is bounded, as is what one query reads (the field's values, then its minutes
of the range).
"""

from __future__ import annotations

import re
import sqlite3
from collections import Counter
from collections.abc import Iterable
from typing import Any

__all__ = ["MAX_VALUES", "Known", "ValueTally", "add_locked", "create_locked",
           "delete_locked", "key_of", "tally", "trim_locked"]

MAX_VALUES = 256  # distinct values a field may have in a dataset and still be kept
MAX_TEXT = 200  # a longer text value makes its field wide
MINUTE_US = 60_000_000
_INT64 = 2 ** 63
# Fields read as ``$."name"`` by the compiled SQL (no dots: a dotted name may be nested).
PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_SKIP = frozenset({"_time", "_sysTime", "level", "message"})

ValueTally = Counter[tuple[str, str, int, str]]  # (field, value key, minute, level key)

_SCHEMA = [
    "CREATE TABLE IF NOT EXISTS rollup_values (dataset TEXT NOT NULL, field TEXT NOT NULL, "
    "value TEXT NOT NULL, minute INTEGER NOT NULL, level TEXT NOT NULL, n INTEGER NOT NULL, "
    "PRIMARY KEY (dataset, field, value, minute, level)) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS rollup_wide (dataset TEXT NOT NULL, field TEXT NOT NULL, "
    "PRIMARY KEY (dataset, field)) WITHOUT ROWID",
    # Datasets stored by an earlier version (no counts): their searches scan, as before.
    "CREATE TABLE IF NOT EXISTS rollup_values_off (dataset TEXT NOT NULL PRIMARY KEY) "
    "WITHOUT ROWID",
]
# Every field of a dataset whose counts are off (the key of ``Known.wide``).
ALL = "\x00all"
_UPSERT = ("INSERT INTO rollup_values (dataset, field, value, minute, level, n) "
           "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (dataset, field, value, minute, level) "
           "DO UPDATE SET n = n + excluded.n")
WIDE = "\x00wide"  # the key of a value that makes its field wide


def key_of(value: Any) -> str | None:
    """A value's stored key (its JSON type and text, as rollups keys a level); WIDE for a
    value that makes its field wide, None for a null (matched by no equality)."""
    if value is None:
        return None
    if isinstance(value, str):
        return "s" + value if len(value) <= MAX_TEXT else WIDE
    if isinstance(value, bool):
        return "i1" if value else "i0"
    if isinstance(value, int):
        return "i" + str(value) if -_INT64 <= value < _INT64 else WIDE
    if isinstance(value, float):
        return "f" + repr(value) if value == value and abs(value) < 1e15 else WIDE
    return WIDE


class Known:
    """What the store knows of each dataset's fields (under its lock): the values seen of
    each kept field (at most MAX_VALUES each), and the wide fields."""

    def __init__(self) -> None:
        self.values: dict[str, dict[str, set[str]]] = {}
        self.wide: dict[str, frozenset[str]] = {}

    def skip(self, dataset: str) -> frozenset[str]:
        """The fields a batch of ``dataset`` need not count (read before the lock is taken:
        replaced, never changed in place)."""
        return self.wide.get(dataset, frozenset())

    def load_locked(self, db: sqlite3.Connection) -> None:
        self.values.clear()
        self.wide.clear()
        for dataset, field, value in db.execute(
                "SELECT DISTINCT dataset, field, value FROM rollup_values"):
            self.values.setdefault(dataset, {}).setdefault(field, set()).add(value)
        wide: dict[str, set[str]] = {}
        for dataset, field in db.execute("SELECT dataset, field FROM rollup_wide UNION ALL "
                                         "SELECT dataset, ? FROM rollup_values_off", (ALL,)):
            wide.setdefault(dataset, set()).add(field)
        self.wide = {d: frozenset(f) for d, f in wide.items()}

    def forget(self, dataset: str | None) -> None:
        if dataset is None:
            self.values.clear()
            self.wide.clear()
        else:
            self.values.pop(dataset, None)
            self.wide.pop(dataset, None)


def tally(events: Iterable[dict[str, Any]], minutes: Iterable[int], levels: Iterable[str],
          skip: frozenset[str]) -> ValueTally:
    """A batch's counts per (field, value, minute, level) (before the store's lock is taken);
    a field with a value that makes it wide is counted under WIDE."""
    out: ValueTally = Counter()
    if ALL in skip:
        return out
    left_out = _SKIP | skip
    rows = list(zip(events, minutes, levels, strict=True))
    raw: Counter[tuple[str, Any, type, int, str]] = Counter()
    try:
        # Counted by the values themselves first, in C (the type kept apart: 1, 1.0 and True
        # are equal keys to a dict, not to the scan), then keyed once per distinct value.
        raw.update((name, value, type(value), minute, level)
                   for event, minute, level in rows
                   for name, value in event.items() if name not in left_out)
    except TypeError:  # an object or array value: not hashable, counted one by one
        raw.clear()
        for event, minute, level in rows:
            for name, value in event.items():
                if name not in left_out:
                    hashable = value if isinstance(value, (str, int, float)) or (
                        value is None) else WIDE
                    raw[(name, hashable, type(value), minute, level)] += 1
    plain: dict[str, bool] = {}
    for (name, value, _, minute, level), n in raw.items():
        ok = plain.get(name)
        if ok is None:
            ok = plain[name] = PLAIN.match(name) is not None
        key = WIDE if value is WIDE else key_of(value)
        if ok and key is not None:
            out[(name, key, minute, level)] += n
    return out


def create_locked(db: sqlite3.Connection, known: Known) -> None:
    """The tables, made when missing, in one transaction (the datasets of a file of an
    earlier version marked as not counted); then what the store knows, read from them."""
    new = not db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' "
                         "AND name = 'rollup_values'").fetchone()
    db.execute("BEGIN")
    try:
        for statement in _SCHEMA:  # each one made if missing, whatever made the others
            db.execute(statement)
        if new:
            # Counting a file's events again would take minutes at a million (each event's
            # JSON read in Python) before the service could answer: its datasets keep the
            # scan instead, until deleted (a dataset made from now on is counted).
            db.execute("INSERT INTO rollup_values_off (dataset) SELECT DISTINCT dataset "
                       "FROM events")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
    known.load_locked(db)


def _refill_locked(db: sqlite3.Connection, known: Known, level_key: Any, dataset: str,
                   minute: int) -> None:
    """One minute of a dataset's counts made again from its stored events."""
    from .depth import load_stored

    cur = db.execute("SELECT dataset, time, body FROM events WHERE dataset = ? AND time >= ? "
                     "AND time < ?", (dataset, minute * MINUTE_US, (minute + 1) * MINUTE_US))
    while rows := cur.fetchmany(10_000):
        per: dict[str, ValueTally] = {}
        for name, t, body in rows:
            event = load_stored(body)
            if not isinstance(event, dict):
                continue
            counts = per.setdefault(name, Counter())
            counts.update(tally([event], [t // MINUTE_US], [level_key(event.get("level"))],
                                known.skip(name)))
        for name, counts in per.items():
            add_locked(db, known, name, counts)


def add_locked(db: sqlite3.Connection, known: Known, dataset: str, counts: ValueTally) -> None:
    """A batch's counts, inside the insert's transaction: a field that now has too many
    values, or a value that cannot be kept, becomes wide (its counts deleted)."""
    if not counts or ALL in known.skip(dataset):
        return
    seen = known.values.setdefault(dataset, {})
    wide = set(known.wide.get(dataset, ()))
    new: dict[str, set[str]] = {}
    for field, key, _, _ in counts:
        if field not in wide:
            new.setdefault(field, set()).add(key)
    widened = []
    for field, keys in new.items():
        have = seen.get(field, set())
        if WIDE in keys or len(have | keys) > MAX_VALUES:
            widened.append(field)
        else:
            seen[field] = have | keys
    for field in widened:
        wide.add(field)
        seen.pop(field, None)
        db.execute("DELETE FROM rollup_values WHERE dataset = ? AND field = ?", (dataset, field))
        db.execute("INSERT OR IGNORE INTO rollup_wide (dataset, field) VALUES (?, ?)",
                   (dataset, field))
    if widened:
        known.wide[dataset] = frozenset(wide)
    db.executemany(_UPSERT, [(dataset, f, k, m, lv, n) for (f, k, m, lv), n in counts.items()
                             if f not in wide])


def delete_locked(db: sqlite3.Connection, known: Known, dataset: str | None) -> None:
    """A dataset's counts and wide fields (None: every dataset's) gone with its events."""
    if dataset is None:
        db.execute("DELETE FROM rollup_values")
        db.execute("DELETE FROM rollup_wide")
        db.execute("DELETE FROM rollup_values_off")
    else:
        db.execute("DELETE FROM rollup_values WHERE dataset = ?", (dataset,))
        db.execute("DELETE FROM rollup_wide WHERE dataset = ?", (dataset,))
        db.execute("DELETE FROM rollup_values_off WHERE dataset = ?", (dataset,))
    known.forget(dataset)


def trim_locked(db: sqlite3.Connection, known: Known, level_key: Any, dataset: str,
                older_than_us: int) -> None:
    """After the events before ``older_than_us`` were deleted: the minutes before it go, and
    the minute it falls in is counted again from what is left of it. (The values seen stay
    known: a superset, which only makes a field wide sooner.)"""
    minute = older_than_us // MINUTE_US
    db.execute("DELETE FROM rollup_values WHERE dataset = ? AND minute <= ?", (dataset, minute))
    _refill_locked(db, known, level_key, dataset, minute)


# ---------------------------------------------------------------------------- answering

def is_wide(db: sqlite3.Connection, dataset: str, field: str) -> bool:
    """Whether the field's counts are not kept (it is wide, or its dataset's counts are off)."""
    return db.execute("SELECT 1 FROM rollup_wide WHERE dataset = ? AND field = ? UNION ALL "
                      "SELECT 1 FROM rollup_values_off WHERE dataset = ?",
                      (dataset, field, dataset)).fetchone() is not None


def values(db: sqlite3.Connection, dataset: str, field: str) -> list[str]:
    """The value keys of a kept field (at most MAX_VALUES, and the rows of one field)."""
    return [v for (v,) in db.execute(
        "SELECT DISTINCT value FROM rollup_values WHERE dataset = ? AND field = ?",
        (dataset, field))]


def minutes(db: sqlite3.Connection, dataset: str, field: str, keys: list[str], lo: int,
            hi: int) -> Iterable[tuple[int, str, int]]:
    """(minute, level key, events) of the field's values ``keys`` over minutes [lo, hi)."""
    for key in keys:
        yield from db.execute(
            "SELECT minute, level, n FROM rollup_values WHERE dataset = ? AND field = ? "
            "AND value = ? AND minute >= ? AND minute < ?", (dataset, field, key, lo, hi))


def event_key(body: str, field: str) -> str | None:
    """The key of a stored event's value of ``field`` (for the range's partial minutes)."""
    from .depth import load_stored

    event = load_stored(body)
    return key_of(event.get(field)) if isinstance(event, dict) else None

