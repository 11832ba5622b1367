"""Per-minute event counts by level, kept at ingest: the page's day-wide views without a scan.

The page opens on ``count() by bin(_time, 15m), level`` over a day, and its level chart is
``count() by level``; over a million events each was a scan of a million rows (seconds, and
time-outs under load). The store keeps, in the same transaction as each insert, how many
events of each dataset fell in each minute with each ``level``; a query of exactly that shape
(only ``where``s on ``_time``, then one ``summarize`` of ``count()`` by a time bin of whole
minutes and/or ``level``) is answered from those counts, with the partial minutes at the
range's ends counted from the events themselves. Anything else runs as before.

The search box's ``level:x`` and ``-level:x`` (``where level =~ "x"``, ``where not(level =~
"x")``) are answered from the counts too: they choose among the counted levels.

A level is kept as a key that says its JSON type (``s`` text, ``i`` integer, ``f`` real,
``n`` none); an object or array level (``x``) is not answered from here, as the scan's answer
would print it as SQLite renders JSON.
"""

from __future__ import annotations

import contextlib
import json
import math
import sqlite3
from collections import Counter
from collections.abc import Iterable
from typing import Any

from . import numbercounts, valuecounts
from .apl import Bin, Call, Field, Lit, format_time
from .aplsql_expr import path, quote
from .aplsql_run import MATCHED, MAX_ROWS

__all__ = ["MINUTE_US", "Tally", "add_locked", "answer_rows", "create_locked", "delete_locked",
           "level_key", "tally", "trim_locked"]

MINUTE_US = 60_000_000
_COMPLEX = "x"
_NONE = "n"
_INT64 = 2 ** 63

Tally = Counter[tuple[int, str]]  # (minute, level key) -> events

_SCHEMA = """
    CREATE TABLE rollup_minutes (
        dataset TEXT NOT NULL, minute INTEGER NOT NULL, level TEXT NOT NULL,
        n INTEGER NOT NULL, PRIMARY KEY (dataset, minute, level)) WITHOUT ROWID
"""
_UPSERT = ("INSERT INTO rollup_minutes (dataset, minute, level, n) VALUES (?, ?, ?, ?) "
           "ON CONFLICT (dataset, minute, level) DO UPDATE SET n = n + excluded.n")
# The level as SQLite's json_type/json_extract see it, for counts made from stored events.
_LEVEL_SQL = "json_type(body, '$.\"level\"'), json_extract(body, '$.\"level\"')"


def level_key(value: Any) -> str:
    """The stored key of an event's level (as Python decoded it)."""
    if value is None:
        return _NONE
    if isinstance(value, str):
        return "s" + value
    if isinstance(value, bool):
        return "i1" if value else "i0"
    if isinstance(value, int):
        return "i" + str(value) if -_INT64 <= value < _INT64 else _COMPLEX
    if isinstance(value, float):
        return "f" + repr(value) if math.isfinite(value) else _COMPLEX
    return _COMPLEX


def _sql_key(kind: str | None, value: Any) -> str:
    """The same key from SQLite's json_type and json_extract of a stored event."""
    if kind is None or kind == "null":
        return _NONE
    if kind == "text":
        return "s" + str(value)
    if kind == "true":
        return "i1"
    if kind == "false":
        return "i0"
    if kind == "integer":
        return "i" + str(value)
    if kind == "real":
        return "f" + repr(float(value))
    return _COMPLEX


def _value(key: str) -> Any:
    """A key back as the value the scan's answer gives (json_extract's)."""
    kind, rest = key[0], key[1:]
    if kind == "s":
        return rest
    if kind == "i":
        return int(rest)
    if kind == "f":
        return float(rest)
    return None


def tally(events: list[dict[str, Any]], times: Iterable[int]) -> Tally:
    """A batch's counts per minute and level (before the store's lock is taken): counted by
    the level's own value first (in C), then keyed per distinct value."""
    minute = MINUTE_US
    minutes = [t // minute for t in times]
    try:
        raw = Counter(zip(minutes, [e.get("level") for e in events], strict=True))
    except TypeError:  # an object or array level: not hashable
        return Counter((m, level_key(e.get("level"))) for e, m in zip(events, minutes,
                                                                       strict=True))
    out: Tally = Counter()
    for (m, value), n in raw.items():
        out[(m, level_key(value))] += n
    return out


def create_locked(db: sqlite3.Connection) -> None:
    """The table, filled from the stored events when it is new (a file of an earlier
    version): in one transaction, so the counts are never part-made."""
    if db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' "
                  "AND name = 'rollup_minutes'").fetchone():
        return
    db.execute("BEGIN")
    try:
        db.execute(_SCHEMA)
        counts: dict[tuple[str, int, str], int] = {}
        for dataset, minute, kind, value, n in db.execute(
                f"SELECT dataset, time / {MINUTE_US} - (time < 0 AND time % {MINUTE_US} != 0),"
                f" {_LEVEL_SQL}, count(*) FROM events GROUP BY 1, 2, 3, 4"):
            key = (dataset, minute, _sql_key(kind, value))
            counts[key] = counts.get(key, 0) + n
        db.executemany(_UPSERT, [(d, m, k, n) for (d, m, k), n in counts.items()])
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def add_locked(db: sqlite3.Connection, dataset: str, counts: Tally) -> None:
    """A batch's counts, inside the insert's transaction."""
    db.executemany(_UPSERT, [(dataset, m, k, n) for (m, k), n in counts.items()])


def delete_locked(db: sqlite3.Connection, dataset: str | None) -> None:
    """A dataset's counts (None: every dataset's) gone with its events."""
    if dataset is None:
        db.execute("DELETE FROM rollup_minutes")
    else:
        db.execute("DELETE FROM rollup_minutes WHERE dataset = ?", (dataset,))


def trim_locked(db: sqlite3.Connection, dataset: str, older_than_us: int) -> None:
    """After the events before ``older_than_us`` were deleted: the minutes before it go, and
    the minute it falls in is counted again from what is left of it."""
    minute = older_than_us // MINUTE_US
    db.execute("DELETE FROM rollup_minutes WHERE dataset = ? AND minute <= ?", (dataset, minute))
    counts: Tally = Counter()
    for kind, value, n in db.execute(
            f"SELECT {_LEVEL_SQL}, count(*) FROM events WHERE dataset = ? AND time >= ? "
            f"AND time < ? GROUP BY 1, 2", (dataset, minute * MINUTE_US,
                                            (minute + 1) * MINUTE_US)):
        counts[(minute, _sql_key(kind, value))] += n
    add_locked(db, dataset, counts)


# ---------------------------------------------------------------------------- answering

def _time_only(e: Any) -> bool:
    """True for a ``where`` that is only bounds on ``_time`` joined by ``and``."""
    if not isinstance(e, Bin):
        return False
    if e.op == "and":
        return _time_only(e.left) and _time_only(e.right)
    if e.op not in ("<", "<=", ">", ">=", "=="):
        return False
    field, other = (e.left, e.right) if isinstance(e.left, Field) else (e.right, e.left)
    return isinstance(field, Field) and field.name == "_time" and _constant_time(other)


def _constant_time(e: Any) -> bool:
    """A literal, or ago() / now() / datetime() of literals: the same bound for every event."""
    if isinstance(e, Lit):
        return True
    return isinstance(e, Call) and e.name in ("ago", "now", "datetime", "todatetime") and all(
        isinstance(a, Lit) for a in e.args)


def _level_filter(e: Any) -> tuple[bool, str] | None:
    """``level =~ "x"`` (the search box's ``level:x``) as (False, "x"), ``not(level =~ "x")``
    (``-level:x``) as (True, "x"); None for anything else."""
    negated = False
    if isinstance(e, Call) and e.name == "not" and len(e.args) == 1:
        negated, e = True, e.args[0]
    if (isinstance(e, Bin) and e.op == "=~" and isinstance(e.left, Field)
            and e.left.name == "level" and isinstance(e.right, Lit)
            and isinstance(e.right.value, str) and e.right.kind == "value"):
        return negated, e.right.value
    return None


def _passes(key: str, filters: list[tuple[bool, str]]) -> bool:
    """Whether events of this level key pass the filters, as the scan's SQL decides:
    ``coalesce(lower(level) = lower('x'), 0)``, negated for ``not(...)``, with the service's
    own lower() (sqlfunctions: every letter folded, a number as its text)."""
    for negated, want in filters:
        if key == _NONE:
            equal = False
        elif key[0] == "s":
            equal = key[1:].lower() == want.lower()
        elif key[0] == "i":
            equal = key[1:] == want.lower()
        else:
            equal = str(float(key[1:])) == want.lower()
        if equal == negated:
            return False
    return True


Term = tuple[str, list[tuple[str, Any]]]  # a field and its comparisons (op, literal), or-ed


def _term(e: Any) -> Term | None:
    """The search box's ``f:v`` on one field (``f =~ "v"``, ``(f == 500 or f == "500")``,
    ``f == "v"``) as (field, comparisons), for a field the value counts may hold; None for
    anything else."""
    if isinstance(e, Bin) and e.op == "or":
        left, right = _term(e.left), _term(e.right)
        if left is None or right is None or left[0] != right[0]:
            return None
        return left[0], left[1] + right[1]
    if not (isinstance(e, Bin) and e.op in ("==", "=~") and isinstance(e.left, Field)
            and isinstance(e.right, Lit) and e.right.kind == "value"):
        return None
    name, value = e.left.name, e.right.value
    if not valuecounts.PLAIN.match(name) or name in ("_time", "_sysTime", "level", "message"):
        return None
    if e.op == "=~" and isinstance(value, str):
        return name, [("=~", value)]
    if e.op == "==" and (isinstance(value, str) or (
            isinstance(value, (int, float)) and not isinstance(value, bool)
            and abs(value) < 1e15)):
        return name, [("==", value)]
    return None


def _matches(key: str, term: Term) -> bool | None:
    """Whether a field's value (its key) passes the term, as the scan's SQL decides (None:
    not known here: a real number compared as text, whose SQLite spelling may differ)."""
    kind, rest = key[0], key[1:]
    for op, want in term[1]:
        if op == "=~":
            if kind == "f":
                return None
            if (rest.lower() if kind == "s" else rest) == want.lower():
                return True
        elif isinstance(want, str):
            if kind == "s" and rest == want:
                return True
        elif kind in ("i", "f") and (int(rest) if kind == "i" else float(rest)) == want:
            return True
    return False


Bounds = tuple[str, list[tuple[str, int | float]]]  # a field and its comparisons, and-ed


def _bounds(e: Any) -> Bounds | None:
    """The search box's ``f>1000`` (``f >= 250 and f < 1000``: every comparison of one field
    with a number, and-ed) as (field, [(op, number)]), for a field the number counts may
    hold; None for anything else."""
    if isinstance(e, Bin) and e.op == "and":
        left, right = _bounds(e.left), _bounds(e.right)
        if left is None or right is None or left[0] != right[0]:
            return None
        return left[0], left[1] + right[1]
    if not (isinstance(e, Bin) and e.op in ("<", "<=", ">", ">=") and isinstance(e.left, Field)):
        return None
    name, value = e.left.name, _number(e.right)
    if (not valuecounts.PLAIN.match(name) or name in ("_time", "_sysTime", "level", "message")
            or isinstance(value, bool) or not isinstance(value, (int, float))
            or not abs(value) < 1e15):
        return None
    return name, [(e.op, value)]


def _number(e: Any) -> Any:
    """A literal number as the compiled query folds it (``-5`` is ``0 - 5``); None for
    anything else."""
    if isinstance(e, Lit) and e.kind == "value":
        return e.value
    if isinstance(e, Bin) and e.op in ("+", "-"):
        left, right = _number(e.left), _number(e.right)
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (left, right)):
            return left + right if e.op == "+" else left - right
    return None


Shape = tuple[list[str], list[tuple[bool, str]], Term | None, Bounds | None]


def _shape(parsed: Any, compiled: Any) -> Shape | None:
    """The groups (``"bin"``, ``"level"``) of a query the counts can answer, its filters
    on the level, and its term on one other field or its comparisons of one numeric field
    (or None), or None."""
    ops = parsed.ops
    if not ops or ops[-1][0] != "summarize" or not compiled.aggregated:
        return None
    filters: list[tuple[bool, str]] = []
    term: Term | None = None
    bounds: Bounds | None = None
    for op in ops[:-1]:
        if op[0] != "where":
            return None
        level = _level_filter(op[1])
        if level is not None:
            filters.append(level)
        elif _time_only(op[1]):
            continue
        elif (more := _bounds(op[1])) is not None:
            if term is not None or (bounds is not None and bounds[0] != more[0]):
                return None
            bounds = more if bounds is None else (more[0], bounds[1] + more[1])
        elif bounds is not None or term is not None or (term := _term(op[1])) is None:
            return None
    _, aggs, groups = ops[-1]
    if not aggs or any(not (isinstance(c, Call) and c.name == "count" and not c.args)
                       for _, c in aggs):
        return None
    shape: list[str] = []
    for name, expr in groups:
        if name == "level" and isinstance(expr, Field) and expr.name == "level":
            shape.append("level")
        elif (name == "_time" and isinstance(expr, Call) and expr.name in ("bin", "bin_auto")
              and expr.args and isinstance(expr.args[0], Field)
              and expr.args[0].name == "_time" and compiled.bin_us
              and compiled.bin_us % MINUTE_US == 0):
            shape.append("bin")
        else:
            return None
    if len(set(shape)) != len(shape):
        return None
    return shape, filters, term, bounds


def _end(db: sqlite3.Connection) -> None:
    """The read transaction ends whatever happened (a pooled connection left in one would
    read an old snapshot ever after)."""
    try:
        db.execute("COMMIT")
    except sqlite3.Error:
        with contextlib.suppress(sqlite3.Error):
            db.execute("ROLLBACK")


def _order(value: Any) -> tuple[int, Any]:
    """SQLite's ascending order: NULL, then numbers, then text."""
    if value is None:
        return (0, 0)
    return (2, value) if isinstance(value, str) else (1, value)


def answer_rows(db: sqlite3.Connection, parsed: Any, compiled: Any, lo: int | None,
                hi: int) -> list[Any] | None:
    """The raw rows (as ``aplsql_run.fetch_rows`` gives them) of a query of the page's
    histogram's shape over ``[lo, hi)``, from the per-minute counts; None when the query is
    of another shape (or a level is an object): then it runs as a scan."""
    found = _shape(parsed, compiled)
    if found is None or (lo is not None and lo < 0):
        return None
    shape, filters, term, bounds = found
    dataset = compiled.dataset
    span = compiled.bin_us or MINUTE_US
    db.execute("BEGIN")  # one snapshot for the counts and the edges' events
    try:
        keys: list[str] = []
        if term is not None:  # the field's values that pass the term, from its counts
            if valuecounts.is_wide(db, dataset, term[0]):
                return None
            for held in valuecounts.values(db, dataset, term[0]):
                passes = _matches(held, term)
                if passes is None:
                    return None
                if passes:
                    keys.append(held)
        # The comparisons of a numeric field, on the stored events (the partial minutes)
        # as the scan writes them.
        compare = ""
        if bounds is not None:
            if not numbercounts.is_kept(db, dataset, bounds[0]):
                return None
            compare = " AND " + numbercounts.condition(
                f"json_extract(body, {quote(path(bounds[0]))})", bounds[1])
        if lo is None:
            row = db.execute("SELECT min(minute) FROM rollup_minutes WHERE dataset = ?",
                             (dataset,)).fetchone()
            if row[0] is None:
                first = hi // MINUTE_US  # no events: an empty answer
            elif row[0] < 0:
                return None  # before 1970, SQLite's bins round towards zero
            else:
                first = row[0]
            lo = first * MINUTE_US
        whole_lo = -(-lo // MINUTE_US)  # the first whole minute of the range
        whole_hi = hi // MINUTE_US  # the minute after the last whole one
        counts: Counter[tuple[int, str]] = Counter()  # (bin start, level key) -> events
        if whole_lo < whole_hi:
            rows: Iterable[Any]
            if term is not None:
                rows = valuecounts.minutes(db, dataset, term[0], keys, whole_lo, whole_hi)
            elif bounds is not None:
                rows = numbercounts.minutes(db, dataset, bounds[0], bounds[1], whole_lo,
                                            whole_hi)
            else:
                rows = db.execute("SELECT minute, level, n FROM rollup_minutes WHERE "
                                  "dataset = ? AND minute >= ? AND minute < ?",
                                  (dataset, whole_lo, whole_hi))
            for minute, key, n in rows:
                counts[(minute * MINUTE_US // span * span, key)] += n
            edges = [(lo, whole_lo * MINUTE_US), (whole_hi * MINUTE_US, hi)]
        else:
            edges = [(lo, hi)]
        for a, b in edges:
            if a >= b:
                continue
            for t, kind, value, stored in db.execute(
                    f"SELECT time, {_LEVEL_SQL}, body FROM events WHERE dataset = ? "
                    f"AND time >= ? AND time < ?{compare}", (dataset, a, b)):
                if term is not None:
                    own = valuecounts.event_key(stored, term[0])
                    if own is None or own == valuecounts.WIDE or not _matches(own, term):
                        continue
                counts[(t // span * span, _sql_key(kind, value))] += 1
    finally:
        _end(db)
    if any(key == _COMPLEX for _, key in counts):
        return None
    if filters:
        kept = {key: _passes(key, filters) for key in {k for _, k in counts}}
        counts = Counter({k: n for k, n in counts.items() if kept[k[1]]})
    groups: Counter[tuple[int | None, str | None]] = Counter()
    for (start, key), n in counts.items():
        groups[(start if "bin" in shape else None,
                key if "level" in shape else None)] += n
    if not shape and not groups:
        groups[(None, None)] = 0  # a count with no groups is one row, of 0
    names = [name for name, _ in parsed.ops[-1][1]]

    def sort_key(item: tuple[tuple[int | None, str | None], int]) -> list[Any]:
        (first, level), _ = item
        return [(0, first) if g == "bin" else _order(_value(level or _NONE)) for g in shape]

    out: list[Any] = []
    for (bin_start, key), n in sorted(groups.items(), key=sort_key)[:MAX_ROWS]:
        body: dict[str, Any] = {}
        for g in shape:
            if g == "bin":
                body["_time"] = format_time(bin_start or 0)
            else:
                body["level"] = _value(key or _NONE)
        for name in names:
            body[name] = n
        body[MATCHED] = n
        out.append((None, bin_start, None, json.dumps(body)))
    return out

