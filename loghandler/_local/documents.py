"""The resources the local service keeps as the documents its clients send (monitors,
notifiers, dashboards, starred queries, map fields): one table, a document a row, keyed by its
kind and id, in the store's SQLite connection (so ``--db`` keeps them across restarts).
"""

from __future__ import annotations

import json
import secrets
import sqlite3
import threading
from typing import Any

from .ingest import HttpError

__all__ = ["MAX_DOCUMENTS", "Documents"]

# At most this many documents of one kind: a test suite's worth, never unbounded.
MAX_DOCUMENTS = 10_000


class Documents:
    """JSON documents by kind and id, under the store's lock."""

    def __init__(self, db: sqlite3.Connection, lock: threading.Lock) -> None:
        self._db = db
        self._lock = lock
        with lock:
            db.execute("CREATE TABLE IF NOT EXISTS documents ("
                       "seq INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL, "
                       "id TEXT NOT NULL, body TEXT NOT NULL, UNIQUE (kind, id))")

    def list(self, kind: str) -> list[Any]:
        """Every document of ``kind``, oldest first."""
        with self._lock:
            rows = self._db.execute("SELECT body FROM documents WHERE kind = ? ORDER BY seq",
                                    (kind,)).fetchall()
        return [json.loads(body) for (body,) in rows]

    def get(self, kind: str, doc_id: str) -> Any:
        with self._lock:
            row = self._db.execute("SELECT body FROM documents WHERE kind = ? AND id = ?",
                                   (kind, doc_id)).fetchone()
        return None if row is None else json.loads(row[0])

    def put(self, kind: str, doc_id: str, body: Any) -> None:
        """Store ``body`` under ``doc_id`` (a new one, or in place of the stored one)."""
        text = json.dumps(body)
        with self._lock:
            cur = self._db.execute("UPDATE documents SET body = ? WHERE kind = ? AND id = ?",
                                   (text, kind, doc_id))
            if cur.rowcount:
                return
            (count,) = self._db.execute("SELECT count(*) FROM documents WHERE kind = ?",
                                        (kind,)).fetchone()
            if count >= MAX_DOCUMENTS:
                raise HttpError(400, f"the local service keeps at most {MAX_DOCUMENTS:,} "
                                     f"{kind}: delete some")
            self._db.execute("INSERT INTO documents (kind, id, body) VALUES (?, ?, ?)",
                             (kind, doc_id, text))

    def delete(self, kind: str, doc_id: str) -> bool:
        """Delete a document; False when there is none."""
        with self._lock:
            return self._db.execute("DELETE FROM documents WHERE kind = ? AND id = ?",
                                    (kind, doc_id)).rowcount > 0

    def new_id(self, kind: str) -> str:
        """An id no document of ``kind`` has had (random: never a deleted one's again)."""
        while True:
            doc_id = secrets.token_hex(8)
            if self.get(kind, doc_id) is None:
                return doc_id
