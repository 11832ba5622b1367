"""The local service's page: its query for a dataset (the search box's syntax is
``loghandler._search``, shared with ``loghandler tail --search``), its time ranges, and the
facets of what a search found.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from .._search import SearchError, search_apl

__all__ = ["FACET_ROWS", "PAGE_ROWS", "RANGES", "SearchError", "facets", "page_query",
           "search_apl"]

# The page's time ranges, as APL timespans.
RANGES = {"5m": "5m", "15m": "15m", "1h": "1h", "24h": "24h", "7d": "7d"}
# The rows the page shows at once (the newest).
PAGE_ROWS = 200

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
