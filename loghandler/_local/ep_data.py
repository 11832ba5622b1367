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
from . import otlp
from .apl import format_time
from .ingest import HttpError, IngestOptions, media_type, parse_values, prepare_events
from .request import Raw, Request

__all__ = ["exists", "ingest", "otlp_ingest", "query"]


def exists(req: Request, dataset: str) -> None:
    # Only the named datasets exist (serve --dataset): another one is the real 404.
    allowed = req.state.datasets
    if allowed is not None and dataset not in allowed:
        req.discard()
        raise HttpError(404, "dataset not found")


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
    limit = req.state.ingest_limit
    if limit is not None:
        within, headers = limit.take(len(body))
        req.limit_headers = {**req.limit_headers, **headers}
        if not within:
            raise HttpError(430, f"ingest limit exceeded: this service takes {limit.limit:,} "
                                 "bytes a month; wait until X-IngestLimit-Reset")
    values = parse_values(body, req.headers.get("Content-Type"),
                          csv_delimiter=options.csv_delimiter,
                          csv_fields=(None if fields_header is None else
                                      [f.strip() for f in fields_header.split(",")]))
    return store_values(req, dataset, values, options, labels, len(body))


def store_values(req: Request, dataset: str, values: list[Any], options: IngestOptions, labels: Any,
           size: int) -> dict[str, Any]:
    """Validate and store the values of one request: its ingest status."""
    now = format_time(time.time_ns() // 1000)
    events, failures = prepare_events(values, options, now, labels)
    events, refused = req.state.field_limit.admit(dataset, events)
    for _ in refused:
        failures.append({"timestamp": now, "error": (
            f"field limit exceeded: dataset {dataset!r} may hold at most "
            f"{req.state.field_limit.limit} fields")})
    req.state.store.add_events(dataset, events)
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
    status = store_values(req, dataset, values, IngestOptions({}), None, len(body))
    message = "; ".join(sorted({f["error"] for f in status["failures"]}))
    return status, Raw(otlp.encode_response(kind, signal, status["failed"], message), kind)


def query(req: Request) -> dict[str, Any]:
    data = req.json_body()
    if not isinstance(data, dict) or not isinstance(data.get("apl"), str):
        raise HttpError(400, 'the body must be a JSON object with "apl": the query text')
    fmt = (parse_qs(urlsplit(req.path).query).get("format") or ["legacy"])[0]
    if fmt not in ("legacy", "tabular"):
        raise HttpError(400, f"unsupported format {fmt!r}; use legacy or tabular")
    allowed = req.state.datasets
    if allowed is not None or req.token is not True:
        try:
            name: str | None = apl.parse_query(data["apl"]).dataset
        except apl.AplError:
            name = None  # the store's run of the query answers 400, naming what is wrong
        if name is not None:
            req.may("query", "GET", name)
        # Only the named datasets exist (serve --dataset): another one is the real 404.
        if allowed is not None and name is not None and name not in allowed:
            raise HttpError(404, "dataset not found")
    return req.state.store.query(data["apl"], data.get("startTime"),
                                   data.get("endTime"), fmt, cursor=data.get("cursor"),
                                   include_cursor=data.get("includeCursor", False))
