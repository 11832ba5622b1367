"""A small subset of APL for the local service: the query and its tabular operators (the
words and times are ``apl_lexer``'s, the expressions ``apl_syntax``'s). ``aplsql`` compiles the
syntax tree to one SQLite query.

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

from typing import Any

from .._time import format_micros as format_time
from .._time import format_micros_trimmed as format_trimmed
from .._time import parse_micros as parse_time
from .apl_lexer import MAX_INT, AplError, Token, parse_relative_time, position, span_us
from .apl_syntax import AGGREGATIONS, Bin, Call, ExprParser, Field, InList, Lit, Query

__all__ = [
    "AGGREGATIONS",
    "MAX_INT",
    "AplError",
    "Bin",
    "Call",
    "Field",
    "InList",
    "Lit",
    "Query",
    "Token",
    "format_time",
    "format_trimmed",
    "parse_query",
    "parse_relative_time",
    "parse_time",
    "position",
    "span_us",
]

OPERATORS = ("where", "search", "sort by", "order by", "take", "limit", "top", "project",
             "project-away", "project-rename", "extend", "parse", "count", "summarize",
             "distinct")
# The types a parse column may name, and what each reads its text as.
PARSE_TYPES = {"string": "string", "int": "long", "long": "long", "real": "real",
               "double": "real", "bool": "bool", "boolean": "bool", "datetime": "datetime",
               "date": "datetime"}

# Operators that, standing first, mean the dataset was left out.
_OPERATOR_WORDS = frozenset({"take", "limit", "where", "filter", "summarize", "sort", "order",
                             "project", "extend", "count", "top", "distinct", "search",
                             "parse"})


class _Parser(ExprParser):
    """A query: its source, then tabular operators separated by ``|``."""

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

    def field_pattern(self) -> str:
        """A field name, or a pattern with ``*`` (``user*``, ``*_id``, ``geo.*``) for
        project-away: the run of adjacent name characters, dots and stars."""
        if self.at("op", "["):
            name = self.field_name()
            # ['geo.']*: a quoted prefix and a star right after it.
            if self.at("op", "*") and self.peek().pos == self.toks[self.i - 1].pos + 1:
                self.next()
                return name + "*"
            return name
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


def parse_query(text: str) -> Query:
    """The syntax tree of an APL query in the subset; AplError otherwise."""
    if not isinstance(text, str):
        raise AplError("apl must be a string")
    return _Parser(text).query()

