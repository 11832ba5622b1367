"""API tokens and annotations of the local service, as the real service's API documents them.

Tokens (``/v2/tokens``: create, list, get, regenerate, delete): a created token works for the
actions its capabilities allow and is refused (403) the others, as the seed says of API tokens
("limits the actions allowed with it, for example only querying one particular dataset"). The
tokens the service was started with may do everything; a created token can grant (create or
regenerate a token with) only capabilities it holds itself. Annotations (``/v2/annotations``:
create, list by dataset and time, get, update, delete) are kept as given. Both live in memory,
for the life of the service; each collection is bounded.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from typing import Any

from .._time import format_micros, parse_micros
from .ingest import HttpError, normalize_time

__all__ = ["MAX_ITEMS", "Access", "Annotations", "verb"]

# At most this many created tokens, and annotations: a test suite's worth, never unbounded.
MAX_ITEMS = 10_000

_VERBS = {"GET": "read", "POST": "create", "PUT": "update", "DELETE": "delete"}
_ORG_CAPABILITIES = frozenset({
    "annotations", "apiTokens", "auditLog", "billing", "dashboards", "datasets", "endpoints",
    "flows", "integrations", "monitors", "notifiers", "rbac", "sharedAccessKeys", "users",
    "views"})
_DATASET_CAPABILITIES = frozenset({
    "ingest", "query", "starredQueries", "virtualFields", "trim", "vacuum", "data", "share"})
_ACTIONS = frozenset({"create", "read", "update", "delete"})


def verb(method: str) -> str:
    """The action an HTTP method is, in the capabilities' words."""
    return _VERBS.get(method, "read")


def _now() -> str:
    return format_micros(time.time_ns() // 1000)


def _capabilities(value: Any, allowed: frozenset[str], what: str) -> dict[str, list[str]]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise HttpError(400, f"{what} must be an object")
    out: dict[str, list[str]] = {}
    for name, actions in value.items():
        if actions is None:
            continue
        if name not in allowed:
            raise HttpError(400, f"{what}: unknown capability {name!r}; known: "
                                 f"{', '.join(sorted(allowed))}")
        if not isinstance(actions, list) or not set(actions) <= _ACTIONS:
            raise HttpError(400, f"{what}.{name} must be a list of create, read, update, delete")
        out[name] = list(actions)
    return out


class Access:
    """The service's tokens: those it was started with (every action), and created ones."""

    def __init__(self, tokens: list[bytes]) -> None:
        self._root = tokens
        self._lock = threading.Lock()
        self._created: dict[str, dict[str, Any]] = {}  # id -> the token's record

    def find(self, header: str | None) -> dict[str, Any] | bool | None:
        """The token of an ``Authorization`` header: True for one the service was started
        with, a created token's record, or None (unknown: 403)."""
        # The scheme is case-insensitive (RFC 9110): "bearer <token>" works as "Bearer".
        if not header or header[:7].lower() != "bearer ":
            return None
        given = header[7:].strip().encode()
        ok = False
        for token in self._root:  # every token compared, in constant time
            ok |= hmac.compare_digest(given, token)
        if ok:
            return True
        with self._lock:
            records = list(self._created.values())
        found = None
        for record in records:
            if hmac.compare_digest(given, record["_secret"].encode()):
                found = record
        if found is not None and found.get("_expires_us") is not None and (
                found["_expires_us"] <= time.time_ns() // 1000):
            return None
        return found

    @staticmethod
    def allows(token: dict[str, Any] | bool, capability: str, action: str,
               dataset: str | None) -> bool:
        if token is True:
            return True
        assert isinstance(token, dict)
        if dataset is not None:
            caps = (token.get("datasetCapabilities") or {}).get(dataset) or {}
        else:
            caps = token.get("orgCapabilities") or {}
        return action in (caps.get(capability) or ())

    @staticmethod
    def beyond(holder: dict[str, Any] | bool, record: dict[str, Any]) -> str | None:
        """The first capability ``record`` holds that ``holder`` does not ("datasets: create",
        "query: read in dataset 'web'"), or None: a token may grant only what it holds
        itself, so creating or regenerating a token never widens what its maker can do."""
        if holder is True:
            return None
        for name, actions in (record.get("orgCapabilities") or {}).items():
            for action in actions:
                if not Access.allows(holder, name, action, None):
                    return f"{name}: {action}"
        for dataset, caps in (record.get("datasetCapabilities") or {}).items():
            for name, actions in caps.items():
                for action in actions:
                    if not Access.allows(holder, name, action, dataset):
                        return f"{name}: {action} in dataset {dataset!r}"
        return None

    # ------------------------------------------------------------------ /v2/tokens

    def create(self, body: Any, creator: dict[str, Any] | bool = True) -> dict[str, Any]:
        if not isinstance(body, dict) or not isinstance(body.get("name"), str) or not (
                body["name"].strip()):
            raise HttpError(400, 'a token needs a "name"')
        datasets = body.get("datasetCapabilities") or {}
        if not isinstance(datasets, dict):
            raise HttpError(400, "datasetCapabilities must be an object keyed by dataset")
        record = {
            "id": secrets.token_hex(8),
            "name": body["name"],
            "description": body.get("description") if isinstance(body.get("description"),
                                                                  str) else None,
            "expiresAt": None,
            "datasetCapabilities": {
                name: _capabilities(caps, _DATASET_CAPABILITIES,
                                    f"datasetCapabilities.{name}")
                for name, caps in datasets.items()},
            "orgCapabilities": _capabilities(body.get("orgCapabilities"), _ORG_CAPABILITIES,
                                             "orgCapabilities"),
            "samlAuthenticated": False,
            "_secret": "xaat-" + secrets.token_hex(16),
            "_expires_us": None,
        }
        self._set_expiry(record, body.get("expiresAt"), "expiresAt")
        extra = self.beyond(creator, record)
        if extra is not None:
            raise HttpError(403, f"this token may not grant {extra}: a token can grant only "
                                 "the capabilities it holds")
        with self._lock:
            if len(self._created) >= MAX_ITEMS:
                raise HttpError(400, f"the local service keeps at most {MAX_ITEMS:,} tokens: "
                                     "delete some")
            self._created[record["id"]] = record
        return {**self._public(record), "token": record["_secret"]}

    def list(self) -> list[dict[str, Any]]:
        with self._lock:
            return [self._public(r) for r in self._created.values()]

    def get(self, token_id: str) -> dict[str, Any]:
        with self._lock:
            record = self._created.get(token_id)
            if record is None:
                raise HttpError(404, f"token not found: no token with id {token_id!r}")
            return self._public(record)

    def regenerate(self, token_id: str, body: Any, creator: dict[str, Any] | bool = True
                   ) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise HttpError(400, "the body must be an object with existingTokenExpiresAt and "
                                 "newTokenExpiresAt")
        with self._lock:
            old = self._created.get(token_id)
            if old is None:
                raise HttpError(404, f"token not found: no token with id {token_id!r}")
            # A new secret for a token is a new token: the same rule as creating one.
            extra = self.beyond(creator, old)
            if extra is not None:
                raise HttpError(403, f"this token may not regenerate a token that holds "
                                     f"{extra}: a token can grant only the capabilities it "
                                     "holds")
            self._set_expiry(old, body.get("existingTokenExpiresAt"), "existingTokenExpiresAt")
            new = {**old, "id": secrets.token_hex(8), "_secret": "xaat-" + secrets.token_hex(16)}
            self._set_expiry(new, body.get("newTokenExpiresAt"), "newTokenExpiresAt")
            self._created[new["id"]] = new
        return {**self._public(new), "token": new["_secret"]}

    def delete(self, token_id: str) -> None:
        with self._lock:
            if self._created.pop(token_id, None) is None:
                raise HttpError(404, f"token not found: no token with id {token_id!r}")

    @staticmethod
    def _set_expiry(record: dict[str, Any], value: Any, what: str) -> None:
        if value is None:
            return
        try:
            stamp = normalize_time(value)
        except ValueError as exc:
            raise HttpError(400, f"{what}: {exc}") from None
        record["expiresAt"] = stamp
        record["_expires_us"] = parse_micros(stamp)

    @staticmethod
    def _public(record: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in record.items() if not k.startswith("_")}


class Annotations:
    """``/v2/annotations``, kept in memory."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: dict[str, dict[str, Any]] = {}

    def _check(self, body: Any, *, partial: bool) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise HttpError(400, "an annotation must be a JSON object")
        out: dict[str, Any] = {}
        datasets = body.get("datasets")
        if datasets is not None or not partial:
            if not isinstance(datasets, list) or not datasets or not all(
                    isinstance(d, str) and d for d in datasets):
                raise HttpError(400, 'an annotation needs "datasets": a list of dataset names')
            out["datasets"] = datasets
        kind = body.get("type")
        if kind is not None or not partial:
            if not isinstance(kind, str) or not kind:
                raise HttpError(400, 'an annotation needs a "type"')
            out["type"] = kind
        for key in ("time", "endTime"):
            if body.get(key) is not None:
                try:
                    out[key] = normalize_time(body[key])
                except ValueError as exc:
                    raise HttpError(400, f"{key}: {exc}") from None
        for key in ("title", "description", "url"):
            value = body.get(key)
            if value is not None:
                if not isinstance(value, str):
                    raise HttpError(400, f"{key} must be a string")
                out[key] = value
        return out

    def create(self, body: Any) -> dict[str, Any]:
        fields = self._check(body, partial=False)
        record = {"id": "ann_" + secrets.token_hex(8), "time": _now(), "endTime": None,
                  "title": None, "description": None, "url": None, **fields}
        with self._lock:
            if len(self._items) >= MAX_ITEMS:
                raise HttpError(400, f"the local service keeps at most {MAX_ITEMS:,} "
                                     "annotations: delete some")
            self._items[record["id"]] = record
        return dict(record)

    def list(self, datasets: list[str], start: str | None, end: str | None) -> list[dict[str, Any]]:
        try:
            lo = normalize_time(start) if start else None
            hi = normalize_time(end) if end else None
        except ValueError as exc:
            raise HttpError(400, f"start/end: {exc}") from None
        with self._lock:
            items = [dict(r) for r in self._items.values()]
        return [r for r in items
                if (not datasets or set(datasets) & set(r["datasets"]))
                and (lo is None or r["time"] >= lo) and (hi is None or r["time"] <= hi)]

    def get(self, item_id: str) -> dict[str, Any]:
        with self._lock:
            record = self._items.get(item_id)
        if record is None:
            raise HttpError(404, f"annotation not found: no annotation with id {item_id!r}")
        return dict(record)

    def update(self, item_id: str, body: Any) -> dict[str, Any]:
        fields = self._check(body, partial=True)
        with self._lock:
            record = self._items.get(item_id)
            if record is None:
                raise HttpError(404, f"annotation not found: no annotation with id {item_id!r}")
            record.update(fields)
            return dict(record)

    def delete(self, item_id: str) -> None:
        with self._lock:
            if self._items.pop(item_id, None) is None:
                raise HttpError(404, f"annotation not found: no annotation with id {item_id!r}")
