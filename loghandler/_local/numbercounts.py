"""Per-minute event counts by (numeric field, value, level), kept at ingest: a comparison's
histogram and count (``duration_ms>1000``, ``status>=500``, ``duration_ms>=250
duration_ms<1000``) without a scan.

valuecounts keeps the fields of few values; a duration or a size has as many values as
events, so a comparison on it read every event of the range (1.4 s of CPU at a million). This
keeps, for the first ``MAX_FIELDS`` top-level fields of a dataset whose first value is a
number, how many events had each value, per minute and level, in a table whose key starts
with (dataset, field, value): a comparison reads only the entries of the values it matches,
then groups them by minute and level (the partial minutes at the range's ends are counted
from the events, by the scan's own SQL).

The values are kept as SQLite sees them in the stored event (``json_extract`` of the value's
JSON text, in the same statement that stores them), so a comparison of the kept value is the
scan's comparison: a text value (or an object, an array) is greater than every number in
SQLite's order, and is kept as the empty text, which compares as every text does with a
number; ``true``/``false`` are 1 and 0; a null is never matched and not kept.

Which fields are kept is decided once per dataset and stored (``rollup_number_fields``): a
field is *kept* when its first non-null value in the dataset is an integer or a real number
and fewer than ``MAX_FIELDS`` are kept; *seen* when its first value was anything else (a
later number does not make it kept: its earlier values were not counted); *dropped* when a
kept field took a value SQLite cannot read back (a NaN or an infinity: its counts are deleted,
it stays unanswered). Once ``MAX_FIELDS`` are kept (or ``MAX_SEEN`` others were seen) the
dataset is *closed*: no other field is ever kept. The datasets of a file written by an
earlier version are closed with none kept (their comparisons scan, as before) until deleted.
What one dataset stores is bounded by its events times ``MAX_FIELDS``; what one query reads
is the matching values' entries of one field.
"""

from __future__ import annotations

import math
import sqlite3
from collections import Counter
from collections.abc import Iterable
from operator import methodcaller
from typing import Any, NamedTuple

from .valuecounts import PLAIN

__all__ = ["MAX_FIELDS", "MAX_SEEN", "Fields", "NumberTally", "Plan", "add_locked",
           "create_locked", "delete_locked", "is_kept", "minutes", "tally", "trim_locked"]

MAX_FIELDS = 8  # numeric fields kept per dataset (the first seen)
MAX_SEEN = 1024  # other fields remembered while a dataset's slots are open
MINUTE_US = 60_000_000
_INT64 = 2 ** 63
_SKIP = frozenset({"_time", "_sysTime", "level", "message"})
CLOSED = "\x00closed"  # the field of a dataset's row that says it is closed
TEXT = '""'  # the JSON a text, object or array value is kept as (the empty text)

_SCHEMA = [
    # ``value`` has no type: each value keeps json_extract's (integer, real or text) and
    # compares as the scan's json_extract does, without any conversion.
    # Keyed by the hour before the value: a batch's events (of the same hour or two) change
    # a few pages of the table, not about one page per row as a key led by the value would
    # (at a million: 42.5 against 35.7 µs of CPU an event for the whole ingest, loads 8.9 and
    # 5.9); a comparison seeks its values in each hour.
    "CREATE TABLE IF NOT EXISTS rollup_numbers (dataset TEXT NOT NULL, field TEXT NOT NULL, "
    "hour INTEGER NOT NULL, value NOT NULL, minute INTEGER NOT NULL, level TEXT NOT NULL, "
    "n INTEGER NOT NULL, PRIMARY KEY (dataset, field, hour, value, minute, level)) "
    "WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS rollup_number_fields (dataset TEXT NOT NULL, "
    "field TEXT NOT NULL, state TEXT NOT NULL, seq INTEGER NOT NULL, "
    "PRIMARY KEY (dataset, field)) WITHOUT ROWID",
]
_UPSERT = ("INSERT INTO rollup_numbers (dataset, field, hour, value, minute, level, n) "
           "VALUES (?, ?, ?, CASE WHEN typeof(?) = 'text' THEN json_extract(?, '$') "
           "ELSE ? END, ?, ?, ?) "
           "ON CONFLICT (dataset, field, hour, value, minute, level) "
           "DO UPDATE SET n = n + excluded.n")
MAX_HOURS = 24 * 31  # hours a query seeks one by one (a longer range reads every entry)
_STATE = ("INSERT INTO rollup_number_fields (dataset, field, state, seq) VALUES (?, ?, ?, ?) "
          "ON CONFLICT (dataset, field) DO UPDATE SET state = excluded.state")

# (field, value as handed to SQLite (_param), minute, level key, events)
NumberTally = list[tuple[str, int | str | None, int, str, int]]


class Plan(NamedTuple):
    """What a batch of one dataset counts, read before the store's lock is taken (replaced,
    never changed in place): the kept fields, every field decided, whether new fields may
    still be kept, and the dataset's generation (a delete starts a new one)."""
    kept: tuple[str, ...]
    decided: frozenset[str]
    closed: bool
    generation: int


class Counted(NamedTuple):
    """A batch's counts: per (field, value, minute, level), each undecided field's first
    value's kind (True: a number), and the plan they were made by."""
    counts: NumberTally
    first: dict[str, bool]
    plan: Plan


_OPEN = Plan((), frozenset(), False, 0)


class Fields:
    """The store's knowledge of each dataset's numeric fields (under its lock)."""

    def __init__(self) -> None:
        self.plans: dict[str, Plan] = {}
        self._generation = 0

    def plan(self, dataset: str) -> Plan:
        return self.plans.get(dataset) or _OPEN._replace(generation=self._generation)

    def load_locked(self, db: sqlite3.Connection) -> None:
        self.plans.clear()
        states: dict[str, list[tuple[str, str]]] = {}
        for dataset, field, state in db.execute(
                "SELECT dataset, field, state FROM rollup_number_fields ORDER BY dataset, seq"):
            states.setdefault(dataset, []).append((field, state))
        for dataset, rows in states.items():
            self.plans[dataset] = Plan(
                tuple(f for f, s in rows if s == "kept"),
                frozenset(f for f, _ in rows if f != CLOSED),
                any(f == CLOSED for f, _ in rows), self._generation)

    def forget(self, dataset: str | None) -> None:
        self._generation += 1
        if dataset is None:
            self.plans.clear()
        else:
            self.plans.pop(dataset, None)


def _param(value: Any) -> int | str | None:
    """How a value is handed to SQLite: an integer as itself (SQLite's integer); a real, or
    an integer past 64 bits, as the JSON text SQLite reads it from in the stored event (then
    ``json_extract`` of it: the scan's very number); TEXT for a text, object or array; None
    for a value SQLite cannot read back (NaN, infinity)."""
    if isinstance(value, bool):
        return 1 if value else 0
    if isinstance(value, int):
        return value if -_INT64 <= value < _INT64 else int.__repr__(value)
    if isinstance(value, float):
        return float.__repr__(value) if math.isfinite(value) else None
    return TEXT


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def tally(events: list[dict[str, Any]], minutes: list[int], levels: list[str],
          plan: Plan) -> Counted:
    """A batch's counts (before the store's lock is taken): every value of each kept field
    and, while the dataset is open, of each field not decided yet (which add_locked then
    decides by its first value here)."""
    counts: NumberTally = []
    first: dict[str, bool] = {}  # in the order first seen
    fields = list(plan.kept)
    if not plan.closed:
        names: set[str] = set().union(*events)
        found = []
        for name in names:
            if name not in plan.decided and name not in _SKIP and PLAIN.match(name):
                at, value = next(((i, v) for i, e in enumerate(events)
                                  if (v := e.get(name)) is not None), (-1, None))
                if value is not None:
                    found.append((at, list(events[at]).index(name), name, _is_number(value)))
        # Decided in the order first seen (the batch's order, then the event's); counted
        # only when it may be kept (a first value of another kind makes it seen).
        for _, _, name, number in sorted(found):
            first[name] = number
            if number:
                fields.append(name)
    for field in fields:
        values = list(map(methodcaller("get", field), events))
        raw: Counter[tuple[type, Any, int, str]] = Counter()
        try:
            # Counted by the values themselves first, in C (the type kept apart: 1, 1.0 and
            # True are one key to a dict, not to SQLite), then each handed over once.
            raw.update(zip(map(type, values), values, minutes, levels, strict=True))
        except TypeError:  # an object or array value: not hashable, kept as a text
            raw.clear()
            for v, m, lv in zip(values, minutes, levels, strict=True):
                raw[(str, "" if isinstance(v, (dict, list)) else v, m, lv)] += 1
        # (Texts are all one value: their rows add up in the upsert.)
        counts += [(field, v if t is int and -_INT64 <= v < _INT64 else _param(v), m, lv, n)
                   for (t, v, m, lv), n in raw.items() if v is not None]
    return Counted(counts, first, plan)


def create_locked(db: sqlite3.Connection, fields: Fields) -> None:
    """The tables, made when missing, in one transaction (the datasets of a file of an
    earlier version closed with no field kept); then what the store knows, read from them."""
    new = not db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' "
                         "AND name = 'rollup_numbers'").fetchone()
    db.execute("BEGIN")
    try:
        for statement in _SCHEMA:
            db.execute(statement)
        if new:
            # Counting a file's stored events again would hold the service's start for
            # minutes at a million: its datasets keep the scan until deleted.
            db.execute("INSERT OR IGNORE INTO rollup_number_fields (dataset, field, state, seq)"
                       " SELECT DISTINCT dataset, ?, 'closed', 0 FROM events", (CLOSED,))
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
    fields.load_locked(db)


def add_locked(db: sqlite3.Connection, fields: Fields, dataset: str, counted: Counted,
               events: list[dict[str, Any]], minutes: list[int], levels: list[str]) -> None:
    """A batch's counts, inside the insert's transaction: the undecided fields decided (kept
    when their first value is a number and a slot is free), a kept field that took a value
    SQLite cannot read back dropped."""
    plan = fields.plan(dataset)
    if counted.plan.generation != plan.generation or any(
            not number and field in plan.kept for field, number in counted.first.items()):
        # The dataset was deleted (or cleared) since the batch was counted, or another
        # batch made a field kept that this one saw first as another kind (so did not
        # count): counted again by what is known now.
        counted = tally(events, minutes, levels, plan)
    if plan.closed and not plan.kept:
        return
    kept = list(plan.kept)
    decided = set(plan.decided)
    closed = plan.closed
    seq = len(decided) + 1
    for field, number in counted.first.items():
        if field in decided or closed:
            continue
        if number and len(kept) < MAX_FIELDS:
            kept.append(field)
            state = "kept"
        else:
            state = "seen"
        decided.add(field)
        db.execute(_STATE, (dataset, field, state, seq))
        seq += 1
        if len(kept) >= MAX_FIELDS or len(decided) - len(kept) > MAX_SEEN:
            closed = True
            # Closed for good: what was seen need not be remembered any more.
            db.execute("DELETE FROM rollup_number_fields WHERE dataset = ? AND state = 'seen'",
                       (dataset,))
            db.execute(_STATE, (dataset, CLOSED, "closed", 0))
    keep = set(kept)
    dropped = {f for f, value, _, _, _ in counted.counts if value is None and f in keep}
    for field in dropped:
        kept.remove(field)
        keep.discard(field)
        db.execute("DELETE FROM rollup_numbers WHERE dataset = ? AND field = ?",
                   (dataset, field))
        db.execute(_STATE, (dataset, field, "dropped", seq))
    _upsert(db, dataset, counted.counts, keep)
    new = Plan(tuple(kept), frozenset(decided), closed, plan.generation)
    if new != plan:
        fields.plans[dataset] = new


def delete_locked(db: sqlite3.Connection, fields: Fields, dataset: str | None) -> None:
    """A dataset's counts and choices (None: every dataset's) gone with its events."""
    if dataset is None:
        db.execute("DELETE FROM rollup_numbers")
        db.execute("DELETE FROM rollup_number_fields")
    else:
        db.execute("DELETE FROM rollup_numbers WHERE dataset = ?", (dataset,))
        db.execute("DELETE FROM rollup_number_fields WHERE dataset = ?", (dataset,))
    fields.forget(dataset)


def trim_locked(db: sqlite3.Connection, fields: Fields, level_key: Any, dataset: str,
                older_than_us: int) -> None:
    """After the events before ``older_than_us`` were deleted: the minutes before it go, and
    the minute it falls in is counted again from what is left of it."""
    from .depth import load_stored

    plan = fields.plan(dataset)
    if not plan.kept:
        return
    minute = older_than_us // MINUTE_US
    db.execute("DELETE FROM rollup_numbers WHERE dataset = ? AND minute <= ?",
               (dataset, minute))
    cur = db.execute("SELECT body FROM events WHERE dataset = ? AND time >= ? AND time < ?",
                     (dataset, minute * MINUTE_US, (minute + 1) * MINUTE_US))
    only = plan._replace(closed=True)  # every field of these events was decided at ingest
    while rows := cur.fetchmany(10_000):
        events = [e for (body,) in rows if isinstance(e := load_stored(body), dict)]
        levels = [level_key(e.get("level")) for e in events]
        counted = tally(events, [minute] * len(events), levels, only)
        _upsert(db, dataset, counted.counts, set(plan.kept))


def _upsert(db: sqlite3.Connection, dataset: str, counts: NumberTally, keep: set[str]
            ) -> None:
    """The counts of the kept fields added (in tally's order: by field, then as the events
    came, mostly in time: each page of the table changed about once)."""
    # The value three times: numbered placeholders (?4) with a sequence of parameters are
    # deprecated by Python 3.12's sqlite3 (an error from 3.14).
    rows = [(dataset, f, m // 60, v, v, v, m, lv, n) for f, v, m, lv, n in counts if f in keep]
    if rows:
        db.executemany(_UPSERT, rows)


# ---------------------------------------------------------------------------- answering

def is_kept(db: sqlite3.Connection, dataset: str, field: str) -> bool:
    """Whether every value of the field in the dataset is counted."""
    return db.execute("SELECT 1 FROM rollup_number_fields WHERE dataset = ? AND field = ? "
                      "AND state = 'kept'", (dataset, field)).fetchone() is not None


def condition(column: str, bounds: Iterable[tuple[str, int | float]]) -> str:
    """The comparisons as SQL on ``column``, each literal spelled as the compiled query
    spells it (repr: SQLite reads the same number)."""
    return " AND ".join(f"{column} {op} {value!r}" for op, value in bounds)


def minutes(db: sqlite3.Connection, dataset: str, field: str,
            bounds: list[tuple[str, int | float]], lo: int, hi: int
            ) -> Iterable[tuple[int, str, int]]:
    """(minute, level key, events) of the field's values that pass every comparison, over
    minutes [lo, hi): the matching values' entries only, grouped."""
    first, last = lo // 60, (hi - 1) // 60
    # Each hour's matching values sought (hour IN (...): the value's range is then the
    # index's); a longer range reads the field's every entry of its hours instead.
    hours = (f"hour IN ({', '.join(str(h) for h in range(first, last + 1))})"
             if last - first < MAX_HOURS else f"hour >= {first} AND hour <= {last}")
    return db.execute(
        f"SELECT minute, level, sum(n) FROM rollup_numbers WHERE dataset = ? AND field = ? "
        f"AND {hours} AND {condition('value', bounds)} AND minute >= ? AND minute < ? "
        f"GROUP BY 1, 2", (dataset, field, lo, hi))
