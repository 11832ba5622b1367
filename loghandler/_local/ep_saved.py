"""Starred (saved) queries and dashboards, stored as the real service's API v2 documents them
(references: getStarredQueries, createStarred, getStarred, updateStarred, deleteStarred;
listDashboards, createDashboard, getDashboard, updateDashboard, deleteDashboard).
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import parse_qs, unquote

from .._time import format_micros
from .access import Access, verb
from .ep_alerts import USER_ID
from .ingest import HttpError
from .request import Request

__all__ = ["dashboards", "starred_queries"]

# The fields the reference requires of a dashboard document.
DASHBOARD_FIELDS: dict[str, type | tuple[type, ...]] = {
    "name": str, "owner": str, "charts": list, "layout": list, "refreshTime": int,
    "schemaVersion": int, "timeWindowStart": str, "timeWindowEnd": str}


def _page(items: list[Any], params: dict[str, list[str]]) -> list[Any]:
    """``?limit=&offset=``, as the list endpoints take them."""
    try:
        offset = max(0, int(params.get("offset", ["0"])[-1] or 0))
        limit = int(params.get("limit", ["0"])[-1] or 0)
    except ValueError:
        raise HttpError(400, "limit and offset must be whole numbers") from None
    return items[offset:offset + limit] if limit > 0 else items[offset:]


def _starred_allowed(req: Request, method: str, dataset: Any) -> bool:
    """A created token holds starredQueries per dataset; the service's own tokens: all."""
    token = req.token
    if token is True or token is None:
        return True
    if not isinstance(dataset, str) or not dataset:
        return False
    return Access.allows(token, "starredQueries", verb(method), dataset)


def _check_starred(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise HttpError(400, "a starred query is a JSON object")
    if not isinstance(body.get("name"), str) or not body["name"]:
        raise HttpError(400, 'a starred query needs "name"')
    if body.get("kind", "apl") != "apl":
        raise HttpError(400, 'a starred query\'s "kind" is "apl"')
    query = body.get("query")
    if not isinstance(query, dict) or not isinstance(query.get("apl"), str):
        raise HttpError(400, 'a starred query needs "query": {"apl": "..."}')
    metadata = body.get("metadata", {})
    if not isinstance(metadata, dict):
        raise HttpError(400, "metadata must be an object")
    if body.get("dataset") is not None and not isinstance(body["dataset"], str):
        raise HttpError(400, "dataset must be a dataset's name")
    return {**body, "kind": "apl", "metadata": metadata,
            "who": body.get("who") if isinstance(body.get("who"), str) and body["who"]
            else USER_ID}


def starred_queries(req: Request, method: str, doc_id: str | None, query: str
                    ) -> tuple[int, Any]:
    """``/v2/apl-starred-queries`` (list with ``limit``, ``offset``, ``dataset``, ``who``,
    ``qs``; create) and ``/v2/apl-starred-queries/{id}`` (get, update, delete)."""
    docs = req.state.store.documents
    if doc_id is None:
        req.allow(method, "GET", "POST")
        if method == "GET":
            req.discard()
            params = parse_qs(query)
            items = [q for q in docs.list("starred")
                     if _starred_allowed(req, method, q.get("dataset"))]
            if params.get("dataset"):
                items = [q for q in items if q.get("dataset") == params["dataset"][-1]]
            items = _whose(items, params.get("who", [""])[-1])
            if params.get("qs"):
                text = params["qs"][-1].lower()
                items = [q for q in items if text in q["name"].lower()
                         or text in q["query"]["apl"].lower()]
            return 200, _page(items, params)
        body = _check_starred(req.json_body())
        if not _starred_allowed(req, method, body.get("dataset")):
            raise _refused(method, body.get("dataset"))
        new = {"id": docs.new_id("starred"), **{k: v for k, v in body.items() if k != "id"}}
        docs.put("starred", new["id"], new)
        return 200, new
    doc_id = unquote(doc_id)
    req.allow(method, "GET", "PUT", "DELETE")
    old = docs.get("starred", doc_id)
    update = _check_starred(req.json_body()) if method == "PUT" else None
    if method != "PUT":
        req.discard()
    if old is None:
        raise HttpError(404, f"starred query not found: no starred query with id {doc_id!r}")
    if not _starred_allowed(req, method, old.get("dataset")):
        raise _refused(method, old.get("dataset"))
    if method == "GET":
        return 200, old
    if method == "DELETE":
        docs.delete("starred", doc_id)
        return 204, None
    assert update is not None
    new = {"id": doc_id, **{k: v for k, v in update.items() if k != "id"}}
    docs.put("starred", doc_id, new)
    return 200, new


def _whose(items: list[Any], who: str) -> list[Any]:
    """getStarredQueries' ``who``: none, the caller's own; ``all``, everyone's (what the
    JavaScript client's list sends); ``team``, everyone's but the caller's; else that user's.
    The local service has one user, whose every token is that user's."""
    if who == "all":
        return items
    if who == "team":
        return [q for q in items if q.get("who") != USER_ID]
    return [q for q in items if q.get("who") == (who or USER_ID)]


def _refused(method: str, dataset: Any) -> HttpError:
    where = f"dataset {dataset!r}" if isinstance(dataset, str) and dataset else "any dataset"
    return HttpError(403, f"this token may not {verb(method)} starredQueries in {where}: "
                          "create one with that capability")


def _check_dashboard(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict) or not isinstance(body.get("dashboard"), dict):
        raise HttpError(400, 'send {"dashboard": {...}, "uid": "...", "overwrite": false}')
    dashboard = body["dashboard"]
    missing = [k for k in DASHBOARD_FIELDS if k not in dashboard]
    if missing:
        raise HttpError(400, f"the dashboard lacks {', '.join(missing)}; a dashboard needs "
                             f"{', '.join(DASHBOARD_FIELDS)}")
    for key, kind in DASHBOARD_FIELDS.items():
        if not isinstance(dashboard[key], kind) or isinstance(dashboard[key], bool):
            raise HttpError(400, f"dashboard.{key} has the wrong type")
    if dashboard["refreshTime"] not in (15, 60, 300):
        raise HttpError(400, "dashboard.refreshTime is 15, 60 or 300 (seconds)")
    if dashboard["schemaVersion"] != 2:
        raise HttpError(400, "dashboard.schemaVersion is 2")
    return body


def _stored_dashboard(uid: str, dashboard: dict[str, Any], old: dict[str, Any] | None
                      ) -> dict[str, Any]:
    now = format_micros(time.time_ns() // 1000)
    return {"uid": uid, "id": old["id"] if old else uid,
            "version": (old["version"] + 1) if old else 1,
            "dashboard": {**dashboard, "uid": uid},
            "createdAt": old["createdAt"] if old else now,
            "updatedAt": now,
            "createdBy": old["createdBy"] if old else USER_ID,
            "updatedBy": USER_ID}


def dashboards(req: Request, method: str, uid: str | None, query: str) -> tuple[int, Any]:
    """``/v2/dashboards`` (list with ``limit``/``offset``; create) and
    ``/v2/dashboards/uid/{uid}`` (get, update, delete)."""
    docs = req.state.store.documents
    if uid is None:
        req.allow(method, "GET", "POST")
        if method == "GET":
            req.discard()
            return 200, _page(docs.list("dashboards"), parse_qs(query))
        body = _check_dashboard(req.json_body())
        uid = body.get("uid") or body["dashboard"].get("uid") or docs.new_id("dashboards")
        if not isinstance(uid, str):
            raise HttpError(400, "uid must be a string")
        old = docs.get("dashboards", uid)
        if old is not None and not body.get("overwrite"):
            raise HttpError(409, f"dashboard {uid!r} exists already: send \"overwrite\": true "
                                 "to replace it")
        return _save(req, uid, body, old)
    uid = unquote(uid)
    req.allow(method, "GET", "PUT", "DELETE")
    old = docs.get("dashboards", uid)
    if method == "PUT":
        body = _check_dashboard(req.json_body())
        if old is None:
            raise HttpError(404, f"dashboard not found: no dashboard with uid {uid!r}")
        return _save(req, uid, body, old)
    req.discard()
    if old is None:
        raise HttpError(404, f"dashboard not found: no dashboard with uid {uid!r}")
    if method == "GET":
        return 200, old
    docs.delete("dashboards", uid)
    return 204, None


def _save(req: Request, uid: str, body: dict[str, Any], old: dict[str, Any] | None
          ) -> tuple[int, Any]:
    version = body.get("version")
    if old is not None and version is not None and version != old["version"]:
        raise HttpError(412, f"version conflict: dashboard {uid!r} is at version "
                             f"{old['version']}, not {version}")
    new = _stored_dashboard(uid, body["dashboard"], old)
    req.state.store.documents.put("dashboards", uid, new)
    if old is None:
        return 201, {"status": "created", "dashboard": new, "overwritten": False}
    return 200, {"status": "updated", "dashboard": new, "overwritten": True}
