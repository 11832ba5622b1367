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
        return 200, access.create(req.json_body(), req.token)
    token_id = unquote(token_id)
    if sub:
        req.allow(method, "POST")
        return 200, access.regenerate(token_id, req.json_body(), req.token)
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


# The local service's one user and organisation (references: getCurrentUser (v1, v2),
# getUsers, getUser, getOrgs, getOrg).
USER = {"id": "local", "name": "Local user", "email": "local@localhost",
        "role": {"id": "owner", "name": "owner"}}
_STARTED = "2024-01-01T00:00:00Z"


def user(req: Request, method: str, version: str) -> tuple[int, Any]:
    """``GET /v2/user`` (and v1's, whose role is a name and which lists permissions)."""
    req.allow(method, "GET")
    req.discard()
    if version == "v1":
        return 200, {**USER, "role": "owner", "permissions": []}
    return 200, USER


def users(req: Request, method: str, user_id: str | None) -> tuple[int, Any]:
    """``GET /v2/users`` and ``GET /v2/users/{id}``: the one user."""
    req.allow(method, "GET")
    req.discard()
    if user_id is None:
        return 200, [USER]
    if unquote(user_id) != USER["id"]:
        raise HttpError(404, f"user not found: no user with id {unquote(user_id)!r}")
    return 200, USER


def _org(org_id: str) -> dict[str, Any]:
    limits = {"monthlyIngestGb": 0, "monthlyQueryGbHours": 0, "storageAllowanceGB": 0,
              "apiRateLimitPerSecond": 0, "maxUsers": 1, "maxDatasets": 0, "maxMonitors": 0,
              "maxFields": 0, "maxEndpoints": 0, "maxQueryWindowSeconds": 0,
              "maxAuditWindowSeconds": 0}
    return {"id": org_id, "name": "Local service", "slug": org_id, "plan": "personal",
            "planCreated": _STARTED, "lastUsageSync": _STARTED, "paymentStatus": "na",
            "primaryEmail": USER["email"], "role": "owner", "metaCreated": _STARTED,
            "metaModified": _STARTED, "metaVersion": "1", "firstFailedPayment": "",
            "defaultEdgeDeployment": "",
            "license": {"id": "local", "tier": "personal", "issuer": "loghandler",
                        "issuedTo": org_id, "issuedAt": _STARTED, "validFrom": _STARTED,
                        "expiresAt": None, **limits, "withAuths": [], "features": {},
                        "billingPeriodStart": _STARTED, "billingPeriodEnd": _STARTED,
                        "defaultEdgeDeployment": "", "edgeDeployments": []}}


def orgs(req: Request, method: str, org_id: str | None) -> tuple[int, Any]:
    """``GET /v2/orgs`` and ``GET /v2/orgs/{id}``: one organisation, whose id is the one the
    request's organisation header names (``local`` without one)."""
    req.allow(method, "GET")
    req.discard()
    own = req.service_header("Org-Id") or "local"
    if org_id is None:
        return 200, [_org(own)]
    if unquote(org_id) not in (own, "local"):
        raise HttpError(404, f"organization not found: no organization with id "
                             f"{unquote(org_id)!r}")
    return 200, _org(unquote(org_id))
