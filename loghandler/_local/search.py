"""The page's search box (and ``loghandler tail --search``) as APL: one translation, so the
query line shows exactly what ran, against the whole dataset, not the rows on screen.

    declined                 events holding the word anywhere        search "declined"
    "card declined"          the phrase                              search "card declined"
    level:error              a field equal to a value (any case)     where level =~ "error"
    user_id:17               numbers match as numbers or as text     where (user_id == 17 or ...)
    path:/api/*              a prefix                                where path startswith "/api/"
    status>=500              comparisons: > >= < <=                  where status >= 500
    -level:debug, -timeout   leave out                               where not(...)

Terms are ANDed. A left-out word is looked for in ``message`` (``search`` cannot be negated).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

__all__ = ["FACET_ROWS", "RANGES", "SearchError", "facets", "page_query", "search_apl"]

# The page's time ranges, as APL timespans.
RANGES = {"5m": "5m", "15m": "15m", "1h": "1h", "24h": "24h", "7d": "7d"}
# The rows the page shows at once (the newest).
PAGE_ROWS = 200

_FIELD = re.compile(r"[A-Za-z_@$][\w.@$-]*\Z")
_COMPARE = re.compile(r"([A-Za-z_@$][\w.@$-]*)(>=|<=|>|<)(.+)\Z", re.S)
_NUMBER = re.compile(r"-?\d+(\.\d+)?\Z")
# At most this many terms: a pasted log line is not a query.
MAX_TERMS = 32


class SearchError(ValueError):
    """A search the page cannot turn into a query; the message says why."""


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        if text[i].isspace():
            i += 1
            continue
        j = i
        token = []
        while j < n and not text[j].isspace():
            if text[j] == '"':
                end = text.find('"', j + 1)
                if end < 0:
                    raise SearchError("a quote is not closed: close it, as in \"card declined\"")
                token.append(text[j:end + 1])
                j = end + 1
            else:
                token.append(text[j])
                j += 1
        out.append("".join(token))
        i = j
    return out


def _unquote(value: str) -> str:
    return value[1:-1] if len(value) >= 2 and value[0] == value[-1] == '"' else value


def _string(value: str) -> str:
    return json.dumps(value)  # APL's double-quoted strings take JSON's escapes


def _field(name: str) -> str:
    if _FIELD.match(name):
        return name
    return "['" + name.replace("\\", "\\\\").replace("'", "\\'") + "']"


def _term(token: str) -> tuple[str, bool, str | None]:
    """(the APL condition, whether it is a free-text search term, the term) of one token."""
    m = _COMPARE.match(token)
    if m and ":" not in m.group(1):
        name, op, value = m.group(1), m.group(2), _unquote(m.group(3))
        if not _NUMBER.match(value):
            raise SearchError(f"{token!r}: a comparison needs a number, as in status>=500")
        return f"{_field(name)} {op} {value}", False, None
    if ":" in token and not token.startswith('"'):
        name, _, value = token.partition(":")
        value = _unquote(value)
        if not name or not _FIELD.match(name):
            raise SearchError(f"{token!r}: name a field before the colon, as in level:error")
        if value == "":
            return f"isnull({_field(name)})", False, None
        if value.endswith("*") and len(value) > 1:
            return f"{_field(name)} startswith {_string(value[:-1])}", False, None
        if _NUMBER.match(value):
            return (f"({_field(name)} == {value} or {_field(name)} == {_string(value)})",
                    False, None)
        return f"{_field(name)} =~ {_string(value)}", False, None
    text = _unquote(token)
    return f"message contains {_string(text)}", True, text


def search_apl(source: str, text: str, tail: str = "") -> str:
    """The APL for ``text`` (the search syntax above) over ``source`` (``['name']``), with
    ``tail`` (``| sort ... | take N``) after; the source alone for an empty search."""
    tokens = _tokens(text)
    if len(tokens) > MAX_TERMS:
        raise SearchError(f"at most {MAX_TERMS} terms; narrow the search")
    parts = [source]
    for token in tokens:
        negated = token.startswith("-") and len(token) > 1
        condition, free, term = _term(token[1:] if negated else token)
        if free and not negated:
            parts.append(f"search {_string(term or '')}")
        elif negated:
            parts.append(f"where not({condition})")
        else:
            parts.append(f"where {condition}")
    return " | ".join(parts) + (" " + tail if tail else "")


# Facets look at this many of the newest matching events (bounded work for any dataset).
FACET_ROWS = 5_000
FACET_FIELDS = 20
FACET_VALUES = 5
_SKIP_FACETS = frozenset({"_time", "_sysTime", "_rowId", "message", "exception", "stack"})


def facets(tables: list[dict[str, Any]]) -> dict[str, Any]:
    """The fields of a tabular answer's rows with their most frequent values: ``{"rows": n,
    "fields": [{"name", "present", "values": [[value, count], ...]}]}``, the fields present in
    most rows first. Values are counted as the service stores them; long texts, objects and
    arrays are not (they are not what one filters on)."""
    table = next((t for t in tables if t.get("name") != "_totals"), None)
    if table is None:
        return {"rows": 0, "fields": []}
    columns = table.get("columns") or []
    names = [f["name"] for f in table.get("fields", [])]
    n = len(columns[0]) if columns else 0
    out = []
    for name, column in zip(names, columns, strict=False):
        if name in _SKIP_FACETS:
            continue
        counts: Counter[Any] = Counter()
        present = 0
        for value in column:
            if value is None:
                continue
            present += 1
            if isinstance(value, (str, int, float, bool)) and not (
                    isinstance(value, str) and len(value) > 200):
                counts[value] += 1
        if present and counts:
            out.append({"name": name, "present": present,
                        "values": [[v, c] for v, c in counts.most_common(FACET_VALUES)]})
    out.sort(key=lambda f: (-f["present"], f["name"]))
    return {"rows": n, "fields": out[:FACET_FIELDS]}


_ROW_ID = re.compile(r"[0-9a-f]{1,32}\Z")


_ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z\Z")


def page_query(dataset: str, text: str, time_range: str | None, rows: int = PAGE_ROWS,
               before: tuple[str, str] | None = None) -> str:
    """The page's query for a dataset: its search, its time range (``RANGES``; None or "all":
    every time), the newest ``rows`` first; with ``before`` (the ``_time`` and ``_rowId`` of
    the last row shown), the page after it: older events, none twice, none skipped."""
    source = "['" + dataset.replace("\\", "\\\\").replace("'", "\\'") + "']"
    if time_range not in (None, "", "all"):
        start, sep, end = (time_range or "").partition("/")
        if sep:  # a custom range, "START/END" in UTC (the page's drag on the histogram)
            if not _ISO.match(start) or not _ISO.match(end) or start >= end:
                raise SearchError(f"a custom range is START/END, both UTC with a Z, START "
                                  f"first: not {time_range!r}")
            source += (f" | where _time >= datetime('{start}') and "
                       f"_time < datetime('{end}')")
        else:
            span = RANGES.get(time_range)
            if span is None:
                raise SearchError(f"unknown range {time_range!r}: use {', '.join(RANGES)}, "
                                  f"START/END or all")
            source += f" | where _time >= ago({span})"
    if before is not None:
        when, row_id = before
        if not _ROW_ID.match(row_id) or not re.fullmatch(r"[0-9T:.\-+Z]{10,40}", when):
            raise SearchError("the page to continue after is not one this service gave")
        source += (f" | where _time < datetime('{when}') or (_time == datetime('{when}') "
                   f"and _rowId < '{row_id}')")
    return search_apl(source, text, f"| sort by _time desc, _rowId desc | take {rows}")
