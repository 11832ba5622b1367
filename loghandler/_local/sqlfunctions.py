"""The functions the local service's queries call that SQLite lacks (``aplsql`` uses them by
these names): APL's ``has``, ``todatetime``, ``parse``, ``matches regex`` (bounded by the query's
deadline), case folding of every letter, ``arg_max``/``arg_min`` and ``percentile``.
"""

from __future__ import annotations

import calendar
import functools
import json
import math
import os
import random
import re
import sqlite3
import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Any

from .apl import format_trimmed, parse_time

__all__ = ["PERCENTILE_SAMPLE", "QUERY", "QUERY_TIMEOUT", "SEARCH", "add_functions",
           "regex_package", "sort_key"]

# A query that runs longer than this is stopped (and answered 400).
QUERY_TIMEOUT = 10.0

_TERM_EDGE = "(?<![0-9A-Za-z_])"
_TERM_END = "(?![0-9A-Za-z_])"


def _apl_has(text: Any, term: Any, cs: int) -> int | None:
    """APL's ``has``: ``term`` as a whole term of ``text`` (not inside a longer word)."""
    if text is None or term is None:
        return None
    text, term = str(text), str(term)
    if not term:
        return 1
    flags = 0 if cs else re.IGNORECASE
    return 1 if re.search(_TERM_EDGE + re.escape(term) + _TERM_END, text, flags) else 0


def _apl_todatetime(value: Any) -> int | None:
    """APL's ``todatetime`` of a stored value: epoch microseconds, or null. A text is read as
    a time, a number as nanoseconds since the epoch (the reference's todatetime)."""
    if isinstance(value, str):
        return parse_time(value)
    if isinstance(value, (int, float)) and math.isfinite(value):
        return int(value) // 1000
    return None


def _apl_datetime_add(part: str, n: Any, when: Any) -> int | None:
    """datetime_add by the calendar: ``n`` months, quarters or years after ``when`` (epoch
    microseconds), the day clamped to the last of the month."""
    if when is None or not isinstance(n, (int, float)) or isinstance(n, bool):
        return None
    months = int(n) * {"month": 1, "quarter": 3, "year": 12}[part]
    try:
        t = datetime.fromtimestamp(0, timezone.utc) + timedelta(microseconds=int(when))
        total = t.year * 12 + (t.month - 1) + months
        year, month = divmod(total, 12)
        day = min(t.day, calendar.monthrange(year, month + 1)[1])
        moved = t.replace(year=year, month=month + 1, day=day)
    except (ValueError, OverflowError):
        return None
    delta = moved - datetime.fromtimestamp(0, timezone.utc)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _fold(value: Any, upper: bool) -> Any:
    # SQLite's lower()/upper() fold ASCII only; APL folds every letter ("É" is "é").
    if isinstance(value, str):
        return value.upper() if upper else value.lower()
    if isinstance(value, (int, float)):
        return str(value)  # as SQLite's lower(5) is '5'
    return value


def _sort_key(value: Any) -> tuple[int, Any]:
    # SQLite's order across types: numbers before text before blobs.
    if isinstance(value, (int, float)):
        return (0, value)
    return (1, value) if isinstance(value, str) else (2, bytes(value))


sort_key = _sort_key  # the reader merges the halves of an aggregation in SQLite's order


class _ArgBest:
    """arg_max / arg_min: the row (JSON text) where the value is greatest / least; the first
    such row on a tie."""

    sign = 1

    def __init__(self) -> None:
        self.key: tuple[int, Any] | None = None
        self.row: Any = None

    def step(self, value: Any, row: Any) -> None:
        if value is None:
            return
        key = _sort_key(value)
        if self.key is None or (key > self.key if self.sign > 0 else key < self.key):
            self.key, self.row = key, row

    def finalize(self) -> Any:
        return self.row


class _ArgMin(_ArgBest):
    sign = -1


# A percentile is estimated from a uniform sample of at most this many values per group (the
# service's is an estimate too): memory stays bounded however many events a group has.
PERCENTILE_SAMPLE = 100_000


class _Percentile:
    """percentile(x, p): the nearest-rank percentile of the numbers (text and nulls skipped).

    SQLite calls ``step`` once a value (a day's p95 by path: 350,000 calls), and the call is
    most of its cost: while the sample fills, ``step`` is a closure doing the least it can
    (a type test, an append, a length; no attribute of the instance), and it gives way to
    the sampling step once the sample is full. SQLite gives ints, floats, text, blobs and
    None only (no bool): ``type(...) is`` is isinstance's test for them. The random numbers
    are drawn only past the sample's size: their generator is made then (seeding one costs
    as much as a few hundred steps)."""

    def __init__(self) -> None:
        values: list[float] = []
        self.values = values
        self.seen = 0  # the numbers seen, counted once the sample is full
        self.p: Any = 50.0
        self.rng: random.Random | None = None
        append = values.append
        last: Any = 50.0

        def fill(value: Any, p: Any) -> None:
            nonlocal last
            if type(value) is float or type(value) is int:
                append(value)
                last = p  # a closure's cell: cheaper than the instance's attribute
                if len(values) >= PERCENTILE_SAMPLE:
                    # A sampled estimate depends on the order of the group's values: the
                    # reader's parts of a range (which may feed them in another order) then
                    # give way to one query (reader.py).
                    QUERY.sampled = True
                    self.p = p
                    self.seen = len(values)
                    self.rng = random.Random(0)  # the same answer for the same data
                    self.step = self._sample  # type: ignore[method-assign]

        def p_now() -> Any:
            return last

        self.step = fill  # type: ignore[method-assign]
        self._filled_p = p_now

    def step(self, value: Any, p: Any) -> None:  # replaced by __init__'s fill
        raise NotImplementedError

    def _sample(self, value: Any, p: Any) -> None:
        if not (type(value) is float or type(value) is int):
            return
        assert self.rng is not None
        self.p = p
        self.seen += 1
        j = self.rng.randrange(self.seen)
        if j < PERCENTILE_SAMPLE:
            self.values[j] = value

    def finalize(self) -> Any:
        if not self.values:
            return None
        self.values.sort()
        p = self._filled_p() if self.rng is None else self.p
        rank = max(1, math.ceil(float(p) / 100 * len(self.values)))
        return self.values[min(rank, len(self.values)) - 1]


@functools.lru_cache(maxsize=64)
def _parse_spec(spec: str) -> list[list[Any]]:
    return json.loads(spec)  # type: ignore[no-any-return]


def _parse_value(text: str, kind: str) -> Any:
    if kind == "string":
        return text
    word = text.strip()
    if kind == "long":
        try:
            return int(word)
        except ValueError:
            return None
    if kind == "real":
        try:
            value = float(word)
        except ValueError:
            return None
        return value if math.isfinite(value) else None
    if kind == "bool":
        return {"true": True, "false": False}.get(word.lower())
    us = parse_time(word)
    return None if us is None else format_trimmed(us)


@functools.lru_cache(maxsize=8)  # the columns of one row ask in turn: one scan per row
def _parse_all(text: str, spec: str) -> tuple[Any, ...] | None:
    """APL ``parse`` (simple mode) of one text: the columns' values, or None for no match.

    One pass, left to right: each string constant is found from where the last one ended,
    and a column is the text between them (the rest of the text, at the end), so the work is
    linear in the text whatever the pattern."""
    values: list[Any] = []
    pos = 0
    pending: list[Any] | None = None  # a column or * waiting for the text that ends it
    for part in _parse_spec(spec):
        if part[0] != "text":
            pending = part
            continue
        literal = part[1]
        if pending is None:
            if not text.startswith(literal, pos):
                return None
            pos += len(literal)
            continue
        j = text.find(literal, pos)
        if j < 0:
            return None
        if pending[0] == "column":
            values.append(_parse_value(text[pos:j], pending[2]))
        pos, pending = j + len(literal), None
    if pending is not None and pending[0] == "column":
        values.append(_parse_value(text[pos:], pending[2]))
    return tuple(values)


def _apl_parse(value: Any, spec: str, index: int) -> Any:
    if value is None:
        return None
    values = _parse_all(value if isinstance(value, str) else str(value), spec)
    return None if values is None else values[index]


# The query running on this thread: when it must stop (monotonic), for matches regex, and
# whether a regex ran out of that time.
QUERY = threading.local()


def regex_package() -> Any:
    """The ``regex`` package (the ``regex`` extra), or None: then ``re`` in a helper process
    (regexworker.py) matches."""
    try:
        import regex  # type: ignore[import-untyped]
    except ImportError:
        return None
    return regex


@functools.lru_cache(maxsize=32)
def _regex(pattern: str) -> Any:
    return regex_package().compile(pattern)


# The regex package's timeout counts the matching thread's CPU time, not the clock's: on busy
# cores a match ran far past its query's deadline (a 2 s timeout took 14 s at a load of 24).
# A match that is not over in REGEX_SLICE of CPU is finished in a thread of its own, waited
# for until the deadline by the clock; past it the query stops, and the thread ends at its own
# CPU-time bound. At most one match a core at once (the wait counts against the deadline).
_REGEX_SLOTS = threading.BoundedSemaphore(max(1, os.cpu_count() or 1))
REGEX_SLICE = 0.05


def _search_in_process(pattern: str, text: str, timeout: float) -> bool:
    started = time.monotonic()
    if not _REGEX_SLOTS.acquire(timeout=timeout):
        raise TimeoutError
    try:
        matched = _regex(pattern).search(text, timeout=min(timeout, REGEX_SLICE)) is not None
    except TimeoutError:
        left = timeout - (time.monotonic() - started)
        if timeout <= REGEX_SLICE or left <= 0:
            _REGEX_SLOTS.release()
            raise
    except BaseException:
        _REGEX_SLOTS.release()
        raise
    else:
        _REGEX_SLOTS.release()
        return matched
    # A long match: in its own thread (which gives the slot back), waited for by the clock.
    found: list[Any] = []
    done = threading.Event()

    def match() -> None:
        try:
            found.append(_regex(pattern).search(text, timeout=left) is not None)
        except BaseException as exc:  # handed to the query's thread
            found.append(exc)
        finally:
            _REGEX_SLOTS.release()
            done.set()

    threading.Thread(target=match, name="loghandler-query-regex", daemon=True).start()
    if not done.wait(left) or not found:
        raise TimeoutError
    if isinstance(found[0], BaseException):
        raise found[0]
    return bool(found[0])


def _search_in_worker(pattern: str, text: str, timeout: float) -> bool:
    from . import regexworker

    return regexworker.search(pattern, text, timeout)


# How matches regex runs: with the regex package in this process (its matching takes a
# timeout), else Python's re in a helper process that the deadline can end.
SEARCH = _search_in_process if regex_package() is not None else _search_in_worker


def _apl_matches(value: Any, pattern: str) -> int | None:
    """APL's ``matches regex`` (aplsql_expr.check_regex vetted the pattern): bounded by the
    query's deadline, as a backtracking pattern could otherwise run for ever."""
    if value is None:
        return None
    deadline = getattr(QUERY, "deadline", None)
    timeout = QUERY_TIMEOUT if deadline is None else deadline - time.monotonic()
    text = value if isinstance(value, str) else str(value)
    try:
        if timeout <= 0:
            raise TimeoutError
        return 1 if SEARCH(pattern, text, timeout) else 0
    except TimeoutError:
        QUERY.timed_out = True
        raise


def _apl_strcat(*parts: Any) -> str:
    """APL's strcat where SQLite's length limit cannot be set (Python 3.10): the length is
    checked before the text is made, so chained strcats cannot make gigabytes."""
    texts = ["" if p is None else p if isinstance(p, str) else str(p) for p in parts]
    limit = getattr(QUERY, "max_length", None) or 12 * 1024 * 1024
    if sum(map(len, texts)) > limit:
        QUERY.too_big = True
        raise ValueError("string or blob too big")
    return "".join(texts)


def add_functions(db: sqlite3.Connection) -> None:
    # The query's functions SQLite lacks (aplsql uses them by these names).
    db.create_function("apl_has", 3, _apl_has, deterministic=True)
    db.create_function("apl_todatetime", 1, _apl_todatetime, deterministic=True)
    db.create_function("apl_datetime_add", 3, _apl_datetime_add, deterministic=True)
    db.create_function("apl_parse", 3, _apl_parse, deterministic=True)
    db.create_function("apl_matches", 2, _apl_matches, deterministic=True)
    db.create_function("apl_lower", 1, lambda v: _fold(v, False), deterministic=True)
    db.create_function("apl_upper", 1, lambda v: _fold(v, True), deterministic=True)
    db.create_function("apl_strcat", -1, _apl_strcat, deterministic=True)
    db.create_aggregate("apl_arg_max", 2, _ArgBest)  # type: ignore[arg-type]
    db.create_aggregate("apl_arg_min", 2, _ArgMin)  # type: ignore[arg-type]
    db.create_aggregate("apl_percentile", 2, _Percentile)  # type: ignore[arg-type]

