"""The local service's data endpoints: ingest (every body shape the real service takes:
ingest.py), OTLP/HTTP logs and traces (otlp.py) and the APL query (``POST /v1/datasets/_apl``,
run by the store's reader).
"""

from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import parse_qs, urlsplit

from . import apl as apl
from . import legacy, otlp
from .apl import format_time
from .ingest import (
    MAX_VALUE_BYTES,
    HttpError,
    IngestOptions,
    media_type,
    parse_values,
    prepare_events,
)
from .reader import MAX_QUERY_TIMEOUT, QUERY_TIMEOUT
from .request import Raw, Request
from .store import DATASET_NAME_RULE, valid_dataset_name

__all__ = ["exists", "ingest", "legacy_query", "not_found", "otlp_ingest", "query",
           "query_timeout", "store_values", "take_stored"]


def not_found(dataset: str) -> HttpError:
    """The real service's 404 for a dataset nobody created, saying how to create it here."""
    return HttpError(404, f"dataset {dataset!r} not found: create it first (loghandler "
                          f"datasets create {dataset}, or POST /v1/datasets with "
                          f'{{"name": "{dataset}"}}), or start loghandler serve with '
                          f"--dataset {dataset} (or --create-datasets: any name is created by "
                          f"its first ingest)")


def exists(req: Request, dataset: str) -> None:
    """A 404 for a dataset nobody created, as the real service answers, unless this service
    creates datasets on first ingest (``--create-datasets``; the testing helper's default)."""
    store = req.state.store
    if store.dataset_exists(dataset):
        return
    if req.state.create_datasets:
        if not valid_dataset_name(dataset):  # the name rule POST /v1/datasets applies
            req.discard()
            raise HttpError(400, f"cannot create dataset {dataset[:200]!r}: a dataset's name "
                                 f"is {DATASET_NAME_RULE}")
        store.ensure_dataset(dataset)
        return
    req.discard()
    raise not_found(dataset)


def ingest(req: Request, dataset: str, params: dict[str, list[str]]) -> dict[str, Any]:
    exists(req, dataset)
    try:
        options = IngestOptions(params)
    except HttpError:
        req.discard()
        raise
    fields_header = req.service_header("CSV-Fields")
    labels_header = req.service_header("Event-Labels")
    labels: Any = None
    try:
        if labels_header is not None:
            labels = json.loads(labels_header)
            if not isinstance(labels, dict):
                raise ValueError("not a JSON object")
    except ValueError as exc:
        req.discard()
        raise HttpError(400, f"the event-labels header must be a JSON object of the "
                             f"fields to add to every event ({exc})") from None
    body = req.read_body()
    values = parse_values(body, req.headers.get("Content-Type"),
                          csv_delimiter=options.csv_delimiter,
                          csv_fields=(None if fields_header is None else
                                      [f.strip() for f in fields_header.split(",")]))
    # The labels are stored in every event: each copy counts.
    copies = 0 if labels_header is None else len(labels_header.encode(
        "utf-8", "surrogateescape")) * len(values)
    take_stored(req, len(body) + copies, "the event-labels header" if copies else None)
    # No string of a line can be longer than the line: most bodies need no search for the
    # strings over 1 MB that the service replaces.
    longest = len(body) if len(body) <= MAX_VALUE_BYTES else _longest_line(body)
    return store_values(req, dataset, values, options, labels, len(body), longest)


def take_stored(req: Request, stored: int, copied: str | None) -> None:
    """Count what a request stores (its decoded body, and each copy of what is copied into
    every event: ``copied`` names it) against the request's limit (413 past it:
    ``--max-body-bytes``) and the ingest limit (430 past it: ``--ingest-limit``)."""
    most = req.state.max_body_bytes
    if stored > most:
        why = f" with {copied} copied into each event" if copied else ""
        raise HttpError(413, f"the request stores {stored:,} bytes{why}, over this service's "
                             f"limit of {most:,} bytes a request (--max-body-bytes): send "
                             "fewer events a request" + (f", or a smaller {copied}" if copied
                                                         else ""))
    limit = req.state.ingest_limit
    if limit is not None:
        within, headers = limit.take(stored)
        req.limit_headers = {**req.limit_headers, **headers}
        if not within:
            raise HttpError(430, f"ingest limit exceeded: this service takes {limit.limit:,} "
                                 "bytes a month; wait until X-IngestLimit-Reset")


def _longest_line(body: bytes) -> int:
    """At most MAX_VALUE_BYTES when every line is that short (the usual case, found with a few
    searches: every half of it holds a newline), else the longest line's length."""
    half = MAX_VALUE_BYTES // 2
    if all(body.find(b"\n", start, start + half) >= 0
           for start in range(0, len(body) - half + 1, half)):
        return MAX_VALUE_BYTES
    return max(map(len, body.split(b"\n")))


def store_values(req: Request, dataset: str, values: list[Any], options: IngestOptions,
                 labels: Any, size: int, longest: int | None = None) -> dict[str, Any]:
    """Validate and store the values of one request: its ingest status."""
    now = format_time(time.time_ns() // 1000)
    times: list[int] = []
    events, failures = prepare_events(values, options, now, labels, times=times,
                                      longest=longest)
    kept, refused, types = req.state.field_limit.admit(dataset, events)
    if refused:
        ids = {id(e) for e in kept}
        times = [t for e, t in zip(events, times, strict=True) if id(e) in ids]
    req.state.store.record_fields(dataset, types)
    for _ in refused:
        failures.append({"timestamp": now, "error": (
            f"field limit exceeded: dataset {dataset!r} may hold at most "
            f"{req.state.field_limit.limit} fields")})
    req.state.store.add_events(dataset, kept, times)
    events = kept
    return {"ingested": len(events), "failed": len(failures), "failures": failures,
            "processedBytes": size, "blocksCreated": 0, "walLength": len(events)}


def otlp_ingest(req: Request, signal: str, dataset: str | None) -> tuple[dict[str, Any], Raw]:
    """OTLP/HTTP logs or traces into the dataset the dataset header names (otlp.py)."""
    if not dataset:
        req.discard()
        raise HttpError(400, "name the dataset for OTLP data in the X-Axiom-Dataset "
                             "(or x-service-dataset) header")
    req.may("ingest", "POST", dataset)
    exists(req, dataset)
    kind = media_type(req.headers.get("Content-Type"))
    if kind not in ("application/x-protobuf", "application/json"):
        req.discard()
        raise HttpError(415, "OTLP/HTTP bodies are application/x-protobuf or "
                             "application/json")
    body = req.read_body()
    try:
        values = otlp.decode_request(body, kind, signal)
    except otlp.OtlpError as exc:
        raise HttpError(400, f"the body is not an OTLP {signal} request: {exc}") from None
    copies = otlp.copied_size(values)
    take_stored(req, len(body) + copies, "the resource and scope" if copies else None)
    status = store_values(req, dataset, values, IngestOptions({}), None, len(body))
    message = "; ".join(sorted({f["error"] for f in status["failures"]}))
    return status, Raw(otlp.encode_response(kind, signal, status["failed"], message), kind)


def query(req: Request) -> dict[str, Any]:
    req.may_some("query")  # before the body is read and decoded
    data = req.json_body()
    if not isinstance(data, dict) or not isinstance(data.get("apl"), str):
        raise HttpError(400, 'the body must be a JSON object with "apl": the query text')
    fmt = (parse_qs(urlsplit(req.path).query).get("format") or ["legacy"])[0]
    if fmt not in ("legacy", "tabular"):
        raise HttpError(400, f"unsupported format {fmt!r}; use legacy or tabular")
    try:
        name: str | None = apl.parse_query(data["apl"]).dataset
    except apl.AplError:
        name = None  # the store's run of the query answers 400, naming what is wrong
    if name is not None:
        req.may("query", "GET", name)
        if not req.state.create_datasets and not req.state.store.dataset_exists(name):
            raise not_found(name)
    return req.state.store.query(data["apl"], data.get("startTime"),
                                   data.get("endTime"), fmt, timeout=query_timeout(data),
                                   cursor=data.get("cursor"),
                                   include_cursor=data.get("includeCursor", False),
                                   cancelled=req.client_gone, client=req.client_key)


def query_timeout(data: dict[str, Any]) -> float:
    """How long the query may run: QUERY_TIMEOUT, or the body's ``timeout`` (seconds, a
    local extension the page uses to run a query again with more time), up to
    MAX_QUERY_TIMEOUT."""
    value = data.get("timeout")
    if value is None:
        return QUERY_TIMEOUT
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
            0 < value <= MAX_QUERY_TIMEOUT):
        raise HttpError(400, f'"timeout" is the seconds a query may run, more than 0 and at '
                             f"most {MAX_QUERY_TIMEOUT:g}; got {value!r}")
    return float(value)


def legacy_query(req: Request, dataset: str) -> dict[str, Any]:
    """``POST /v1/datasets/{name}/query``: the legacy query (legacy.py), run as APL."""
    req.may("query", "GET", dataset)
    data = req.json_body()
    if not req.state.create_datasets and not req.state.store.dataset_exists(dataset):
        raise not_found(dataset)
    if not isinstance(data, dict) or not data.get("startTime") or not data.get("endTime"):
        raise HttpError(400, "a legacy query needs startTime and endTime (RFC 3339)")
    q = legacy.translate(dataset, data)
    store = req.state.store
    start, end = data["startTime"], data["endTime"]
    if q.events is not None:
        answer = store.query(q.events, start, end, "legacy", cursor=data.get("cursor") or None,
                             include_cursor=data.get("includeCursor", False),
                             client=req.client_key)
        answer["buckets"] = {"series": [], "totals": []}
    else:
        assert q.totals is not None and q.series is not None
        answer = store.query(q.totals, start, end, "legacy", client=req.client_key)
        series = store.query(q.series, start, end, "legacy",
                             client=req.client_key)["buckets"]["series"]
        answer["buckets"] = {
            "series": [{**s, "groups": legacy.rename(s["groups"], q.aliases)} for s in series],
            "totals": legacy.rename(answer["buckets"]["totals"], q.aliases)}
    answer["fieldsMeta"] = []
    return answer
