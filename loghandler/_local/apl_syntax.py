"""APL's expressions for the local service: the syntax tree and the recursive-descent parser
of values, fields, calls and operators between them (``apl`` reads the tabular operators on top).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .apl_lexer import MAX_INT, AplError, Token, position, tokenize

__all__ = ["AGGREGATIONS", "Bin", "Call", "ExprParser", "Field", "InList", "Lit", "Query"]

# Expressions nest at most this deep (parentheses, calls, unary minus), and a query has at most
# this many binary operators: the compiler recurses through both.
MAX_DEPTH = 64
MAX_OPERATORS = 200


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


class ExprParser:
    """The token cursor and the expressions; ``apl._Parser`` adds the operators."""

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

    def call_arg(self, function: str) -> Any:
        # arg_max(x, *): every field of the row; nowhere else is * an argument.
        if function in ("arg_max", "arg_min") and self.at("op", "*"):
            self.next()
            return Field("*")
        return self.expr()

    def field_name(self) -> str:
        e = self.primary()
        if not isinstance(e, Field):
            raise self.fail("expected a field name")
        return e.name

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
        if self.at("op", "*"):
            # `where * has "x"`: every field (the compiler allows it before an operator).
            self.next()
            return Field("*")
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

