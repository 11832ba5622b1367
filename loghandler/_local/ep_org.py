"""The local service's organisation resources: API tokens (``/v2/tokens``), annotations
(``/v2/annotations``) and views (``/v2/views``).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, unquote

from .ingest import HttpError
from .request import Request
from .views import validate_view

__all__ = ["annotations_api", "tokens", "view", "views"]


def tokens(req: Request, method: str, token_id: str | None, sub: str | None) -> tuple[int, Any]:
    access = req.state.access
    if token_id is None:
        req.allow(method, "GET", "POST")
        if method == "GET":
            req.discard()
            return 200, access.list()
        return 200, access.create(req.json_body())
    token_id = unquote(token_id)
    if sub:
        req.allow(method, "POST")
        return 200, access.regenerate(token_id, req.json_body())
    req.allow(method, "GET", "DELETE")
    req.discard()
    if method == "GET":
        return 200, access.get(token_id)
    access.delete(token_id)
    return 204, None


def annotations_api(req: Request, method: str, item_id: str | None, query: str) -> tuple[int, Any]:
    notes = req.state.annotations
    if item_id is None:
        req.allow(method, "GET", "POST")
        if method == "GET":
            req.discard()
            params = parse_qs(query)
            datasets = [d for v in params.get("datasets", []) for d in v.split(",") if d]
            start, end = params.get("start"), params.get("end")
            return 200, notes.list(datasets, start[0] if start else None,
                                   end[0] if end else None)
        return 200, notes.create(req.json_body())
    item_id = unquote(item_id)
    req.allow(method, "GET", "PUT", "DELETE")
    if method == "PUT":
        return 200, notes.update(item_id, req.json_body())
    req.discard()
    if method == "GET":
        return 200, notes.get(item_id)
    notes.delete(item_id)
    return 204, None


def view(req: Request, method: str, view_id: str) -> tuple[int, Any]:
    store = req.state.store
    if method == "GET":
        req.discard()
        found = store.get_view(view_id)
    elif method == "PUT":
        view = validate_view(req.json_body())
        found = store.put_view(view_id, view)
    else:
        req.discard()
        if store.delete_view(view_id):
            return 204, None
        found = None
    if found is None:
        raise HttpError(404, f"view not found: no view with id {view_id!r}")
    return 200, found


def views(req: Request, method: str) -> tuple[int, Any]:
    """``GET|POST /v2/views``: the stored views, or a new one (the service gives its id)."""
    req.allow(method, "GET", "POST")
    if method == "GET":
        req.discard()
        return 200, req.state.store.views()
    view = validate_view(req.json_body())
    return 200, req.state.store.create_view(view)
