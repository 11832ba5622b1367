"""A small subset of APL for the local service: a tokenizer, a recursive-descent parser, and a
compiler to one SQLite query over the event store.

The whole pipeline runs in SQLite: each tabular operator wraps the previous one as a sub-select
over the same four columns (``seq`` the row id, ``time`` epoch microseconds, ``sys`` the
``_sysTime``, ``body`` the event's JSON), so a ``where`` right after the source is flattened into
the scan of the (dataset, time, seq) index and a filtered ``count`` over a million events never
builds a Python object per event. Fields are read with ``json_extract``; ``project`` and
``summarize`` build a new ``body`` with ``json_object`` (``extend`` and ``project-away`` edit it
with ``json_set`` / ``json_remove``), so the operators after them work the same way. While the
body is still the stored JSON, a comparison with a string is first tested on its text (is
``"level":"error"`` in it?), so most events are never parsed. Anything outside the subset
raises ``AplError`` naming the unsupported part (the service answers it as a 400).

The subset (see README, "Querying"): a source (``['name']`` or ``name``); ``where`` (``filter``)
with ``== != < <= > >= =~ !~``, ``contains startswith endswith`` (and ``_cs`` and ``!`` forms),
``in`` / ``!in`` / ``in~``, ``and or not()``, ``isnull isnotnull isempty isnotempty``,
``now() ago() datetime()``, ``tolower toupper strlen``, ``+ - * /``, timespans (``1s 5m 1h 1d
100ms``); ``sort by`` / ``order by`` (``asc``/``desc``, default ``desc``); ``take`` / ``limit``;
``top N by``; ``project`` / ``extend`` (``name`` or ``name = expr``); ``project-away``;
``count``; ``summarize`` with ``count() countif() sum() avg() min() max() dcount()`` ``by``
fields, ``bin(_time, span)`` and ``bin_auto(_time)``; ``distinct``.
"""

from __future__ import annotations

import json
import math
import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

__all__ = [
    "AplError",
    "Compiled",
    "compile_query",
    "format_time",
    "parse_query",
    "parse_relative_time",
    "parse_time",
    "run",
]

# Expressions nest at most this deep (parentheses, calls, unary minus), and a query has at most
# this many binary operators: the compiler recurses through both.
MAX_DEPTH = 64
MAX_OPERATORS = 200
# At most this many rows in one answer, like the real service's cap on a query's result.
MAX_ROWS = 65_000

OPERATORS = ("where", "sort by", "order by", "take", "limit", "top", "project", "project-away",
             "extend", "count", "summarize", "distinct")

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_US = {"d": 86_400_000_000, "day": 86_400_000_000, "days": 86_400_000_000,
       "h": 3_600_000_000, "hr": 3_600_000_000, "hrs": 3_600_000_000,
       "hour": 3_600_000_000, "hours": 3_600_000_000,
       "m": 60_000_000, "min": 60_000_000, "minute": 60_000_000, "minutes": 60_000_000,
       "s": 1_000_000, "sec": 1_000_000, "second": 1_000_000, "seconds": 1_000_000,
       "ms": 1_000, "milli": 1_000, "millis": 1_000, "millisecond": 1_000,
       "milliseconds": 1_000,
       "us": 1, "micro": 1, "micros": 1, "microsecond": 1, "microseconds": 1}
_RFC3339 = re.compile(r"(\d{4}-\d\d-\d\d(?:[Tt ]\d\d:\d\d(?::\d\d)?)?)(?:\.(\d+))?"
                      r"([Zz]|[+-]\d\d:?\d\d)?")


class AplError(Exception):
    """A query outside the subset, or not valid: the message says what and where."""


# ---------------------------------------------------------------------------- time values

def parse_time(value: Any) -> int | None:
    """An RFC 3339 string as epoch microseconds (UTC when no offset); None if it is not one."""
    if not isinstance(value, str):
        return None
    try:
        dt = datetime.fromisoformat(value)
    except ValueError:
        # Python 3.10 takes neither "Z" nor more than six fraction digits (nanoseconds).
        m = _RFC3339.fullmatch(value.strip())
        if m is None:
            return None
        frac = (m.group(2) or "")[:6]
        zone = m.group(3) or ""
        zone = "+00:00" if zone in ("Z", "z") else zone
        try:
            dt = datetime.fromisoformat(m.group(1).replace("t", "T") + (
                "." + frac.ljust(6, "0") if frac else "") + zone)
        except ValueError:
            return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return (dt - _EPOCH) // _ONE_US


_ONE_US = datetime(1970, 1, 1, 0, 0, 0, 1, tzinfo=timezone.utc) - _EPOCH


def format_time(us: int) -> str:
    """Epoch microseconds as RFC 3339 UTC with six fraction digits (sorts as text)."""
    seconds, frac = divmod(us, 1_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{frac:06d}Z"


def parse_relative_time(value: Any, now_us: int) -> int:
    """``startTime``/``endTime``: RFC 3339, ``now`` or ``now-1h``; AplError otherwise."""
    if isinstance(value, str):
        text = value.strip()
        m = re.fullmatch(r"now(?:\s*([+-])\s*(\d+(?:\.\d+)?)([a-z]+))?", text)
        if m:
            if not m.group(1):
                return now_us
            span = _span(m.group(2), m.group(3), 0)
            return now_us + span if m.group(1) == "+" else now_us - span
        t = parse_time(text)
        if t is not None:
            return t
    raise AplError(f"{value!r} is not a time: use RFC 3339 (2024-05-01T12:00:00Z), "
                   f"'now' or 'now-1h'")


def _span(number: str, unit: str, pos: int) -> int:
    scale = _US.get(unit)
    if scale is None:
        raise AplError(f"unknown timespan unit {unit!r} at {pos + 1}: use d, h, m, s, ms or us")
    return int(float(number) * scale) if "." in number or "e" in number.lower() else (
        int(number) * scale)


# ---------------------------------------------------------------------------- tokenizer

@dataclass(frozen=True)
class Token:
    kind: str  # ident, string, number, span, op, eof
    value: Any
    pos: int


_WORD = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_WORD_OP = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*(?:-[A-Za-z][A-Za-z0-9_$]*)*")
_NUMBER = re.compile(r"\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")
_UNIT = re.compile(r"[A-Za-z]+")
_OPS = ("==", "!=", "<=", ">=", "=~", "!~", "|", "(", ")", "[", "]", ",", ".", "<", ">", "=",
        "+", "-", "*", "/", "!", "~", "%")


def tokenize(text: str) -> list[Token]:
    """The tokens of ``text``; AplError at the first character that starts none."""
    out: list[Token] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
            continue
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        if (c not in "\"')" and len(out) >= 2 and out[-1].value == "(" and
                out[-2].kind == "ident" and out[-2].value.lower() == "datetime"):
            # datetime(2024-05-01T12:00:00Z): the literal is the source text up to ')'.
            j = text.find(")", i)
            if j < 0:
                raise AplError(f"expected ')' after the datetime at {i + 1}")
            out.append(Token("string", text[i:j].strip(), i))
            i = j
            continue
        if c in "\"'":
            j, buf = i + 1, []
            while True:
                if j >= n:
                    raise AplError(f"unterminated string starting at {i + 1}")
                ch = text[j]
                if ch == c:
                    break
                if ch == "\\" and j + 1 < n:
                    esc = text[j + 1]
                    if esc == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", text[j + 2:j + 6]):
                        buf.append(chr(int(text[j + 2:j + 6], 16)))
                        j += 6
                        continue
                    buf.append({"n": "\n", "t": "\t", "r": "\r", "0": "\0"}.get(esc, esc))
                    j += 2
                    continue
                buf.append(ch)
                j += 1
            # \ud83c\udf89: a surrogate pair, as JSON writes characters beyond the BMP.
            joined = "".join(buf).encode("utf-16", "surrogatepass").decode("utf-16", "replace")
            out.append(Token("string", joined, i))
            i = j + 1
            continue
        if c.isdigit():
            m = _NUMBER.match(text, i)
            assert m is not None
            number = m.group(0)
            j = m.end()
            u = _UNIT.match(text, j)
            if u:
                out.append(Token("span", _span(number, u.group(0), i), i))
                i = u.end()
                continue
            value: Any = float(number) if any(ch in number for ch in ".eE") else int(number)
            out.append(Token("number", value, i))
            i = j
            continue
        if c.isalpha() or c in "_$":
            after_pipe = bool(out) and out[-1].kind == "op" and out[-1].value == "|"
            # Hyphens belong to operator names (project-away, mv-expand), right after a '|';
            # elsewhere a-b is a subtraction (names with hyphens are written ['a-b']).
            pattern = _WORD_OP if after_pipe else _WORD
            m = pattern.match(text, i)
            assert m is not None
            out.append(Token("ident", m.group(0), i))
            i = m.end()
            continue
        for op in _OPS:
            if text.startswith(op, i):
                out.append(Token("op", op, i))
                i += len(op)
                break
        else:
            raise AplError(f"unexpected character {c!r} at {i + 1}")
    out.append(Token("eof", None, n))
    return out


# ---------------------------------------------------------------------------- syntax tree

@dataclass(frozen=True)
class Lit:
    value: Any
    kind: str  # value, time, span


@dataclass(frozen=True)
class Field:
    name: str


@dataclass(frozen=True)
class Call:
    name: str
    args: tuple[Any, ...]
    pos: int


@dataclass(frozen=True)
class Bin:
    op: str
    left: Any
    right: Any
    pos: int


@dataclass(frozen=True)
class InList:
    left: Any
    values: tuple[Any, ...]
    negated: bool
    insensitive: bool


@dataclass
class Query:
    dataset: str
    ops: list[tuple[Any, ...]] = field(default_factory=list)


_STRING_OPS = {"contains", "contains_cs", "startswith", "startswith_cs", "endswith",
               "endswith_cs"}
_UNSUPPORTED_STRING_OPS = {"has", "has_cs", "hasprefix", "hassuffix", "has_any", "has_all",
                           "matches", "like", "between", "hasprefix_cs", "hassuffix_cs"}
_CMP = {"==", "!=", "<", "<=", ">", ">=", "=~", "!~"}
_AGGS = {"count", "countif", "sum", "avg", "min", "max", "dcount"}


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.toks = tokenize(text)
        self.i = 0
        self.depth = 0
        self.operators = 0

    # -- helpers
    def peek(self, k: int = 0) -> Token:
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def next(self) -> Token:
        tok = self.toks[self.i]
        self.i = min(self.i + 1, len(self.toks) - 1)
        return tok

    def at(self, kind: str, value: Any = None, k: int = 0) -> bool:
        tok = self.peek(k)
        return tok.kind == kind and (value is None or tok.value == value)

    def at_word(self, *words: str) -> bool:
        tok = self.peek()
        return tok.kind == "ident" and tok.value.lower() in words

    def where(self, tok: Token) -> str:
        return _at(self.text, tok.pos)

    def fail(self, message: str, tok: Token | None = None) -> AplError:
        return AplError(f"{message} at {self.where(tok or self.peek())}")

    def expect(self, kind: str, value: Any = None, what: str | None = None) -> Token:
        if not self.at(kind, value):
            tok = self.peek()
            found = "the end of the query" if tok.kind == "eof" else repr(tok.value)
            raise self.fail(f"expected {what or repr(value)}, found {found}")
        return self.next()

    # -- query
    def query(self) -> Query:
        q = Query(self.source())
        while self.at("op", "|"):
            self.next()
            q.ops.append(self.operator())
        if not self.at("eof"):
            tok = self.peek()
            raise self.fail(f"unexpected {tok.value!r}; operators are separated by '|'")
        return q

    def source(self) -> str:
        tok = self.peek()
        if self.at("op", "["):
            self.next()
            name = self.expect("string", what="a dataset name in quotes, as in ['logs']").value
            self.expect("op", "]")
            return str(name)
        if tok.kind == "ident":
            self.next()
            return str(tok.value)
        if tok.kind == "eof":
            raise AplError("the query is empty: start with a dataset, as in ['logs']")
        raise self.fail("a query starts with a dataset, as in ['logs'] | where ...")

    def operator(self) -> tuple[Any, ...]:
        tok = self.peek()
        if tok.kind != "ident":
            raise self.fail("expected an operator after '|'")
        word = tok.value.lower()
        self.next()
        if word in ("where", "filter"):
            return ("where", self.expr())
        if word in ("sort", "order"):
            self.expect("ident", None, "'by'")
            if self.toks[self.i - 1].value.lower() != "by":
                raise self.fail(f"expected 'by' after '{word}'", self.toks[self.i - 1])
            keys = [self.sort_key()]
            while self.at("op", ","):
                self.next()
                keys.append(self.sort_key())
            return ("sort", keys)
        if word in ("take", "limit"):
            n = self.expect("number", what="a number of rows").value
            if not isinstance(n, int) or n < 0:
                raise self.fail(f"{word} needs a whole number of rows", tok)
            return ("take", n)
        if word == "project":
            items = [self.named_expr()]
            while self.at("op", ","):
                self.next()
                items.append(self.named_expr())
            return ("project", items)
        if word == "extend":
            items = [self.named_expr(require_name=True)]
            while self.at("op", ","):
                self.next()
                items.append(self.named_expr(require_name=True))
            return ("extend", items)
        if word == "project-away":
            names = [self.field_name()]
            while self.at("op", ","):
                self.next()
                names.append(self.field_name())
            return ("project-away", names)
        if word == "top":
            n = self.expect("number", what="a number of rows").value
            if not isinstance(n, int) or n < 0:
                raise self.fail("top needs a whole number of rows", tok)
            if not self.at_word("by"):
                raise self.fail("expected 'by' after top N")
            self.next()
            return ("top", n, self.sort_key())
        if word == "distinct":
            groups = [self.named_expr()]
            while self.at("op", ","):
                self.next()
                groups.append(self.named_expr())
            return ("summarize", [], groups)
        if word == "count":
            return ("count",)
        if word == "summarize":
            return self.summarize()
        raise AplError(f"unsupported operator '{tok.value}' at {self.where(tok)}; the local "
                       f"service supports {', '.join(OPERATORS)}")

    def sort_key(self) -> tuple[Any, bool]:
        e = self.expr()
        desc = True
        if self.at_word("asc", "desc"):
            desc = self.next().value.lower() == "desc"
        if self.at_word("nulls"):
            self.next()
            self.expect("ident", None, "'first' or 'last'")
        return e, desc

    def field_name(self) -> str:
        e = self.primary()
        if not isinstance(e, Field):
            raise self.fail("expected a field name")
        return e.name

    def named_expr(self, require_name: bool = False) -> tuple[str, Any]:
        if self.peek().kind == "ident" and self.at("op", "=", 1):
            name = self.next().value
            self.next()
            return str(name), self.expr()
        if self.at("op", "[") and self.at("op", "=", 3):
            self.next()
            name = self.expect("string").value
            self.expect("op", "]")
            self.next()
            return str(name), self.expr()
        e = self.expr()
        if require_name or not isinstance(e, Field):
            raise self.fail("name the computed column, as in name = expression")
        return e.name, e

    def summarize(self) -> tuple[Any, ...]:
        aggs = []
        if not self.at_word("by"):
            aggs.append(self.aggregation())
            while self.at("op", ","):
                self.next()
                aggs.append(self.aggregation())
        groups: list[tuple[str, Any]] = []
        if self.at_word("by"):
            self.next()
            groups.append(self.named_expr_group())
            while self.at("op", ","):
                self.next()
                groups.append(self.named_expr_group())
        if not aggs and not groups:
            raise self.fail("summarize needs an aggregation, as in summarize count() by level")
        return ("summarize", aggs, groups)

    def aggregation(self) -> tuple[str, Call]:
        name: str | None = None
        if self.peek().kind == "ident" and self.at("op", "=", 1):
            name = self.next().value
            self.next()
        tok = self.peek()
        e = self.primary()
        if not isinstance(e, Call) or e.name not in _AGGS:
            label = e.name if isinstance(e, Call) else tok.value
            raise AplError(f"unsupported aggregation '{label}' at {self.where(tok)}; the local "
                           f"service supports {', '.join(sorted(_AGGS))}")
        if name is None:
            arg = e.args[0] if e.args else None
            name = f"{e.name}_" + (arg.name if isinstance(arg, Field) else "")
        return str(name), e

    def named_expr_group(self) -> tuple[str, Any]:
        name, e = self.named_expr() if not self.at_word("bin", "bin_auto") else (
            "", self.expr())
        if not name:
            if isinstance(e, Call) and e.name in ("bin", "bin_auto") and e.args and (
                    isinstance(e.args[0], Field)):
                name = e.args[0].name
            else:
                raise self.fail("name the group, as in name = expression")
        return name, e

    # -- expressions
    def bin(self, op: str, left: Any, right: Any, pos: int) -> Bin:
        # A chain of and/or/+ is a left-deep tree that the compiler walks recursively: bound
        # the operators per query as the nesting is bounded.
        self.operators += 1
        if self.operators > MAX_OPERATORS:
            raise AplError(f"the query has more than {MAX_OPERATORS} operators in its "
                           f"expressions; split it")
        return Bin(op, left, right, pos)

    def expr(self) -> Any:
        # Parentheses, unary minus and calls recurse through here: bound the depth, so a
        # hostile query is a 400, not a RecursionError (and SQLite's own limit is 1000).
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.fail(f"the expression nests more than {MAX_DEPTH} levels deep")
        try:
            left = self.and_expr()
            while self.at_word("or"):
                tok = self.next()
                left = self.bin("or", left, self.and_expr(), tok.pos)
            return left
        finally:
            self.depth -= 1

    def and_expr(self) -> Any:
        left = self.cmp_expr()
        while self.at_word("and"):
            tok = self.next()
            left = self.bin("and", left, self.cmp_expr(), tok.pos)
        return left

    def cmp_expr(self) -> Any:
        left = self.add_expr()
        tok = self.peek()
        if tok.kind == "op" and tok.value in _CMP:
            self.next()
            return self.bin(tok.value, left, self.add_expr(), tok.pos)
        negated = False
        if tok.kind == "op" and tok.value == "!" and self.peek(1).kind == "ident":
            negated = True
            self.next()
            tok = self.peek()
        if tok.kind == "ident":
            word = tok.value.lower()
            if word in _STRING_OPS:
                self.next()
                return self.bin(("!" if negated else "") + word, left, self.add_expr(), tok.pos)
            if word == "in":
                self.next()
                insensitive = False
                if self.at("op", "~"):
                    self.next()
                    insensitive = True
                self.expect("op", "(", "'(' and a list of values")
                values = [self.expr()]
                while self.at("op", ","):
                    self.next()
                    values.append(self.expr())
                self.expect("op", ")")
                return InList(left, tuple(values), negated, insensitive)
            if word in _UNSUPPORTED_STRING_OPS or negated:
                raise AplError(f"unsupported operator '{'!' if negated else ''}{tok.value}' at "
                               f"{self.where(tok)}; the local service supports == != < <= > >= "
                               f"=~ !~ contains startswith endswith in (and their _cs and ! "
                               f"forms)")
        return left

    def add_expr(self) -> Any:
        left = self.mul_expr()
        while self.at("op", "+") or self.at("op", "-"):
            tok = self.next()
            left = self.bin(tok.value, left, self.mul_expr(), tok.pos)
        return left

    def mul_expr(self) -> Any:
        left = self.unary()
        while self.at("op", "*") or self.at("op", "/") or self.at("op", "%"):
            tok = self.next()
            left = self.bin(tok.value, left, self.unary(), tok.pos)
        return left

    def unary(self) -> Any:
        if self.at("op", "-"):
            tok = self.next()
            return self.bin("-", Lit(0, "value"), self.expr_unary(), tok.pos)
        return self.primary()

    def expr_unary(self) -> Any:
        self.depth += 1  # - - - - x: the same bound as nesting
        if self.depth > MAX_DEPTH:
            raise self.fail(f"the expression nests more than {MAX_DEPTH} levels deep")
        try:
            return self.unary()
        finally:
            self.depth -= 1

    def primary(self) -> Any:
        tok = self.peek()
        if tok.kind == "number":
            self.next()
            return Lit(tok.value, "value")
        if tok.kind == "span":
            self.next()
            return Lit(tok.value, "span")
        if tok.kind == "string":
            self.next()
            return Lit(tok.value, "value")
        if self.at("op", "("):
            self.next()
            e = self.expr()
            self.expect("op", ")")
            return e
        if self.at("op", "["):
            self.next()
            name = str(self.expect("string", what="a field name in quotes, as in ['a.b']").value)
            self.expect("op", "]")
            while True:  # ['ctx'].code, ['ctx']['code']
                if self.at("op", ".") and self.peek(1).kind == "ident":
                    self.next()
                    name += "." + self.next().value
                elif self.at("op", "[") and self.at("string", None, 1):
                    self.next()
                    name += "." + str(self.next().value)
                    self.expect("op", "]")
                else:
                    return Field(name)
        if tok.kind == "ident":
            word = tok.value
            low = word.lower()
            if low in ("true", "false"):
                self.next()
                return Lit(low == "true", "value")
            if low == "null":
                self.next()
                return Lit(None, "value")
            if self.at("op", "(", 1):
                self.next()
                self.next()
                args: list[Any] = []
                if not self.at("op", ")"):
                    args.append(self.expr())
                    while self.at("op", ","):
                        self.next()
                        args.append(self.expr())
                self.expect("op", ")")
                return Call(low, tuple(args), tok.pos)
            self.next()
            name = word
            while self.at("op", ".") and self.peek(1).kind == "ident":
                self.next()
                name += "." + self.next().value
            return Field(name)
        found = "the end of the query" if tok.kind == "eof" else repr(tok.value)
        raise self.fail(f"expected a value or a field, found {found}")


def _at(text: str, pos: int) -> str:
    line = text.count("\n", 0, pos) + 1
    col = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return f"line {line}, column {col}"


def parse_query(text: str) -> Query:
    """The syntax tree of an APL query in the subset; AplError otherwise."""
    if not isinstance(text, str):
        raise AplError("apl must be a string")
    return _Parser(text).query()


# ---------------------------------------------------------------------------- compiler

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
        neg = op.startswith("!")
        base = op.lstrip("!")
        lo = "" if base.endswith("_cs") else "lower"
        name = base.removesuffix("_cs")
        a, b = f"{lo}({left.sql})", f"{lo}({right.sql})"
        pre = self.prefilter(left, right, base)
        if base in ("=~", "~"):
            sql = f"coalesce({a} = {b}, 0)"
            neg = op == "!~"
        elif name == "contains":
            sql = _guard(pre, f"coalesce(instr({a}, {b}) > 0, 0)")
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
                           f"{_at(self.text, pos)}")
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
            fn = {"tolower": "lower", "toupper": "upper", "strlen": "length"}[name]
            return _Sql(f"{fn}({self.expr(args[0]).sql})", "value")
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
        if name in _AGGS:
            raise AplError(f"{name}() is an aggregation: use it in summarize")
        raise AplError(f"unsupported function '{name}()' at {_at(self.text, c.pos)}; the "
                       f"local service supports now, ago, datetime, isnull, isnotnull, "
                       f"isempty, isnotempty, not, tolower, toupper, strlen, bin")

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


_DEFAULT_ORDER = "time DESC, seq DESC"


_AUTO_SPANS = [n * _US[u] for n, u in ((1, "s"), (5, "s"), (10, "s"), (30, "s"), (1, "m"),
                                         (5, "m"), (10, "m"), (30, "m"), (1, "h"), (3, "h"),
                                         (6, "h"), (12, "h"), (1, "d"), (7, "d"), (30, "d"))]


def auto_span(first_us: int, last_us: int) -> int:
    """bin_auto's span for a time range: the smallest round span giving at most 100 bins."""
    width = max(0, last_us - first_us)
    return next((span for span in _AUTO_SPANS if width / span <= 100), _AUTO_SPANS[-1])


def compile_query(text: str, *, start_us: int | None = None, end_us: int | None = None,
                  now_us: int | None = None,
                  data_range: tuple[int, int] | None = None) -> Compiled:
    """Compile ``text`` into one SELECT over the ``events`` table; AplError if unsupported.

    ``data_range`` (the dataset's first and last ``_time``) sizes ``bin_auto`` where the
    query has no ``start_us``/``end_us``.
    """
    q = parse_query(text)
    now = time.time_ns() // 1000 if now_us is None else now_us
    comp = _Compiler(now, text)
    if start_us is not None or data_range is not None:
        first = start_us if start_us is not None else data_range[0]  # type: ignore[index]
        last = end_us if end_us is not None else (data_range[1] if data_range else now)
        comp.auto_span_us = auto_span(first, last)
    cond = [f"dataset = {_q(q.dataset)}"]
    if start_us is not None:
        cond.append(f"time >= {int(start_us)}")
    if end_us is not None:
        cond.append(f"time < {int(end_us)}")
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
    ops: list[tuple[Any, ...]] = []
    for op in q.ops:
        if op[0] == "top":  # top N by x: sort by x, take N
            ops += [("sort", [op[2]]), ("take", op[1])]
        else:
            ops.append(op)
    for op in ops:
        kind = op[0]
        if kind == "where":
            c = comp.expr(op[1])
            sql = f"SELECT seq, time, sys, body, ord FROM ({sql}) WHERE {c.sql}"
        elif kind == "sort":
            parts, order_report = [], []
            for e, desc in op[1]:
                s = comp.expr(e)
                parts.append(f"{s.sql} {'DESC' if desc else 'ASC'}")
                order_report.append((e.name if isinstance(e, Field) else "expr", desc))
            if not aggregated:
                parts.append("seq DESC" if op[1][0][1] else "seq ASC")
            order = ", ".join(parts)
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
            gone = op[1]
            paths = ", ".join(_q(_path_flat(name)) for name in gone)
            sql = f"SELECT seq, time, sys, json_remove(body, {paths}) AS body, ord FROM ({sql})"
            if fields is not None:
                fields = [name for name in fields if name not in gone]
            else:
                hidden += [name for name in gone if name in ("_time", "_sysTime", "_rowId")]
            comp.raw_body = False
        elif kind == "count":
            sql = (f"SELECT NULL AS seq, NULL AS time, NULL AS sys, "
                   f"json_object('count', count(*)) AS body, NULL AS ord FROM ({sql})")
            fields, aggregated, order, order_report = ["count"], True, None, []
            comp.raw_body = False
            groups, aggs = [], [("count", "count")]
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
            for name, call in agg_list:
                items.append(f"{_q(name)}, {comp.aggregate(call)}")
                names.append(name)
                aggs.append((name, call.name))
            sql = (f"SELECT NULL AS seq, {time_group} AS time, NULL AS sys, "
                   f"json_object({', '.join(items)}) AS body, NULL AS ord FROM ({sql})"
                   + (f" GROUP BY {', '.join(group_sql)}" if group_sql else ""))
            fields, aggregated = names, True
            comp.raw_body = False
            groups = [name for name, _ in group_list]
            order = ", ".join(order_parts) or None
            order_report = []
    final_order = order or (None if aggregated else _DEFAULT_ORDER)
    if not order_report and final_order == _DEFAULT_ORDER:
        order_report = [("_time", True)]
    sql = (f"SELECT seq, time, sys, body FROM ({sql})"
           + (f" ORDER BY {final_order}" if final_order else "") + f" LIMIT {MAX_ROWS}")
    return Compiled(sql, q.dataset, fields, aggregated, groups, aggs, order_report, bin_us,
                    hidden)


# ---------------------------------------------------------------------------- running

@dataclass
class Result:
    """Rows of a query as dicts, with what a service answer reports about them."""

    compiled: Compiled
    rows: list[dict[str, Any]]
    system: list[tuple[str | None, str | None, str | None]]  # (_time, _sysTime, _rowId)
    fields: list[str]
    elapsed_us: int


def run(db: Any, compiled: Compiled) -> Result:
    """Run a compiled query on a sqlite3 connection (the caller holds its lock)."""
    started = time.perf_counter()
    raw = db.execute(compiled.sql).fetchall()
    rows: list[dict[str, Any]] = []
    system: list[tuple[str | None, str | None, str | None]] = []
    loads = json.loads
    if compiled.fields is None:
        seen: dict[str, None] = {"_time": None, "_sysTime": None, "_rowId": None}
        for seq, t, sys_time, body in raw:
            event = loads(body)
            stamp = event.get("_time")
            if not isinstance(stamp, str):
                stamp = format_time(t)
            row_id = f"{seq:016x}"
            row = {"_time": stamp, "_sysTime": sys_time, "_rowId": row_id}
            for k, v in event.items():
                if k not in row:
                    row[k] = v
                    if k not in seen:
                        seen[k] = None
            rows.append(row)
            system.append((stamp, sys_time, row_id))
        for name in compiled.hidden:
            seen.pop(name, None)
            for row in rows:
                row.pop(name, None)
        fields = list(seen)
    else:
        fields = list(compiled.fields)
        for seq, t, sys_time, body in raw:
            data = loads(body)
            rows.append({name: data.get(name) for name in fields})
            system.append((None if t is None else format_time(t), sys_time,
                           None if seq is None else f"{seq:016x}"))
    return Result(compiled, rows, system, fields,
                  int((time.perf_counter() - started) * 1_000_000))


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
    matched = len(result.rows)
    if c.aggregated and c.aggregations and c.aggregations[0][1] == "count":
        matched = sum(int(r.get(c.aggregations[0][0]) or 0) for r in result.rows)
    times = [t for t, _, _ in result.system if t]
    row_ids = [r for _, _, r in result.system if r]
    return {
        "elapsedTime": result.elapsed_us,
        "blocksExamined": 1 if rows_examined else 0,
        "rowsExamined": rows_examined,
        "rowsMatched": matched,
        "numGroups": len(result.rows) if c.aggregated else 0,
        "isPartial": len(result.rows) >= MAX_ROWS,
        "cacheStatus": 1,
        "minBlockTime": min(times) if times else start,
        "maxBlockTime": max(times) if times else end,
        "messages": [],
        "minCursor": min(row_ids) if row_ids else "",
        "maxCursor": max(row_ids) if row_ids else "",
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
            entry["agg"] = {"name": aggs[name], "args": [], "fields": []}
        fields.append(entry)
    table: dict[str, Any] = {
        "name": "0",
        "sources": [{"name": c.dataset}],
        "fields": fields,
        "order": [{"field": f, "desc": d} for f, d in c.order],
        "groups": [{"name": g} for g in c.groups],
        "range": {"field": "_time", "start": start, "end": end},
        "buckets": ({"field": "_time", "size": c.bin_us // 1_000_000}
                    if c.bin_us and c.bin_us % 1_000_000 == 0 else None),
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
                           "endTime": format_time(bin_start + (c.bin_us or 0)),
                           "groups": [{"id": i, **e} for i, e in enumerate(entries)]})
    return {"format": "legacy", "status": _status(result, rows_examined, start, end),
            "matches": matches, "buckets": {"series": series, "totals": totals},
            "datasetNames": [c.dataset], "fieldsMetaMap": {}}
