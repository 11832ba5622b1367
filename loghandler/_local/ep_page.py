"""The web page's own endpoints: the datasets with their counts, its search box as APL (the
events' query and the histogram's: search.py) and the fields of what a search found, and its
files (served without a token: the page reads everything else through the API).
"""

from __future__ import annotations

import math
import time
from typing import Any

from . import aplsql
from .ingest import HttpError
from .reader import MAX_QUERY_TIMEOUT
from .request import Request
from .search import (
    FACET_ROWS,
    PAGE_ROWS,
    SearchError,
    facets,
    histogram_query,
    page_query,
    range_source,
    range_us,
    search_apl,
)

__all__ = ["STATIC", "datasets", "search", "search_facets"]

# The web page: plain files shipped in the package, served without a token (the page then
# reads everything through the authenticated API, with the token from the URL fragment).
STATIC = {"/": ("index.html", "text/html; charset=utf-8"),
           "/index.html": ("index.html", "text/html; charset=utf-8"),
           "/app.js": ("app.js", "text/javascript; charset=utf-8"),
           "/style.css": ("style.css", "text/css; charset=utf-8")}

# Facets first estimate how many events match from a sample of about this many events (when
# the counts kept at ingest cannot count them).
FACET_PROBE = 20_000
# The fields' sample reads at most about this many events of the range, whatever the search.
FACET_SCAN = 50_000


def _asked(req: Request) -> dict[str, Any]:
    req.may_some("query")  # before the body is read and decoded
    data = req.json_body()
    if not isinstance(data, dict) or not isinstance(data.get("dataset"), str) or not (
            isinstance(data.get("q", ""), str)):
        raise HttpError(400, 'send {"dataset": "...", "q": "...", "range": "1h"}')
    req.may("query", "GET", data["dataset"])
    if not isinstance(data.get("range"), str):
        data["range"] = None
    return data


def datasets(req: Request) -> list[dict[str, Any]]:
    """The datasets and how many events each holds (counted as they arrive: no query)."""
    req.discard()
    req.may("datasets", "GET")
    counts = req.state.store.datasets()
    return [{"name": d["name"], "count": counts.get(d["name"], 0)}
            for d in req.state.store.dataset_list()]


def search(req: Request) -> dict[str, Any]:
    """The page's queries for a search and a range: the newest events (``apl``; with
    ``after``, the page after that row) and the histogram (``histogram``: its query, its
    range and its bins, about 100 of them, as bin_auto chooses)."""
    data = _asked(req)
    after = data.get("after")  # the last row shown: {"_time", "_rowId"}, for the next page
    before = None
    if isinstance(after, dict):
        if not isinstance(after.get("_time"), str) or not isinstance(after.get("_rowId"),
                                                                       str):
            raise HttpError(400, '"after" needs the "_time" and "_rowId" of a row')
        before = (after["_time"], after["_rowId"])
    dataset, text, time_range = data["dataset"], data.get("q", ""), data["range"]
    try:
        apl = page_query(dataset, text, time_range, PAGE_ROWS, before)
        if before is not None:
            return {"apl": apl}
        now_us = time.time_ns() // 1000
        start, end = range_us(time_range, now_us,
                              req.state.store.reader.data_range(dataset))
        bin_us = aplsql.auto_span(start, end)
        return {"apl": apl, "maxTimeout": MAX_QUERY_TIMEOUT,
                "histogram": {"apl": histogram_query(dataset, text, time_range, bin_us),
                              "start": _iso(start), "end": _iso(end),
                              "bin_ms": bin_us // 1000}}
    except SearchError as exc:
        raise HttpError(400, str(exc)) from None


def search_facets(req: Request) -> dict[str, Any]:
    """The fields of the events a search finds over the range: every one of them when they
    are few, else a sample spread evenly over the range (a hash of each event's row id picks
    it, whatever its time), and it says so. Bounded whatever the search: at most about
    FACET_SCAN events of the range are read for the sample (a search that matches few
    events, as ``status:500``, has a sample of the matches among them), and how many match
    is counted from the counts kept at ingest when they can, else estimated from a probe of
    about FACET_PROBE events."""
    data = _asked(req)
    store = req.state.store
    try:
        matching = search_apl(range_source(data["dataset"], data["range"]), data.get("q", ""))
    except SearchError as exc:
        raise HttpError(400, str(exc)) from None

    def count(apl: str, sample: int = 1) -> int:
        answer = store.reader.query(apl + " | count", fmt="tabular", sample=sample,
                                    cancelled=req.client_gone, client=req.client_key)
        return int(answer["tables"][0]["columns"][0][0])

    source = range_source(data["dataset"], data["range"])
    # The range's events: from the per-minute counts (a million index entries otherwise).
    in_range = store.reader.counted(source + " | summarize count()", client=req.client_key)
    if in_range is None:
        in_range = count(source)  # the index, no event read
    searched = bool(data.get("q", "").strip())
    counted = store.reader.counted(matching + " | summarize count()",
                                   client=req.client_key) if searched else in_range
    estimate = in_range if counted is None else counted
    if counted is None and in_range > FACET_ROWS:
        # How many match: a probe of the range estimates it.
        probe = max(1, in_range // FACET_PROBE)
        estimate = count(matching, probe) * probe
    # The sample's spacing: about FACET_ROWS of the matches, and never more than about
    # FACET_SCAN events of the range read.
    every = max(1, math.floor(estimate / FACET_ROWS), math.ceil(in_range / FACET_SCAN))
    apl = matching + f" | take {FACET_ROWS}"
    answer = store.reader.query(apl, fmt="tabular", sample=every, cancelled=req.client_gone,
                                client=req.client_key)
    got = facets(answer.get("tables", []))
    sampled = every > 1 or got["rows"] >= FACET_ROWS
    # How many the search finds in the range: counted (no search, the kept counts, or every
    # event read), or estimated from the probe.
    exact = counted is not None or not sampled
    matched = counted if counted is not None else got["rows"] if not sampled else max(
        estimate, got["rows"])
    return {"apl": apl, **got, "sampled": sampled, "every": every, "matched": matched,
            "exact": exact}


def _iso(us: int) -> str:
    from .apl import format_time

    return str(format_time(us))
