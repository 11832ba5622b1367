"""The local service's read path: an APL query run over the stored events, bounded by its
deadline (SQLite's progress handler and ``matches regex``'s own), and answered in the
service's formats. With a file, queries read through a connection of their own (WAL), so a long
one does not hold up ingest; in memory they share the store's one connection.
"""

from __future__ import annotations

import pathlib
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Any

from . import apl as apl
from . import aplsql as aplsql
from . import aplsql_run as aplsql_run
from .ingest import HttpError
from .sqlfunctions import QUERY, QUERY_TIMEOUT, add_functions

__all__ = ["QUERY_TIMEOUT", "Reader"]


class Reader:
    """Runs queries: ``db`` and ``lock`` are the store's connection and lock, ``count`` the
    events a dataset holds (the status's ``rowsExamined``)."""

    def __init__(self, path: str | None, db: sqlite3.Connection, lock: threading.Lock,
                 count: Callable[[str], int]) -> None:
        self._db = db
        self._lock = lock
        self._count = count
        self._reader: sqlite3.Connection | None = None
        self._reader_lock = threading.Lock()
        if path:
            uri = pathlib.Path(path).resolve().as_uri() + "?mode=ro"
            self._reader = sqlite3.connect(uri, uri=True, check_same_thread=False,
                                           isolation_level=None)
            add_functions(self._reader)

    def close(self) -> None:
        with self._reader_lock:
            if self._reader is not None:
                self._reader.close()

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
            QUERY.deadline, QUERY.timed_out = deadline, False
            try:
                result = aplsql_run.run(db, compiled, deadline)
            except (sqlite3.DatabaseError, aplsql_run.QueryTimeout, ValueError,
                    OverflowError) as exc:
                # A query out of range somewhere SQLite or the answer's times notice (a
                # datatype mismatch, a number past the calendar): the client's to fix, a 400.
                if (isinstance(exc, aplsql_run.QueryTimeout) or "interrupt" in str(exc)
                        or QUERY.timed_out):
                    raise HttpError(400, f"the query ran longer than {timeout:g} s; narrow it "
                                         f"with a time range or a where") from None
                raise HttpError(400, f"the query cannot run: {exc}") from None
            finally:
                db.set_progress_handler(None, 0)
                QUERY.deadline = None
        examined = self._count(compiled.dataset)
        start_s = apl.format_time(start_us if start_us is not None else 0)
        end_s = apl.format_time(end_us if end_us is not None else now_us)
        build = aplsql_run.tabular_answer if fmt == "tabular" else aplsql_run.legacy_answer
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

