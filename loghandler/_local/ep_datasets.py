"""The datasets API of the local service: list and create, get, update and delete, trim
(``/v1/datasets`` and the same paths under ``/v2``).
"""

from __future__ import annotations

import re
import time
from typing import Any
from urllib.parse import unquote

from . import apl as apl
from .ingest import HttpError
from .request import Request

__all__ = ["datasets"]

_DATASET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def datasets(req: Request, method: str, name: str | None, trim: str | None
              ) -> tuple[int, Any]:
    """The datasets API: list and create, get, update and delete, trim."""
    store = req.state.store
    allowed = req.state.datasets
    if name is None:
        req.allow(method, "GET", "POST")
        if method == "GET":
            req.discard()
            listed = store.dataset_list()
            if allowed is not None:
                known = {d["name"] for d in listed}
                listed += [{"id": n, "name": n, "description": "", "who": "",
                            "created": ""} for n in sorted(allowed) if n not in known]
            return 200, [_with_edge(req, d) for d in listed]
        data = req.json_body()
        if not isinstance(data, dict) or not isinstance(data.get("name"), str) or not (
                _DATASET_NAME.fullmatch(data["name"])):
            raise HttpError(400, "a dataset needs a name of 1-128 letters, digits, '-', "
                                 "'_' or '.': {\"name\": \"logs\", \"description\": \"...\"}")
        created = store.dataset_create(data["name"], str(data.get("description") or ""))
        if created is None:
            raise HttpError(409, f"dataset {data['name']!r} exists already")
        if allowed is not None:
            allowed.add(data["name"])
        edge = data.get("edgeDeployment")
        if isinstance(edge, str) and edge:
            req.state.edge_deployments[data["name"]] = edge
        return 200, _with_edge(req, created)
    name = unquote(name)
    if trim:
        req.allow(method, "POST")
        data = req.json_body()
        span = data.get("maxDuration") if isinstance(data, dict) else None
        try:
            now_us = time.time_ns() // 1000
            cutoff = apl.parse_relative_time(f"now-{span}", now_us) if isinstance(
                span, str) else None
        except apl.AplError:
            cutoff = None
        if cutoff is None:
            raise HttpError(400, 'trim needs {"maxDuration": "1h"} (a span: 30m, 1h, 2d)')
        n = store.dataset_trim(name, cutoff)
        if n is None:
            raise HttpError(404, f"dataset {name!r} not found")
        return 200, {"numDeleted": n}
    req.allow(method, "GET", "PUT", "DELETE")
    if method == "GET":
        req.discard()
        found = store.dataset_get(name)
    elif method == "PUT":
        data = req.json_body()
        description = data.get("description") if isinstance(data, dict) else None
        if not isinstance(description, str):
            raise HttpError(400, 'update needs {"description": "..."}')
        found = store.dataset_update(name, description)
    else:
        req.discard()
        if not store.dataset_delete(name):
            raise HttpError(404, f"dataset {name!r} not found")
        if allowed is not None:
            allowed.discard(name)
        req.state.edge_deployments.pop(name, None)
        req.state.field_limit.forget(name)
        return 204, None
    if found is None:
        raise HttpError(404, f"dataset {name!r} not found")
    return 200, _with_edge(req, found)


def _with_edge(req: Request, dataset: dict[str, Any]) -> dict[str, Any]:
    # The edge deployment a dataset was created in (the official SDK's edge tests read it
    # back); kept for the life of the service, "" when none was given.
    return {**dataset, "edgeDeployment": req.state.edge_deployments.get(
        dataset.get("name", ""), "")}
