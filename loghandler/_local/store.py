"""The local service's storage: events, views and datasets in SQLite (in memory, or in a file
that survives restarts). The write path and the dataset registry (datasets and their fields) are
here; queries read through ``reader.Reader``, views are ``views.Views``, the documents clients
keep (monitors, dashboards, ...) ``documents.Documents``.

The HTTP side is service.py; this module knows nothing of requests.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import tempfile
import threading
import time
from collections.abc import Iterable
from json.encoder import c_make_encoder, encode_basestring_ascii  # type: ignore[attr-defined]
from typing import Any

from . import narrow, numbercounts, rollups, valuecounts, words
from .apl import format_time, parse_time
from .depth import load_stored
from .documents import Documents
from .reader import QUERY_TIMEOUT, Reader
from .sqlfunctions import add_functions
from .views import VIEW_FIELDS, Views, reject_constant, validate_view

__all__ = ["QUERY_TIMEOUT", "VIEW_FIELDS", "Store", "reject_constant", "validate_view"]


# The stored encoding of an event: compact, ASCII escapes (what aplsql's text pre-filter
# expects), by the json module's C encoder made once (json.dumps with separators builds an
# encoder per call: twice the time).
_encoder = json.JSONEncoder(separators=(",", ":"))
if c_make_encoder is not None:
    _iterencode = c_make_encoder(None, _encoder.default, encode_basestring_ascii, None, ":",
                                 ",", False, False, True)
else:  # pragma: no cover - CPython has the C encoder
    _iterencode = _encoder.iterencode


def _times(events: list[dict[str, Any]]) -> list[int]:
    now_us = time.time_ns() // 1000
    return [now_us if t is None else t for t in
            (parse_time(event.get("_time")) for event in events)]


def _rows(dataset: str, events: list[dict[str, Any]], times: list[int] | None
          ) -> list[tuple[str, int, str, str]]:
    now_us = time.time_ns() // 1000
    sys_time = format_time(now_us)
    if times is None:
        times = _times(events)
    join, it = "".join, _iterencode
    return [(dataset, t, sys_time, join(it(event, 0))) for event, t in zip(events, times,
                                                                           strict=True)]


# The one rule for a dataset's name, whichever way it is created (POST /v1/datasets, an
# ingest with --create-datasets, serve --dataset): no NUL, no path, no endless name.
_DATASET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
DATASET_NAME_RULE = "1-128 letters, digits, '-', '_' or '.', starting with a letter or digit"


def valid_dataset_name(name: object) -> bool:
    """True when ``name`` may name a dataset (DATASET_NAME_RULE)."""
    return isinstance(name, str) and _DATASET_NAME.fullmatch(name) is not None


def _create_private(file: str) -> None:
    """Create the database file readable by its owner only (600), when it is new: it holds
    the logs. SQLite gives the -wal and -shm files it creates next to it the same mode (the
    unix VFS copies the database's), and the process's umask stays as it is (changing it
    would race with every other thread creating files). A file that exists keeps its mode."""
    try:
        fd = os.open(file, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    except OSError:
        return  # not creatable here (a folder that does not exist): sqlite3 says why
    os.close(fd)


class Store:
    """Events and views in SQLite: one connection shared by the handler threads, under a lock.

    One row per event: its dataset, its ``_time`` as an integer (epoch microseconds), its
    ``_sysTime`` (when it arrived) and the event's JSON as ingested; the row's ``seq`` is the
    ``_rowId``. The index on (dataset, time, seq) keeps queries over a time range or the newest
    events fast however many are stored; a batch is one ``executemany`` in one transaction.
    """

    def __init__(self, path: str | None = None) -> None:
        self.path = path
        # Without a file of the user's, the events live in a temporary one (removed at close):
        # a file lets queries read through connections of their own (reader.py), which an
        # in-memory database cannot share, so one query never waits for another.
        self._scratch = None if path else tempfile.mkdtemp(prefix="loghandler-local-")
        file = path or os.path.join(self._scratch or "", "events.sqlite")
        _create_private(file)
        self._db = sqlite3.connect(file, check_same_thread=False, isolation_level=None)
        add_functions(self._db)
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            # A scratch file need not survive a crash: no waits for the disk.
            self._db.execute("PRAGMA synchronous=" + ("NORMAL" if path else "OFF"))
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
                CREATE TABLE IF NOT EXISTS fields (
                    seq INTEGER PRIMARY KEY AUTOINCREMENT,
                    dataset TEXT NOT NULL, name TEXT NOT NULL, type TEXT NOT NULL,
                    unit TEXT NOT NULL DEFAULT '', description TEXT NOT NULL DEFAULT '',
                    hidden INTEGER NOT NULL DEFAULT 0, UNIQUE (dataset, name));
            """)
            self._migrate_batches_locked()
            rollups.create_locked(self._db)
            self._known = valuecounts.Known()
            valuecounts.create_locked(self._db, self._known)
            self._numbers = numbercounts.Fields()
            numbercounts.create_locked(self._db, self._numbers)
            self._word_index = words.create_locked(self._db)
            self._narrow = narrow.Narrow()
            narrow.create_locked(self._db, self._narrow)
            # Counts per dataset live in memory: wait_for() asks often, and counting rows of a
            # big dataset is a scan. Ordered by first arrival, as datasets() promises.
            self._counts: dict[str, int] = {
                name: int(n) for name, n in self._db.execute(
                    "SELECT dataset, COUNT(*) FROM events GROUP BY dataset ORDER BY MIN(seq)")}
            # The registry's names, in memory: every ingest asks whether its dataset exists.
            # A file written by an earlier version may hold events of datasets never created:
            # they are registered now.
            self._names: set[str] = {name for (name,) in self._db.execute(
                "SELECT name FROM datasets")}
            for name in list(self._counts):
                self._register_locked(name)
        self._views = Views(self._db, self._lock)
        self.documents = Documents(self._db, self._lock)
        self._map_fields: dict[str, list[str]] = {
            name: self.documents.get("mapfields", name) or [] for name in self._names}
        self.reader = Reader(file, self._db, self._lock, self.count, word_index=self._word_index)

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
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)

    # ------------------------------------------------------------------ events

    def add_events(self, dataset: str, events: list[dict[str, Any]],
                   times: list[int] | None = None) -> None:
        """Store validated events; each gets its ``_sysTime`` and ``_rowId`` here. ``times``:
        each event's ``_time`` in epoch microseconds, when the caller has them already."""
        if not events:
            return
        if times is None:
            times = _times(events)
        rows = _rows(dataset, events, times)  # the JSON is made before the lock is taken
        counts = rollups.tally(events, times)
        minutes = [t // rollups.MINUTE_US for t in times]
        levels = [rollups.level_key(e.get("level")) for e in events]
        values = valuecounts.tally(events, minutes, levels, self._known.skip(dataset))
        numbers = numbercounts.tally(events, minutes, levels, self._numbers.plan(dataset))
        with self._lock:
            self._register_locked(dataset)
            self._db.execute("BEGIN")
            try:
                top = words.top_locked(self._db)
                self._db.executemany(
                    "INSERT INTO events (dataset, time, sys, body) VALUES (?, ?, ?, ?)", rows)
                if self._word_index:
                    words.add_locked(self._db, top)
                narrow.add_locked(self._db, self._narrow, dataset, events, top)
                rollups.add_locked(self._db, dataset, counts)
                valuecounts.add_locked(self._db, self._known, dataset, values)
                numbercounts.add_locked(self._db, self._numbers, dataset, numbers, events,
                                        minutes, levels)
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
            self._counts[dataset] = self._counts.get(dataset, 0) + len(events)
            self._changed.notify_all()

    def _insert_locked(self, dataset: str, events: list[dict[str, Any]]) -> None:
        indexed = words.exists(self._db)
        top = words.top_locked(self._db) if indexed else 0
        self._db.executemany("INSERT INTO events (dataset, time, sys, body) VALUES (?, ?, ?, ?)",
                             _rows(dataset, events, None))
        if indexed:
            words.add_locked(self._db, top)

    def events(self, dataset: str) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._db.execute(
                "SELECT body FROM events WHERE dataset = ? ORDER BY seq", (dataset,)
            ).fetchall()
        return [load_stored(body) for (body,) in rows]

    def count(self, dataset: str) -> int:
        with self._lock:
            return self._counts.get(dataset, 0)

    def datasets(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    # ------------------------------------------------------------------ the dataset registry

    def _record_locked(self, name: str) -> dict[str, Any] | None:
        row = self._db.execute("SELECT name, description, created FROM datasets WHERE name = ?",
                               (name,)).fetchone()
        if row is None:
            return None
        return self._dataset(*row)

    def _dataset(self, name: str, description: str, created: str) -> dict[str, Any]:
        return {"id": name, "name": name, "description": description, "who": "",
                "created": created, "mapFields": self._map_fields.get(name, [])}

    def dataset_list(self) -> list[dict[str, Any]]:
        """Every dataset, oldest first."""
        with self._lock:
            rows = self._db.execute(
                "SELECT name, description, created FROM datasets ORDER BY seq").fetchall()
        return [self._dataset(*row) for row in rows]

    def _register_locked(self, name: str, description: str = "") -> bool:
        """Add ``name`` to the registry; False when it is there already."""
        if name in self._names:
            return False
        self._db.execute("INSERT OR IGNORE INTO datasets (name, description, created) "
                         "VALUES (?, ?, ?)", (name, description,
                                              format_time(time.time_ns() // 1000)))
        self._names.add(name)
        return True

    def dataset_exists(self, name: str) -> bool:
        return name in self._names

    def ensure_dataset(self, name: str) -> None:
        """Create ``name`` unless it exists (an ingest with ``--create-datasets``)."""
        if name not in self._names:
            with self._lock:
                self._register_locked(name)

    def dataset_get(self, name: str) -> dict[str, Any] | None:
        with self._lock:
            return self._record_locked(name)

    def dataset_create(self, name: str, description: str) -> dict[str, Any] | None:
        """The new dataset; None when one of that name exists."""
        with self._lock:
            if not self._register_locked(name, description):
                return None
            return self._record_locked(name)

    def dataset_update(self, name: str, description: str) -> dict[str, Any] | None:
        with self._lock:
            if name not in self._names:
                return None
            self._db.execute("UPDATE datasets SET description = ? WHERE name = ?",
                             (description, name))
            return self._record_locked(name)

    def dataset_delete(self, name: str) -> bool:
        """Delete the dataset, its events and fields; False when there is none."""
        with self._lock:
            if name not in self._names:
                return False
            self._db.execute("DELETE FROM datasets WHERE name = ?", (name,))
            words.delete_locked(self._db, "dataset = ?", (name,), self._word_index)
            narrow.forget_locked(self._db, self._narrow, name)
            rollups.delete_locked(self._db, name)
            valuecounts.delete_locked(self._db, self._known, name)
            numbercounts.delete_locked(self._db, self._numbers, name)
            self._db.execute("DELETE FROM fields WHERE dataset = ?", (name,))
            self._names.discard(name)
            self._counts.pop(name, None)
            self._map_fields.pop(name, None)
        self.documents.delete("mapfields", name)
        return True

    def dataset_trim(self, name: str, older_than_us: int) -> int | None:
        """Delete the events stamped before ``older_than_us``; how many (None: no dataset)."""
        with self._lock:
            if name not in self._names:
                return None
            n = words.delete_locked(self._db, "dataset = ? AND time < ?", (name, older_than_us),
                                    self._word_index)
            rollups.trim_locked(self._db, name, older_than_us)
            valuecounts.trim_locked(self._db, self._known, rollups.level_key, name,
                                    older_than_us)
            numbercounts.trim_locked(self._db, self._numbers, rollups.level_key, name,
                                     older_than_us)
            self._counts[name] = max(0, self._counts.get(name, 0) - n)
            return n

    # ------------------------------------------------------------------ fields

    def record_fields(self, dataset: str, types: dict[str, str]) -> None:
        """New fields of a dataset, or new types of known ones (field -> its type now)."""
        if not types:
            return
        with self._lock:
            self._db.executemany(
                "INSERT INTO fields (dataset, name, type) VALUES (?, ?, ?) "
                "ON CONFLICT (dataset, name) DO UPDATE SET type = excluded.type",
                [(dataset, name, kind) for name, kind in types.items()])

    def field_types(self) -> dict[str, dict[str, str]]:
        """Every dataset's fields and their types, as stored (to seed the field limit)."""
        out: dict[str, dict[str, str]] = {}
        with self._lock:
            for dataset, name, kind in self._db.execute(
                    "SELECT dataset, name, type FROM fields ORDER BY seq"):
                out.setdefault(dataset, {})[name] = kind
        return out

    def fields(self, dataset: str, name: str | None = None) -> list[dict[str, Any]]:
        """A dataset's fields (or the one named): name, type, unit, description, hidden."""
        sql = ("SELECT name, type, unit, description, hidden FROM fields WHERE dataset = ?"
               + (" AND name = ?" if name is not None else "") + " ORDER BY name")
        with self._lock:
            rows = self._db.execute(sql, (dataset,) if name is None else (dataset, name))
            return [{"name": n, "type": t, "unit": u, "description": d, "hidden": bool(h)}
                    for n, t, u, d, h in rows]

    def field_update(self, dataset: str, name: str, unit: str, description: str,
                     hidden: bool) -> dict[str, Any] | None:
        """Set a field's unit, description and hidden flag; None when there is no field."""
        with self._lock:
            cur = self._db.execute("UPDATE fields SET unit = ?, description = ?, hidden = ? "
                                   "WHERE dataset = ? AND name = ?",
                                   (unit, description, int(hidden), dataset, name))
            if not cur.rowcount:
                return None
        return self.fields(dataset, name)[0]

    def map_fields(self, dataset: str) -> list[str]:
        return list(self._map_fields.get(dataset, []))

    def set_map_fields(self, dataset: str, names: list[str]) -> list[str]:
        """A dataset's map fields (fields kept whole, not flattened: recorded, not applied)."""
        unique = list(dict.fromkeys(names))
        self.documents.put("mapfields", dataset, unique)
        with self._lock:
            self._map_fields[dataset] = unique
        return list(unique)

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
            words.delete_locked(self._db, "1", (), self._word_index)
            narrow.forget_locked(self._db, self._narrow, None)
            rollups.delete_locked(self._db, None)
            valuecounts.delete_locked(self._db, self._known, None)
            numbercounts.delete_locked(self._db, self._numbers, None)
            self._counts.clear()

    def query(self, text: str, start: Any = None, end: Any = None, fmt: str = "legacy",
              timeout: float = QUERY_TIMEOUT, cursor: Any = None,
              include_cursor: Any = False, cancelled: Any = None,
              client: Any = None) -> dict[str, Any]:
        """Run an APL query: ``Reader.query``."""
        return self.reader.query(text, start, end, fmt, timeout, cursor, include_cursor,
                                 cancelled, client=client)

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
