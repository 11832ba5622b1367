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
import time
from dataclasses import dataclass, field
from typing import Any

from .apl import (
    AGGREGATIONS,
    AplError,
    Bin,
    Call,
    Field,
    InList,
    Lit,
    format_trimmed,
    parse_query,
    parse_time,
    position,
    span_us,
)

__all__ = ["Compiled", "Result", "compile_query", "legacy_answer", "run", "tabular_answer"]

# At most this many rows in one answer, like the real service's cap on a query's result.
MAX_ROWS = 65_000
# The rows of events a query with no take or limit answers: a page, the next one by cursor.
DEFAULT_PAGE = 1_000
# A key no APL name can spell: each summary row's count of its events, for rowsMatched.
MATCHED = "\x01matched"
# At most this much of stored events is read for one answer (a larger one is partial): a
# query over big events otherwise took minutes and gigabytes of memory.
MAX_ANSWER_BYTES = 64 * 1024 * 1024


def _q(s: str) -> str:
    if "\x00" in s:
        raise AplError("strings may not contain NUL characters")
    return "'" + s.replace("'", "''") + "'"


def _path(name: str) -> str:
    if '"' in name:
        # SQLite's JSON paths cannot name such a key: say so rather than match nothing.
        raise AplError(f"field names with a double quote are not supported here: {name!r}")
    return "$." + ".".join(f'"{part}"' for part in name.split("."))


def _fmt_sql(t: str) -> str:
    return (f"(strftime('%Y-%m-%dT%H:%M:%S', ({t}) / 1000000, 'unixepoch') || "
            f"printf('.%06dZ', ({t}) % 1000000))")


@dataclass(frozen=True)
class _Sql:
    sql: str
    kind: str  # value, time, span, bool
    const: Any = None  # the Python value of a constant, else None
    is_const: bool = False
    field: str | None = None  # the field it reads, for a plain field of the event
    bin_us: int | None = None  # the span, for bin(_time, span) and bin_auto(_time)


_ROWID = "printf('%016x', seq)"


class _Compiler:
    def __init__(self, now_us: int, text: str) -> None:
        self.now_us = now_us
        self.text = text
        self.raw_body = True  # body is still the stored JSON (no project/summarize yet)
        self.auto_span_us = 3_600_000_000  # bin_auto's span: set from the query's time range

    def field(self, name: str) -> _Sql:
        if name == "_time":
            return _Sql("time", "time")
        if name == "_sysTime":
            return _Sql("sys", "value")
        if name == "_rowId":
            return _Sql(f"(CASE WHEN seq IS NULL THEN NULL ELSE {_ROWID} END)", "value")
        if "." in name:
            return _Sql(f"coalesce(json_extract(body, {_q(_path(name))}), "
                        f"json_extract(body, {_q(_path_flat(name))}))", "value")
        return _Sql(f"json_extract(body, {_q(_path(name))})", "value", field=name)

    def const(self, value: Any, kind: str = "value") -> _Sql:
        if value is None:
            sql = "NULL"
        elif isinstance(value, bool):
            sql = "1" if value else "0"
        elif isinstance(value, (int, float)):
            if isinstance(value, float) and not math.isfinite(value):
                raise AplError("numbers must be finite")
            sql = repr(value)
        else:
            sql = _q(str(value))
        return _Sql(sql, kind, value, True)

    def expr(self, e: Any) -> _Sql:
        if isinstance(e, Lit):
            return self.const(e.value, e.kind)
        if isinstance(e, Field):
            return self.field(e.name)
        if isinstance(e, Call):
            return self.call(e)
        if isinstance(e, InList):
            left = self.expr(e.left)
            vals = [self.expr(v) for v in e.values]
            if left.kind == "time":
                vals = [self.as_time(v) for v in vals]
            if e.insensitive:
                inner = (f"lower({left.sql}) IN ("
                         + ", ".join(f"lower({v.sql})" for v in vals) + ")")
            else:
                inner = f"{left.sql} IN (" + ", ".join(v.sql for v in vals) + ")"
            sql = f"coalesce({inner}, 0)"
            return _Sql(f"(NOT {sql})" if e.negated else sql, "bool")
        if isinstance(e, Bin):
            return self.binary(e)
        raise AplError(f"unsupported expression {e!r}")

    def as_time(self, s: _Sql) -> _Sql:
        if s.kind == "time":
            return s
        if s.is_const and isinstance(s.const, str):
            t = parse_time(s.const)
            if t is None:
                raise AplError(f"{s.const!r} is not a time (RFC 3339, as in "
                               f"2024-05-01T12:00:00Z)")
            return self.const(t, "time")
        return s

    def binary(self, e: Bin) -> _Sql:
        op = e.op
        if op in ("and", "or"):
            left, right = self.expr(e.left), self.expr(e.right)
            return _Sql(f"({left.sql} {op.upper()} {right.sql})", "bool")
        left, right = self.expr(e.left), self.expr(e.right)
        if op in ("+", "-", "*", "/", "%"):
            return self.arith(op, left, right, e.pos)
        if left.kind == "time" or right.kind == "time":
            left, right = self.as_time(left), self.as_time(right)
        if op == "==":
            return _Sql(_guard(self.prefilter(left, right, "=="),
                               f"({left.sql} = {right.sql})"), "bool")
        if op == "!=":
            return _Sql(f"({left.sql} IS NOT {right.sql})", "bool")
        if op in ("<", "<=", ">", ">="):
            return _Sql(f"({left.sql} {op} {right.sql})", "bool")
        if op == "matches regex":
            if not right.is_const or not isinstance(right.const, str):
                raise AplError(f"matches regex takes the pattern as a string, at "
                               f"{position(self.text, e.pos)}")
            check_regex(right.const, position(self.text, e.pos))
            return _Sql(f"coalesce(apl_matches({left.sql}, {right.sql}), 0)", "bool")
        neg = op.startswith("!")
        base = op.lstrip("!")
        lo = "" if base.endswith("_cs") else _folder(left, right)
        name = base.removesuffix("_cs")
        a, b = f"{lo}({left.sql})", f"{lo}({right.sql})"
        pre = self.prefilter(left, right, base)
        if base in ("=~", "~"):
            sql = f"coalesce({a} = {b}, 0)"
            neg = op == "!~"
        elif name == "contains":
            sql = _guard(pre, f"coalesce(instr({a}, {b}) > 0, 0)")
        elif name == "has":
            # A whole term (store.apl_has): "error" has "error", "errors" does not.
            cs = 1 if base.endswith("_cs") else 0
            pre = self.prefilter(left, right, "contains_cs" if cs else "contains")
            sql = _guard(pre, f"coalesce(apl_has({left.sql}, {right.sql}, {cs}), 0)")
        elif name == "startswith":
            sql = _guard(pre, f"coalesce(substr({a}, 1, length({b})) = {b}, 0)")
        elif name == "endswith":
            sql = _guard(pre, f"coalesce(length({a}) >= length({b}) AND "
                              f"substr({a}, length({a}) - length({b}) + 1) = {b}, 0)")
        else:
            raise AplError(f"unsupported operator '{op}'")
        return _Sql(f"(NOT {sql})" if neg else sql, "bool")

    def prefilter(self, left: _Sql, right: _Sql, op: str) -> str:
        """A cheap necessary condition on the raw JSON text, tested before the exact one.

        Parsing each event's JSON is most of a filtered scan's cost; a text search over the
        stored body rules most rows out first. Only valid while ``body`` is the stored JSON
        (written by ``json.dumps`` with its default ASCII escapes), so the literal's encoding
        is the stored one.
        """
        if not self.raw_body or not left.sql.startswith("json_extract(body, "):
            return ""
        value = right.const
        if not right.is_const or not isinstance(value, str) or not value:
            return ""
        if op == "==":
            needle = json.dumps(value)
            if left.field is not None:
                # Stored with separators (",", ":"): a top-level "key":"value" pair is
                # written exactly so, a much rarer text than the value alone.
                needle = json.dumps(left.field) + ":" + needle
            return f"instr(body, {_q(needle)}) > 0"
        if not all(" " <= ch <= "~" and ch not in "\"\\" for ch in value):
            return ""  # escaped in the JSON text: the raw literal would not be found there
        if op.endswith("_cs"):
            return f"instr(body, {_q(value)}) > 0"
        like = value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        # LIKE ignores ASCII case, as lower() does: the same rows pass.
        return f"body LIKE {_q('%' + like + '%')} ESCAPE '\\'"

    def arith(self, op: str, left: _Sql, right: _Sql, pos: int) -> _Sql:
        kinds = (left.kind, right.kind)
        if op in ("+", "-") and kinds in (("time", "span"), ("span", "time"), ("span", "span")):
            kind = "span" if kinds == ("span", "span") else "time"
        elif op == "-" and kinds == ("time", "time"):
            kind = "span"
        elif "time" in kinds:
            raise AplError(f"cannot use {op} on a datetime and a {right.kind} at "
                           f"{position(self.text, pos)}")
        else:
            kind = "value" if "span" not in kinds else "span"
        if left.is_const and right.is_const and isinstance(left.const, (int, float)) and (
                isinstance(right.const, (int, float))) and op in ("+", "-"):
            value = left.const + right.const if op == "+" else left.const - right.const
            return self.const(value, kind)
        return _Sql(f"({left.sql} {op} {right.sql})", kind)

    def call(self, c: Call) -> _Sql:
        name, args = c.name, c.args

        def arity(n: int) -> None:
            if len(args) != n:
                raise AplError(f"{name}() takes {n} argument{'s' if n != 1 else ''}")

        if name == "now":
            arity(0)
            return self.const(self.now_us, "time")
        if name == "ago":
            arity(1)
            span = self.expr(args[0])
            if span.kind != "span" or not span.is_const:
                raise AplError("ago() takes a timespan, as in ago(1h)")
            return self.const(self.now_us - int(span.const), "time")
        if name == "datetime":
            arity(1)
            return self.as_time(self.expr(args[0]))
        if name in ("isnull", "isnotnull", "isempty", "isnotempty"):
            arity(1)
            v = self.expr(args[0]).sql
            sql = {"isnull": f"({v} IS NULL)", "isnotnull": f"({v} IS NOT NULL)",
                   "isempty": f"(coalesce({v}, '') = '')",
                   "isnotempty": f"(coalesce({v}, '') != '')"}[name]
            return _Sql(sql, "bool")
        if name == "not":
            arity(1)
            return _Sql(f"(NOT coalesce({self.expr(args[0]).sql}, 0))", "bool")
        if name in ("tolower", "toupper", "strlen"):
            arity(1)
            # apl_lower/apl_upper (store.py): every letter, not only ASCII as SQLite's.
            fn = {"tolower": "apl_lower", "toupper": "apl_upper", "strlen": "length"}[name]
            return _Sql(f"{fn}({self.expr(args[0]).sql})", "value")
        if name in ("strcat", "coalesce"):
            if not args or len(args) > 64:
                raise AplError(f"{name}() takes 1 to 64 arguments")
            parts = [self.expr(a) for a in args]
            if name == "coalesce":
                kinds = {p.kind for p in parts}
                return _Sql(f"coalesce({', '.join(p.sql for p in parts)})",
                            kinds.pop() if len(kinds) == 1 else "value")
            # strcat: each argument as text, a missing one as nothing (as APL's strcat does).
            return _Sql("(" + " || ".join(f"coalesce({self.text_of(p)}, '')" for p in parts)
                        + ")", "value")
        if name in ("tostring", "toint", "tolong", "todouble", "toreal"):
            arity(1)
            val = self.expr(args[0])
            if name == "tostring":
                return _Sql(self.text_of(val), "value")
            cast = "INTEGER" if name in ("toint", "tolong") else "REAL"
            # A number stays one; a text converts when it reads as a number, else null (as
            # APL's conversions answer, where SQLite's CAST would say 0): its REAL is nonzero,
            # or it starts the way a zero does.
            text = f"trim(CAST({val.sql} AS TEXT))"
            return _Sql(f"(CASE WHEN typeof({val.sql}) IN ('integer', 'real') "
                        f"OR CAST({text} AS REAL) != 0 OR {text} GLOB '[-+0.]*' "
                        f"THEN CAST({val.sql} AS {cast}) END)", "value")
        if name == "todatetime":
            arity(1)
            when = self.expr(args[0])
            if when.kind == "time":
                return when
            if when.is_const:
                return self.as_time(when)
            # A field's text read as a time (store.apl_todatetime); not a time: null.
            return _Sql(f"apl_todatetime({when.sql})", "time")
        if name == "case":
            # case(predicate, then, [predicate, then, ...] else): the first that holds.
            if len(args) < 3 or len(args) % 2 == 0 or len(args) > 129:
                raise AplError("case() takes predicate, value pairs and a last else value")
            parts = [self.expr(a) for a in args]
            whens = " ".join(f"WHEN coalesce({parts[k].sql}, 0) THEN {parts[k + 1].sql}"
                             for k in range(0, len(parts) - 1, 2))
            kinds = {p.kind for p in parts[1::2]} | {parts[-1].kind}
            return _Sql(f"(CASE {whens} ELSE {parts[-1].sql} END)",
                        kinds.pop() if len(kinds) == 1 else "value")
        if name in ("iff", "iif"):
            arity(3)
            cond, then, other = (self.expr(a) for a in args)
            kind = then.kind if then.kind == other.kind else "value"
            return _Sql(f"(CASE WHEN coalesce({cond.sql}, 0) THEN {then.sql} "
                        f"ELSE {other.sql} END)", kind)
        if name == "bin":
            arity(2)
            x, size = self.expr(args[0]), self.expr(args[1])
            if x.kind != "time" or size.kind != "span" or not size.is_const or size.const <= 0:
                raise AplError("bin() is supported on _time with a timespan, as in "
                               "bin(_time, 1h)")
            step = int(size.const)
            return _Sql(f"(({x.sql} / {step}) * {step})", "time", bin_us=step)
        if name == "bin_auto":
            arity(1)
            x = self.expr(args[0])
            if x.kind != "time":
                raise AplError("bin_auto() is supported on _time, as in bin_auto(_time)")
            step = self.auto_span_us
            return _Sql(f"(({x.sql} / {step}) * {step})", "time", bin_us=step)
        if name in AGGREGATIONS:
            raise AplError(f"{name}() is an aggregation: use it in summarize")
        raise AplError(f"unsupported function '{name}()' at {position(self.text, c.pos)}; the "
                       f"local service supports now, ago, datetime, isnull, isnotnull, "
                       f"isempty, isnotempty, not, tolower, toupper, strlen, strcat, "
                       f"coalesce, tostring, toint, tolong, todouble, toreal, todatetime, "
                       f"iff, case, bin")

    def text_of(self, v: _Sql) -> str:
        """SQL for a value as APL's tostring() writes it: times in RFC 3339, booleans as
        true/false, numbers and texts as they are."""
        if v.kind == "time":
            return _fmt_sql(v.sql)
        if v.kind == "bool":
            return f"(CASE WHEN {v.sql} THEN 'true' ELSE 'false' END)"
        return f"CAST({v.sql} AS TEXT)"

    def json_value(self, s: _Sql, name: str | None = None) -> str:
        """SQL giving the value to put in a json_object (a JSON value, not its text)."""
        if s.kind == "time":
            if s.sql == "time":
                return f"coalesce(body -> '$._time', json_quote({_fmt_sql('time')}))"
            return _fmt_sql(s.sql)
        if s.kind == "bool":
            return f"json(CASE WHEN {s.sql} THEN 'true' ELSE 'false' END)"
        if name is not None and s.sql.startswith("json_extract(body, "):
            # Objects and arrays stay JSON (json_extract would give their text).
            return f"(body -> {s.sql[len('json_extract(body, '):-1]})"
        return s.sql

    def aggregate(self, call: Call) -> str:
        name, args = call.name, call.args
        if name == "count":
            if args:
                raise AplError("count() takes no argument; use countif(predicate)")
            return "count(*)"
        if len(args) != 1:
            raise AplError(f"{name}() takes 1 argument")
        x = self.expr(args[0])
        if name == "countif":
            return f"sum(CASE WHEN {x.sql} THEN 1 ELSE 0 END)"
        if name == "dcount":
            return f"count(DISTINCT {x.sql})"
        if x.kind == "time" and name in ("min", "max"):
            return _fmt_sql(f"{name}({x.sql})")
        return f"{name}({x.sql})"

    def multi_aggregate(self, name: str, call: Call) -> list[tuple[str, str, dict[str, Any]]]:
        """The columns of an aggregation that makes several: (column, SQL, its "agg")."""
        args = call.args
        x = self.expr(args[0])
        field = args[0].name if isinstance(args[0], Field) else ""
        out = []
        if call.name in ("percentile", "percentiles"):
            for a in args[1:]:
                p = a.value
                label = str(int(p)) if float(p).is_integer() else str(p).replace(".", "_")
                column = (name if call.name == "percentile" and name != f"percentile_{field}"
                          else f"percentile_{field}_{label}")
                sql = f"apl_percentile({x.sql}, {float(p)!r})"
                if x.kind == "time":
                    sql = _fmt_sql(f"CAST({sql} AS INTEGER)")
                out.append((column, sql, {"name": call.name, "fields": [field] if field
                                          else [], "args": [p]}))
            return out
        # arg_max(x, a, b): the row where x is greatest (arg_min: least); x and its a and b.
        best = "max" if call.name == "arg_max" else "min"
        info = {"name": call.name, "fields": [field] if field else [], "args": []}
        value = f"{best}({x.sql})"
        out.append((field or name, _fmt_sql(value) if x.kind == "time" else value, info))
        wanted = [a.name for a in args[1:] if isinstance(a, Field)]
        if "*" in wanted:
            out.append(("*", f"apl_{call.name}({x.sql}, body)", info))
        named = [w for w in wanted if w != "*"]
        if named:
            parts = ", ".join(f"{_q(w)}, {self.json_value(self.expr(Field(w)), w)}"
                              for w in named)
            row = f"apl_{call.name}({x.sql}, json_object({parts}))"
            for w in named:
                out.append((w, f"json_extract({row}, {_q(_path_flat(w))})", info))
        return out


# The longest regex pattern a query may hold.
MAX_REGEX = 1_000


def check_regex(pattern: str, where: str) -> None:
    """AplError unless ``pattern`` is a regex the local service can run (``matches regex``).

    It needs the ``regex`` package: its matching takes a timeout, so one pattern that
    backtracks without end stops at the query's deadline. Python's own ``re`` cannot be
    stopped mid-match: one such pattern would hold the query (and the store) for ever."""
    if len(pattern) > MAX_REGEX:
        raise AplError(f"the regex at {where} is longer than {MAX_REGEX:,} characters")
    try:
        import regex  # type: ignore[import-untyped]
    except ImportError:
        raise AplError("matches regex needs the regex package in the local service's "
                       "environment: pip install 'loghandler-ingest[regex]'") from None
    try:
        regex.compile(pattern)
    except regex.error as exc:
        raise AplError(f"the regex at {where} is not valid: {exc}") from None


def _glob(pattern: str) -> str:
    # APL's * as GLOB's; GLOB's other specials taken literally.
    return "".join(f"[{c}]" if c in "?[" else c for c in pattern)


def _folder(left: _Sql, right: _Sql) -> str:
    """The case folding of a case-insensitive comparison: SQLite's ``lower`` (ASCII, fast)
    when a side is an ASCII constant, as then no other letter can match; else every letter's
    (store.apl_lower), so "ÉCOLE" =~ "école"."""
    consts = [s.const for s in (left, right) if s.is_const and isinstance(s.const, str)]
    return "lower" if consts and all(c.isascii() for c in consts) else "apl_lower"


def _guard(pre: str, exact: str) -> str:
    # CASE, not AND: inside an expression SQLite evaluates both sides of an AND, and the
    # point of the cheap test is that the exact one (a JSON parse) mostly does not run.
    return f"(CASE WHEN {pre} THEN {exact} ELSE 0 END)" if pre else exact


def _path_flat(name: str) -> str:
    _path(name)  # the same check
    return f'$."{name}"'


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


_DEFAULT_ORDER = "time DESC, seq DESC"


_AUTO_SPANS = [n * span_us(u) for n, u in ((1, "s"), (5, "s"), (10, "s"), (30, "s"), (1, "m"),
                                         (5, "m"), (10, "m"), (30, "m"), (1, "h"), (3, "h"),
                                         (6, "h"), (12, "h"), (1, "d"), (7, "d"), (30, "d"))]


def auto_span(first_us: int, last_us: int) -> int:
    """bin_auto's span for a time range: the smallest round span giving at most 100 bins."""
    width = max(0, last_us - first_us)
    return next((span for span in _AUTO_SPANS if width / span <= 100), _AUTO_SPANS[-1])


def compile_query(text: str, *, start_us: int | None = None, end_us: int | None = None,
                  now_us: int | None = None,
                  data_range: tuple[int, int] | None = None,
                  cursor: tuple[int, int, bool] | None = None) -> Compiled:
    """Compile ``text`` into one SELECT over the ``events`` table; AplError if unsupported.

    ``data_range`` (the dataset's first and last ``_time``) sizes ``bin_auto`` where the
    query has no ``start_us``/``end_us``. ``cursor`` (the ``_time`` and row of an event, and
    whether to include it) starts the rows after that event in the query's time order: older
    ones for the default newest-first order, newer ones after ``sort by _time asc``.
    """
    q = parse_query(text)
    now = time.time_ns() // 1000 if now_us is None else now_us
    comp = _Compiler(now, text)
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
    cond = [f"dataset = {_q(q.dataset)}"]
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
    sql = f"SELECT seq, time, sys, body, NULL AS ord FROM events WHERE {' AND '.join(cond)}"
    order: str | None = None  # SQL ORDER BY for the current rows, None: unordered
    order_report: list[tuple[str, bool]] = []
    fields: list[str] | None = None
    aggregated = False
    groups: list[str] = []
    aggs: list[tuple[str, str]] = []
    bin_us: int | None = None

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
            sql = f"SELECT seq, time, sys, body, ord FROM ({sql}) WHERE {c.sql}"
        elif kind == "search":
            # The stored text is the event's JSON with ASCII escapes: each term is looked for
            # in that form, case folded as SQLite folds (ASCII).
            conds = " AND ".join(
                f"instr(lower(body), lower({_q(json.dumps(term)[1:-1])})) > 0" for term in op[1])
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
                f"json_extract(body, {_q(_path_flat(k))})" for k in series_keys) + ")"
            total = f"sum(json_extract(body, {_q(_path_flat(series_value))}))"
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
                items.append(f"{_q(name)}, {comp.json_value(comp.expr(e), name)}")
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
                value = f"apl_parse({source.sql}, {_q(spec)}, {i})"
                if kind_ == "bool":  # SQLite has no booleans: JSON's, not 1 and 0
                    value = f"json(CASE {value} WHEN 1 THEN 'true' WHEN 0 THEN 'false' END)"
                values.append(f"{_q(_path_flat(name))}, {value}")
            sets = ", ".join(values)
            sql = f"SELECT seq, time, sys, json_set(body, {sets}) AS body, ord FROM ({sql})"
            if fields is not None:
                fields += [name for name in columns if name not in fields]
            comp.raw_body = False
        elif kind == "extend":
            sql = keep_order(sql)
            if order is not None:
                order = "ord"
            sets = ", ".join(f"{_q(_path_flat(name))}, {comp.json_value(comp.expr(e), name)}"
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
                paths = ", ".join(_q(_path_flat(name)) for name in gone)
                new_body = f"json_remove(body, {paths})"
            if patterns:
                # project-away user*: the top-level keys matching no pattern (and, as the
                # answer is built, the dotted fields of nested objects: away_patterns).
                keep = " AND ".join(f"NOT (key GLOB {_q(_glob(p))})" for p in patterns)
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
                removed = f"json_remove({new_body}, {_q(_path(old))}, {_q(_path_flat(old))})"
                new_body = f"json_set({removed}, {_q(_path_flat(new))}, {value})"
                if fields is not None:
                    fields = [new if name == old else name for name in fields]
            sql = f"SELECT seq, time, sys, {new_body} AS body, ord FROM ({sql})"
            comp.raw_body = False
        elif kind == "count":
            sql = (f"SELECT NULL AS seq, NULL AS time, NULL AS sys, "
                   f"json_object('count', count(*), {_q(MATCHED)}, count(*)) AS body, "
                   f"NULL AS ord FROM ({sql})")
            fields, aggregated, order, order_report = ["count"], True, None, []
            comp.raw_body = False
            groups, aggs = [], [("count", "count")]
            agg_info["count"] = {"name": "count", "fields": [], "args": []}
        elif kind == "summarize":
            _, agg_list, group_list = op
            items, group_sql, names = [], [], []
            time_group = "NULL"
            order_parts = []
            bin_us = None
            for name, e in group_list:
                s = comp.expr(e)
                group_sql.append(s.sql)
                items.append(f"{_q(name)}, {comp.json_value(s)}")
                names.append(name)
                if s.kind == "time" and time_group == "NULL":
                    time_group = s.sql
                    order_parts.append("time ASC")
                    bin_us = s.bin_us
                else:
                    order_parts.append(f"json_extract(body, {_q(_path_flat(name))}) ASC")
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
                        items.append(f"{_q(column)}, {value_sql}")
                        names.append(column)
                        aggs.append((column, call.name))
                        agg_info[column] = info
                    continue
                items.append(f"{_q(name)}, {comp.aggregate(call)}")
                names.append(name)
                aggs.append((name, call.name))
                agg_info[name] = _agg_info(call)
            items.append(f"{_q(MATCHED)}, count(*)")  # the events in the group: rowsMatched
            made = f"json_object({', '.join(items)})"
            if star is not None:
                # The winner's fields, then the groups and aggregations over them.
                made = f"json_patch(coalesce({star}, '{{}}'), {made})"
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
                    hidden, _messages(q), "_rowId" in text, page, agg_info, away_patterns)


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
            if total > max_bytes and raw:
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
    raw, truncated = _fetch(db.execute(compiled.sql), deadline,
                            MAX_ANSWER_BYTES if max_bytes is None else max_bytes)
    if compiled.page is not None and len(raw) > compiled.page:
        del raw[compiled.page:]
        truncated = True  # there is a next page: the status says isPartial, and its cursors
    keys = [(t, seq) for seq, t, _, _ in raw if t is not None and seq is not None]
    # Events: those read to answer (the service's scan stops once the answer is whole, and
    # counting the rest would cost the page a second scan per poll).
    matched = len(raw)
    rows: list[dict[str, Any]] = []
    system: list[tuple[str | None, str | None, str | None]] = []
    loads = json.loads
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
            matched = sum(counts)  # type: ignore[arg-type]
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
