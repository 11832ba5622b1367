"""``client.datasets``: the service's datasets (``/v1/datasets``)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from .._errors import ApiError, ConfigurationError, NotFoundError
from .requester import Requester

__all__ = ["Datasets"]


def _path(name: str) -> str:
    if not isinstance(name, str) or not name:
        raise ConfigurationError("a dataset name must be a non-empty string")
    return f"/v1/datasets/{quote(name, safe='')}"


class Datasets:
    """``client.datasets``: list, get, create, update, trim and delete datasets.

    Each dataset is the service's JSON object (``name``, ``id``, ``description``, ``created``).
    """

    def __init__(self, client: Requester) -> None:
        self._client = client

    def list(self) -> list[dict[str, Any]]:
        """Every dataset (GET /v1/datasets)."""
        data = self._client.request("GET", "/v1/datasets")
        if not isinstance(data, list):
            raise ApiError(200, data, "expected a JSON list of datasets from GET /v1/datasets")
        return [d for d in data if isinstance(d, dict)]

    def get(self, name: str) -> dict[str, Any]:
        """One dataset (GET /v1/datasets/{name}); ``NotFoundError`` when there is none."""
        try:
            data = self._client.request("GET", _path(name))
        except NotFoundError as exc:
            raise self._missing(exc, name) from None
        return data if isinstance(data, dict) else {"name": name}

    def create(self, name: str, description: str = "") -> dict[str, Any]:
        """Create a dataset (POST /v1/datasets); ``ApiError`` (409) when it exists."""
        _path(name)
        data = self._client.request("POST", "/v1/datasets",
                                    {"name": name, "description": description})
        return data if isinstance(data, dict) else {"name": name, "description": description}

    def _missing(self, exc: NotFoundError, name: str) -> NotFoundError:
        return NotFoundError(exc.status, exc.body, f"no dataset {name!r}: `loghandler datasets "
                                                   "list` shows the datasets there are")

    def update(self, name: str, description: str) -> dict[str, Any]:
        """Change a dataset's description (PUT /v1/datasets/{name})."""
        try:
            data = self._client.request("PUT", _path(name), {"description": description})
        except NotFoundError as exc:
            raise self._missing(exc, name) from None
        return data if isinstance(data, dict) else {"name": name, "description": description}

    def trim(self, name: str, max_duration: str) -> Any:
        """Delete the events older than ``max_duration`` (e.g. "30d", "1h") from a dataset
        (POST /v1/datasets/{name}/trim); the service's answer."""
        try:
            return self._client.request("POST", _path(name) + "/trim",
                                        {"maxDuration": max_duration})
        except NotFoundError as exc:
            raise self._missing(exc, name) from None

    def delete(self, name: str) -> None:
        """Delete a dataset and its events (DELETE /v1/datasets/{name})."""
        try:
            self._client.request("DELETE", _path(name))
        except NotFoundError as exc:
            raise self._missing(exc, name) from None
