"""APL (the subset ``apl`` parses) compiled to one SQLite query over the event store, run, and
answered in the service's formats.

The whole pipeline runs in SQLite: each tabular operator wraps the previous one as a sub-select
over the same four columns (``seq`` the row id, ``time`` epoch microseconds, ``sys`` the
``_sysTime``, ``body`` the event's JSON), so a ``where`` right after the source is flattened into
the scan of the (dataset, time, seq) index and a filtered ``count`` over a million events never
builds a Python object per event. Fields are read with ``json_extract``; ``project`` and
``summarize`` build a new ``body`` with ``json_object`` (``extend`` and ``project-away`` edit it
with ``json_set`` / ``json_remove``), so the operators after them work the same way. While the
body is still the stored JSON, a comparison with a string is first tested on its text (is
``"level":"error"`` in it?), so most events are never parsed.
"""
from __future__ import annotations

import fnmatch
import json
import math
import re
import time
from typing import Any

from . import words
from .apl import AplError, Bin, Call, Field, Lit, parse_query, span_us
from .aplsql_expr import Compiler, NotNarrow, glob, path, path_flat, quote
from .aplsql_run import DEFAULT_PAGE, MATCHED, MAX_ROWS, Compiled

__all__ = ["AUTO_BINS", "Compiled", "NotNarrow", "auto_span", "compile_query", "time_bounds"]

_DEFAULT_ORDER = "time DESC, seq DESC"
_BODY = re.compile(r"\bbody\b")
narrow_table = "narrow_events"  # narrow.TABLE (narrow.py imports this module's helpers)


_AUTO_SPANS = [n * span_us(u) for n, u in ((1, "s"), (2, "s"), (5, "s"), (10, "s"), (15, "s"),
                                         (30, "s"), (1, "m"), (2, "m"), (5, "m"), (10, "m"),
                                         (15, "m"), (30, "m"), (1, "h"), (2, "h"), (3, "h"),
                                         (6, "h"), (12, "h"), (1, "d"), (2, "d"), (7, "d"),
                                         (30, "d"))]
AUTO_BINS = 100


def auto_span(first_us: int, last_us: int) -> int:
    """bin_auto's span for a time range: the round span (1s, 2s, 5s, ... 15m, 30m, 1h, ...)
    giving the number of bins nearest to AUTO_BINS (about 100 per chart: 15 minutes for a day,
    30 seconds for an hour), never more than twice as many."""
    width = max(1, last_us - first_us)
    fits = [span for span in _AUTO_SPANS if width / span <= 2 * AUTO_BINS] or _AUTO_SPANS[-1:]
    return min(fits, key=lambda span: abs(math.log(width / span / AUTO_BINS)))


def compile_query(text: str, *, start_us: int | None = None, end_us: int | None = None,
                  now_us: int | None = None,
                  data_range: tuple[int, int] | None = None,
                  cursor: tuple[int, int, bool] | None = None,
                  sample: int | None = None,
                  span_override_us: int | None = None,
                  word_match: str | None = None,
                  narrow: dict[str, str] | None = None) -> Compiled:
    """Compile ``text`` into one SELECT over the ``events`` table; AplError if unsupported.

    ``data_range`` (the dataset's first and last ``_time``) sizes ``bin_auto`` where the
    query has no ``start_us``/``end_us``. ``cursor`` (the ``_time`` and row of an event, and
    whether to include it) starts the rows after that event in the query's time order: older
    ones for the default newest-first order, newer ones after ``sort by _time asc``.

    ``sample`` keeps about one row in ``sample`` (spread evenly: a hash of the row id),
    tested before anything else (the page's facets). ``span_override_us`` sizes ``bin_auto``
    when the query runs in parts of its range (reader.py).

    ``word_match`` (``words.match_for``'s FTS5 query for the query's leading ``search``
    terms) reads only the events the word index gives, in place of the whole range: each
    ``search`` still tests every event's text, so the answer is the scan's.

    ``narrow`` (a dataset's kept fields and their columns, narrow.py) reads the narrow
    table in place of the events, for a query of ``where``s then a ``summarize`` reading
    only those fields and ``_time``; NotNarrow when it reads anything else.
    """
    q = parse_query(text)
    now = time.time_ns() // 1000 if now_us is None else now_us
    comp = Compiler(now, text)
    if start_us is not None or data_range is not None:
        if start_us is not None:
            first = start_us
            last = end_us if end_us is not None else now
        else:  # no start: the data's own range (up to the end, which defaults to now)
            assert data_range is not None
            first = data_range[0]
            last = data_range[1] if end_us is None else max(first + 1, min(end_us,
                                                                            data_range[1]))
        comp.auto_span_us = auto_span(first, last)
    if span_override_us is not None:
        comp.auto_span_us = span_override_us
    cond = [f"dataset = {quote(q.dataset)}"]
    if sample is not None and sample > 1:
        # Knuth's multiplicative hash of the row id (its low 32 bits): about one row in
        # ``sample``, spread over the rows whatever their order (a plain seq % sample would
        # miss a dataset whose rows alternate with another's).
        cond.insert(0, f"(((seq * 2654435761) % 4294967296) % {int(sample)}) = 0")
    if start_us is not None:
        cond.append(f"time >= {int(start_us)}")
    if end_us is not None:
        cond.append(f"time < {int(end_us)}")
    if cursor is not None:
        c_time, c_seq, include = int(cursor[0]), int(cursor[1]), cursor[2]
        sorts = [op for op in q.ops if op[0] == "sort"]
        ascending = bool(sorts) and isinstance(sorts[-1][1][0][0], Field) and (
            sorts[-1][1][0][0].name == "_time") and not sorts[-1][1][0][1]
        less, eq = (">", ">=" if include else ">") if ascending else ("<",
                                                                        "<=" if include else "<")
        cond.append(f"(time {less} {c_time} OR (time = {c_time} AND seq {eq} {c_seq}))")
    if narrow is not None:
        shape = [op[0] for op in q.ops]
        at = shape.index("summarize") if "summarize" in shape else -1
        if at < 0 or any(k != "where" for k in shape[:at]) or word_match is not None:
            raise NotNarrow("shape")
        for _, call in q.ops[at][1]:
            if call.name in ("arg_max", "arg_min"):  # their named fields are JSON values
                raise NotNarrow(call.name)
        comp.columns = narrow
        sql = (f"SELECT seq, time, NULL AS sys, NULL AS ord, "
               f"{', '.join(sorted(set(narrow.values())))} FROM {narrow_table} "
               f"WHERE {' AND '.join(cond)}")
    elif word_match is not None:
        # The index's events first (CROSS JOIN keeps that order of loops): each read by its
        # row id, the range's conditions then tested on it.
        sql = (f"SELECT events.seq AS seq, events.time AS time, events.sys AS sys, "
               f"events.body AS body, NULL AS ord FROM {words.TABLE} CROSS JOIN events "
               f"ON events.seq = {words.TABLE}.rowid WHERE {words.TABLE} MATCH "
               f"{quote(word_match)} AND {' AND '.join(cond)}")
    else:
        sql = f"SELECT seq, time, sys, body, NULL AS ord FROM events WHERE {' AND '.join(cond)}"
    order: str | None = None  # SQL ORDER BY for the current rows, None: unordered
    order_report: list[tuple[str, bool]] = []
    fields: list[str] | None = None
    aggregated = False
    groups: list[str] = []
    aggs: list[tuple[str, str]] = []
    bin_us: int | None = None
    time_name: str | None = None  # the summarize's time bin group

    def keep_order(sql: str) -> str:
        # Before a step that rebuilds body, an order on the old body is fixed into ``ord``.
        if order is None or order == "ord":
            return sql
        return (f"SELECT seq, time, sys, body, row_number() OVER (ORDER BY {order}) AS ord "
                f"FROM ({sql})")

    hidden: list[str] = []  # system fields that project-away took out of whole events
    agg_info: dict[str, dict[str, Any]] = {}  # column -> the field's "agg" in a tabular answer
    away_patterns: list[str] = []  # project-away patterns, for whole events' dotted fields
    ops: list[tuple[Any, ...]] = []
    for op in q.ops:
        if op[0] == "top":  # top N by x: sort by x, take N
            ops += [("sort", [op[2]]), ("take", op[1])]
        else:
            ops.append(op)
    takes = [op[1] for op in ops if op[0] == "take"]
    series: tuple[list[str], str] | None = None  # right after a time-binned summarize by x
    for op in ops:
        kind = op[0]
        after_series, series = series, None
        if kind == "where":
            c = comp.expr(op[1])
            if comp.columns is not None:
                sql = f"SELECT * FROM ({sql}) WHERE {c.sql}"
            else:
                sql = f"SELECT seq, time, sys, body, ord FROM ({sql}) WHERE {c.sql}"
        elif kind == "search":
            # The stored text is the event's JSON with ASCII escapes: each term is looked for
            # in that form, case folded as SQLite folds (ASCII). LIKE folds ASCII too, and
            # reads the text in place (lower() copied every event first: twice the time).
            conds = " AND ".join(f"body LIKE {quote(like_pattern(json.dumps(term)[1:-1]))} "
                                 f"ESCAPE '\\'" for term in op[1])
            sql = f"SELECT seq, time, sys, body, ord FROM ({sql}) WHERE {conds}"
        elif kind == "sort":
            parts, order_report = [], []
            for e, desc in op[1]:
                s = comp.expr(e)
                parts.append(f"{s.sql} {'DESC' if desc else 'ASC'}")
                order_report.append((e.name if isinstance(e, Field) else "expr", desc))
            if not aggregated:
                parts.append("seq DESC" if op[1][0][1] else "seq ASC")
            order = ", ".join(parts)
        elif kind == "take" and after_series is not None:
            # limit right after summarize ... by bin(_time, ...), x: the N series (groups of x)
            # with the largest total of the first aggregation, every time bin of each.
            series_keys, series_value = after_series
            key = "json_array(" + ", ".join(
                f"json_extract(body, {quote(path_flat(k))})" for k in series_keys) + ")"
            total = f"sum(json_extract(body, {quote(path_flat(series_value))}))"
            sql = (f"SELECT seq, time, sys, body, ord FROM ({sql}) WHERE {key} IN "
                   f"(SELECT {key} FROM ({sql}) GROUP BY 1 ORDER BY {total} DESC, 1 "
                   f"LIMIT {op[1]})")
        elif kind == "take":
            by = order or (None if aggregated else _DEFAULT_ORDER)
            sql = (f"SELECT seq, time, sys, body, ord FROM ({sql})"
                   + (f" ORDER BY {by}" if by else "") + f" LIMIT {op[1]}")
            if order is None and not aggregated:
                order = _DEFAULT_ORDER
        elif kind == "project":
            sql = keep_order(sql)
            if order is not None:
                order = "ord"
            items = []
            names: list[str] = []
            for name, e in op[1]:
                items.append(f"{quote(name)}, {comp.json_value(comp.expr(e), name)}")
                names.append(name)
            sql = (f"SELECT seq, time, sys, json_object({', '.join(items)}) AS body, ord "
                   f"FROM ({sql})")
            fields = names
            comp.raw_body = False
        elif kind == "parse":
            sql = keep_order(sql)
            if order is not None:
                order = "ord"
            source = comp.expr(op[1])
            spec = json.dumps(op[2])
            typed = [(p[1], p[2]) for p in op[2] if p[0] == "column"]
            columns = [name for name, _ in typed]
            values = []
            for i, (name, kind_) in enumerate(typed):
                value = f"apl_parse({source.sql}, {quote(spec)}, {i})"
                if kind_ == "bool":  # SQLite has no booleans: JSON's, not 1 and 0
                    value = f"json(CASE {value} WHEN 1 THEN 'true' WHEN 0 THEN 'false' END)"
                values.append(f"{quote(path_flat(name))}, {value}")
            sets = ", ".join(values)
            sql = f"SELECT seq, time, sys, json_set(body, {sets}) AS body, ord FROM ({sql})"
            if fields is not None:
                fields += [name for name in columns if name not in fields]
            comp.raw_body = False
        elif kind == "extend":
            sql = keep_order(sql)
            if order is not None:
                order = "ord"
            if not comp.raw_body:
                # A body an earlier step computed is read once a row: flattened into this
                # step, each of its fields named here would compute it again (chained strcats
                # took gigabytes and seconds). OFFSET keeps SQLite from flattening.
                sql = f"SELECT seq, time, sys, body, ord FROM ({sql}) LIMIT -1 OFFSET 0"
            sets = ", ".join(f"{quote(path_flat(name))}, {comp.json_value(comp.expr(e), name)}"
                             for name, e in op[1])
            sql = f"SELECT seq, time, sys, json_set(body, {sets}) AS body, ord FROM ({sql})"
            if fields is not None:
                fields += [name for name, _ in op[1] if name not in fields]
            comp.raw_body = False
        elif kind == "project-away":
            sql = keep_order(sql)
            if order is not None:
                order = "ord"
            gone = [name for name in op[1] if "*" not in name]
            patterns = [name for name in op[1] if "*" in name]
            new_body = "body"
            if gone:
                paths = ", ".join(quote(path_flat(name)) for name in gone)
                new_body = f"json_remove(body, {paths})"
            if patterns:
                # project-away user*: the top-level keys matching no pattern (and, as the
                # answer is built, the dotted fields of nested objects: away_patterns).
                keep = " AND ".join(f"NOT (key GLOB {quote(glob(p))})" for p in patterns)
                new_body = (f"(SELECT coalesce(json_group_object(key, value), '{{}}') FROM "
                            f"json_each({new_body}) WHERE {keep})")
            sql = f"SELECT seq, time, sys, {new_body} AS body, ord FROM ({sql})"
            if fields is not None:
                fields = [name for name in fields if name not in gone and not any(
                    fnmatch.fnmatchcase(name, p) for p in patterns)]
            else:
                hidden += [name for name in ("_time", "_sysTime", "_rowId") if name in gone
                           or any(fnmatch.fnmatchcase(name, p) for p in patterns)]
                away_patterns += patterns
            comp.raw_body = False
        elif kind == "project-rename":
            sql = keep_order(sql)
            if order is not None:
                order = "ord"
            new_body = "body"
            for new, old in op[1]:
                if old in ("_time", "_sysTime", "_rowId") or new in ("_time", "_sysTime",
                                                                     "_rowId"):
                    raise AplError(f"project-rename of {old} to {new}: the local service "
                                   f"cannot rename its system fields")
                value = comp.json_value(comp.expr(Field(old)), old)
                removed = f"json_remove({new_body}, {quote(path(old))}, {quote(path_flat(old))})"
                new_body = f"json_set({removed}, {quote(path_flat(new))}, {value})"
                if fields is not None:
                    fields = [new if name == old else name for name in fields]
            sql = f"SELECT seq, time, sys, {new_body} AS body, ord FROM ({sql})"
            comp.raw_body = False
        elif kind == "count":
            sql = (f"SELECT NULL AS seq, NULL AS time, NULL AS sys, "
                   f"json_object('count', count(*), {quote(MATCHED)}, count(*)) AS body, "
                   f"NULL AS ord FROM ({sql})")
            fields, aggregated, order, order_report = ["count"], True, None, []
            comp.raw_body = False
            groups, aggs = [], [("count", "count")]
            agg_info["count"] = {"name": "count", "fields": [], "args": []}
        elif kind == "summarize":
            _, agg_list, group_list = op
            items, group_sql, names = [], [], []
            time_group = "NULL"
            time_name = None
            order_parts = []
            bin_us = None
            for name, e in group_list:
                s = comp.expr(e)
                group_sql.append(s.sql)
                items.append(f"{quote(name)}, {comp.json_value(s)}")
                names.append(name)
                if s.kind == "time" and time_group == "NULL":
                    time_group = s.sql
                    time_name = name
                    order_parts.append("time ASC")
                    bin_us = s.bin_us
                else:
                    order_parts.append(f"json_extract(body, {quote(path_flat(name))}) ASC")
            aggs = []
            star: str | None = None  # arg_max(x, *): the winning row's whole body
            for name, call in agg_list:
                if call.name in ("percentile", "percentiles", "arg_max", "arg_min"):
                    for column, value_sql, info in comp.multi_aggregate(name, call):
                        if column == "*":
                            if star is not None:
                                raise AplError("one arg_max(..., *) or arg_min(..., *) per "
                                               "summarize")
                            star = value_sql
                            names.append("*")
                            continue
                        if column in names:
                            continue  # arg_max(x, x): the one column
                        items.append(f"{quote(column)}, {value_sql}")
                        names.append(column)
                        aggs.append((column, call.name))
                        agg_info[column] = info
                    continue
                items.append(f"{quote(name)}, {comp.aggregate(call)}")
                names.append(name)
                aggs.append((name, call.name))
                agg_info[name] = _agg_info(call)
            items.append(f"{quote(MATCHED)}, count(*)")  # the events in the group: rowsMatched
            made = f"json_object({', '.join(items)})"
            if star is not None:
                # The winner's fields, then the groups and aggregations over them.
                made = f"json_patch(coalesce({star}, '{{}}'), {made})"
            if comp.columns is not None:
                # Nothing before the summarize may read the event's JSON: there is none.
                if _BODY.search(" ".join([sql, made, *group_sql])):
                    raise NotNarrow("body")
                comp.columns = None
            sql = (f"SELECT NULL AS seq, {time_group} AS time, NULL AS sys, "
                   f"{made} AS body, NULL AS ord FROM ({sql})"
                   + (f" GROUP BY {', '.join(group_sql)}" if group_sql else ""))
            fields, aggregated = names, True
            comp.raw_body = False
            groups = [name for name, _ in group_list]
            others = [name for (name, _), g in zip(group_list, group_sql, strict=True)
                      if g != time_group]
            if time_group != "NULL" and others and aggs and group_sql[0] == time_group:
                series = (others, aggs[0][0])
            order = ", ".join(order_parts) or None
            order_report = []
    final_order = order or (None if aggregated else _DEFAULT_ORDER)
    if not order_report and final_order == _DEFAULT_ORDER:
        order_report = [("_time", True)]
    # Events with no take or limit come a page at a time, as the service answers them (one
    # more row is read, to know whether there is a next page).
    page = DEFAULT_PAGE if not aggregated and not takes else None
    sql = (f"SELECT seq, time, sys, body FROM ({sql})"
           + (f" ORDER BY {final_order}" if final_order else "")
           + f" LIMIT {MAX_ROWS if page is None else page + 1}")
    return Compiled(sql, q.dataset, fields, aggregated, groups, aggs, order_report, bin_us,
                    hidden, _messages(q), "_rowId" in text, page, agg_info, away_patterns,
                    time_name)


def like_pattern(text: str) -> str:
    """A LIKE pattern finding ``text`` anywhere (its own % _ and \\ escaped with \\)."""
    return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def time_bounds(text: str, now_us: int | None = None) -> tuple[int | None, int | None]:
    """The ``_time`` range a query's leading ``where``s confine it to, ``(lo, hi)`` (``lo``
    included, ``hi`` not; None: unbounded): ``where _time >= ago(15m)``, the page's
    ``where _time < datetime(...) or (_time == datetime(...) and ...)``. The reader scans
    only that part of the dataset."""
    q = parse_query(text)
    comp = Compiler(time.time_ns() // 1000 if now_us is None else now_us, text)
    lo: int | None = None
    hi: int | None = None
    for op in q.ops:
        if op[0] == "search":
            continue
        if op[0] != "where":
            break
        a, b = _bounds(comp, op[1])
        if a is not None:
            lo = a if lo is None else max(lo, a)
        if b is not None:
            hi = b if hi is None else min(hi, b)
    return lo, hi


_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "=="}


def _bounds(comp: Compiler, e: Any) -> tuple[int | None, int | None]:
    if not isinstance(e, Bin):
        return None, None
    if e.op in ("and", "or"):
        (a1, b1), (a2, b2) = _bounds(comp, e.left), _bounds(comp, e.right)
        if e.op == "and":
            lo = a1 if a2 is None else a2 if a1 is None else max(a1, a2)
            hi = b1 if b2 is None else b2 if b1 is None else min(b1, b2)
            return lo, hi
        return (None if a1 is None or a2 is None else min(a1, a2),
                None if b1 is None or b2 is None else max(b1, b2))
    op, field, other = e.op, e.left, e.right
    if not (isinstance(field, Field) and field.name == "_time"):
        op, field, other = _FLIP.get(e.op, ""), e.right, e.left
    if op not in _FLIP or not (isinstance(field, Field) and field.name == "_time"):
        return None, None
    try:
        value = comp.as_time(comp.expr(other))
    except AplError:
        return None, None
    if not value.is_const or not isinstance(value.const, int) or isinstance(value.const, bool):
        return None, None
    v = value.const
    return {">": (v + 1, None), ">=": (v, None), "<": (None, v), "<=": (None, v + 1),
            "==": (v, v + 1)}[op]


def _agg_info(call: Call) -> dict[str, Any]:
    """What a tabular answer says of an aggregation: its name, the fields it reads and its
    other arguments (``percentile(duration, 95)``: fields ``duration``, args ``95``)."""
    fields = [a.name for a in call.args if isinstance(a, Field)]
    args = [a.value for a in call.args if isinstance(a, Lit)]
    return {"name": call.name, "fields": fields, "args": args}


def _messages(q: Any) -> list[dict[str, Any]]:
    """The warnings the service reports in a query's status (its own wording and codes)."""
    always = sum(1 for op in q.ops if op[0] == "where" and isinstance(op[1], Lit)
                 and op[1].value is True)
    if not always:
        return []
    return [{"priority": "warn", "count": always,
             "code": "apl_whereclausealwaysevaluatestoTRUEwhichwillincludealldata_1",
             "msg": "where clause always evaluates to TRUE, which will include all data"}]


