"""An index of the stored events' text, so that a search for a word (APL's ``search "term"``,
the page's free-text search) reads the events holding it, not every event of the range.

What ``search`` means is aplsql's: the term, written as the stored JSON writes it (ASCII
escapes), anywhere in the event's stored text (names, values, punctuation), ASCII case
folded (SQLite's LIKE). That test still decides every answer. The index only narrows the
events it is made on: an FTS5 table of trigrams (``tokenize='trigram case_sensitive 0'``)
over ``events.body`` as external content (the text is not stored twice), ``detail=none``
(row ids only, no positions), kept in the same transactions as the events: a batch's events
are added by one statement after they are stored (``add_locked``: FTS5 writes what it holds
at each statement's end, so a row at a time, as a trigger would, cost six times as much),
deleted and changed ones by triggers.

An event whose text holds the term holds each of its trigrams, folded as the index folds
them (Unicode folding, which on the ASCII of the stored text is LIKE's): the events with
every trigram are a superset of the answer, and the LIKE picks the answer among them. The
index is used only when the term's rarest trigram is in at most 3 % of the events (a
common word is read faster by the plain scan), and only for the ``search``es before any
other operator than ``where`` (after a ``project`` the text searched is another).

Terms of fewer than three characters after escaping have no trigram: they are scanned. A
SQLite without FTS5 or the trigram tokenizer (before 3.34) has no index: every search scans.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from typing import Any

__all__ = ["COMMON_SHARE", "MAX_TRIGRAMS", "TABLE", "add_locked", "create_locked",
           "delete_locked", "exists", "leading_terms", "match_for", "top_locked", "trigrams"]

TABLE = "events_words"
# A term whose rarest trigram is in more than this share of the events is scanned: reading
# a tenth of the events one by one through the index costs about what reading all of them in
# order does, and counting a trigram's events up to this share is each lookup's cost.
COMMON_SHARE = 0.03
# Trigrams of one term looked up at most, spread over it (a pasted line is not read whole:
# each lookup reads up to COMMON_SHARE of the events' entries of a common trigram); the
# rarest of them narrow the events the most, and the LIKE decides anyway.
MAX_TRIGRAMS = 16

_DELETE_TRIGGER = (
    f"CREATE TRIGGER events_words_delete AFTER DELETE ON events BEGIN "
    f"INSERT INTO {TABLE} ({TABLE}, rowid, body) VALUES ('delete', old.seq, old.body); END")
_SCHEMA = [
    f"CREATE VIRTUAL TABLE {TABLE} USING fts5(body, content='events', content_rowid='seq', "
    "tokenize='trigram case_sensitive 0', detail=none)",
    _DELETE_TRIGGER,
    f"CREATE TRIGGER events_words_update AFTER UPDATE OF body ON events BEGIN "
    f"INSERT INTO {TABLE} ({TABLE}, rowid, body) VALUES ('delete', old.seq, old.body); "
    f"INSERT INTO {TABLE} (rowid, body) VALUES (new.seq, new.body); END",
]


def exists(db: sqlite3.Connection) -> bool:
    """True when the store's file has the index."""
    return db.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (TABLE,)).fetchone() is not None


def create_locked(db: sqlite3.Connection) -> bool:
    """The index, made from the stored events when it is new (a file of an earlier version),
    in one transaction; False when this SQLite cannot make it (no FTS5, no trigram
    tokenizer): then searches scan."""
    if exists(db):
        return True
    db.execute("BEGIN")
    try:
        for statement in _SCHEMA:
            db.execute(statement)
        db.execute(f"INSERT INTO {TABLE} ({TABLE}) VALUES ('rebuild')")
    except sqlite3.OperationalError:
        db.execute("ROLLBACK")
        return False
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
    return True


def top_locked(db: sqlite3.Connection) -> int:
    """The last row id of the events, before a batch is stored (``add_locked``'s start)."""
    return int(db.execute("SELECT coalesce(max(seq), 0) FROM events").fetchone()[0])


def add_locked(db: sqlite3.Connection, after: int) -> None:
    """The events stored after row ``after`` (``top_locked``), into the index, in the
    batch's transaction: one statement."""
    db.execute(f"INSERT INTO {TABLE} (rowid, body) SELECT seq, body FROM events WHERE seq > ?",
               (after,))


def delete_locked(db: sqlite3.Connection, where: str, params: tuple[Any, ...],
                  indexed: bool) -> int:
    """``DELETE FROM events WHERE {where}``, the index kept (``indexed``): how many events went.
    Taking an event out of the index tokenizes it again (about twice the cost of adding it),
    so when more than a third of the events go, the index is made again from those left
    instead, in the same transaction."""
    if not indexed:
        return int(db.execute(f"DELETE FROM events WHERE {where}", params).rowcount)
    (going,) = db.execute(f"SELECT count(*) FROM events WHERE {where}", params).fetchone()
    (total,) = db.execute("SELECT count(*) FROM events").fetchone()
    if going * 3 <= total:
        return int(db.execute(f"DELETE FROM events WHERE {where}", params).rowcount)
    db.execute("BEGIN")
    try:
        db.execute("DROP TRIGGER events_words_delete")
        n = int(db.execute(f"DELETE FROM events WHERE {where}", params).rowcount)
        db.execute(f"INSERT INTO {TABLE} ({TABLE}) VALUES "
                   f"('{'delete-all' if n == total else 'rebuild'}')")
        db.execute(_DELETE_TRIGGER)
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
    return n


def trigrams(term: str) -> list[str]:
    """The distinct trigrams of a search term as the stored text writes it (ASCII escapes),
    case folded as LIKE folds (ASCII), in the order they come."""
    text = json.dumps(term)[1:-1].lower()
    seen: dict[str, None] = {}
    for i in range(len(text) - 2):
        seen.setdefault(text[i:i + 3], None)
    return list(seen)


def leading_terms(ops: Iterable[tuple[Any, ...]]) -> list[str]:
    """The terms of the ``search``es a query makes before any operator other than ``where``
    (those filter the stored events themselves; after a ``take`` or a ``project`` they
    would not)."""
    out: list[str] = []
    for op in ops:
        if op[0] == "search":
            out += op[1]
        elif op[0] != "where":
            break
    return out


def _quoted(token: str) -> str:
    return '"' + token.replace('"', '""') + '"'


def match_for(db: sqlite3.Connection, terms: list[str], events: int) -> str | None:
    """The FTS5 query narrowing a search for ``terms`` (all of them) to the events holding
    their rarest trigrams, or None when a scan is the faster way (no term of three
    characters, or every term common among the store's ``events``)."""
    chosen: list[str] = []
    common = int(COMMON_SHARE * events)
    # At most MAX_TRIGRAMS lookups for one term, and a few more for each other term.
    each = max(2, MAX_TRIGRAMS // max(1, len(terms)))
    for term in terms:
        grams = trigrams(term)
        if len(grams) > each:
            grams = [grams[i * len(grams) // each] for i in range(each)]
        docs = []
        for gram in grams:
            # The events holding it, counted no further than "common".
            (n,) = db.execute(f"SELECT count(*) FROM (SELECT 1 FROM {TABLE} WHERE {TABLE} "
                              f"MATCH ? LIMIT ?)", (_quoted(gram), common + 1)).fetchone()
            docs.append((int(n), gram))
        if not docs or min(docs)[0] > common:
            continue
        chosen += [gram for n, gram in docs if n <= common]
    if not chosen:
        return None
    return " AND ".join(_quoted(gram) for gram in dict.fromkeys(chosen))
