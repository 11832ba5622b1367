"""The local service's storage: events, views and datasets in SQLite (in memory, or in a file
that survives restarts), and the queries run over them (the APL subset: apl.py, aplsql.py).

The HTTP side is service.py; this module knows nothing of requests.
"""

from __future__ import annotations

import functools
import json
import math
import pathlib
import random
import re
import sqlite3
import threading
import time
from collections.abc import Iterable
from typing import Any

from . import apl as apl
from . import aplsql as aplsql
from .apl import format_time, format_trimmed, parse_time
from .ingest import HttpError, json_kind

__all__ = ["QUERY_TIMEOUT", "VIEW_FIELDS", "Store", "reject_constant", "validate_view"]

# The six fields of a view and the JSON type each must have.
VIEW_FIELDS: dict[str, type] = {
    "aplQuery": str,
    "datasets": list,
    "description": str,
    "name": str,
    "sharedByOrg": str,
    "sharedByOrgName": str,
}

_VIEW_DEFAULTS: dict[str, Any] = {name: [] if kind is list else "" for name, kind in
                                  VIEW_FIELDS.items()}

# A query that runs longer than this is stopped (and answered 400).
QUERY_TIMEOUT = 10.0


# The fields a view must have, as the real service requires them in POST and PUT.
REQUIRED_VIEW_FIELDS = ("name", "aplQuery")


def validate_view(data: Any) -> dict[str, Any]:
    """The six view fields of a POST or PUT body, type-checked; ``HttpError(400)`` naming the
    problem. ``name`` and ``aplQuery`` are required; the others default to empty."""
    if not isinstance(data, dict):
        raise HttpError(400, f"the body must be a JSON object (a view), not {json_kind(data)}")
    missing = [name for name in REQUIRED_VIEW_FIELDS if data.get(name) is None]
    if missing:
        raise HttpError(400, f"missing view field(s): {', '.join(missing)}; "
                             f"{' and '.join(REQUIRED_VIEW_FIELDS)} are required")
    view: dict[str, Any] = {}
    for name, kind in VIEW_FIELDS.items():
        value = data.get(name)
        if value is None and name not in REQUIRED_VIEW_FIELDS:
            value = _VIEW_DEFAULTS[name]
        if not isinstance(value, kind):
            expected = "an array of strings" if kind is list else "a string"
            raise HttpError(400, f"field {name} must be {expected}, not {json_kind(value)}")
        if isinstance(value, list) and not all(isinstance(item, str) for item in value):
            raise HttpError(400, f"field {name} must be an array of strings")
        view[name] = list(value) if isinstance(value, list) else value
    return view


def reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


_TERM_EDGE = "(?<![0-9A-Za-z_])"
_TERM_END = "(?![0-9A-Za-z_])"


def _apl_has(text: Any, term: Any, cs: int) -> int | None:
    """APL's ``has``: ``term`` as a whole term of ``text`` (not inside a longer word)."""
    if text is None or term is None:
        return None
    text, term = str(text), str(term)
    if not term:
        return 1
    flags = 0 if cs else re.IGNORECASE
    return 1 if re.search(_TERM_EDGE + re.escape(term) + _TERM_END, text, flags) else 0


def _apl_todatetime(value: Any) -> int | None:
    """APL's ``todatetime`` of a stored text: epoch microseconds, or null."""
    return parse_time(value) if isinstance(value, str) else None


def _fold(value: Any, upper: bool) -> Any:
    # SQLite's lower()/upper() fold ASCII only; APL folds every letter ("É" is "é").
    if isinstance(value, str):
        return value.upper() if upper else value.lower()
    if isinstance(value, (int, float)):
        return str(value)  # as SQLite's lower(5) is '5'
    return value


def _sort_key(value: Any) -> tuple[int, Any]:
    # SQLite's order across types: numbers before text before blobs.
    if isinstance(value, (int, float)):
        return (0, value)
    return (1, value) if isinstance(value, str) else (2, bytes(value))


class _ArgBest:
    """arg_max / arg_min: the row (JSON text) where the value is greatest / least; the first
    such row on a tie."""

    sign = 1

    def __init__(self) -> None:
        self.key: tuple[int, Any] | None = None
        self.row: Any = None

    def step(self, value: Any, row: Any) -> None:
        if value is None:
            return
        key = _sort_key(value)
        if self.key is None or (key > self.key if self.sign > 0 else key < self.key):
            self.key, self.row = key, row

    def finalize(self) -> Any:
        return self.row


class _ArgMin(_ArgBest):
    sign = -1


# A percentile is estimated from a uniform sample of at most this many values per group (the
# service's is an estimate too): memory stays bounded however many events a group has.
PERCENTILE_SAMPLE = 100_000


class _Percentile:
    """percentile(x, p): the nearest-rank percentile of the numbers (text and nulls skipped)."""

    def __init__(self) -> None:
        self.values: list[float] = []
        self.seen = 0
        self.p = 50.0
        self.rng = random.Random(0)  # the same answer for the same data

    def step(self, value: Any, p: Any) -> None:
        if not isinstance(value, (int, float)):
            return
        self.p = float(p)
        self.seen += 1
        if len(self.values) < PERCENTILE_SAMPLE:
            self.values.append(value)
        else:
            j = self.rng.randrange(self.seen)
            if j < PERCENTILE_SAMPLE:
                self.values[j] = value

    def finalize(self) -> Any:
        if not self.values:
            return None
        self.values.sort()
        rank = max(1, math.ceil(self.p / 100 * len(self.values)))
        return self.values[min(rank, len(self.values)) - 1]


@functools.lru_cache(maxsize=64)
def _parse_spec(spec: str) -> list[list[Any]]:
    return json.loads(spec)  # type: ignore[no-any-return]


def _parse_value(text: str, kind: str) -> Any:
    if kind == "string":
        return text
    word = text.strip()
    if kind == "long":
        try:
            return int(word)
        except ValueError:
            return None
    if kind == "real":
        try:
            value = float(word)
        except ValueError:
            return None
        return value if math.isfinite(value) else None
    if kind == "bool":
        return {"true": True, "false": False}.get(word.lower())
    us = parse_time(word)
    return None if us is None else format_trimmed(us)


@functools.lru_cache(maxsize=8)  # the columns of one row ask in turn: one scan per row
def _parse_all(text: str, spec: str) -> tuple[Any, ...] | None:
    """APL ``parse`` (simple mode) of one text: the columns' values, or None for no match.

    One pass, left to right: each string constant is found from where the last one ended,
    and a column is the text between them (the rest of the text, at the end), so the work is
    linear in the text whatever the pattern."""
    values: list[Any] = []
    pos = 0
    pending: list[Any] | None = None  # a column or * waiting for the text that ends it
    for part in _parse_spec(spec):
        if part[0] != "text":
            pending = part
            continue
        literal = part[1]
        if pending is None:
            if not text.startswith(literal, pos):
                return None
            pos += len(literal)
            continue
        j = text.find(literal, pos)
        if j < 0:
            return None
        if pending[0] == "column":
            values.append(_parse_value(text[pos:j], pending[2]))
        pos, pending = j + len(literal), None
    if pending is not None and pending[0] == "column":
        values.append(_parse_value(text[pos:], pending[2]))
    return tuple(values)


def _apl_parse(value: Any, spec: str, index: int) -> Any:
    if value is None:
        return None
    values = _parse_all(value if isinstance(value, str) else str(value), spec)
    return None if values is None else values[index]


# The query running on this thread: when it must stop (monotonic), for matches regex, and
# whether a regex ran out of that time.
_QUERY = threading.local()


@functools.lru_cache(maxsize=32)
def _regex(pattern: str) -> Any:
    import regex  # type: ignore[import-untyped]

    return regex.compile(pattern)


def _apl_matches(value: Any, pattern: str) -> int | None:
    """APL's ``matches regex`` (aplsql.check_regex vetted the pattern): bounded by the
    query's deadline, as a backtracking pattern could otherwise run for ever."""
    if value is None:
        return None
    deadline = getattr(_QUERY, "deadline", None)
    timeout = QUERY_TIMEOUT if deadline is None else max(0.001, deadline - time.monotonic())
    text = value if isinstance(value, str) else str(value)
    try:
        return 1 if _regex(pattern).search(text, timeout=timeout) is not None else 0
    except TimeoutError:
        _QUERY.timed_out = True
        raise


def _add_functions(db: sqlite3.Connection) -> None:
    # The query's functions SQLite lacks (aplsql uses them by these names).
    db.create_function("apl_has", 3, _apl_has, deterministic=True)
    db.create_function("apl_todatetime", 1, _apl_todatetime, deterministic=True)
    db.create_function("apl_parse", 3, _apl_parse, deterministic=True)
    db.create_function("apl_matches", 2, _apl_matches, deterministic=True)
    db.create_function("apl_lower", 1, lambda v: _fold(v, False), deterministic=True)
    db.create_function("apl_upper", 1, lambda v: _fold(v, True), deterministic=True)
    db.create_aggregate("apl_arg_max", 2, _ArgBest)  # type: ignore[arg-type]
    db.create_aggregate("apl_arg_min", 2, _ArgMin)  # type: ignore[arg-type]
    db.create_aggregate("apl_percentile", 2, _Percentile)  # type: ignore[arg-type]


class Store:
    """Events and views in SQLite: one connection shared by the handler threads, under a lock.

    One row per event: its dataset, its ``_time`` as an integer (epoch microseconds), its
    ``_sysTime`` (when it arrived) and the event's JSON as ingested; the row's ``seq`` is the
    ``_rowId``. The index on (dataset, time, seq) keeps queries over a time range or the newest
    events fast however many are stored; a batch is one ``executemany`` in one transaction.
    """

    def __init__(self, path: str | None = None) -> None:
        self.path = path
        self._db = sqlite3.connect(path or ":memory:", check_same_thread=False,
                                   isolation_level=None)
        _add_functions(self._db)
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        with self._lock:
            if path:
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript("""
                CREATE TABLE IF NOT EXISTS events (
                    seq INTEGER PRIMARY KEY AUTOINCREMENT,
                    dataset TEXT NOT NULL, time INTEGER NOT NULL, sys TEXT NOT NULL,
                    body TEXT NOT NULL);
                CREATE INDEX IF NOT EXISTS events_time ON events (dataset, time, seq);
                CREATE TABLE IF NOT EXISTS views (
                    seq INTEGER PRIMARY KEY AUTOINCREMENT,
                    id TEXT NOT NULL UNIQUE, body TEXT NOT NULL);
                CREATE TABLE IF NOT EXISTS datasets (
                    seq INTEGER PRIMARY KEY AUTOINCREMENT,
                    name TEXT NOT NULL UNIQUE, description TEXT NOT NULL,
                    created TEXT NOT NULL);
            """)
            self._migrate_batches_locked()
            # Counts per dataset live in memory: wait_for() asks often, and counting rows of a
            # big dataset is a scan. Ordered by first arrival, as datasets() promises.
            self._counts: dict[str, int] = {
                name: int(n) for name, n in self._db.execute(
                    "SELECT dataset, COUNT(*) FROM events GROUP BY dataset ORDER BY MIN(seq)")}
        # With a file (in WAL mode), queries read through their own connection: a long query
        # then does not hold up ingest. In memory there is only the one connection.
        self._reader: sqlite3.Connection | None = None
        self._reader_lock = threading.Lock()
        if path:
            uri = pathlib.Path(path).resolve().as_uri() + "?mode=ro"
            self._reader = sqlite3.connect(uri, uri=True, check_same_thread=False,
                                           isolation_level=None)
            _add_functions(self._reader)

    def _migrate_batches_locked(self) -> None:
        # A --db file written by an earlier version kept one row per ingest body.
        if not self._db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' "
                                "AND name = 'batches'").fetchone():
            return
        self._db.execute("BEGIN")
        for dataset, body in self._db.execute(
                "SELECT dataset, body FROM batches ORDER BY seq").fetchall():
            self._insert_locked(dataset, json.loads(body))
        self._db.execute("DROP TABLE batches")
        self._db.execute("COMMIT")

    def close(self) -> None:
        with self._reader_lock:
            if self._reader is not None:
                self._reader.close()
        with self._lock:
            self._db.close()

    # ------------------------------------------------------------------ events

    def add_events(self, dataset: str, events: list[dict[str, Any]]) -> None:
        """Store validated events; each gets its ``_sysTime`` and ``_rowId`` here."""
        if not events:
            return
        with self._lock:
            self._db.execute("BEGIN")
            try:
                self._insert_locked(dataset, events)
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
            self._counts[dataset] = self._counts.get(dataset, 0) + len(events)
            self._changed.notify_all()

    def _insert_locked(self, dataset: str, events: list[dict[str, Any]]) -> None:
        now_us = time.time_ns() // 1000
        sys_time = format_time(now_us)
        # This exact encoding (ASCII escapes, no spaces) is what aplsql's text pre-filter expects.
        dumps = json.dumps
        rows = []
        for event in events:
            t = parse_time(event.get("_time"))
            rows.append((dataset, now_us if t is None else t, sys_time,
                         dumps(event, separators=(",", ":"))))
        self._db.executemany("INSERT INTO events (dataset, time, sys, body) VALUES (?, ?, ?, ?)",
                             rows)

    def events(self, dataset: str) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._db.execute(
                "SELECT body FROM events WHERE dataset = ? ORDER BY seq", (dataset,)
            ).fetchall()
        return [json.loads(body) for (body,) in rows]

    def count(self, dataset: str) -> int:
        with self._lock:
            return self._counts.get(dataset, 0)

    def datasets(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    # ------------------------------------------------------------------ the dataset registry

    def _record_locked(self, name: str, description: str = "") -> dict[str, Any] | None:
        row = self._db.execute("SELECT name, description, created FROM datasets WHERE name = ?",
                               (name,)).fetchone()
        if row is None:
            return None
        return {"id": row[0], "name": row[0], "description": row[1], "who": "",
                "created": row[2]}

    def dataset_list(self) -> list[dict[str, Any]]:
        """Every dataset: the ones created, and the ones that got events without being
        created (the service creates none of those; this stand-in lists them, created when
        their first event arrived), oldest first."""
        with self._lock:
            self._register_implicit_locked()
            rows = self._db.execute(
                "SELECT name, description, created FROM datasets ORDER BY seq").fetchall()
        return [{"id": n, "name": n, "description": d, "who": "", "created": c}
                for n, d, c in rows]

    def _register_implicit_locked(self) -> None:
        for name in self._counts:
            self._db.execute("INSERT OR IGNORE INTO datasets (name, description, created) "
                             "VALUES (?, '', ?)", (name, format_time(time.time_ns() // 1000)))

    def dataset_get(self, name: str) -> dict[str, Any] | None:
        with self._lock:
            self._register_implicit_locked()
            return self._record_locked(name)

    def dataset_create(self, name: str, description: str) -> dict[str, Any] | None:
        """The new dataset; None when one of that name exists."""
        with self._lock:
            self._register_implicit_locked()
            if self._record_locked(name) is not None:
                return None
            self._db.execute("INSERT INTO datasets (name, description, created) VALUES "
                             "(?, ?, ?)", (name, description,
                                           format_time(time.time_ns() // 1000)))
            return self._record_locked(name)

    def dataset_update(self, name: str, description: str) -> dict[str, Any] | None:
        with self._lock:
            self._register_implicit_locked()
            if self._record_locked(name) is None:
                return None
            self._db.execute("UPDATE datasets SET description = ? WHERE name = ?",
                             (description, name))
            return self._record_locked(name)

    def dataset_delete(self, name: str) -> bool:
        """Delete the dataset and its events; False when there is none."""
        with self._lock:
            self._register_implicit_locked()
            if self._record_locked(name) is None:
                return False
            self._db.execute("DELETE FROM datasets WHERE name = ?", (name,))
            self._db.execute("DELETE FROM events WHERE dataset = ?", (name,))
            self._counts.pop(name, None)
            return True

    def dataset_trim(self, name: str, older_than_us: int) -> int | None:
        """Delete the events stamped before ``older_than_us``; how many (None: no dataset)."""
        with self._lock:
            self._register_implicit_locked()
            if self._record_locked(name) is None:
                return None
            cur = self._db.execute("DELETE FROM events WHERE dataset = ? AND time < ?",
                                   (name, older_than_us))
            n = cur.rowcount
            self._counts[name] = max(0, self._counts.get(name, 0) - n)
            return n

    def wait_for(self, dataset: str, count: int, timeout: float) -> bool:
        """Wait until ``dataset`` holds at least ``count`` events; False on time-out."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._counts.get(dataset, 0) < count:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(remaining)
            return True

    def clear_events(self) -> None:
        with self._lock:
            self._db.execute("DELETE FROM events")
            self._counts.clear()

    def query(self, text: str, start: Any = None, end: Any = None, fmt: str = "legacy",
              timeout: float = QUERY_TIMEOUT, cursor: Any = None,
              include_cursor: Any = False) -> dict[str, Any]:
        """Run an APL query (the subset in ``apl``) and build the service's answer in ``fmt``.

        ``HttpError(400)`` names what is outside the subset; a query is stopped after
        ``timeout`` seconds, so one query cannot hold the store (and ingest) for long.
        ``cursor`` (a ``_rowId``, as the status's ``minCursor``/``maxCursor`` give) starts the
        rows after that event, and with ``include_cursor`` at it: the next page.
        """
        now_us = time.time_ns() // 1000
        at: tuple[int, int, bool] | None = None
        if cursor not in (None, ""):
            at = self._cursor(text, cursor, include_cursor)
        try:
            start_us = None if start in (None, "") else apl.parse_relative_time(start, now_us)
            # endTime defaults to now, as the service's does: an event stamped in the future
            # is outside a query that names no end.
            end_us = now_us if end in (None, "") else apl.parse_relative_time(end, now_us)
            data_range = None
            if "bin_auto" in text and start_us is None:
                # Without a start, bin_auto's bins span the data's own time range.
                with self._lock:
                    first, last = self._db.execute(
                        "SELECT min(time), max(time) FROM events WHERE dataset = ?",
                        (apl.parse_query(text).dataset,)).fetchone()
                if first is not None:
                    data_range = (first, last + 1)
            compiled = aplsql.compile_query(text, start_us=start_us, end_us=end_us,
                                            now_us=now_us, data_range=data_range, cursor=at)
        except apl.AplError as exc:
            raise HttpError(400, str(exc)) from None
        deadline = time.monotonic() + timeout
        db, lock = ((self._reader, self._reader_lock) if self._reader is not None
                    else (self._db, self._lock))
        with lock:
            db.set_progress_handler(lambda: time.monotonic() > deadline, 20_000)
            _QUERY.deadline, _QUERY.timed_out = deadline, False
            try:
                result = aplsql.run(db, compiled, deadline)
            except (sqlite3.DatabaseError, aplsql.QueryTimeout, ValueError,
                    OverflowError) as exc:
                # A query out of range somewhere SQLite or the answer's times notice (a
                # datatype mismatch, a number past the calendar): the client's to fix, a 400.
                if (isinstance(exc, aplsql.QueryTimeout) or "interrupt" in str(exc)
                        or _QUERY.timed_out):
                    raise HttpError(400, f"the query ran longer than {timeout:g} s; narrow it "
                                         f"with a time range or a where") from None
                raise HttpError(400, f"the query cannot run: {exc}") from None
            finally:
                db.set_progress_handler(None, 0)
                _QUERY.deadline = None
        with self._lock:
            examined = self._counts.get(compiled.dataset, 0)
        start_s = apl.format_time(start_us if start_us is not None else 0)
        end_s = apl.format_time(end_us if end_us is not None else now_us)
        build = aplsql.tabular_answer if fmt == "tabular" else aplsql.legacy_answer
        return build(result, examined, start_s, end_s)

    def _cursor(self, text: str, cursor: Any, include: Any) -> tuple[int, int, bool]:
        """The ``_time`` and row of the event a cursor names; HttpError(400) if none."""
        if not isinstance(include, bool):
            raise HttpError(400, '"includeCursor" must be true or false')
        try:
            dataset = apl.parse_query(text).dataset
        except apl.AplError as exc:
            raise HttpError(400, str(exc)) from None
        try:
            if not isinstance(cursor, str) or len(cursor) > 16:
                raise ValueError
            seq = int(cursor, 16)
        except ValueError:
            raise HttpError(400, f'"cursor" must be a _rowId of the queried dataset, as the '
                                 f"status's minCursor and maxCursor give; got {cursor!r}") from None
        with self._lock:
            row = self._db.execute("SELECT time FROM events WHERE seq = ? AND dataset = ?",
                                   (seq, dataset)).fetchone()
        if row is None:
            raise HttpError(400, f"the cursor {cursor!r} names no event of dataset {dataset!r}")
        return row[0], seq, include

    # ------------------------------------------------------------------ views

    def views(self) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._db.execute("SELECT id, body FROM views ORDER BY seq").fetchall()
        return [{"id": view_id, **json.loads(body)} for view_id, body in rows]

    def get_view(self, view_id: str) -> dict[str, Any] | None:
        """The view with this id; None when there is none."""
        with self._lock:
            row = self._db.execute("SELECT body FROM views WHERE id = ?",
                                   (view_id,)).fetchone()
        return None if row is None else {"id": view_id, **json.loads(row[0])}

    def put_view(self, view_id: str, view: dict[str, Any]) -> dict[str, Any] | None:
        """Replace a stored view; None when there is no view with this id."""
        with self._lock:
            cur = self._db.execute("UPDATE views SET body = ? WHERE id = ?",
                                   (json.dumps(view), view_id))
            if cur.rowcount == 0:
                return None
        return {"id": view_id, **view}

    def create_view(self, view: dict[str, Any]) -> dict[str, Any]:
        """Store a new view under an id of the service's choosing; the view with its id."""
        with self._lock:
            view_id = self._next_id_locked()
            self._db.execute("INSERT INTO views (id, body) VALUES (?, ?)",
                             (view_id, json.dumps(view)))
        return {"id": view_id, **view}

    def delete_view(self, view_id: str) -> bool:
        """Delete a view; False when there is no view with this id."""
        with self._lock:
            return self._db.execute("DELETE FROM views WHERE id = ?", (view_id,)).rowcount > 0

    def seed_views(self, views: Iterable[dict[str, Any]]) -> None:
        """Add views (service JSON, six fields, ``id`` optional) that are not stored yet.

        A view with an id already stored, or without an id but with a stored view's name, is
        left alone: with ``--db FILE`` the stored (maybe updated) view wins over the seed.
        """
        with self._lock:
            for data in views:
                # Seeds may leave fields out (tests rarely care about all six); types still count.
                view = validate_view({**_VIEW_DEFAULTS, **data})
                view_id = data.get("id")
                if view_id is None:
                    names = {json.loads(b)["name"] for (b,) in
                             self._db.execute("SELECT body FROM views")}
                    if view["name"] in names:
                        continue
                    view_id = self._next_id_locked()
                self._db.execute("INSERT OR IGNORE INTO views (id, body) VALUES (?, ?)",
                                 (str(view_id), json.dumps(view)))

    def _next_id_locked(self) -> str:
        # Never an id a deleted view had: a stale id must not name another view later.
        ids = {row[0] for row in self._db.execute("SELECT id FROM views")}
        row = self._db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'views'").fetchone()
        n = (int(row[0]) if row else 0) + 1
        while str(n) in ids:
            n += 1
        return str(n)


