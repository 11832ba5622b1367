"""The local service's page: its query for a dataset (the search box's syntax is
``loghandler._search``, shared with ``loghandler tail --search``), its time ranges, and the
facets of what a search found.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from .._search import SearchError, search_apl
from .apl import parse_relative_time, parse_time

__all__ = ["FACET_ROWS", "PAGE_ROWS", "RANGES", "SearchError", "facets", "histogram_query",
           "page_query", "range_source", "range_us", "search_apl", "span_text"]

# The page's time ranges, as APL timespans.
RANGES = {"5m": "5m", "15m": "15m", "1h": "1h", "24h": "24h", "7d": "7d"}
# The rows the page shows at once (the newest).
PAGE_ROWS = 200

# Facets are computed over a sample of about this many events of the search, spread evenly
# over the range (every event when there are no more).
FACET_ROWS = 5_000
FACET_VALUES = 5
FACET_FIELDS = 1_000  # fields listed at most (the page filters them by name)
# A field with at least this many distinct values whose five most frequent cover less than a
# fifth of its events (ids, durations, times) is shown as such: its distinct count, no list.
HIGH_DISTINCT = 50
HIGH_TOP_SHARE = 0.2
_SKIP_FACETS = frozenset({"_time", "_sysTime", "_rowId", "message", "exception", "stack"})


def facets(tables: list[dict[str, Any]]) -> dict[str, Any]:
    """The fields of a tabular answer's rows: ``{"rows": n, "fields": [{"name", "present",
    "distinct", "high", "values": [[value, count], ...]}]}``, the fields present in most rows
    first. Values are counted as the service stores them; long texts, objects and arrays are
    not (they are not what one filters on). A field of many values each seen rarely is
    ``high`` (high cardinality): its distinct count says more than a list of counts of 1."""
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
        if not present:
            continue
        top = counts.most_common(FACET_VALUES)
        covered = sum(c for _, c in top)
        high = len(counts) >= HIGH_DISTINCT and covered < HIGH_TOP_SHARE * present
        out.append({"name": name, "present": present, "distinct": len(counts), "high": high,
                    "values": [] if high else [[v, c] for v, c in top]})
    # The fields one filters on first (most events have them), ids and durations after.
    out.sort(key=lambda f: (f["high"], -f["present"], f["name"]))
    return {"rows": n, "fields": out[:FACET_FIELDS]}


def range_source(dataset: str, time_range: str | None) -> str:
    """The dataset's source with the range's ``where`` (none for all time)."""
    source = "['" + dataset.replace("\\", "\\\\").replace("'", "\\'") + "']"
    if time_range in (None, "", "all"):
        return source
    start, sep, end = (time_range or "").partition("/")
    if sep:  # a custom range, "START/END" in UTC (the page's drag on the histogram)
        if not _ISO.match(start) or not _ISO.match(end) or start >= end:
            raise SearchError(f"a custom range is START/END, both UTC with a Z, START "
                              f"first: not {time_range!r}")
        return source + f" | where _time >= datetime('{start}') and _time < datetime('{end}')"
    span = RANGES.get(time_range or "")
    if span is None:
        raise SearchError(f"unknown range {time_range!r}: use {', '.join(RANGES)}, "
                          f"START/END or all")
    return source + f" | where _time >= ago({span})"


def range_us(time_range: str | None, now_us: int, data_range: tuple[int, int] | None
             ) -> tuple[int, int]:
    """The range as [start, end) in epoch microseconds: all time is the data's own first and
    last event (the hour up to now for a dataset with none)."""
    if time_range in (None, "", "all"):
        return data_range or (now_us - 3_600_000_000, now_us)
    start, sep, end = (time_range or "").partition("/")
    if sep:
        first, last = parse_time(start), parse_time(end)
        if first is None or last is None:
            raise SearchError(f"a custom range is START/END in UTC: not {time_range!r}")
        return first, last
    return parse_relative_time("now-" + RANGES[time_range or ""], now_us), now_us


def span_text(us: int) -> str:
    """A timespan as APL writes it: 15m, 30s, 2h, 1d."""
    for unit, size in (("d", 86_400_000_000), ("h", 3_600_000_000), ("m", 60_000_000),
                       ("s", 1_000_000)):
        if us % size == 0:
            return f"{us // size}{unit}"
    return f"{us // 1000}ms"


def histogram_query(dataset: str, text: str, time_range: str | None, bin_us: int) -> str:
    """The page's histogram: the search's events over the range, counted per bin and level."""
    return search_apl(range_source(dataset, time_range), text,
                      f"| summarize count() by bin(_time, {span_text(bin_us)}), level")


_ROW_ID = re.compile(r"[0-9a-f]{1,32}\Z")


_ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z\Z")


def page_query(dataset: str, text: str, time_range: str | None, rows: int = PAGE_ROWS,
               before: tuple[str, str] | None = None) -> str:
    """The page's query for a dataset: its search, its time range (``RANGES``; None or "all":
    every time), the newest ``rows`` first; with ``before`` (the ``_time`` and ``_rowId`` of
    the last row shown), the page after it: older events, none twice, none skipped."""
    source = range_source(dataset, time_range)
    if before is not None:
        when, row_id = before
        if not _ROW_ID.match(row_id) or not re.fullmatch(r"[0-9T:.\-+Z]{10,40}", when):
            raise SearchError("the page to continue after is not one this service gave")
        source += (f" | where _time < datetime('{when}') or (_time == datetime('{when}') "
                   f"and _rowId < '{row_id}')")
    return search_apl(source, text, f"| sort by _time desc, _rowId desc | take {rows}")
