"""APL expressions as SQLite expressions over the event store's row (``seq``, ``time``,
``sys``, ``body``): fields read with ``json_extract``, the functions, the string operators with
their cheap pre-filter on the stored JSON text, and the aggregations. ``aplsql`` builds the
operators' sub-selects from these.
"""

from __future__ import annotations

import json
import math
import re
import sqlite3
from dataclasses import dataclass
from typing import Any

from .apl import (
    AGGREGATIONS,
    AplError,
    Bin,
    Call,
    Field,
    InList,
    Lit,
    parse_time,
    position,
)
from .sqlfunctions import regex_package

# Python 3.11's sqlite3 sets a length limit on the reader connections (reader.py); on 3.10
# strcat is a function that checks the length itself.
_SETLIMIT = hasattr(sqlite3.Connection, "setlimit")

__all__ = ["MAX_REGEX", "Compiler", "Sql", "check_regex", "fmt_sql", "glob", "path",
           "path_flat", "quote"]


def quote(s: str) -> str:
    if "\x00" in s:
        raise AplError("strings may not contain NUL characters")
    return "'" + s.replace("'", "''") + "'"


def path(name: str) -> str:
    if '"' in name:
        # SQLite's JSON paths cannot name such a key: say so rather than match nothing.
        raise AplError(f"field names with a double quote are not supported here: {name!r}")
    return "$." + ".".join(f'"{part}"' for part in name.split("."))


def fmt_sql(t: str) -> str:
    return (f"(strftime('%Y-%m-%dT%H:%M:%S', ({t}) / 1000000, 'unixepoch') || "
            f"printf('.%06dZ', ({t}) % 1000000))")


@dataclass(frozen=True)
class Sql:
    sql: str
    kind: str  # value, time, span, bool
    const: Any = None  # the Python value of a constant, else None
    is_const: bool = False
    field: str | None = None  # the field it reads, for a plain field of the event
    bin_us: int | None = None  # the span, for bin(_time, span) and bin_auto(_time)


_ROWID = "printf('%016x', seq)"
# A name no query can spell: the leaf value of json_tree, for `* has "x"`.
LEAF = "\x00leaf"


class NotNarrow(Exception):
    """The query reads something the narrow table does not hold: the scan answers it."""


class Compiler:
    def __init__(self, now_us: int, text: str) -> None:
        self.now_us = now_us
        self.text = text
        self.raw_body = True  # body is still the stored JSON (no project/summarize yet)
        self.auto_span_us = 3_600_000_000  # bin_auto's span: set from the query's time range
        # Reading the narrow table (narrow.py): each kept field's column, until the summarize.
        self.columns: dict[str, str] | None = None

    def field(self, name: str) -> Sql:
        if self.columns is not None and name not in ("_time", LEAF):
            if name not in self.columns:
                raise NotNarrow(name)
            return Sql(self.columns[name], "value", field=name)
        if name == LEAF:
            return Sql("value", "value")
        if name == "_time":
            return Sql("time", "time")
        if name == "_sysTime":
            return Sql("sys", "value")
        if name == "_rowId":
            return Sql(f"(CASE WHEN seq IS NULL THEN NULL ELSE {_ROWID} END)", "value")
        if name == "*":
            raise AplError("* stands for every field only before an operator, as in "
                           "where * has 'timeout'")
        if "." in name:
            return Sql(f"coalesce(json_extract(body, {quote(path(name))}), "
                        f"json_extract(body, {quote(path_flat(name))}))", "value")
        return Sql(f"json_extract(body, {quote(path(name))})", "value", field=name)

    def const(self, value: Any, kind: str = "value") -> Sql:
        if value is None:
            sql = "NULL"
        elif isinstance(value, bool):
            sql = "1" if value else "0"
        elif isinstance(value, (int, float)):
            if isinstance(value, float) and not math.isfinite(value):
                raise AplError("numbers must be finite")
            sql = repr(value)
        else:
            sql = quote(str(value))
        return Sql(sql, kind, value, True)

    def expr(self, e: Any) -> Sql:
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
            return Sql(f"(NOT {sql})" if e.negated else sql, "bool")
        if isinstance(e, Bin):
            return self.binary(e)
        raise AplError(f"unsupported expression {e!r}")

    def as_time(self, s: Sql) -> Sql:
        if s.kind == "time":
            return s
        if s.is_const and isinstance(s.const, str):
            t = parse_time(s.const)
            if t is None:
                raise AplError(f"{s.const!r} is not a time (RFC 3339, as in "
                               f"2024-05-01T12:00:00Z)")
            return self.const(t, "time")
        if not s.is_const:
            # A field or expression beside a time (a column that extend set from
            # todatetime(), stored as its text): read as a time, as todatetime() reads it.
            return Sql(f"apl_todatetime({s.sql})", "time")
        return s

    def binary(self, e: Bin) -> Sql:
        op = e.op
        if isinstance(e.left, Field) and e.left.name == "*" and op not in ("and", "or"):
            return self.every_field(e)
        if op in ("and", "or"):
            left, right = self.expr(e.left), self.expr(e.right)
            return Sql(f"({left.sql} {op.upper()} {right.sql})", "bool")
        left, right = self.expr(e.left), self.expr(e.right)
        if op in ("+", "-", "*", "/", "%"):
            return self.arith(op, left, right, e.pos)
        if left.kind == "time" or right.kind == "time":
            left, right = self.as_time(left), self.as_time(right)
        if op == "==":
            return Sql(_guard(self.prefilter(left, right, "=="),
                               f"({left.sql} = {right.sql})"), "bool")
        if op == "!=":
            return Sql(f"({left.sql} IS NOT {right.sql})", "bool")
        if op in ("<", "<=", ">", ">="):
            return Sql(f"({left.sql} {op} {right.sql})", "bool")
        if op == "matches regex":
            if not right.is_const or not isinstance(right.const, str):
                raise AplError(f"matches regex takes the pattern as a string, at "
                               f"{position(self.text, e.pos)}")
            check_regex(right.const, position(self.text, e.pos))
            return Sql(f"coalesce(apl_matches({left.sql}, {right.sql}), 0)", "bool")
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
        return Sql(f"(NOT {sql})" if neg else sql, "bool")

    def every_field(self, e: Bin) -> Sql:
        """``* has "x"`` (and ``*`` before any comparison or string operator): some field of
        the event, at any depth, holds what the operator tests; a negated operator: none
        does."""
        neg = e.op.startswith("!") and e.op not in ("!=", "!~")
        positive = e.op[1:] if neg else e.op
        one = Compiler(self.now_us, self.text)
        one.raw_body = False
        inner = one.binary(Bin(positive, Field(LEAF), e.right, e.pos)).sql
        exists = (f"EXISTS (SELECT 1 FROM json_tree(body) WHERE type NOT IN ('object', "
                  f"'array') AND coalesce({inner}, 0))")
        right = self.expr(e.right)
        pre = self.prefilter(Sql("json_extract(body, '$')", "value"), right, "contains") if (
            positive in ("has", "contains", "==", "=~", "startswith", "endswith")) else ""
        sql = _guard(pre, exists)
        return Sql(f"(NOT {sql})" if neg else sql, "bool")

    def prefilter(self, left: Sql, right: Sql, op: str) -> str:
        """A cheap necessary condition on the raw JSON text, tested before the exact one.

        Parsing each event's JSON is most of a filtered scan's cost; a text search over the
        stored body rules most rows out first. Only valid while ``body`` is the stored JSON
        (written by ``json.dumps`` with its default ASCII escapes), so the literal's encoding
        is the stored one.
        """
        if not self.raw_body or not left.sql.startswith("json_extract(body, "):
            return ""
        value = right.const
        if (op == "==" and right.is_const and left.field is not None
                and isinstance(value, (int, float)) and not isinstance(value, bool)
                and abs(value) < 1e15 and value not in (0, 1)):
            # A top-level number is written "key":500 (a float 500.0 as "key":500.0, which
            # holds it too); below 1e15 json.dumps writes every number in plain digits. Not
            # 0 and 1: SQLite reads a JSON false and true as those.
            digits = str(int(value)) if float(value).is_integer() else repr(float(value))
            return f"instr(body, {quote(json.dumps(left.field) + ':' + digits)}) > 0"
        if not right.is_const or not isinstance(value, str) or not value:
            return ""
        if op == "==":
            needle = json.dumps(value)
            if left.field is not None:
                # Stored with separators (",", ":"): a top-level "key":"value" pair is
                # written exactly so, a much rarer text than the value alone.
                needle = json.dumps(left.field) + ":" + needle
            return f"instr(body, {quote(needle)}) > 0"
        if not all(" " <= ch <= "~" and ch not in "\"\\" for ch in value):
            return ""  # escaped in the JSON text: the raw literal would not be found there
        if op.endswith("_cs"):
            return f"instr(body, {quote(value)}) > 0"
        like = value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        # LIKE ignores ASCII case, as lower() does: the same rows pass.
        return f"body LIKE {quote('%' + like + '%')} ESCAPE '\\'"

    def arith(self, op: str, left: Sql, right: Sql, pos: int) -> Sql:
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
        return Sql(f"({left.sql} {op} {right.sql})", kind)

    def call(self, c: Call) -> Sql:
        name, args = c.name, c.args

        def arity(n: int) -> None:
            if len(args) != n:
                raise AplError(f"{name}() takes {n} argument{'s' if n != 1 else ''}")

        if name == "now":
            # now(-1h): now() and a timespan (scalar data types: now(-timespan)).
            if len(args) > 1:
                raise AplError("now() takes no argument or a timespan, as in now(-1h)")
            if not args:
                return self.const(self.now_us, "time")
            offset = self.expr(args[0])
            if offset.kind != "span" or not offset.is_const:
                raise AplError("now() takes a timespan, as in now(-1h)")
            return self.const(self.now_us + int(offset.const), "time")
        if name == "datetime_add":
            return self.datetime_add(args)
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
            return Sql(sql, "bool")
        if name == "not":
            arity(1)
            return Sql(f"(NOT coalesce({self.expr(args[0]).sql}, 0))", "bool")
        if name in ("tolower", "toupper", "strlen"):
            arity(1)
            # apl_lower/apl_upper (store.py): every letter, not only ASCII as SQLite's.
            fn = {"tolower": "apl_lower", "toupper": "apl_upper", "strlen": "length"}[name]
            return Sql(f"{fn}({self.expr(args[0]).sql})", "value")
        if name in ("strcat", "coalesce"):
            if not args or len(args) > 64:
                raise AplError(f"{name}() takes 1 to 64 arguments")
            parts = [self.expr(a) for a in args]
            if name == "coalesce":
                kinds = {p.kind for p in parts}
                return Sql(f"coalesce({', '.join(p.sql for p in parts)})",
                            kinds.pop() if len(kinds) == 1 else "value")
            # strcat: each argument as text, a missing one as nothing (as APL's strcat does).
            if not _SETLIMIT:  # the length limit is checked by the function (3.10)
                return Sql("apl_strcat(" + ", ".join(self.text_of(p) for p in parts) + ")",
                           "value")
            return Sql("(" + " || ".join(f"coalesce({self.text_of(p)}, '')" for p in parts)
                        + ")", "value")
        if name in ("tostring", "toint", "tolong", "todouble", "toreal"):
            arity(1)
            val = self.expr(args[0])
            if name == "tostring":
                return Sql(self.text_of(val), "value")
            cast = "INTEGER" if name in ("toint", "tolong") else "REAL"
            # A number stays one; a text converts when it reads as a number, else null (as
            # APL's conversions answer, where SQLite's CAST would say 0): its REAL is nonzero,
            # or it starts the way a zero does.
            text = f"trim(CAST({val.sql} AS TEXT))"
            return Sql(f"(CASE WHEN typeof({val.sql}) IN ('integer', 'real') "
                        f"OR CAST({text} AS REAL) != 0 OR {text} GLOB '[-+0.]*' "
                        f"THEN CAST({val.sql} AS {cast}) END)", "value")
        if name == "todatetime":
            arity(1)
            when = self.expr(args[0])
            if when.kind == "time":
                return when
            if when.is_const:
                # A text that is no time, or anything else that is none: null (reference:
                # todatetime); a number is nanoseconds since the epoch.
                value = when.const
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    return self.const(int(value) // 1000, "time")
                t = parse_time(value) if isinstance(value, str) else None
                return self.const(t, "time")
            # A field's value read as a time (sqlfunctions.apl_todatetime); none: null.
            return Sql(f"apl_todatetime({when.sql})", "time")
        if name == "case":
            # case(predicate, then, [predicate, then, ...] else): the first that holds.
            if len(args) < 3 or len(args) % 2 == 0 or len(args) > 129:
                raise AplError("case() takes predicate, value pairs and a last else value")
            parts = [self.expr(a) for a in args]
            whens = " ".join(f"WHEN coalesce({parts[k].sql}, 0) THEN {parts[k + 1].sql}"
                             for k in range(0, len(parts) - 1, 2))
            kinds = {p.kind for p in parts[1::2]} | {parts[-1].kind}
            return Sql(f"(CASE {whens} ELSE {parts[-1].sql} END)",
                        kinds.pop() if len(kinds) == 1 else "value")
        if name in ("iff", "iif"):
            arity(3)
            cond, then, other = (self.expr(a) for a in args)
            kind = then.kind if then.kind == other.kind else "value"
            return Sql(f"(CASE WHEN coalesce({cond.sql}, 0) THEN {then.sql} "
                        f"ELSE {other.sql} END)", kind)
        if name == "bin":
            arity(2)
            x, size = self.expr(args[0]), self.expr(args[1])
            if x.kind != "time" or size.kind != "span" or not size.is_const or size.const <= 0:
                raise AplError("bin() is supported on _time with a timespan, as in "
                               "bin(_time, 1h)")
            step = int(size.const)
            return Sql(f"(({x.sql} / {step}) * {step})", "time", bin_us=step)
        if name == "bin_auto":
            arity(1)
            x = self.expr(args[0])
            if x.kind != "time":
                raise AplError("bin_auto() is supported on _time, as in bin_auto(_time)")
            step = self.auto_span_us
            return Sql(f"(({x.sql} / {step}) * {step})", "time", bin_us=step)
        if name in AGGREGATIONS:
            raise AplError(f"{name}() is an aggregation: use it in summarize")
        raise AplError(f"unsupported function '{name}()' at {position(self.text, c.pos)}; the "
                       f"local service supports now, ago, datetime, isnull, isnotnull, "
                       f"isempty, isnotempty, not, tolower, toupper, strlen, strcat, "
                       f"coalesce, tostring, toint, tolong, todouble, toreal, todatetime, "
                       f"iff, case, bin")

    def datetime_add(self, args: tuple[Any, ...]) -> Sql:
        """datetime_add(part, n, datetime): a fixed unit (week ... microsecond) as arithmetic
        on the time; month, quarter and year by the calendar (sqlfunctions.apl_datetime_add),
        the day clamped to the month's last."""
        if len(args) != 3:
            raise AplError("datetime_add() takes a part, a number and a datetime, as in "
                           "datetime_add('hour', 1, _time)")
        part, n, when = (self.expr(a) for a in args)
        if not part.is_const or not isinstance(part.const, str) or (
                part.const.lower() not in DATETIME_PARTS):
            raise AplError(f"datetime_add()'s part is one of {', '.join(DATETIME_PARTS)}")
        when = self.as_time(when)
        if when.kind != "time":
            when = Sql(f"apl_todatetime({when.sql})", "time")
        unit = DATETIME_PARTS[part.const.lower()]
        if unit:
            return Sql(f"({when.sql} + CAST({n.sql} AS INTEGER) * {unit})", "time")
        return Sql(f"apl_datetime_add({quote(part.const.lower())}, {n.sql}, {when.sql})",
                   "time")

    def text_of(self, v: Sql) -> str:
        """SQL for a value as APL's tostring() writes it: times in RFC 3339, booleans as
        true/false, numbers and texts as they are."""
        if v.kind == "time":
            return fmt_sql(v.sql)
        if v.kind == "bool":
            return f"(CASE WHEN {v.sql} THEN 'true' ELSE 'false' END)"
        return f"CAST({v.sql} AS TEXT)"

    def json_value(self, s: Sql, name: str | None = None) -> str:
        """SQL giving the value to put in a json_object (a JSON value, not its text)."""
        if s.kind == "time":
            if s.sql == "time":
                return f"coalesce(body -> '$._time', json_quote({fmt_sql('time')}))"
            return fmt_sql(s.sql)
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
            return fmt_sql(f"{name}({x.sql})")
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
                    sql = fmt_sql(f"CAST({sql} AS INTEGER)")
                out.append((column, sql, {"name": call.name, "fields": [field] if field
                                          else [], "args": [p]}))
            return out
        # arg_max(x, a, b): the row where x is greatest (arg_min: least); x and its a and b.
        best = "max" if call.name == "arg_max" else "min"
        info = {"name": call.name, "fields": [field] if field else [], "args": []}
        value = f"{best}({x.sql})"
        out.append((field or name, fmt_sql(value) if x.kind == "time" else value, info))
        wanted = [a.name for a in args[1:] if isinstance(a, Field)]
        if "*" in wanted:
            out.append(("*", f"apl_{call.name}({x.sql}, body)", info))
        named = [w for w in wanted if w != "*"]
        if named:
            parts = ", ".join(f"{quote(w)}, {self.json_value(self.expr(Field(w)), w)}"
                              for w in named)
            row = f"apl_{call.name}({x.sql}, json_object({parts}))"
            for w in named:
                out.append((w, f"json_extract({row}, {quote(path_flat(w))})", info))
        return out


# The longest regex pattern a query may hold.
MAX_REGEX = 1_000


# datetime_add's parts: microseconds in each fixed one; 0 for the calendar's.
DATETIME_PARTS = {"year": 0, "quarter": 0, "month": 0, "week": 604_800_000_000,
                  "day": 86_400_000_000, "hour": 3_600_000_000, "minute": 60_000_000,
                  "second": 1_000_000, "millisecond": 1_000, "microsecond": 1}


def check_regex(pattern: str, where: str) -> None:
    """AplError unless ``pattern`` is a regex the local service can run (``matches regex``).

    With the ``regex`` package (the ``regex`` extra) it matches in this process, with a
    timeout; without it, Python's ``re`` matches in a helper process that the query's deadline
    ends (sqlfunctions, regexworker): either way one pattern that backtracks without end stops
    at the deadline."""
    if len(pattern) > MAX_REGEX:
        raise AplError(f"the regex at {where} is longer than {MAX_REGEX:,} characters")
    package = regex_package()
    try:
        if package is not None:
            package.compile(pattern)
        else:
            re.compile(pattern)
    except (re.error, getattr(package, "error", re.error)) as exc:
        raise AplError(f"the regex at {where} is not valid: {exc}") from None


def glob(pattern: str) -> str:
    # APL's * as GLOB's; GLOB's other specials taken literally.
    return "".join(f"[{c}]" if c in "?[" else c for c in pattern)


def _folder(left: Sql, right: Sql) -> str:
    """The case folding of a case-insensitive comparison: SQLite's ``lower`` (ASCII, fast)
    when a side is an ASCII constant, as then no other letter can match; else every letter's
    (store.apl_lower), so "ÉCOLE" =~ "école"."""
    consts = [s.const for s in (left, right) if s.is_const and isinstance(s.const, str)]
    return "lower" if consts and all(c.isascii() for c in consts) else "apl_lower"


def _guard(pre: str, exact: str) -> str:
    # CASE, not AND: inside an expression SQLite evaluates both sides of an AND, and the
    # point of the cheap test is that the exact one (a JSON parse) mostly does not run.
    return f"(CASE WHEN {pre} THEN {exact} ELSE 0 END)" if pre else exact


def path_flat(name: str) -> str:
    path(name)  # the same check
    return f'$."{name}"'

