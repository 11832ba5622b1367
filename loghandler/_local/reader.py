"""The local service's read path: an APL query run over the stored events, bounded by its
deadline (SQLite's progress handler and ``matches regex``'s own), stopped when its client hangs
up, and answered in the service's formats.

Queries read through connections of their own (the store's file is in WAL mode), one per
query at a time from a small pool: a long query holds up neither ingest nor the other queries,
and a query that stops (its deadline, or its client gone: SQLite's interrupt) gives its
connection back at once.

An aggregation over many events (a day's ``count() by level, bin_auto(_time)``) runs in parts
of its time range on a connection per core, and their groups are merged. One by a time bin
that the narrow table answers (a day's p95 by path) runs in parts of whole bins, one after
the other: each group is in one part, so nothing is merged, and each part sorts fewer rows.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import pathlib
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from . import apl as apl
from . import aplsql as aplsql
from . import aplsql_run as aplsql_run
from . import narrow, rollups, words
from .ingest import HttpError
from .sqlfunctions import QUERY, QUERY_TIMEOUT, add_functions, sort_key

__all__ = ["MAX_QUERY_TIMEOUT", "QUERY_TIMEOUT", "READERS", "QueryTimedOut", "ReadStats", "Reader"]

# A client may ask for more time than QUERY_TIMEOUT ("timeout" in the query's body), up to this.
MAX_QUERY_TIMEOUT = 60.0
# Connections reading at once; a query waits (within its deadline) for one to be free. More
# than the cores: a one-row query (an event's link) must not wait behind a day's aggregation.
READERS = 8
# An aggregation over at least this many events runs in parts of its time range, on a
# connection per core (counts, sums, minimums and maximums merge exactly): about PART_ROWS
# events a part, as a sort of fewer rows costs less a row.
SPLIT_MIN_ROWS = 200_000
PART_ROWS = 100_000
MAX_PARTS = 64
WORKERS = min(4, os.cpu_count() or 1)
MERGEABLE = frozenset({"count", "countif", "sum", "min", "max"})
# A summarize by a time bin over the narrow table runs in parts of whole bins, one after the
# other, about NARROW_PART_ROWS events each (estimated): each part's GROUP BY sorts fewer rows
# (a day's p95 by path at a million events: 0.43 s in 20 parts, 0.48 s in one; through the
# API 70-90 ms less, alternated). Each group is in one part, so the parts' rows are the
# answer's, put in its order; only for aggregations that the order their values come in
# cannot change (not a sum of floats, not arg_max's ties; a sampled percentile: one query).
NARROW_PART_ROWS = 40_000
BY_BIN = frozenset({"count", "countif", "dcount", "min", "max", "percentile", "percentiles"})
# How often (s) a running query looks whether its client is still there.
CLIENT_CHECK_EVERY = 0.02
# The longest text or blob a query may make (SQLite's SQLITE_LIMIT_LENGTH on each reader
# connection; the default is 1 GB): a small query of chained strcats made gigabytes. The
# service sets it a little over its body limit, so that any stored event can still be read.
MAX_LENGTH = 12 * 1024 * 1024
# Python 3.10's sqlite3 cannot set that limit: strcat checks the length itself there.
HAS_SETLIMIT = hasattr(sqlite3.Connection, "setlimit")


# The web page's queries are its token's with this mark (``Request.client_key``): they hold
# fewer connections, wait behind the API's for one, and pause while an API query runs, so a
# page loading its panels (events, histogram, fields, at once) does not slow the API's.
PAGE = "page"
# How long a page's query pauses, at each progress check (about every 20,000 SQLite steps),
# while an API query runs: it leaves the cores to the API's query.
PAGE_PAUSE = 0.002


def _is_page(client: Any) -> bool:
    return isinstance(client, tuple) and len(client) == 2 and client[0] == PAGE


def _share(readers: int, client: Any = None) -> int:
    """The reader connections one client (one token) may hold at once: half of them, so that
    one client's heavy queries never hold every reader; the page's, a quarter."""
    return max(1, readers // 4 if _is_page(client) else readers // 2)


class ReadStats:
    """What the reader did, for tests and benchmarks: queries stopped because their client
    went away, and those stopped at their deadline."""

    def __init__(self) -> None:
        self.cancelled = 0
        self.timed_out = 0
        self.running = 0
        self.api_running = 0  # of them, the API's (not the page's): the page's pause for them
        self._lock = threading.Lock()  # += on an attribute is not atomic across threads

    def api_started(self, by: int) -> None:
        with self._lock:
            self.api_running += by


class _Stop:
    """One query's stop conditions: its deadline and its client (``cancelled()``); with
    ``pause`` (the page's queries), a short sleep while it says an API query runs."""

    def __init__(self, deadline: float, cancelled: Callable[[], bool] | None,
                 pause: Callable[[], bool] | None = None) -> None:
        self.deadline = deadline
        self.cancelled_check = cancelled
        self.cancelled = False
        self._next_check = 0.0
        self.pause = pause

    def __call__(self) -> int:
        if self.pause is not None and self.pause():
            time.sleep(PAGE_PAUSE)  # the GIL and the core go to the API's query
        now = time.monotonic()
        if now > self.deadline:
            return 1
        if self.cancelled_check is not None and now >= self._next_check:
            self._next_check = now + CLIENT_CHECK_EVERY
            if self.cancelled_check():
                self.cancelled = True
                return 1
        return 0


class Reader:
    """Runs queries over the store's file (``path``); ``db`` and ``lock`` are the store's own
    connection and lock (used when there is no file to open twice), ``count`` the events a
    dataset holds (the status's ``rowsExamined``); ``word_index``: the store has the index of
    the events' text (``words``) that a search for a word reads."""

    def __init__(self, path: str | None, db: sqlite3.Connection, lock: threading.Lock,
                 count: Callable[[str], int], readers: int = READERS,
                 word_index: bool = False) -> None:
        self._db = db
        self._word_index = word_index
        self._lock = lock
        self._count = count
        self._uri = None if not path else pathlib.Path(path).resolve().as_uri() + "?mode=ro"
        self._idle: list[sqlite3.Connection] = []
        self._opened = 0
        self._max = max(1, readers)
        self._pool = threading.Condition()
        self._closed = False
        self.stats = ReadStats()
        self.max_length = MAX_LENGTH
        # Connections held per client, and the queries waiting for one: a free connection
        # goes to the waiter whose client holds the fewest (then the oldest), never past a
        # client's share.
        self._held: dict[Any, int] = {}
        self._waiting: list[tuple[Any, int]] = []
        self._tickets = itertools.count()

    def close(self) -> None:
        with self._pool:
            self._closed = True
            for conn in self._idle:
                conn.close()
            self._idle.clear()
            self._pool.notify_all()

    def _turn(self, me: tuple[Any, int]) -> bool:
        """True when waiter ``me`` may take a connection now: one is free or may be opened,
        its client is under its share, and no waiter of a client holding fewer (or as many,
        and waiting longer) is before it."""
        if not self._idle and self._opened >= self._max:
            return False
        held = self._held
        if held.get(me[0], 0) >= _share(self._max, me[0]):
            return False
        eligible = [w for w in self._waiting if held.get(w[0], 0) < _share(self._max, w[0])]
        # The API's queries first, then the client holding fewest, then the oldest.
        return min(eligible, key=lambda w: (_is_page(w[0]), held.get(w[0], 0), w[1])) is me

    @contextlib.contextmanager
    def _connection(self, stop: _Stop, client: Any = None, wait: bool = True
                    ) -> Iterator[sqlite3.Connection | None]:
        """A connection for one query of ``client`` (its token): a free one of the pool, a
        new one while there are fewer than READERS, else one given back (waiting no longer
        than the query may run, and not for a client gone). Fair between clients: each holds
        at most its share, and a free connection goes to the client holding fewest. With
        ``wait`` false, None unless one is free for this client now (a query's helper)."""
        if self._uri is None:
            with self._lock:
                yield self._db
            return
        conn: sqlite3.Connection | None = None
        with self._pool:
            me = (client, next(self._tickets))
            self._waiting.append(me)
            try:
                while conn is None:
                    if self._closed:
                        raise sqlite3.ProgrammingError("the store is closed")
                    if wait and stop():  # past its deadline: no connection, it stops
                        raise _Stopped
                    if self._turn(me):
                        conn = self._idle.pop() if self._idle else self._open_connection()
                        self._held[client] = self._held.get(client, 0) + 1
                    elif not wait:
                        break
                    else:
                        self._pool.wait(CLIENT_CHECK_EVERY)
            finally:
                self._waiting.remove(me)
                self._pool.notify_all()  # the order of the others may have changed
        if conn is None:
            yield None
            return
        try:
            yield conn
        finally:
            with self._pool:
                left = self._held.get(client, 0) - 1
                if left > 0:
                    self._held[client] = left
                else:
                    self._held.pop(client, None)
                if self._closed:
                    conn.close()
                    self._opened -= 1
                else:
                    self._idle.append(conn)
                self._pool.notify_all()

    def _open_connection(self) -> sqlite3.Connection:
        """A new reader connection (the pool's lock held), its length limit set."""
        self._opened += 1
        try:
            conn = sqlite3.connect(self._uri or "", uri=True, check_same_thread=False,
                                   isolation_level=None)
            add_functions(conn)
            if HAS_SETLIMIT:  # 3.11: SQLITE_LIMIT_LENGTH is 0
                limited: Any = conn  # typed for 3.10, which lacks setlimit
                limited.setlimit(getattr(sqlite3, "SQLITE_LIMIT_LENGTH", 0), self.max_length)
        except BaseException:
            self._opened -= 1
            raise
        return conn

    def query(self, text: str, start: Any = None, end: Any = None, fmt: str = "legacy",
              timeout: float = QUERY_TIMEOUT, cursor: Any = None,
              include_cursor: Any = False,
              cancelled: Callable[[], bool] | None = None,
              sample: int | None = None, client: Any = None) -> dict[str, Any]:
        """Run an APL query (the subset in ``apl``) and build the service's answer in ``fmt``.

        ``HttpError(400)`` names what is outside the subset; a query is stopped after
        ``timeout`` seconds (a 400 that says so, with ``timedOut``), and as soon as
        ``cancelled()`` says its client has gone (499). ``cursor`` (a ``_rowId``, as the
        status's ``minCursor``/``maxCursor`` give) starts the rows after that event, and with
        ``include_cursor`` at it: the next page. ``sample``: about one event in that many
        (the page's facets). ``client`` (its token) shares the reader connections fairly
        with the other clients'.
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
            parsed = apl.parse_query(text)
            data_range = None
            if "bin_auto" in text and start_us is None:
                # Without a start, bin_auto's bins span the data's own time range.
                data_range = self.data_range(parsed.dataset)
            args: dict[str, Any] = {"start_us": start_us, "end_us": end_us, "now_us": now_us,
                                    "data_range": data_range, "cursor": at, "sample": sample}
            compiled = aplsql.compile_query(text, **args)
            lo, hi = aplsql.time_bounds(text, now_us)
        except apl.AplError as exc:
            raise HttpError(400, str(exc)) from None
        if at is not None:  # the cursor's event bounds the rows too
            if any(name == "_time" and not desc for name, desc in compiled.order[:1]):
                lo = at[0] if lo is None else max(lo, at[0])
            else:
                hi = at[0] + 1 if hi is None else min(hi, at[0] + 1)
        lo = start_us if lo is None else lo if start_us is None else max(lo, start_us)
        hi = end_us if hi is None else min(hi, end_us)
        page = _is_page(client)
        stop = _Stop(time.monotonic() + timeout, cancelled,
                     (lambda: self.stats.api_running > 0) if page else None)
        self.stats.running += 1
        if not page:
            self.stats.api_started(1)
        try:
            with self._connection(stop, client) as db:
                assert db is not None
                db.set_progress_handler(stop, 20_000)
                QUERY.deadline, QUERY.timed_out = stop.deadline, False
                QUERY.max_length, QUERY.too_big = self.max_length, False
                try:
                    result = self._run(db, text, parsed, compiled, args, lo, hi, stop, client)
                finally:
                    db.set_progress_handler(None, 0)
                    QUERY.deadline = None
        except (_Stopped, sqlite3.DatabaseError, aplsql_run.QueryTimeout, ValueError,
                OverflowError) as exc:
            if (isinstance(exc, sqlite3.DataError) and "too big" in str(exc)) or getattr(
                    QUERY, "too_big", False):
                raise HttpError(422, f"the query makes a value over this service's limit of "
                                     f"{self.max_length:,} bytes (SQLITE_LIMIT_LENGTH): make "
                                     "smaller values (fewer strcat arguments), or project "
                                     "fewer fields") from None
            if stop.cancelled or (cancelled is not None and isinstance(exc, _Stopped)
                                  and cancelled()):
                self.stats.cancelled += 1
                raise HttpError(499, "the client went away: the query stopped") from None
            # A query out of range somewhere SQLite or the answer's times notice (a datatype
            # mismatch, a number past the calendar): the client's to fix, a 400.
            if (isinstance(exc, (aplsql_run.QueryTimeout, _Stopped)) or "interrupt" in str(exc)
                    or QUERY.timed_out):
                self.stats.timed_out += 1
                raise QueryTimedOut(timeout) from None
            raise HttpError(400, f"the query cannot run: {exc}") from None
        finally:
            self.stats.running -= 1
            if not page:
                self.stats.api_started(-1)
        examined = self._count(compiled.dataset)
        start_s = apl.format_time(start_us if start_us is not None else 0)
        end_s = apl.format_time(end_us if end_us is not None else now_us)
        build = aplsql_run.tabular_answer if fmt == "tabular" else aplsql_run.legacy_answer
        return build(result, examined, start_s, end_s)

    def counted(self, text: str, client: Any = None) -> int | None:
        """How many events ``text`` (a query ending in ``summarize count()``) counts, when the
        counts kept at ingest answer it (no scan: a few thousand rows read); None when only a
        scan could (the caller estimates instead)."""
        now_us = time.time_ns() // 1000
        try:
            parsed = apl.parse_query(text)
            compiled = aplsql.compile_query(text, end_us=now_us, now_us=now_us)
            lo, hi = aplsql.time_bounds(text, now_us)
        except apl.AplError:
            return None
        hi = now_us if hi is None else min(hi, now_us)
        try:
            with self._connection(_Stop(time.monotonic() + QUERY_TIMEOUT, None), client) as db:
                assert db is not None
                rows = rollups.answer_rows(db, parsed, compiled, lo, hi)
        except (_Stopped, sqlite3.Error):  # no connection in time, a store closing: the
            return None  # caller's query then says what went wrong
        if rows is None or len(rows) != 1:
            return None
        return int(json.loads(rows[0][3])[aplsql_run.MATCHED])

    def data_range(self, dataset: str) -> tuple[int, int] | None:
        """The first and last ``_time`` of a dataset's events (last + 1), or None."""
        # Two queries: SQLite reads a lone min() or max() off the index's end, both at once
        # by scanning all of it.
        with self._connection(_Stop(time.monotonic() + QUERY_TIMEOUT, None)) as db:
            assert db is not None
            (first,) = db.execute("SELECT min(time) FROM events WHERE dataset = ?",
                                  (dataset,)).fetchone()
            (last,) = db.execute("SELECT max(time) FROM events WHERE dataset = ?",
                                 (dataset,)).fetchone()
        return None if first is None else (first, last + 1)

    def _run(self, db: sqlite3.Connection, text: str, parsed: Any, compiled: Any,
             args: dict[str, Any], lo: int | None, hi: int, stop: _Stop,
             client: Any = None) -> Any:
        started = time.perf_counter()
        counted = rollups.answer_rows(db, parsed, compiled, lo, hi)  # the page's histogram
        if counted is not None:
            return aplsql_run.build(compiled, counted, False, stop.deadline, started)
        fast = self._narrow(db, text, parsed, compiled, args, lo, hi, stop)
        if fast is not None:
            return fast
        terms = words.leading_terms(parsed.ops) if self._word_index else []
        match = words.match_for(db, terms, self._count(compiled.dataset)) if terms else None
        if match is not None:  # a rare word: the events holding it, from the index
            compiled = aplsql.compile_query(text, **{**args, "word_match": match})
            # Few events (at most words.COMMON_SHARE of them): one pass, no parts.
            return aplsql_run.run(db, compiled, stop.deadline)
        if self._uri is not None and self._max > 1 and WORKERS > 1 and _splittable(
                parsed, compiled):
            parts = self._parts(db, compiled, lo, hi)
            if parts is not None:
                return self._run_in_parts(db, text, compiled, args, parts, stop, started,
                                          client)
        return aplsql_run.run(db, compiled, stop.deadline)

    def _narrow(self, db: sqlite3.Connection, text: str, parsed: Any, compiled: Any,
                args: dict[str, Any], lo: int | None, hi: int, stop: _Stop) -> Any:
        """The answer from the narrow table (narrow.py), when the query reads only its kept
        fields; else None (the scan answers)."""
        if not compiled.aggregated or "summarize" not in text:
            return None
        # One read transaction: the fields' columns and their values of one moment (a
        # dataset deleted and filled again between them may keep other fields).
        own = not db.in_transaction
        if own:
            db.execute("BEGIN")
        try:
            columns = narrow.columns_for(db, compiled.dataset)
            if not columns:
                return None
            try:
                fast = aplsql.compile_query(text, **{**args, "narrow": columns})
            except (aplsql.NotNarrow, apl.AplError):
                return None
            parts = self._bin_parts(db, parsed, fast, lo, hi)
            if parts is not None:
                started = time.perf_counter()
                span = fast.bin_us if "bin_auto" in text else None  # the whole range's bins
                raw: list[Any] = []
                used, cut = 0, False
                QUERY.sampled = False
                for first, last in parts:
                    sql = aplsql.compile_query(text, **{**args, "narrow": columns,
                                                        "start_us": first, "end_us": last},
                                               span_override_us=span).sql
                    # The parts' rows bounded as the one query's together.
                    got, cut = aplsql_run.fetch_rows(db, sql, stop.deadline,
                                                     aplsql_run.MAX_ANSWER_BYTES - used)
                    if cut or QUERY.sampled:
                        break  # a partial answer keeps the query's first rows: one query
                    raw += got
                    used += sum(len(r[3]) if isinstance(r[3], (str, bytes)) else 16
                                for r in got)
                if not cut and not QUERY.sampled:
                    rows = _in_order(fast, raw, stop.deadline)[:aplsql_run.MAX_ROWS]
                    return aplsql_run.build(fast, rows, False, stop.deadline, started)
            return aplsql_run.run(db, fast, stop.deadline)
        finally:
            if own:
                db.execute("COMMIT")

    def _bin_parts(self, db: sqlite3.Connection, parsed: Any, fast: Any, lo: int | None,
                   hi: int) -> list[tuple[int, int]] | None:
        """[lo, hi) in parts of whole time bins for a narrow ``summarize ... by bin(_time)``
        (NARROW_PART_ROWS), when its events are estimated to fill two; else None. The events
        of the range are estimated from the dataset's (counted at ingest) as if spread evenly
        over its time: a count of the range would cost about what the parts save."""
        step = fast.bin_us
        if not (step and fast.time_group is not None and _splittable_by_bin(parsed, fast)
                and f"((time / {step}) * {step})" in fast.sql[fast.sql.rfind(" GROUP BY "):]):
            return None
        total = self._count(fast.dataset)
        # Two queries: each reads one end of the index (both in one would read all of it).
        (first,) = db.execute("SELECT min(time) FROM narrow_events WHERE dataset = ?",
                              (fast.dataset,)).fetchone()
        (last,) = db.execute("SELECT max(time) FROM narrow_events WHERE dataset = ?",
                             (fast.dataset,)).fetchone()
        if first is None or last is None:
            return None
        lo = first if lo is None else max(lo, first)
        hi = min(hi, last + 1)
        # A bin is (time / step) * step, truncated toward zero: bins are whole between
        # multiples of step only from 0 on.
        if lo < 0 or hi <= lo:
            return None
        share = (hi - lo) / max(1, last + 1 - first)
        bins = -(-hi // step) - lo // step
        count = min(MAX_PARTS, bins, int(total * share) // NARROW_PART_ROWS)
        if count < 2:
            return None
        per = -(-bins // count)  # bins a part
        edges = [lo] + [(lo // step + k * per) * step for k in range(1, count)] + [hi]
        edges = sorted({e for e in edges if lo <= e <= hi})
        return [(a, b) for a, b in itertools.pairwise(edges) if a < b]

    def _parts(self, db: sqlite3.Connection, compiled: Any, lo: int | None, hi: int
               ) -> list[tuple[int, int]] | None:
        """[lo, hi) in parts of equal time (their edges on the query's time bins), when its
        events are many enough to be worth two connections; else None."""
        dataset = compiled.dataset
        (n,) = db.execute("SELECT count(*) FROM events WHERE dataset = ? AND time >= ? "
                          "AND time < ?", (dataset, -(2 ** 63) if lo is None else lo,
                                           hi)).fetchone()
        if n < SPLIT_MIN_ROWS:
            return None
        if lo is None:
            (lo,) = db.execute("SELECT min(time) FROM events WHERE dataset = ? AND time < ?",
                               (dataset, hi)).fetchone()
            if lo is None:
                return None
        # About PART_ROWS events a part (a smaller sort each), at least one per worker.
        count = max(WORKERS, min(MAX_PARTS, n // PART_ROWS))
        step = compiled.bin_us or 1
        edges = sorted({lo, hi} | {lo + (hi - lo) * k // count // step * step
                                   for k in range(1, count)})
        edges = [e for e in edges if lo <= e <= hi]
        return [(a, b) for a, b in itertools.pairwise(edges) if a < b] or None

    def _run_in_parts(self, db: sqlite3.Connection, text: str, compiled: Any,
                      args: dict[str, Any], parts: list[tuple[int, int]], stop: _Stop,
                      started: float, client: Any = None) -> Any:
        """An aggregation over many events in parts of its time range, this connection and
        WORKERS - 1 others taking the next part in turn; the parts' groups merged (counts and
        sums added, minimums and maximums kept). Smaller sorts, and every core at work. A
        helper takes a connection only when one is free for this client (never waits): the
        others' queries come first."""
        span = compiled.bin_us if "bin_auto" in text else None  # bins as the whole range's
        todo = list(reversed(list(enumerate(parts))))
        lock = threading.Lock()
        done: dict[int, list[Any]] = {}
        found: dict[str, Any] = {"truncated": False}

        def take() -> tuple[int, tuple[int, int]] | None:
            with lock:
                return todo.pop() if todo and "error" not in found else None

        def work(conn: sqlite3.Connection) -> None:
            while (job := take()) is not None:
                index, (first, last) = job
                sql = aplsql.compile_query(text, **{**args, "start_us": first, "end_us": last},
                                           span_override_us=span).sql
                got, truncated = aplsql_run.fetch_rows(conn, sql, stop.deadline,
                                                       aplsql_run.MAX_ANSWER_BYTES)
                with lock:
                    done[index] = got
                    found["truncated"] = found["truncated"] or truncated

        def helper() -> None:
            try:
                # The same stop: a time-out, a client gone or a failure ends every part.
                with self._connection(stop, client, wait=False) as conn:
                    if conn is None:
                        return  # none free for this client: the others do the parts
                    conn.set_progress_handler(stop, 20_000)
                    QUERY.deadline, QUERY.timed_out = stop.deadline, False
                    try:
                        work(conn)
                    finally:
                        conn.set_progress_handler(None, 0)
                        QUERY.deadline = None
            except BaseException as exc:  # handed to the query's own thread
                found.setdefault("error", exc)
                stop.deadline = 0.0

        helpers = [threading.Thread(target=helper, name="loghandler-query-part", daemon=True)
                   for _ in range(WORKERS - 1)]
        for thread in helpers:
            thread.start()
        try:
            work(db)
        except BaseException as exc:
            found.setdefault("error", exc)
            stop.deadline = 0.0  # the others stop too
        for thread in helpers:
            thread.join()
        if "error" in found:
            raise found["error"]
        # Merged in the parts' order, whichever finished first: the same sums every time.
        merged = _merge_groups(compiled, [row for i in sorted(done) for row in done[i]],
                               stop.deadline)
        return aplsql_run.build(compiled, merged, found["truncated"], stop.deadline, started)

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


class QueryTimedOut(HttpError):
    """A query stopped at its deadline: a 400 that says so, and how long a query may be given
    (``timedOut``, ``timeout``, ``maxTimeout`` beside the message, for the page's "run
    again with more time")."""

    def __init__(self, timeout: float) -> None:
        super().__init__(400, f"the query ran longer than {timeout:g} s; narrow it with a time "
                              f"range or a where")
        self.extra = {"timedOut": True, "timeout": timeout, "maxTimeout": MAX_QUERY_TIMEOUT}


class _Stopped(Exception):
    """A query stopped while it waited for a connection."""


def _splittable(parsed: Any, compiled: Any) -> bool:
    """True for an aggregation that two halves of its events can answer: filters, then one
    ``summarize`` (or ``count``) of counts, sums, minimums and maximums, last."""
    if not compiled.aggregated or not parsed.ops or parsed.ops[-1][0] not in ("summarize",
                                                                                "count"):
        return False
    if any(op[0] not in ("where", "search") for op in parsed.ops[:-1]):
        return False
    return all(name in MERGEABLE for _, name in compiled.aggregations) and (
        "*" not in (compiled.fields or []))


def _splittable_by_bin(parsed: Any, compiled: Any) -> bool:
    """True for filters then one ``summarize`` of BY_BIN aggregations, last."""
    if not parsed.ops or parsed.ops[-1][0] != "summarize" or any(
            op[0] not in ("where", "search") for op in parsed.ops[:-1]):
        return False
    return bool(compiled.aggregations) and all(
        name in BY_BIN for _, name in compiled.aggregations) and "*" not in (
        compiled.fields or [])


def _group_order(compiled: Any, row: Any, data: dict[str, Any]) -> list[Any]:
    """A row's place in the query's order: its groups ascending (NULL first), the time bin
    by its time, as the query's ORDER BY puts them."""
    out = []
    for g in compiled.groups:
        value = row[1] if g == compiled.time_group else data.get(g)
        out.append((0,) if value is None else (1, sort_key(value)))
    return out


def _in_order(compiled: Any, raw: list[Any], deadline: float | None) -> list[Any]:
    """The rows of a query's parts (each group in one part) in the query's order."""
    keyed = []
    for n, row in enumerate(raw):
        if deadline is not None and not n % 1000 and time.monotonic() > deadline:
            raise aplsql_run.QueryTimeout
        keyed.append((_group_order(compiled, row, json.loads(row[3])), n, row))
    keyed.sort(key=lambda k: (k[0], k[1]))
    return [row for _, _, row in keyed]


def _one_number(value: Any) -> Any:
    """A whole float as the int it equals (a group's key in a merge)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _merge_groups(compiled: Any, raw: list[Any], deadline: float | None = None) -> list[Any]:
    """The rows of two halves of an aggregation as one: rows of the same groups combined,
    in the order the query's SQL gives (its groups ascending, the time bin by its time).
    QueryTimeout past ``deadline``: the merge is part of the query's time."""
    groups = [g for g in compiled.groups if g != compiled.time_group]
    how = dict(compiled.aggregations)
    merged: dict[Any, list[Any]] = {}
    for n, (seq, t, sys_time, body) in enumerate(raw):
        if deadline is not None and not n % 1000 and time.monotonic() > deadline:
            raise aplsql_run.QueryTimeout
        data = json.loads(body)
        # 0 and 0.0 are one group in SQLite's GROUP BY, as in the one query's answer.
        key = (t, json.dumps([_one_number(data.get(g)) for g in groups]))
        have = merged.get(key)
        if have is None:
            merged[key] = [seq, t, sys_time, data]
            continue
        old = have[3]
        for name, value in data.items():
            kind = "count" if name == aplsql_run.MATCHED else how.get(name)
            mine = old.get(name)
            if kind is None or value is None:
                continue
            if mine is None:
                old[name] = value
            elif kind in ("count", "countif", "sum"):
                old[name] = mine + value
            elif (sort_key(value) < sort_key(mine)) == (kind == "min"):
                old[name] = value

    rows = sorted(merged.values(), key=lambda row: _group_order(compiled, row, row[3]))
    if deadline is not None and time.monotonic() > deadline:
        raise aplsql_run.QueryTimeout
    return [(seq, t, sys_time, json.dumps(data)) for seq, t, sys_time, data in rows][
        :aplsql_run.MAX_ROWS]
