"""Views as the local service stores them: the six fields, checked as the real service checks
them, in the store's ``views`` table (ids of the service's choosing, never reused).
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterable
from typing import Any

from .ingest import HttpError, json_kind

__all__ = ["VIEW_FIELDS", "Views", "reject_constant", "validate_view"]


# The six fields of a view and the JSON type each must have.
VIEW_FIELDS: dict[str, type] = {
    "aplQuery": str,
    "datasets": list,
    "description": str,
    "name": str,
    "sharedByOrg": str,
    "sharedByOrgName": str,
}

_VIEW_DEFAULTS: dict[str, Any] = {name: [] if kind is list else "" for name, kind in
                                  VIEW_FIELDS.items()}


# The fields a view must have, as the real service requires them in POST and PUT.
REQUIRED_VIEW_FIELDS = ("name", "aplQuery")


def validate_view(data: Any) -> dict[str, Any]:
    """The six view fields of a POST or PUT body, type-checked; ``HttpError(400)`` naming the
    problem. ``name`` and ``aplQuery`` are required; the others default to empty."""
    if not isinstance(data, dict):
        raise HttpError(400, f"the body must be a JSON object (a view), not {json_kind(data)}")
    missing = [name for name in REQUIRED_VIEW_FIELDS if data.get(name) is None]
    if missing:
        raise HttpError(400, f"missing view field(s): {', '.join(missing)}; "
                             f"{' and '.join(REQUIRED_VIEW_FIELDS)} are required")
    view: dict[str, Any] = {}
    for name, kind in VIEW_FIELDS.items():
        value = data.get(name)
        if value is None and name not in REQUIRED_VIEW_FIELDS:
            value = _VIEW_DEFAULTS[name]
        if not isinstance(value, kind):
            expected = "an array of strings" if kind is list else "a string"
            raise HttpError(400, f"field {name} must be {expected}, not {json_kind(value)}")
        if isinstance(value, list) and not all(isinstance(item, str) for item in value):
            raise HttpError(400, f"field {name} must be an array of strings")
        view[name] = list(value) if isinstance(value, list) else value
    return view


def reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


class Views:
    """The stored views, in the store's connection (under its lock)."""

    def __init__(self, db: sqlite3.Connection, lock: threading.Lock) -> None:
        self._db = db
        self._lock = lock

    def list(self) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._db.execute("SELECT id, body FROM views ORDER BY seq").fetchall()
        return [{"id": view_id, **json.loads(body)} for view_id, body in rows]

    def get(self, view_id: str) -> dict[str, Any] | None:
        """The view with this id; None when there is none."""
        with self._lock:
            row = self._db.execute("SELECT body FROM views WHERE id = ?",
                                   (view_id,)).fetchone()
        return None if row is None else {"id": view_id, **json.loads(row[0])}

    def put(self, view_id: str, view: dict[str, Any]) -> dict[str, Any] | None:
        """Replace a stored view; None when there is no view with this id."""
        with self._lock:
            cur = self._db.execute("UPDATE views SET body = ? WHERE id = ?",
                                   (json.dumps(view), view_id))
            if cur.rowcount == 0:
                return None
        return {"id": view_id, **view}

    def create(self, view: dict[str, Any]) -> dict[str, Any]:
        """Store a new view under an id of the service's choosing; the view with its id."""
        with self._lock:
            view_id = self._next_id_locked()
            self._db.execute("INSERT INTO views (id, body) VALUES (?, ?)",
                             (view_id, json.dumps(view)))
        return {"id": view_id, **view}

    def delete(self, view_id: str) -> bool:
        """Delete a view; False when there is no view with this id."""
        with self._lock:
            return self._db.execute("DELETE FROM views WHERE id = ?", (view_id,)).rowcount > 0

    def seed(self, views: Iterable[dict[str, Any]]) -> None:
        """Add views (service JSON, six fields, ``id`` optional) that are not stored yet.

        A view with an id already stored, or without an id but with a stored view's name, is
        left alone: with ``--db FILE`` the stored (maybe updated) view wins over the seed.
        """
        with self._lock:
            for data in views:
                # Seeds may leave fields out (tests rarely care about all six); types still count.
                view = validate_view({**_VIEW_DEFAULTS, **data})
                view_id = data.get("id")
                if view_id is None:
                    names = {json.loads(b)["name"] for (b,) in
                             self._db.execute("SELECT body FROM views")}
                    if view["name"] in names:
                        continue
                    view_id = self._next_id_locked()
                self._db.execute("INSERT OR IGNORE INTO views (id, body) VALUES (?, ?)",
                                 (str(view_id), json.dumps(view)))

    def _next_id_locked(self) -> str:
        # Never an id a deleted view had: a stale id must not name another view later.
        ids = {row[0] for row in self._db.execute("SELECT id FROM views")}
        row = self._db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'views'").fetchone()
        n = (int(row[0]) if row else 0) + 1
        while str(n) in ids:
            n += 1
        return str(n)


