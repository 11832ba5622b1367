"""A small subset of APL for the local service: its time values, tokenizer and
recursive-descent parser. ``aplsql`` compiles the syntax tree to one SQLite query.

The subset (docs, "Querying"): a source (``['name']`` or ``name``); ``where`` (``filter``)
with ``== != < <= > >= =~ !~``, ``contains startswith endswith has`` (and ``_cs`` and ``!``
forms), ``in`` / ``!in`` / ``in~``, ``and or not()``, ``isnull isnotnull isempty isnotempty``,
``now() ago() datetime()``, ``tolower toupper strlen``, ``strcat coalesce``, ``tostring toint
tolong todouble toreal todatetime``, ``iff case``, raw strings (``@'...'``), ``+ - * /``,
timespans (``1s 5m 1h 1d 1w 100ms``); ``search "term"``; ``sort by`` / ``order by``
(``asc``/``desc``, default ``desc``); ``take`` / ``limit``; ``top N by``; ``project`` /
``extend`` (``name`` or ``name = expr``); ``project-away``; ``count``; ``summarize`` with
``count() countif() sum() avg() min() max() dcount()`` ``by`` fields, ``bin(_time, span)`` and
``bin_auto(_time)``; ``distinct``. Anything else raises
``AplError`` naming the unsupported part and where it is (the service answers it as a 400).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from .._time import format_micros as format_time
from .._time import format_micros_trimmed as format_trimmed
from .._time import parse_micros as parse_time

__all__ = [
    "AGGREGATIONS",
    "AplError",
    "Bin",
    "Call",
    "Field",
    "InList",
    "Lit",
    "Query",
    "format_time",
    "format_trimmed",
    "parse_query",
    "parse_relative_time",
    "parse_time",
    "position",
    "span_us",
]

# Expressions nest at most this deep (parentheses, calls, unary minus), and a query has at most
# this many binary operators: the compiler recurses through both.
MAX_DEPTH = 64
MAX_OPERATORS = 200

OPERATORS = ("where", "search", "sort by", "order by", "take", "limit", "top", "project",
             "project-away", "project-rename", "extend", "parse", "count", "summarize",
             "distinct")
# The types a parse column may name, and what each reads its text as.
PARSE_TYPES = {"string": "string", "int": "long", "long": "long", "real": "real",
               "double": "real", "bool": "bool", "boolean": "bool", "datetime": "datetime",
               "date": "datetime"}

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_US = {"w": 604_800_000_000, "week": 604_800_000_000, "weeks": 604_800_000_000,
       "d": 86_400_000_000, "day": 86_400_000_000, "days": 86_400_000_000,
       "h": 3_600_000_000, "hr": 3_600_000_000, "hrs": 3_600_000_000,
       "hour": 3_600_000_000, "hours": 3_600_000_000,
       "m": 60_000_000, "min": 60_000_000, "minute": 60_000_000, "minutes": 60_000_000,
       "s": 1_000_000, "sec": 1_000_000, "second": 1_000_000, "seconds": 1_000_000,
       "ms": 1_000, "milli": 1_000, "millis": 1_000, "millisecond": 1_000,
       "milliseconds": 1_000,
       "us": 1, "micro": 1, "micros": 1, "microsecond": 1, "microseconds": 1}


# Operators that, standing first, mean the dataset was left out.
_OPERATOR_WORDS = frozenset({"take", "limit", "where", "filter", "summarize", "sort", "order",
                             "project", "extend", "count", "top", "distinct", "search",
                             "parse"})


class AplError(Exception):
    """A query outside the subset, or not valid: the message says what and where."""


# ---------------------------------------------------------------------------- time values

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


# The largest integer a query may use (SQLite's, 64-bit); a timespan too, in microseconds.
MAX_INT = 2**63 - 1


def _span(number: str, unit: str, pos: int, text: str | None = None) -> int:
    scale = _US.get(unit)
    where = position(text, pos) if text is not None else f"character {pos + 1}"
    if scale is None:
        raise AplError(f"unknown timespan unit {unit!r} in {number}{unit}: use w, d, h, m, s, "
                       f"ms or us, as in 5m, at {where}")
    try:
        us = int(float(number) * scale) if "." in number or "e" in number.lower() else (
            int(number) * scale)
    except (OverflowError, ValueError):
        us = MAX_INT + 1
    if abs(us) > MAX_INT:
        raise AplError(f"the timespan {number}{unit} is out of range (at most about 292,000 "
                       f"years), at {where}")
    return us


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
        "+", "-", "*", "/", "!", "~", "%", ":")


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
        if c == "@" and i + 1 < n and text[i + 1] in "\"'":
            # A raw string (@'C:\\logs', @"a\b"): no escapes, up to the same quote.
            quote = text[i + 1]
            j = text.find(quote, i + 2)
            if j < 0:
                raise AplError(f"unterminated string starting at {i + 1}")
            out.append(Token("string", text[i + 2:j], i))
            i = j + 1
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
            if m is None:  # "²" is a digit to str.isdigit(), not to a number
                raise AplError(f"unexpected character {c!r} at {position(text, i)}")
            number = m.group(0)
            j = m.end()
            u = _UNIT.match(text, j)
            if u:
                out.append(Token("span", _span(number, u.group(0), i, text), i))
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
            if m is None:  # a letter outside ASCII, not in quotes: names are ASCII (or ['...'])
                raise AplError(f"unexpected character {c!r} at {position(text, i)}; a name "
                               f"with other characters is written ['{c}...']")
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
               "endswith_cs", "has", "has_cs"}
_UNSUPPORTED_STRING_OPS = {"hasprefix", "hassuffix", "has_any", "has_all",
                           "like", "hasprefix_cs", "hassuffix_cs"}
_CMP = {"==", "!=", "<", "<=", ">", ">=", "=~", "!~"}
AGGREGATIONS = {"count", "countif", "sum", "avg", "min", "max", "dcount", "percentile",
                "percentiles", "arg_max", "arg_min"}


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

    def comma_list(self, item: Callable[[], Any]) -> list[Any]:
        """One or more of what ``item`` reads, separated by commas."""
        items = [item()]
        while self.at("op", ","):
            self.next()
            items.append(item())
        return items

    def where(self, tok: Token) -> str:
        return position(self.text, tok.pos)

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
            if tok.kind == "op" and tok.value == "=":
                raise self.fail("'=' does not compare in APL: use '==', as in "
                                "where level == 'error',")
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
            if tok.value.lower() in _OPERATOR_WORDS and not self.at("op", "|", 1):
                # `take 5` alone: an operator where the dataset belongs.
                raise self.fail(f"the query starts with the operator {tok.value!r}: name the "
                                f"dataset first, as in ['logs'] | {tok.value} ...,", tok)
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
        if word == "search":
            # search "a" "b": events holding every term anywhere (names and values), case
            # folded as ASCII.
            terms = [self.expect("string", what='a quoted term, as in search "timeout"').value]
            while self.at("string"):
                terms.append(self.next().value)
            return ("search", terms)
        if word in ("sort", "order"):
            self.expect("ident", None, "'by'")
            if self.toks[self.i - 1].value.lower() != "by":
                raise self.fail(f"expected 'by' after '{word}'", self.toks[self.i - 1])
            keys = self.comma_list(self.sort_key)
            return ("sort", keys)
        if word in ("take", "limit"):
            return ("take", self.row_count(word, tok))
        if word == "project":
            items = self.comma_list(self.named_expr)
            return ("project", items)
        if word == "extend":
            items = self.comma_list(lambda: self.named_expr(require_name=True))
            return ("extend", items)
        if word == "project-away":
            names = self.comma_list(self.field_pattern)
            return ("project-away", names)
        if word == "project-rename":
            pairs = self.comma_list(self.rename)
            return ("project-rename", pairs)
        if word == "top":
            n = self.row_count(word, tok)
            if not self.at_word("by"):
                raise self.fail("expected 'by' after top N")
            self.next()
            return ("top", n, self.sort_key())
        if word == "distinct":
            groups = self.comma_list(self.named_expr)
            return ("summarize", [], groups)
        if word == "count":
            return ("count",)
        if word == "parse":
            return self.parse_op(tok)
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

    def parse_op(self, tok: Token) -> tuple[Any, ...]:
        """parse x with "user=" user " took " ms:int "ms" *: the simple mode (string constants,
        columns with an optional type, and * for any text)."""
        source = self.expr()
        if not self.at_word("with"):
            raise self.fail("expected 'with' and a pattern, as in parse message with "
                            "\"user=\" user \" \" *")
        self.next()
        parts: list[tuple[Any, ...]] = []
        while not (self.at("op", "|") or self.at("eof")):
            if self.at("string"):
                text = self.next().value
                if text:
                    parts.append(("text", text))
            elif self.at("op", "*"):
                if parts and parts[-1][0] == "column":
                    raise self.fail("a column and * next to each other: put the text between "
                                    "them in the pattern")
                self.next()
                if not (parts and parts[-1][0] == "any"):
                    parts.append(("any",))
            elif self.peek().kind == "ident":
                name = self.next().value
                kind = "string"
                if self.at("op", ":"):
                    self.next()
                    t = self.expect("ident", what="a type (string, int, long, real, "
                                                  "datetime, bool)")
                    kind = PARSE_TYPES.get(t.value.lower(), "")
                    if not kind:
                        raise self.fail(f"unknown type {t.value!r} in parse; use string, int, "
                                        f"long, real, datetime or bool", t)
                if parts and parts[-1][0] in ("column", "any"):
                    raise self.fail("two columns (or * and a column) next to each other: put "
                                    "the text between them in the pattern")
                parts.append(("column", str(name), kind))
            else:
                raise self.fail("expected a string, a column name or * in the parse pattern")
            if len(parts) > 64:
                raise self.fail("a parse pattern has at most 64 parts")
        if not any(p[0] == "column" for p in parts):
            raise self.fail("the parse pattern names no column", tok)
        return ("parse", source, parts)

    def call_arg(self, function: str) -> Any:
        # arg_max(x, *): every field of the row; nowhere else is * an argument.
        if function in ("arg_max", "arg_min") and self.at("op", "*"):
            self.next()
            return Field("*")
        return self.expr()

    def field_pattern(self) -> str:
        """A field name, or a pattern with ``*`` (``user*``, ``*_id``, ``geo.*``) for
        project-away: the run of adjacent name characters, dots and stars."""
        if self.at("op", "["):
            return self.field_name()
        first = self.peek()
        end = first.pos
        while (self.peek().pos == end and (self.peek().kind == "ident" or (
                self.peek().kind == "op" and self.peek().value in (".", "*")))):
            end += len(str(self.next().value))
        name = self.text[first.pos:end]
        if not name or name.startswith(".") or name.endswith(".") or ".." in name:
            raise self.fail("expected a field name or a pattern, as in user*", first)
        return name

    def rename(self) -> tuple[str, str]:
        if not (self.peek().kind == "ident" or self.at("op", "[")):
            raise self.fail("expected new_name = old_name")
        new = self.field_name()
        self.expect("op", "=", "'=', as in project-rename new_name = old_name")
        return new, self.field_name()

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
        aggs = [] if self.at_word("by") else self.comma_list(self.aggregation)
        groups: list[tuple[str, Any]] = []
        if self.at_word("by"):
            self.next()
            groups = self.comma_list(self.named_expr_group)
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
        if not isinstance(e, Call) or e.name not in AGGREGATIONS:
            label = e.name if isinstance(e, Call) else tok.value
            raise AplError(f"unsupported aggregation '{label}' at {self.where(tok)}; the local "
                           f"service supports {', '.join(sorted(AGGREGATIONS))}")
        if e.name in ("percentile", "percentiles"):
            if len(e.args) < 2 or not isinstance(e.args[0], (Field, Call, Bin)) or not all(
                    isinstance(a, Lit) and isinstance(a.value, (int, float))
                    and not isinstance(a.value, bool) and 0 <= a.value <= 100
                    for a in e.args[1:]):
                raise AplError(f"{e.name}() takes a field and percentages from 0 to 100, as "
                               f"in {e.name}(duration, 95), at {self.where(tok)}")
            if e.name == "percentile" and len(e.args) != 2:
                raise AplError(f"percentile() takes one percentage; percentiles() takes "
                               f"several, at {self.where(tok)}")
        if e.name in ("arg_max", "arg_min") and (len(e.args) < 2 or not all(
                isinstance(a, Field) for a in e.args[1:])):
            raise AplError(f"{e.name}() takes the expression to maximise and the fields to "
                           f"return, as in {e.name}(duration, name, user), at "
                           f"{self.where(tok)}")
        if name is None:
            arg = e.args[0] if e.args else None
            name = f"{e.name}_" + (arg.name if isinstance(arg, Field) else "")
            if e.name in ("percentile", "percentiles"):
                name = "percentile_" + (arg.name if isinstance(arg, Field) else "")
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
    def row_count(self, word: str, tok: Any) -> int:
        n = self.expect("number", what="a number of rows").value
        if not isinstance(n, int) or n < 0:
            raise self.fail(f"{word} needs a whole number of rows", tok)
        if n > MAX_INT:  # SQLite's integers are 64-bit: a larger one is no row count
            raise self.fail(f"{word} {n} is out of range: at most {MAX_INT}", tok)
        return n

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
                values = self.comma_list(self.expr)
                self.expect("op", ")")
                return InList(left, tuple(values), negated, insensitive)
            if word == "matches" and not negated:
                self.next()
                if not self.at_word("regex"):
                    raise self.fail("expected 'regex' after 'matches', as in "
                                    "message matches regex 'time(d)? ?out'")
                self.next()
                return self.bin("matches regex", left, self.add_expr(), tok.pos)
            if word == "between":
                # x between (lo .. hi): both ends included; !between is outside them.
                self.next()
                self.expect("op", "(", "'(' and a range, as in between (1 .. 10)")
                lo = self.add_expr()
                self.expect("op", ".", "'..' between the range's ends")
                self.expect("op", ".", "'..' between the range's ends")
                hi = self.add_expr()
                self.expect("op", ")")
                if negated:
                    return self.bin("or", self.bin("<", left, lo, tok.pos),
                                    self.bin(">", left, hi, tok.pos), tok.pos)
                return self.bin("and", self.bin(">=", left, lo, tok.pos),
                                self.bin("<=", left, hi, tok.pos), tok.pos)
            if word in _UNSUPPORTED_STRING_OPS or negated:
                raise AplError(f"unsupported operator '{'!' if negated else ''}{tok.value}' at "
                               f"{self.where(tok)}; the local service supports == != < <= > >= "
                               f"=~ !~ contains startswith endswith has in (and their _cs "
                               f"and ! forms)")
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
                    args = self.comma_list(lambda: self.call_arg(low))
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


def position(text: str, pos: int) -> str:
    """``line L, column C`` of a character offset in the query, for messages."""
    line = text.count("\n", 0, pos) + 1
    col = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return f"line {line}, column {col}"


def parse_query(text: str) -> Query:
    """The syntax tree of an APL query in the subset; AplError otherwise."""
    if not isinstance(text, str):
        raise AplError("apl must be a string")
    return _Parser(text).query()


def span_us(unit: str) -> int:
    """Microseconds in one ``unit`` of a timespan (``d``, ``h``, ``m``, ``s``, ``ms``, ...)."""
    return _US[unit]
