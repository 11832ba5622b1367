"""Saved views: the ``View`` value object and ``client.views`` (list, get, create, update,
delete)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from .._errors import ApiError, ConfigurationError, NotFoundError
from .requester import Requester

__all__ = ["View", "Views"]

# python name -> the service's JSON name, in the order the service documents them.
FIELDS = {
    "apl_query": "aplQuery",
    "datasets": "datasets",
    "description": "description",
    "name": "name",
    "shared_by_org": "sharedByOrg",
    "shared_by_org_name": "sharedByOrgName",
}
_JSON_TO_PY = {v: k for k, v in FIELDS.items()}


@dataclass
class View:
    """A saved view. Unknown fields of the service's JSON are kept in ``extra`` and sent back."""

    name: str = ""
    apl_query: str = ""
    datasets: list[str] = field(default_factory=list)
    description: str = ""
    shared_by_org: str = ""
    shared_by_org_name: str = ""
    id: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> View:
        """Read the service's camelCase JSON object."""
        if not isinstance(data, dict):
            raise ApiError(200, data, f"expected a view object, got {type(data).__name__}")
        kwargs: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for key, value in data.items():
            if key in _JSON_TO_PY:
                kwargs[_JSON_TO_PY[key]] = value
            elif key == "id":
                kwargs["id"] = None if value is None else str(value)
            else:
                extra[key] = value
        kwargs["datasets"] = _datasets(kwargs.get("datasets"))
        for name in FIELDS:
            if name != "datasets" and kwargs.get(name) is None:
                kwargs[name] = ""
        return cls(**kwargs, extra=extra)

    def to_dict(self) -> dict[str, Any]:
        """The service's JSON: all six fields, the id when known, and every unknown field."""
        out: dict[str, Any] = dict(self.extra)
        if self.id is not None:
            out["id"] = self.id
        for py, js in FIELDS.items():
            value = getattr(self, py)
            out[js] = list(value) if py == "datasets" else value
        return out


def _datasets(value: Any) -> list[Any]:
    # list("logs") would be ["l", "o", "g", "s"]: a lone name is one dataset.
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value]


def _view_path(view_id: Any) -> str:
    if view_id is None or str(view_id) == "":
        raise ConfigurationError("view_id must be a non-empty id")
    return f"/v2/views/{quote(str(view_id), safe='')}"


def _as_view(view: Any) -> View:
    if isinstance(view, Mapping):
        return View.from_dict(dict(view))
    if not isinstance(view, View):
        raise ConfigurationError(
            f"view must be a View (or the service's JSON dict), not {type(view).__name__}"
        )
    return view


class Views:
    """``client.views``: the organization's saved views (``/v2/views``)."""

    def __init__(self, client: Requester) -> None:
        self._client = client

    def list(self) -> list[View]:
        """All views (GET /v2/views)."""
        data = self._client.request("GET", "/v2/views")
        if not isinstance(data, list):
            raise ApiError(200, data, "expected a JSON list of views from GET /v2/views")
        return [View.from_dict(item) for item in data]

    def get(self, view_id: str) -> View:
        """The view with this id (GET /v2/views/{id}); ``NotFoundError`` when there is none."""
        path = _view_path(view_id)
        try:
            data = self._client.request("GET", path)
        except NotFoundError as exc:
            raise NotFoundError(exc.status, exc.body,
                                f"no view with id {str(view_id)!r}: `loghandler views list` "
                                "shows the ids there are") from None
        result = View.from_dict(data)
        if result.id is None:
            result.id = str(view_id)
        return result

    def create(self, view: View | Mapping[str, Any]) -> View:
        """Create a view (POST /v2/views) and return it as stored, with the id the service
        gave it. ``name`` and ``apl_query`` are required; an ``id`` in ``view`` is not sent."""
        view = _as_view(view)
        if not view.name or not view.apl_query:
            raise ConfigurationError("a view needs a name and an apl_query to be created")
        body = view.to_dict()
        body.pop("id", None)
        data = self._client.request("POST", "/v2/views", body)
        if data is None:  # an empty 2xx: the service took what we sent, without an id to tell
            return dataclasses.replace(view, id=None, extra=dict(view.extra))
        return View.from_dict(data)

    def delete(self, view_id: str) -> None:
        """Delete a view (DELETE /v2/views/{id}); ``NotFoundError`` when there is none."""
        self._client.request("DELETE", _view_path(view_id))

    def _find(self, view_id: str) -> View:
        view_id = str(view_id)
        for view in self.list():
            if view.id == view_id:
                return view
        raise NotFoundError(404, None, f"no view with id {view_id!r}: `loghandler views list` "
                                       "shows the ids there are")

    def update(self, view_id: str, view: View | None = None, **changes: Any) -> View:
        """Replace a view (PUT /v2/views/{id}) and return the service's answer.

        All six fields are always sent, because the service leaves partial updates undefined.
        ``changes`` use python names (``apl_query="..."``) and apply on top of ``view``, or of the
        current view found by id in ``list()`` when ``view`` is None.
        """
        if view_id is None or str(view_id) == "":
            raise ConfigurationError("view_id must be a non-empty id")
        unknown = set(changes) - set(FIELDS)
        if unknown:
            raise ConfigurationError(
                f"unknown view field(s) {', '.join(sorted(unknown))}; "
                f"use {', '.join(FIELDS)}"
            )
        if "datasets" in changes and isinstance(changes["datasets"], str):
            raise ConfigurationError("datasets must be a list of dataset names, not a string")
        if isinstance(view, Mapping):
            view = View.from_dict(dict(view))
        elif view is not None and not isinstance(view, View):
            raise ConfigurationError(
                f"view must be a View (or the service's JSON dict), not {type(view).__name__}"
            )
        base = self._find(view_id) if view is None else view
        updated = dataclasses.replace(base, **changes) if changes else base
        body = updated.to_dict()
        if "id" in body:
            body["id"] = str(view_id)  # a body naming another view than the path is ambiguous
        data = self._client.request("PUT", f"/v2/views/{quote(str(view_id), safe='')}", body)
        if data is None:  # an empty 2xx answer: the service took what we sent
            return dataclasses.replace(updated, id=str(view_id), extra=dict(updated.extra))
        result = View.from_dict(data)
        if result.id is None:
            result.id = str(view_id)
        return result
