"""APL's words for the local service: its time values (``now-1h``, timespans) and the
tokenizer. ``apl_syntax`` reads the tokens into expressions, ``apl`` into a query.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .._time import parse_micros as parse_time

__all__ = ["MAX_INT", "AplError", "Token", "parse_relative_time", "position", "span_us",
           "tokenize"]

_US = {"w": 604_800_000_000, "week": 604_800_000_000, "weeks": 604_800_000_000,
       "d": 86_400_000_000, "day": 86_400_000_000, "days": 86_400_000_000,
       "h": 3_600_000_000, "hr": 3_600_000_000, "hrs": 3_600_000_000,
       "hour": 3_600_000_000, "hours": 3_600_000_000,
       "m": 60_000_000, "min": 60_000_000, "minute": 60_000_000, "minutes": 60_000_000,
       "s": 1_000_000, "sec": 1_000_000, "second": 1_000_000, "seconds": 1_000_000,
       "ms": 1_000, "milli": 1_000, "millis": 1_000, "millisecond": 1_000,
       "milliseconds": 1_000,
       "us": 1, "micro": 1, "micros": 1, "microsecond": 1, "microseconds": 1}


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


def position(text: str, pos: int) -> str:
    """``line L, column C`` of a character offset in the query, for messages."""
    line = text.count("\n", 0, pos) + 1
    col = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return f"line {line}, column {col}"


def span_us(unit: str) -> int:
    """Microseconds in one ``unit`` of a timespan (``d``, ``h``, ``m``, ``s``, ``ms``, ...)."""
    return _US[unit]
