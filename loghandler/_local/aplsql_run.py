"""A compiled query run on SQLite (bounded by bytes read and by its deadline), and its rows
answered in the service's formats: ``legacy`` (``matches``, ``buckets``) and ``tabular``.
"""

from __future__ import annotations

import fnmatch
import time
from dataclasses import dataclass, field
from typing import Any

from .apl import format_trimmed, parse_time
from .depth import load_stored

__all__ = ["DEFAULT_PAGE", "MATCHED", "MAX_ANSWER_BYTES", "MAX_ROWS", "Compiled",
           "QueryTimeout", "Result", "build", "fetch_rows", "legacy_answer", "run",
           "tabular_answer"]

# At most this many rows in one answer, like the real service's cap on a query's result.
MAX_ROWS = 65_000
# The rows of events a query with no take or limit answers: a page, the next one by cursor.
DEFAULT_PAGE = 1_000
# A key no APL name can spell: each summary row's count of its events, for rowsMatched.
MATCHED = "\x01matched"
# At most this much of stored events is read for one answer (a larger one is partial): a
# query over big events otherwise took minutes and gigabytes of memory.
MAX_ANSWER_BYTES = 64 * 1024 * 1024


@dataclass
class Compiled:
    """A query ready to run: the SQL, what its rows are, and what the answer reports."""

    sql: str
    dataset: str
    fields: list[str] | None  # None: whole events (system fields + the event's own)
    aggregated: bool
    groups: list[str]
    aggregations: list[tuple[str, str]]  # (column, aggregation name)
    order: list[tuple[str, bool]]  # (field, desc), as reported
    bin_us: int | None  # the span of a bin(_time, ...) group
    hidden: list[str] = field(default_factory=list)  # system fields left out of whole events
    messages: list[dict[str, Any]] = field(default_factory=list)  # the status's warnings
    row_id: bool = False  # whole events carry _rowId: the query names it
    page: int | None = None  # rows of a page (no take or limit): more is a partial answer
    agg_info: dict[str, dict[str, Any]] = field(default_factory=dict)  # column -> its "agg"
    away: list[str] = field(default_factory=list)  # project-away patterns (user*)
    time_group: str | None = None  # the group that is a time bin (its rows' ``time``)


# ---------------------------------------------------------------------------- running

@dataclass
class Result:
    """Rows of a query as dicts, with what a service answer reports about them."""

    compiled: Compiled
    rows: list[dict[str, Any]]
    system: list[tuple[str | None, str | None, str | None]]  # (_time, _sysTime, _rowId)
    fields: list[str]
    elapsed_us: int
    truncated: bool = False  # cut at MAX_ANSWER_BYTES or at a page: a partial answer
    keys: list[tuple[int, int]] = field(default_factory=list)  # (time, seq) of event rows
    matched: int = 0  # the events the query matched (rowsMatched)


class QueryTimeout(Exception):
    """Building the answer ran past the query's deadline."""


def _fetch(cursor: Any, deadline: float | None, max_bytes: int) -> tuple[list[Any], bool]:
    """The rows of a running query, until their stored events add up to ``max_bytes`` (then
    True: truncated); QueryTimeout past ``deadline`` (monotonic)."""
    raw: list[Any] = []
    total = 0
    while True:
        chunk = cursor.fetchmany(1000)
        if not chunk:
            return raw, False
        for row in chunk:
            body = row[3]
            total += len(body) if isinstance(body, (str, bytes)) else 16
            # Counted from the first row: one row over the bound is not kept either.
            if total > max_bytes:
                return raw, True
            raw.append(row)
        if deadline is not None and time.monotonic() > deadline:
            raise QueryTimeout


def _trim(stamp: Any) -> Any:
    """An RFC 3339 time with its fraction's trailing zeros cut, as the service answers."""
    if isinstance(stamp, str) and stamp.endswith("Z") and "." in stamp[19:]:
        return stamp[:-1].rstrip("0").rstrip(".") + "Z"
    return stamp


def _add_flat(event: dict[str, Any], row: dict[str, Any]) -> None:
    """The event's fields into ``row`` (a key it holds already stays), a nested object as
    dotted fields, as the service stores and answers them. A loop, not recursion: an event may
    nest as deep as JSON parsing allowed at ingest."""
    stack = [("", iter(event.items()))]
    while stack:
        prefix, items = stack[-1]
        for k, v in items:
            name = prefix + k
            if isinstance(v, dict) and v:
                stack.append((name + ".", iter(v.items())))
                break
            if name not in row:
                row[name] = v
        else:
            stack.pop()


def run(db: Any, compiled: Compiled, deadline: float | None = None,
        max_bytes: int | None = None) -> Result:
    """Run a compiled query on a sqlite3 connection (the caller holds its lock).

    Bounded as a whole: the rows read stop at ``max_bytes`` of stored events (default
    MAX_ANSWER_BYTES: a partial answer), and building them raises QueryTimeout past
    ``deadline``, as the SQL step is interrupted there.

    Whole events come back as the service answers them: ``_time`` and ``_sysTime`` (trailing
    zeros of the fraction cut), then the event's fields with nested objects as dotted fields;
    ``_rowId`` only when the query names it (a paging key of the local service's own)."""
    started = time.perf_counter()
    raw, truncated = fetch_rows(db, compiled.sql, deadline,
                                MAX_ANSWER_BYTES if max_bytes is None else max_bytes)
    return build(compiled, raw, truncated, deadline, started)


def fetch_rows(db: Any, sql: str, deadline: float | None, max_bytes: int
               ) -> tuple[list[Any], bool]:
    """The raw rows of ``sql`` (seq, time, sys, body), bounded as ``run`` bounds them."""
    return _fetch(db.execute(sql), deadline, max_bytes)


def build(compiled: Compiled, raw: list[Any], truncated: bool, deadline: float | None,
          started: float) -> Result:
    """The answer's rows from the raw rows of ``compiled`` (read at once, or in parts of its
    time range by the reader); ``started`` is when the query began (perf_counter)."""
    if compiled.page is not None and len(raw) > compiled.page:
        del raw[compiled.page:]
        truncated = True  # there is a next page: the status says isPartial, and its cursors
    keys = [(t, seq) for seq, t, _, _ in raw if t is not None and seq is not None]
    # Events: those read to answer (the service's scan stops once the answer is whole, and
    # counting the rest would cost the page a second scan per poll).
    matched = len(raw)
    rows: list[dict[str, Any]] = []
    system: list[tuple[str | None, str | None, str | None]] = []
    loads = load_stored  # a bad stored event is shown as such, never fails the answer
    if compiled.fields is None:
        with_row_id = compiled.row_id
        seen: dict[str, None] = {"_time": None, "_sysTime": None}
        if with_row_id:
            seen["_rowId"] = None
        for i, (seq, t, sys_time, body) in enumerate(raw):
            if deadline is not None and not i % 1000 and time.monotonic() > deadline:
                raise QueryTimeout
            event = loads(body)
            stamp = format_trimmed(t)
            sys_time = _trim(sys_time)
            row_id = f"{seq:016x}"
            row: dict[str, Any] = {"_time": stamp, "_sysTime": sys_time}
            if with_row_id:
                row["_rowId"] = row_id
            _add_flat(event, row)
            for k in row:
                if k not in seen:
                    seen[k] = None
            rows.append(row)
            system.append((stamp, sys_time, row_id))
        for name in compiled.hidden:
            seen.pop(name, None)
            for row in rows:
                row.pop(name, None)
        if compiled.away:
            for name in [k for k in seen if any(fnmatch.fnmatchcase(k, p)
                                                for p in compiled.away)]:
                seen.pop(name)
                for row in rows:
                    row.pop(name, None)
        fields = list(seen)
    else:
        fields = list(compiled.fields)
        datas = [loads(body) for _, _, _, body in raw]
        if "*" in fields:
            for i, data in enumerate(datas):
                flat: dict[str, Any] = {}
                _add_flat(data, flat)
                datas[i] = flat
            # arg_max(x, *): the winners' own fields, after the named columns.
            at = fields.index("*")
            named = set(fields)
            rest: dict[str, None] = {}
            for data in datas:
                for k in data:
                    if k not in named and k != MATCHED:
                        rest[k] = None
            fields[at:at + 1] = list(rest)
        times = [name for name in fields if name in ("_time", "_sysTime")]
        for (seq, t, sys_time, _), data in zip(raw, datas, strict=True):
            row = {name: data.get(name) for name in fields}
            for name in times:
                row[name] = _trim(row[name])
            rows.append(row)
            system.append((None if t is None else format_trimmed(t), _trim(sys_time),
                           None if seq is None else f"{seq:016x}"))
        # An aggregation's rows count their events (MATCHED); after a project that rebuilt
        # them, the rows are what matched.
        counts = [data.get(MATCHED) for data in datas]
        if compiled.aggregated and all(isinstance(n, int) for n in counts):
            matched = sum(n for n in counts if isinstance(n, int))
    return Result(compiled, rows, system, fields,
                  int((time.perf_counter() - started) * 1_000_000), truncated, keys, matched)


# ---------------------------------------------------------------------------- answers

def _type_of(values: list[Any], name: str) -> str:
    if name in ("_time", "_sysTime"):
        return "datetime"
    kinds = set()
    for v in values:
        if v is None:
            continue
        if isinstance(v, bool):
            kinds.add("boolean")
        elif isinstance(v, int):
            kinds.add("integer")
        elif isinstance(v, float):
            kinds.add("float")
        elif isinstance(v, str):
            kinds.add("string")
        elif isinstance(v, list):
            kinds.add("array")
        else:
            kinds.add("dictionary")
    if kinds == {"integer", "float"}:
        return "float"
    return kinds.pop() if len(kinds) == 1 else ("unknown" if not kinds else "|".join(
        sorted(kinds)))


def _status(result: Result, rows_examined: int, start: str, end: str) -> dict[str, Any]:
    c = result.compiled
    matched = result.matched
    return {
        "elapsedTime": result.elapsed_us,
        "blocksExamined": 1 if rows_examined else 0,
        "rowsExamined": rows_examined,
        "rowsMatched": matched,
        "numGroups": len(result.rows) if c.aggregated else 0,
        "isPartial": result.truncated or len(result.rows) >= MAX_ROWS,
        "cacheStatus": 1,
        "minBlockTime": format_trimmed(min(result.keys)[0]) if result.keys else start,
        "maxBlockTime": format_trimmed(max(result.keys)[0]) if result.keys else end,
        "messages": c.messages,
        # The oldest and the newest event of the answer: the cursor of the next page (for
        # newest first, the minimum; after sort by _time asc, the maximum).
        "minCursor": f"{min(result.keys)[1]:016x}" if result.keys else "",
        "maxCursor": f"{max(result.keys)[1]:016x}" if result.keys else "",
    }


def tabular_answer(result: Result, rows_examined: int, start: str, end: str) -> dict[str, Any]:
    """The ``format=tabular`` answer: one table, its fields and one column per field."""
    c = result.compiled
    columns = [[row.get(name) for row in result.rows] for name in result.fields]
    aggs = dict(c.aggregations)
    fields = []
    for name, column in zip(result.fields, columns, strict=False):
        entry: dict[str, Any] = {"name": name, "type": _type_of(column, name)}
        if name in aggs:
            entry["agg"] = c.agg_info[name]
        fields.append(entry)
    table: dict[str, Any] = {
        "name": "0",
        "sources": [{"name": c.dataset}],
        "fields": fields,
        "order": [{"field": f, "desc": d} for f, d in c.order],
        "groups": [{"name": g} for g in c.groups],
        "range": {"field": "_time", "start": start, "end": end},
        # The bin's span in nanoseconds, as the service gives it.
        "buckets": {"field": "_time", "size": c.bin_us * 1000} if c.bin_us else None,
        "columns": columns,
    }
    return {"format": "tabular", "status": _status(result, rows_examined, start, end),
            "tables": [table], "datasetNames": [c.dataset], "fieldsMetaMap": {}}


def legacy_answer(result: Result, rows_examined: int, start: str, end: str) -> dict[str, Any]:
    """The ``format=legacy`` answer: ``matches`` for events, ``buckets`` for aggregations."""
    c = result.compiled
    matches: list[dict[str, Any]] = []
    series: list[dict[str, Any]] = []
    totals: list[dict[str, Any]] = []
    if not c.aggregated:
        for row, (t, sys_time, row_id) in zip(result.rows, result.system, strict=False):
            data = {k: v for k, v in row.items() if k not in ("_time", "_sysTime", "_rowId")}
            matches.append({"_time": row.get("_time", t), "_sysTime": sys_time,
                            "_rowId": row_id, "data": data})
    else:
        aggs = dict(c.aggregations)
        by_time: dict[str, list[dict[str, Any]]] = {}
        for row in result.rows:
            group = {k: v for k, v in row.items() if k not in aggs and
                     not (c.bin_us and k == "_time")}
            entry = {"group": group,
                     "aggregations": [{"op": name, "value": row.get(name)} for name in aggs]}
            if c.bin_us:
                by_time.setdefault(str(row.get("_time")), []).append(entry)
            else:
                totals.append(entry)
        for stamp, entries in by_time.items():
            bin_start = parse_time(stamp) or 0
            series.append({"startTime": stamp,
                           "endTime": format_trimmed(bin_start + (c.bin_us or 0)),
                           "groups": [{"id": i, **e} for i, e in enumerate(entries)]})
    return {"format": "legacy", "status": _status(result, rows_examined, start, end),
            "matches": matches, "buckets": {"series": series, "totals": totals},
            "datasetNames": [c.dataset], "fieldsMetaMap": {}}
