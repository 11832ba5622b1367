"""Monitors and notifiers, as the real service's API v2 stores and answers them (references:
getMonitors, getMonitor, createMonitor, updateMonitor, deleteMonitor, getMonitorHistory;
getNotifiers, getNotifier, createNotifier, updateNotifier, deleteNotifier).

The local service keeps the definitions exactly as sent (every field, unknown ones included),
adds what the service adds (``id``, ``createdAt``, ``createdBy``, ``updatedAt``), and checks
what the reference requires. Running a monitor on a schedule and notifying is the cloud's: a
monitor here never fires, so its history is always empty.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import parse_qs, unquote

from .._time import format_micros
from .ingest import HttpError, normalize_time
from .request import Request

__all__ = ["USER_ID", "monitors", "notifiers", "stamped"]

# The local service's one user: what createdBy and who say.
USER_ID = "local"

MONITOR_TYPES = ("Threshold", "MatchEvent", "AnomalyDetection")
OPERATORS = ("Below", "BelowOrEqual", "Above", "AboveOrEqual", "AboveOrBelow")
NOTIFIER_KINDS = ("customWebhook", "discord", "discordWebhook", "email", "microsoftTeams",
                  "opsgenie", "pagerduty", "slack", "webhook")


def _now() -> str:
    return format_micros(time.time_ns() // 1000)


def stamped(body: dict[str, Any], doc_id: str, old: dict[str, Any] | None) -> dict[str, Any]:
    """The stored document: the body as sent, with the fields the service sets (a client's
    own ``id``/``createdAt``/``createdBy``/``updatedAt`` are not taken)."""
    now = _now()
    out = {k: v for k, v in body.items() if k not in ("id", "createdAt", "createdBy",
                                                       "updatedAt")}
    return {"id": doc_id, **out,
            "createdAt": old["createdAt"] if old else now,
            "createdBy": old["createdBy"] if old else USER_ID,
            "updatedAt": now}


def _check_monitor(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise HttpError(400, "a monitor is a JSON object")
    for key in ("name", "type"):
        if not isinstance(body.get(key), str) or not body[key]:
            raise HttpError(400, f'a monitor needs "{key}"' + (
                f" (one of {', '.join(MONITOR_TYPES)})" if key == "type" else ""))
    if body["type"] not in MONITOR_TYPES:
        raise HttpError(400, f"unknown monitor type {body['type']!r}: use one of "
                             f"{', '.join(MONITOR_TYPES)}")
    if body.get("operator") not in (None, "", *OPERATORS):
        raise HttpError(400, f"unknown operator {body['operator']!r}: use one of "
                             f"{', '.join(OPERATORS)}")
    queries = [k for k in ("aplQuery", "mplQuery") if isinstance(body.get(k), str)
               and body[k].strip()]
    if len(queries) != 1:
        raise HttpError(400, "a monitor needs one of aplQuery or mplQuery (not both)")
    for key in ("intervalMinutes", "rangeMinutes"):
        value = body.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 1):
            raise HttpError(400, f"{key} must be a whole number of minutes, at least 1")
    for key in ("threshold", "tolerance", "secondDelay", "compareDays"):
        value = body.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value,
                                                                         (int, float))):
            raise HttpError(400, f"{key} must be a number")
    ids = body.get("notifierIds", body.get("notifierIDs"))
    if ids is not None and (not isinstance(ids, list) or not all(isinstance(i, str)
                                                                  for i in ids)):
        raise HttpError(400, "notifierIds must be a list of notifier ids")
    out = dict(body)
    if "notifierIDs" in out:  # an older client's spelling of the reference's notifierIds
        out["notifierIds"] = out.pop("notifierIDs")
    if out.get("disabledUntil") not in (None, ""):
        try:
            normalize_time(out["disabledUntil"])  # checked, kept as sent
        except ValueError as exc:
            raise HttpError(400, f"disabledUntil: {exc}") from None
    elif "disabledUntil" in out:
        out["disabledUntil"] = None  # "" is no time: a client parsing one would fail
    return out


def _check_notifier(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise HttpError(400, "a notifier is a JSON object")
    if not isinstance(body.get("name"), str) or not body["name"]:
        raise HttpError(400, 'a notifier needs "name"')
    props = body.get("properties")
    if not isinstance(props, dict) or not props:
        raise HttpError(400, f'a notifier needs "properties" with one of '
                             f"{', '.join(NOTIFIER_KINDS)}")
    unknown = [k for k in props if k not in NOTIFIER_KINDS]
    if unknown:
        raise HttpError(400, f"unknown notifier kind {unknown[0]!r}: use one of "
                             f"{', '.join(NOTIFIER_KINDS)}")
    custom = props.get("customWebhook")
    if custom is not None and (not isinstance(custom, dict) or not isinstance(
            custom.get("url"), str) or not isinstance(custom.get("body"), str)):
        raise HttpError(400, "a customWebhook notifier needs url and body")
    out = dict(body)
    if out.get("disabledUntil") in ("",):
        out.pop("disabledUntil")
    return out


def _crud(req: Request, method: str, kind: str, doc_id: str | None,
          check: Any) -> tuple[int, Any]:
    docs = req.state.store.documents
    if doc_id is None:
        req.allow(method, "GET", "POST")
        if method == "GET":
            req.discard()
            return 200, docs.list(kind)
        new = stamped(check(req.json_body()), docs.new_id(kind), None)
        docs.put(kind, new["id"], new)
        return 200, new
    doc_id = unquote(doc_id)
    req.allow(method, "GET", "PUT", "DELETE")
    old = docs.get(kind, doc_id)
    if method == "PUT":
        body = check(req.json_body())
        if old is None:
            raise HttpError(404, f"{kind[:-1]} not found: no {kind[:-1]} with id {doc_id!r}")
        new = stamped(body, doc_id, old)
        docs.put(kind, doc_id, new)
        return 200, new
    req.discard()
    if old is None:
        raise HttpError(404, f"{kind[:-1]} not found: no {kind[:-1]} with id {doc_id!r}")
    if method == "GET":
        return 200, old
    docs.delete(kind, doc_id)
    return 204, None


def monitors(req: Request, method: str, doc_id: str | None, history: str | None,
             query: str) -> tuple[int, Any]:
    """``/v2/monitors``, ``/v2/monitors/{id}`` and ``/v2/monitors/{id}/history``."""
    if history:
        req.allow(method, "GET")
        req.discard()
        params = parse_qs(query)
        for key in ("startTime", "endTime"):
            value = params.get(key)
            try:
                if not value:
                    raise ValueError("missing")
                normalize_time(value[-1])
            except ValueError:
                raise HttpError(400, f"the history needs {key}, an RFC 3339 time, as in "
                                     f"?startTime=2024-05-01T00:00:00Z&endTime=...") from None
        assert doc_id is not None
        if req.state.store.documents.get("monitors", unquote(doc_id)) is None:
            raise HttpError(404, f"monitor not found: no monitor with id {unquote(doc_id)!r}")
        return 200, []  # the local service never runs a monitor: no alert ever opened
    return _crud(req, method, "monitors", doc_id, _check_monitor)


def notifiers(req: Request, method: str, doc_id: str | None) -> tuple[int, Any]:
    """``/v2/notifiers`` and ``/v2/notifiers/{id}``."""
    return _crud(req, method, "notifiers", doc_id, _check_notifier)
