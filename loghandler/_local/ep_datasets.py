"""The datasets API of the local service: list and create, get, update and delete, trim
(``/v1/datasets`` and the same paths under ``/v2``), and under ``/v2`` a dataset's fields and map
fields.

References (the real service's API, v1 and v2): getDatasets, createDataset, getDataset,
updateDataset, deleteDataset, trimDataset (v1 answers 200 with a TrimResult, v2 204 with no
body), getFieldsForDataset, getFieldForDataset, updateFieldForDataset, getMapFields,
createMapField, updateMapFields, deleteMapField.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import unquote

from . import apl as apl
from .ingest import HttpError
from .request import Request
from .store import DATASET_NAME_RULE, valid_dataset_name

__all__ = ["datasets", "fields", "map_fields"]


def datasets(req: Request, method: str, name: str | None, trim: str | None,
             version: str = "v1") -> tuple[int, Any]:
    """The datasets API: list and create, get, update and delete, trim."""
    store = req.state.store
    if name is None:
        req.allow(method, "GET", "POST")
        if method == "GET":
            req.discard()
            return 200, [_with_edge(req, d) for d in store.dataset_list()]
        data = req.json_body()
        if not isinstance(data, dict) or not valid_dataset_name(data.get("name")):
            raise HttpError(400, f"a dataset needs a name of {DATASET_NAME_RULE}: "
                                 '{"name": "logs", "description": "..."}')
        created = store.dataset_create(data["name"], str(data.get("description") or ""))
        if created is None:
            raise HttpError(409, f"dataset {data['name']!r} exists already")
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
        # v1 answers its TrimResult; v2 documents 204 with no body.
        return (200, {"numDeleted": n}) if version == "v1" else (204, None)
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


def _known(req: Request, name: str) -> str:
    if not req.state.store.dataset_exists(name):
        req.discard()
        raise HttpError(404, f"dataset {name!r} not found")
    return name


def fields(req: Request, method: str, dataset: str, field: str | None) -> tuple[int, Any]:
    """``GET /v2/datasets/{id}/fields`` (every field the dataset's events brought, with its
    type), ``GET|PUT /v2/datasets/{id}/fields/{field}`` (a PUT sets ``unit``,
    ``description`` and ``hidden``; the name and type are the data's)."""
    store = req.state.store
    dataset = _known(req, unquote(dataset))
    if field is None:
        req.allow(method, "GET")
        req.discard()
        return 200, store.fields(dataset)
    field = unquote(field)
    req.allow(method, "GET", "PUT")
    if method == "GET":
        req.discard()
        found = store.fields(dataset, field)
        if not found:
            raise HttpError(404, f"field {field!r} not found in dataset {dataset!r}")
        return 200, found[0]
    data = req.json_body()
    if not isinstance(data, dict):
        raise HttpError(400, 'a field update is an object: {"name", "type", "unit", '
                             '"description", "hidden"}')
    for key in ("unit", "description"):
        if not isinstance(data.get(key, ""), str):
            raise HttpError(400, f"{key} must be a string")
    if not isinstance(data.get("hidden", False), bool):
        raise HttpError(400, "hidden must be true or false")
    updated = store.field_update(dataset, field, data.get("unit", ""),
                                 data.get("description", ""), data.get("hidden", False))
    if updated is None:
        raise HttpError(404, f"field {field!r} not found in dataset {dataset!r}")
    return 200, updated


def map_fields(req: Request, method: str, dataset: str, field: str | None
               ) -> tuple[int, Any]:
    """``/v2/datasets/{id}/mapfields``: list (GET), add one (POST ``{"name"}``), set all (PUT, a
    list of names); ``DELETE .../mapfields/{name}``. Recorded and answered; the local service
    flattens nested objects all the same."""
    store = req.state.store
    dataset = _known(req, unquote(dataset))
    names = store.map_fields(dataset)
    if field is not None:
        req.allow(method, "DELETE")
        req.discard()
        field = unquote(field)
        if field not in names:
            raise HttpError(404, f"map field {field!r} not found in dataset {dataset!r}")
        store.set_map_fields(dataset, [n for n in names if n != field])
        return 204, None
    req.allow(method, "GET", "POST", "PUT")
    if method == "GET":
        req.discard()
        return 200, names
    data = req.json_body()
    if method == "POST":
        if not isinstance(data, dict) or not isinstance(data.get("name"), str) or not (
                data["name"]):
            raise HttpError(400, 'a map field is {"name": "field"}')
        store.set_map_fields(dataset, [*names, data["name"]])
        return 200, {"name": data["name"]}
    if not isinstance(data, list) or not all(isinstance(n, str) and n for n in data):
        raise HttpError(400, "map fields are a list of field names")
    return 200, store.set_map_fields(dataset, data)
