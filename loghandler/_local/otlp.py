"""OTLP/HTTP (``/v1/logs``, ``/v1/traces``) read into events, so an application instrumented
with OpenTelemetry's exporters can send to the local service as to the real one.

Both encodings OTLP/HTTP defines: binary protobuf (``application/x-protobuf``, what the
exporters send by default) and JSON (``application/json``: lowerCamelCase names, trace and span
ids as hex, 64-bit integers as strings or numbers). The protobuf messages are read by a small
decoder of the wire format below, for the few messages these two requests hold, so the local
service stays stdlib-only: no protobuf runtime to install.

Each log record and each span becomes one event, in the shape the real service stores them:
``trace_id``/``span_id`` as hex, ``attributes`` and ``resource`` as objects (queried as dotted
fields, ``attributes.http.method``), ``service.name`` from the resource, ``scope`` with its
name and version; a span has ``name``, ``kind``, ``duration`` (nanoseconds), ``error``,
``status.code`` and its ``events`` and ``links``; a log record has ``body``, ``severity``,
``severity_number`` and, when the record names one, ``event_name``.
"""

from __future__ import annotations

import base64
import json
import math
import struct
from typing import Any

from .._time import format_micros_trimmed

__all__ = ["OtlpError", "decode_request", "encode_response"]

# How deep AnyValue may nest (arrays and key-value lists inside each other): a hostile body
# otherwise recurses until Python's stack gives out.
MAX_DEPTH = 32

_KINDS = ("unspecified", "internal", "server", "client", "producer", "consumer")
_STATUS = ("UNSET", "OK", "ERROR")


class OtlpError(ValueError):
    """A body that is not the OTLP request it claims to be."""


# ------------------------------------------------------------------ protobuf wire format

def _varint(buf: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if i >= len(buf):
            raise OtlpError("a varint runs past the end of the message")
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7
        if shift > 63:
            raise OtlpError("a varint is longer than 10 bytes")


def _fields(buf: bytes) -> list[tuple[int, Any]]:
    """A message's fields in order, as (number, value): an int for varint and fixed fields,
    bytes for length-delimited ones (strings, bytes, messages, packed repeats)."""
    out: list[tuple[int, Any]] = []
    i, n = 0, len(buf)
    while i < n:
        key, i = _varint(buf, i)
        number, wire = key >> 3, key & 7
        value: Any
        if number == 0:
            raise OtlpError("field number 0")
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire == 1:
            if i + 8 > n:
                raise OtlpError("a 64-bit field runs past the end of the message")
            value = int.from_bytes(buf[i:i + 8], "little")
            i += 8
        elif wire == 2:
            size, i = _varint(buf, i)
            if i + size > n:
                raise OtlpError("a length-delimited field runs past the end of the message")
            value = buf[i:i + size]
            i += size
        elif wire == 5:
            if i + 4 > n:
                raise OtlpError("a 32-bit field runs past the end of the message")
            value = int.from_bytes(buf[i:i + 4], "little")
            i += 4
        else:
            raise OtlpError(f"wire type {wire} is not one OTLP uses")
        out.append((number, value))
    return out


def _text(value: Any) -> str:
    if not isinstance(value, bytes):
        raise OtlpError("a string field holds a number")
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise OtlpError("a string field is not valid UTF-8") from None


def _finite(value: float) -> float | None:
    # JSON has no NaN or infinity (OTLP/JSON spells them as strings): stored as null.
    return value if math.isfinite(value) else None


def _num(value: Any) -> int:
    if not isinstance(value, int):
        raise OtlpError("a number field holds bytes")
    return value


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _pb_any(buf: bytes, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise OtlpError(f"values nest deeper than {MAX_DEPTH} levels")
    out: Any = None
    for number, value in _fields(buf):
        if number == 1:
            out = _text(value)
        elif number == 2:
            out = bool(_num(value))
        elif number == 3:
            out = _signed(_num(value))
        elif number == 4:
            out = _finite(struct.unpack("<d", _num(value).to_bytes(8, "little"))[0])
        elif number == 5:
            out = [_pb_any(v, depth + 1) for n, v in _fields(value) if n == 1]
        elif number == 6:
            out = _pb_attributes([v for n, v in _fields(value) if n == 1], depth + 1)
        elif number == 7:
            out = base64.b64encode(value).decode()
    return out


def _pb_attributes(items: list[bytes], depth: int = 0) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        key, value = "", None
        for number, raw in _fields(item):
            if number == 1:
                key = _text(raw)
            elif number == 2:
                value = _pb_any(raw, depth + 1)
        out[key] = value
    return out


def _pb_resource(buf: bytes | None) -> dict[str, Any]:
    if buf is None:
        return {}
    return _pb_attributes([v for n, v in _fields(buf) if n == 1])


def _hex(value: Any) -> str:
    if not isinstance(value, bytes):
        raise OtlpError("an id field holds a number")
    return value.hex()


def _message(buf: bytes, spec: dict[int, tuple[str, Any]],
             attributes_at: int | None = None) -> dict[str, Any]:
    """A message's fields by ``spec`` (field number -> (name, reader); a name ending in
    "[]" is repeated), and its KeyValue list at ``attributes_at`` as ``attributes``."""
    out: dict[str, Any] = {}
    attributes: list[bytes] = []
    for number, value in _fields(buf):
        if number == attributes_at:
            attributes.append(value)
            continue
        field = spec.get(number)
        if field is None:
            continue  # a field OTLP has added since, or one of no use here
        name, read = field
        if name.endswith("[]"):
            out.setdefault(name[:-2], []).append(read(value))
        else:
            out[name] = read(value)
    if attributes_at is not None:
        out["attributes"] = _pb_attributes(attributes)
    return out


# The messages' fields (opentelemetry-proto's logs.proto, trace.proto and common.proto).
_SCOPE = {1: ("name", _text), 2: ("version", _text)}
_LOG = {1: ("time", _num), 11: ("observed", _num), 2: ("severity_number", _num),
        3: ("severity", _text), 5: ("body", lambda v: _pb_any(v, 0)), 9: ("trace_id", _hex),
        10: ("span_id", _hex), 12: ("event_name", _text)}
_SPAN_EVENT = {1: ("time", _num), 2: ("name", _text)}
_LINK = {1: ("trace_id", _hex), 2: ("span_id", _hex)}
_STATUS_FIELDS = {2: ("status_message", _text), 3: ("status_code", _num)}
_SPAN = {1: ("trace_id", _hex), 2: ("span_id", _hex), 4: ("parent_span_id", _hex),
         5: ("name", _text), 6: ("kind", _num), 7: ("start", _num), 8: ("end", _num),
         11: ("events[]", lambda v: _message(v, _SPAN_EVENT, 3)),
         13: ("links[]", lambda v: _message(v, _LINK, 4)),
         15: ("status", lambda v: _message(v, _STATUS_FIELDS))}


def _pb_scope(buf: bytes | None) -> dict[str, Any]:
    if buf is None:
        return {}
    scope = _message(buf, _SCOPE, 3)
    if not scope["attributes"]:
        del scope["attributes"]
    return scope


def _pb_log(buf: bytes) -> dict[str, Any]:
    return _message(buf, _LOG, 6)


def _pb_span(buf: bytes) -> dict[str, Any]:
    span = _message(buf, _SPAN, 9)
    span.update(span.pop("status", {}))
    return span


def _pb_request(body: bytes, signal: str) -> list[tuple[dict[str, Any], dict[str, Any],
                                                        dict[str, Any]]]:
    """(resource, scope, record) for every log record or span of the request."""
    out = []
    for number, resource_x in _fields(body):
        if number != 1:
            continue
        resource, scopes = _head_and_items(resource_x)
        res = _pb_resource(resource)
        for scope_x in scopes:
            scope, records = _head_and_items(scope_x)
            sc = _pb_scope(scope)
            for record in records:
                out.append((res, sc, _pb_log(record) if signal == "logs" else _pb_span(record)))
    return out


def _head_and_items(buf: bytes) -> tuple[bytes | None, list[bytes]]:
    # Resource…/Scope… messages: field 1 the resource or scope, field 2 the repeated items.
    head: bytes | None = None
    items: list[bytes] = []
    for number, value in _fields(buf):
        if number == 1:
            head = value
        elif number == 2:
            items.append(value)
    return head, items


# ------------------------------------------------------------------ JSON encoding

def _int(value: Any, what: str) -> int:
    # OTLP/JSON writes 64-bit integers as strings; numbers are accepted too.
    if isinstance(value, bool):
        raise OtlpError(f"{what} must be an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            pass
    raise OtlpError(f"{what} must be an integer, or an integer in a string")


def _hex_id(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise OtlpError(f"{what} must be a hex string")
    try:
        bytes.fromhex(value)
    except ValueError:
        raise OtlpError(f"{what} must be a hex string") from None
    return value.lower()


def _obj(value: Any, what: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise OtlpError(f"{what} must be a JSON object")
    return value


def _list(value: Any, what: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise OtlpError(f"{what} must be a JSON array")
    return value


def _js_any(value: Any, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise OtlpError(f"values nest deeper than {MAX_DEPTH} levels")
    value = _obj(value, "an attribute's value")
    if "stringValue" in value:
        return value["stringValue"]
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "intValue" in value:
        return _int(value["intValue"], "intValue")
    if "doubleValue" in value:
        d = value["doubleValue"]
        if isinstance(d, bool) or not isinstance(d, (int, float, str)):
            return None
        return _finite(float(d))
    if "arrayValue" in value:
        return [_js_any(v, depth + 1) for v in _list(
            _obj(value["arrayValue"], "arrayValue").get("values"), "arrayValue.values")]
    if "kvlistValue" in value:
        return _js_attributes(_obj(value["kvlistValue"], "kvlistValue").get("values"),
                              depth + 1)
    if "bytesValue" in value:
        return value["bytesValue"]
    return None


def _js_attributes(items: Any, depth: int = 0) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in _list(items, "attributes"):
        item = _obj(item, "an attribute")
        key = item.get("key")
        if not isinstance(key, str):
            raise OtlpError("an attribute's key must be a string")
        out[key] = _js_any(item.get("value"), depth + 1)
    return out


def _js_request(data: Any, signal: str) -> list[tuple[dict[str, Any], dict[str, Any],
                                                      dict[str, Any]]]:
    data = _obj(data, "the request")
    outer, inner, items = (("resourceLogs", "scopeLogs", "logRecords") if signal == "logs"
                           else ("resourceSpans", "scopeSpans", "spans"))
    out = []
    for rx in _list(data.get(outer), outer):
        rx = _obj(rx, outer)
        res = _js_attributes(_obj(rx.get("resource"), "resource").get("attributes"))
        for sx in _list(rx.get(inner), inner):
            sx = _obj(sx, inner)
            scope_x = _obj(sx.get("scope"), "scope")
            scope: dict[str, Any] = {k: scope_x[k] for k in ("name", "version")
                                     if isinstance(scope_x.get(k), str)}
            if scope_x.get("attributes"):
                scope["attributes"] = _js_attributes(scope_x["attributes"])
            for item in _list(sx.get(items), items):
                out.append((res, scope, _js_log(item) if signal == "logs" else _js_span(item)))
    return out


def _str(value: Any, what: str) -> str | None:
    return value if isinstance(value, str) else None


def _js_message(x: Any, what: str, spec: dict[str, tuple[str, Any]],
                attributes: bool = True) -> dict[str, Any]:
    """An OTLP/JSON object's fields by ``spec`` (its lowerCamelCase key -> (name, reader));
    a field left out, null or empty is left out."""
    x = _obj(x, what)
    out: dict[str, Any] = {}
    if attributes:
        out["attributes"] = _js_attributes(x.get("attributes"))
    for key, (name, read) in spec.items():
        value = x.get(key)
        if value is not None and value != "":
            got = read(value, key)
            if got is not None:
                out[name] = got
    return out


def _js_list(spec: dict[str, tuple[str, Any]], what: str) -> Any:
    return lambda value, key: [_js_message(v, what, spec) for v in _list(value, key)]


# The same messages as the protobuf's, in OTLP/JSON's names.
_JS_LOG = {"timeUnixNano": ("time", _int), "observedTimeUnixNano": ("observed", _int),
           "severityNumber": ("severity_number", _int), "severityText": ("severity", _str),
           "body": ("body", lambda v, _: _js_any(v, 0)), "traceId": ("trace_id", _hex_id),
           "spanId": ("span_id", _hex_id), "eventName": ("event_name", _str)}
_JS_LINK = {"traceId": ("trace_id", _hex_id), "spanId": ("span_id", _hex_id)}
_JS_SPAN = {"traceId": ("trace_id", _hex_id), "spanId": ("span_id", _hex_id),
            "parentSpanId": ("parent_span_id", _hex_id), "name": ("name", _str),
            "kind": ("kind", _int), "startTimeUnixNano": ("start", _int),
            "endTimeUnixNano": ("end", _int),
            "events": ("events", _js_list({"timeUnixNano": ("time", _int),
                                           "name": ("name", _str)}, "an event")),
            "links": ("links", _js_list(_JS_LINK, "a link"))}
_JS_STATUS = {"code": ("status_code", _int), "message": ("status_message", _str)}


def _js_log(x: dict[str, Any]) -> dict[str, Any]:
    return _js_message(x, "a log record", _JS_LOG)


def _js_span(x: dict[str, Any]) -> dict[str, Any]:
    span = _js_message(x, "a span", _JS_SPAN)
    span.update(_js_message(x.get("status"), "status", _JS_STATUS, attributes=False))
    return span


# ------------------------------------------------------------------ events

def _stamp(nanos: int | None) -> str | None:
    if not nanos or nanos < 0 or nanos >= 1 << 63:
        return None  # 0 is "unknown" in OTLP: the service stamps the event on arrival
    return format_micros_trimmed(nanos // 1000)


def _common(resource: dict[str, Any], scope: dict[str, Any]) -> dict[str, Any]:
    event: dict[str, Any] = {}
    if resource:
        event["resource"] = resource
    service = resource.get("service.name")
    if service is not None:
        event["service"] = {"name": service}
    if scope:
        event["scope"] = scope
    return event


def _log_event(resource: dict[str, Any], scope: dict[str, Any],
               r: dict[str, Any]) -> dict[str, Any]:
    event = _common(resource, scope)
    stamp = _stamp(r.get("time")) or _stamp(r.get("observed"))
    if stamp is not None:
        event["_time"] = stamp
    for name in ("body", "severity", "severity_number", "trace_id", "span_id", "event_name"):
        if r.get(name) not in (None, ""):
            event[name] = r[name]
    if r["attributes"]:
        event["attributes"] = r["attributes"]
    return event


def _span_event(resource: dict[str, Any], scope: dict[str, Any],
                s: dict[str, Any]) -> dict[str, Any]:
    event = _common(resource, scope)
    stamp = _stamp(s.get("start"))
    if stamp is not None:
        event["_time"] = stamp
    for name in ("trace_id", "span_id", "parent_span_id", "name"):
        if s.get(name):
            event[name] = s[name]
    kind = s.get("kind", 0)
    event["kind"] = _KINDS[kind] if 0 <= kind < len(_KINDS) else str(kind)
    start, end = s.get("start"), s.get("end")
    if start and end and end >= start:
        event["duration"] = end - start
    code = s.get("status_code", 0)
    event["error"] = code == 2
    status: dict[str, Any] = {"code": _STATUS[code] if 0 <= code < 3 else str(code)}
    if s.get("status_message"):
        status["message"] = s["status_message"]
    event["status"] = status
    if s["attributes"]:
        event["attributes"] = s["attributes"]
    if s.get("events"):
        event["events"] = [{**({"timestamp": _stamp(e["time"])} if e.get("time") else {}),
                            "name": e.get("name", ""), "attributes": e["attributes"]}
                           for e in s["events"]]
    if s.get("links"):
        event["links"] = s["links"]
    return event


def decode_request(body: bytes, media_type: str, signal: str) -> list[dict[str, Any]]:
    """The events of an OTLP ``signal`` ("logs" or "traces") request body; OtlpError if the
    body is not one."""
    if media_type == "application/x-protobuf":
        read: Any = _pb_request
    elif media_type == "application/json":
        try:
            body = json.loads(body)
        except (ValueError, RecursionError) as exc:
            raise OtlpError(f"the body is not valid JSON: {exc}") from None
        read = _js_request
    else:
        raise OtlpError("unsupported media type")
    make = _log_event if signal == "logs" else _span_event
    try:
        return [make(resource, scope, record) for resource, scope, record in read(body, signal)]
    except OtlpError:
        raise
    except (AttributeError, TypeError, ValueError, OverflowError, IndexError,
            struct.error) as exc:
        # A field of another type than its message says (a number where a message or a
        # string belongs, or the other way round): not the request it claims to be.
        raise OtlpError(f"a field has the wrong type ({type(exc).__name__})") from None


def copied_size(events: list[dict[str, Any]]) -> int:
    """The bytes a request's resources and scopes take once stored: each is copied into every
    event of its records (one 400 KB resource and 1,000 empty records stored 400 MB), so each
    copy counts. Each one's size is measured once."""
    sizes: dict[int, int] = {}
    total = 0
    for event in events:
        for name in ("resource", "scope"):
            value = event.get(name)
            if value is None:
                continue
            size = sizes.get(id(value))
            if size is None:
                size = sizes[id(value)] = len(json.dumps(value, ensure_ascii=False).encode(
                    "utf-8", "surrogatepass"))
            total += size
    return total


def _pb_len(number: int, payload: bytes) -> bytes:
    return _pb_key(number, 2) + _pb_uvarint(len(payload)) + payload


def _pb_key(number: int, wire: int) -> bytes:
    return _pb_uvarint(number << 3 | wire)


def _pb_uvarint(value: int) -> bytes:
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        if value:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def encode_response(media_type: str, signal: str, rejected: int, message: str) -> bytes:
    """An Export…ServiceResponse: empty when all was taken, else its ``partial_success``
    with the count turned down (``rejected_log_records`` / ``rejected_spans``: both field 1)
    and why."""
    if media_type == "application/json":
        if not rejected:
            return b"{}"
        # rejected* is an int64: a string in OTLP/JSON.
        key = "rejectedLogRecords" if signal == "logs" else "rejectedSpans"
        return json.dumps({"partialSuccess": {key: str(rejected),
                                              "errorMessage": message}}).encode()
    if not rejected:
        return b""
    partial = (_pb_key(1, 0) + _pb_uvarint(rejected)
               + _pb_len(2, message.encode("utf-8")))
    return _pb_len(1, partial)
