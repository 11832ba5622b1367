"""The web page's own endpoints: its search box and facets as APL (search.py), and its
files (served without a token: the page reads everything else through the API).
"""

from __future__ import annotations

from typing import Any

from .ingest import HttpError
from .request import Request
from .search import FACET_ROWS, PAGE_ROWS, SearchError, facets, page_query

__all__ = ["STATIC", "search", "search_facets"]

# The web page: plain files shipped in the package, served without a token (the page then
# reads everything through the authenticated API, with the token from the URL fragment).
STATIC = {"/": ("index.html", "text/html; charset=utf-8"),
           "/index.html": ("index.html", "text/html; charset=utf-8"),
           "/app.js": ("app.js", "text/javascript; charset=utf-8"),
           "/style.css": ("style.css", "text/css; charset=utf-8")}


def search(req: Request, rows: int | None = None) -> dict[str, Any]:
    data = req.json_body()
    if not isinstance(data, dict) or not isinstance(data.get("dataset"), str) or not (
            isinstance(data.get("q", ""), str)):
        raise HttpError(400, 'send {"dataset": "...", "q": "...", "range": "1h"}')
    req.may("query", "GET", data["dataset"])
    time_range = data.get("range") if isinstance(data.get("range"), str) else None
    after = data.get("after")  # the last row shown: {"_time", "_rowId"}, for the next page
    before = None
    if isinstance(after, dict):
        if not isinstance(after.get("_time"), str) or not isinstance(after.get("_rowId"),
                                                                       str):
            raise HttpError(400, '"after" needs the "_time" and "_rowId" of a row')
        before = (after["_time"], after["_rowId"])
    try:
        return {"apl": page_query(data["dataset"], data.get("q", ""), time_range,
                                  PAGE_ROWS if rows is None else rows, before)}
    except SearchError as exc:
        raise HttpError(400, str(exc)) from None


def search_facets(req: Request) -> dict[str, Any]:
    apl = search(req, FACET_ROWS)["apl"]
    answer = req.state.store.query(apl, None, None, "tabular")
    return {"apl": apl, **facets(answer.get("tables", []))}
