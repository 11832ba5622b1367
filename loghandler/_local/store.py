"""The local service's storage: events, views and datasets in SQLite (in memory, or in a file
that survives restarts). The write path is here; queries read through ``reader.Reader``, views
are ``views.Views``.

The HTTP side is service.py; this module knows nothing of requests.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterable
from typing import Any

from .apl import format_time, parse_time
from .reader import QUERY_TIMEOUT, Reader
from .sqlfunctions import add_functions
from .views import VIEW_FIELDS, Views, reject_constant, validate_view

__all__ = ["QUERY_TIMEOUT", "VIEW_FIELDS", "Store", "reject_constant", "validate_view"]


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
        add_functions(self._db)
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
        self._views = Views(self._db, self._lock)
        self.reader = Reader(path, self._db, self._lock, self.count)

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
        self.reader.close()
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
        """Run an APL query: ``Reader.query``."""
        return self.reader.query(text, start, end, fmt, timeout, cursor, include_cursor)

    # ------------------------------------------------------------------ views

    def views(self) -> list[dict[str, Any]]:
        return self._views.list()

    def get_view(self, view_id: str) -> dict[str, Any] | None:
        return self._views.get(view_id)

    def put_view(self, view_id: str, view: dict[str, Any]) -> dict[str, Any] | None:
        return self._views.put(view_id, view)

    def create_view(self, view: dict[str, Any]) -> dict[str, Any]:
        return self._views.create(view)

    def delete_view(self, view_id: str) -> bool:
        return self._views.delete(view_id)

    def seed_views(self, views: Iterable[dict[str, Any]]) -> None:
        self._views.seed(views)
