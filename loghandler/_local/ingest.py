"""What the local service does with an ingest body: decode, parse, check each event's time.

Pure functions, no I/O, so a table test covers each rule:

    raw bytes --decode_body (Content-Encoding: gzip, zstd)--> bytes
              --parse_values (Content-Type: JSON, NDJSON, CSV)--> values
              --prepare_events (_time per event)--> (events to store, failures)

A body that cannot be read at all (bad gzip, bad JSON syntax) raises ``HttpError`` and nothing of
it is stored. Inside a readable body each value is judged alone, as the real service does: one
that is not an object, or whose time is not a time, is reported in the answer's ``failures`` and
the others are stored.

Times are stored as RFC 3339 UTC with exactly six fractional digits
(``2024-05-01T12:00:00.000000Z``): fixed width, so text order is time order, and exactly what
loghandler's own handler sends, so its ``_time`` values are stored unchanged.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
import zlib
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

from .._time import format_datetime
from .depth import MAX_EVENT_DEPTH, too_deep

__all__ = [
    "IngestOptions",
    "canonical_micros",
    "decode_body",
    "format_datetime",
    "go_layout_to_strptime",
    "is_canonical",
    "json_kind",
    "normalize_time",
    "parse_values",
    "prepare_events",
]


class HttpError(Exception):
    """An answer other than 200: ``status`` and the ``message`` of its ``{code, message}`` body."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


# ---------------------------------------------------------------------------- Content-Encoding

def decode_body(body: bytes, encoding: str | None, limit: int) -> bytes:
    """The body with its Content-Encoding undone, at most ``limit`` bytes (413 above)."""
    enc = (encoding or "").strip().lower()
    # axiom-py sends "Content-Encoding: 1" for an uncompressed body (its ContentEncoding.IDENTITY).
    if enc in ("", "identity", "1"):
        return body
    if enc in ("gzip", "x-gzip"):
        return _gunzip(body, limit)
    if enc == "zstd":
        return _unzstd(body, limit)
    raise HttpError(415, f"unsupported Content-Encoding {enc!r}; use gzip, zstd or none")


def _too_big(limit: int) -> HttpError:
    return HttpError(413, f"the body decompresses to more than this service's limit of "
                          f"{limit} bytes; send smaller batches")


# The input a gzip member is given at first; doubled while the member goes on. The
# decompressor copies what follows a member's end (unused_data): a small step keeps that
# copy small, so a body of many small members decodes in time linear in its size.
_GZIP_STEP = 256
_GZIP_MAX_STEP = 64 * 1024


def _gunzip(body: bytes, limit: int) -> bytes:
    """Every member of a gzip body (``cat a.gz b.gz`` is valid gzip, and streaming compressors
    write several): a body is acknowledged whole or not at all. Bounded: a small gzip body must
    not expand into gigabytes in memory, and many members cost time linear in the body (each
    read at its offset, never the rest of the body copied a member)."""
    parts: list[bytes] = []
    size = 0
    view = memoryview(body)
    end = len(body)
    pos = 0
    while True:
        d = zlib.decompressobj(wbits=31)
        step = _GZIP_STEP
        while not d.eof:
            if pos >= end:
                raise HttpError(400, "the body is not valid gzip: it ends before the gzip "
                                     "stream does")
            given = view[pos:pos + step]
            try:
                out = d.decompress(given, limit + 1 - size)
            except zlib.error as exc:
                raise HttpError(400, f"the body is not valid gzip: {exc}") from None
            size += len(out)
            if size > limit:
                raise _too_big(limit)
            parts.append(out)
            pos += len(given) - len(d.unused_data) - len(d.unconsumed_tail)
            step = min(step * 2, _GZIP_MAX_STEP)
        # The end, or trailing zero padding (tar-style), which is no member; counted once:
        # a zero that is not the padding's is no gzip header, and fails the next member.
        if pos >= end or (body[pos] == 0 and body.count(0, pos) == end - pos):
            return b"".join(parts)


def _unzstd(body: bytes, limit: int) -> bytes:
    try:
        import zstandard
    except ImportError:
        raise HttpError(415, "this local service cannot read zstd bodies: install the "
                             "zstandard package (pip install zstandard), or send gzip") from None
    try:
        reader = zstandard.ZstdDecompressor().stream_reader(body)
        out = reader.read(limit + 1)
        while len(out) <= limit:  # read() may return less than asked before the end
            more = reader.read(limit + 1 - len(out))
            if not more:
                break
            out += more
    except zstandard.ZstdError as exc:
        raise HttpError(400, f"the body is not valid zstd: {exc}") from None
    if len(out) > limit:
        raise _too_big(limit)
    return out


# ---------------------------------------------------------------------------- Content-Type

_JSON_TYPES = frozenset({"application/json", "text/json", ""})
_NDJSON_TYPES = frozenset({"application/x-ndjson", "application/ndjson", "application/jsonl",
                           "application/x-jsonlines", "application/jsonlines"})
_CSV_TYPES = frozenset({"text/csv", "application/csv"})
_WS = re.compile(r"[ \t\r\n]*")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


_decoder = json.JSONDecoder(parse_constant=_reject_constant)


def media_type(content_type: str | None) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


def parse_values(body: bytes, content_type: str | None, *,
                 csv_delimiter: str | None = None,
                 csv_fields: list[str] | None = None) -> list[Any]:
    """The values of a body: each one is meant to be an event (checked later, one by one).

    JSON: one array (its elements), one value, or several values separated by whitespace
    (NDJSON sent as application/json). NDJSON: one value per line, blank lines skipped. CSV:
    a header line, then one event per row, every value a string; with ``csv_fields`` (the
    CSV-fields header) those name the columns and every line is a row.
    """
    kind = media_type(content_type)
    if not body.strip():
        raise HttpError(400, "the body is empty; send JSON, NDJSON or CSV")
    try:
        text = body.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        what = "CSV" if kind in _CSV_TYPES else "JSON"
        raise HttpError(400, f"the body is not valid {what}: it is not UTF-8 ({exc})") from None
    if kind in _CSV_TYPES:
        return _parse_csv(text, csv_delimiter, csv_fields)
    if kind in _NDJSON_TYPES:
        return _parse_ndjson(text)
    if kind not in _JSON_TYPES:
        raise HttpError(415, f"unsupported Content-Type {kind!r}; use application/json, "
                             "application/x-ndjson or text/csv")
    try:
        value = _decoder.decode(text)
    except ValueError as exc:
        if not str(exc).startswith("Extra data"):
            raise HttpError(400, f"the body is not valid JSON: {exc}") from None
        return _parse_stream(text)  # several values: NDJSON sent as application/json
    except RecursionError:
        raise HttpError(400, "the body is not valid JSON: nested too deeply") from None
    return value if isinstance(value, list) else [value]


def _parse_stream(text: str) -> list[Any]:
    values: list[Any] = []
    pos = _WS.match(text, 0).end()  # type: ignore[union-attr]
    end = len(text)
    while pos < end:
        try:
            value, pos = _decoder.raw_decode(text, pos)
        except ValueError as exc:
            raise HttpError(400, f"the body is not valid JSON (nor NDJSON): {exc}") from None
        except RecursionError:
            raise HttpError(400, "the body is not valid JSON: nested too deeply") from None
        # A lone array among several values is a batch of its own.
        if isinstance(value, list):
            values.extend(value)
        else:
            values.append(value)
        pos = _WS.match(text, pos).end()  # type: ignore[union-attr]
    return values


def _parse_ndjson(text: str) -> list[Any]:
    # One decode of the lines as one array: the decoder's C loop instead of one call a line
    # (twice as fast). Lines that do not join so (a blank line, a broken value) take the line
    # by line way, which also names the line at fault.
    body = text.rstrip("\r\n \t")
    try:
        values = _decoder.decode("[" + body.replace("\n", ",") + "]")
    except (ValueError, RecursionError):
        pass
    else:
        # One value a line (a line "1,2" would join as two): else the line by line way says
        # which line is not NDJSON.
        if isinstance(values, list) and len(values) == body.count("\n") + 1:
            return values
    values = []
    for lineno, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            values.append(_decoder.decode(line))
        except ValueError as exc:
            raise HttpError(400, f"the body is not valid NDJSON: line {lineno}: {exc}") from None
        except RecursionError:
            raise HttpError(400, f"the body is not valid NDJSON: line {lineno}: nested too "
                                 "deeply") from None
    return values


def _parse_csv(text: str, delimiter: str | None, fields: list[str] | None = None) -> list[Any]:
    if delimiter is not None and len(delimiter) != 1:
        raise HttpError(400, f"csv-delimiter must be one character, not {delimiter!r}")
    try:
        reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter or ",")
        rows = [row for row in reader if row]
    except csv.Error as exc:
        raise HttpError(400, f"the body is not valid CSV: {exc}") from None
    if fields is not None:
        header, data = fields, rows
        if len(set(header)) != len(header) or not all(name.strip() for name in header):
            raise HttpError(400, "the CSV-fields header must name every column once")
    else:
        if not rows:
            raise HttpError(400, "the CSV body has no header line")
        header, *data = rows
        if len(set(header)) != len(header) or not all(name.strip() for name in header):
            raise HttpError(400, "the CSV header line must name every column once")
    events: list[Any] = []
    for row in data:
        event = dict(zip(header, row, strict=False))
        if len(row) > len(header):  # extra cells are kept, not lost
            for i, cell in enumerate(row[len(header):], len(header) + 1):
                event[f"column{i}"] = cell
        events.append(event)
    return events


# ---------------------------------------------------------------------------- time

# RFC 3339, and the ISO 8601 forms the service also takes: no offset (UTC), a space for the
# "T", or a date alone (midnight UTC).
_RFC3339 = re.compile(
    r"(\d{4})-(\d\d)-(\d\d)(?:[Tt ](\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?)?"
    r"([Zz]|[+-]\d\d:?\d\d)?\Z",
    re.ASCII,
)
_CANONICAL = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z\Z", re.ASCII)
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
# "YYYY-MM-DDTHH:MM" already checked -> its epoch microseconds; bounded.
_VALID_MINUTES: dict[str, int] = {}


def _from_epoch(value: float) -> datetime:
    # Seconds, milliseconds, microseconds or nanoseconds, told apart by size as the real service
    # does: 1e11 seconds is the year 5138, so anything larger is a finer unit.
    magnitude = abs(value)
    if magnitude < 1e11:
        scale = 1.0
    elif magnitude < 1e14:
        scale = 1e3
    elif magnitude < 1e17:
        scale = 1e6
    else:
        scale = 1e9
    if isinstance(value, int):
        micros = value * 1_000_000 // int(scale)
    else:
        micros = round(value * (1e6 / scale))
    return _EPOCH + timedelta(microseconds=micros)


def canonical_micros(value: str) -> int:
    """The epoch microseconds of a time in the stored form (``_CANONICAL``); ValueError when
    that date or time does not exist. Minutes are remembered: most events of a batch share
    one, and then the rest is one slice and one int()."""
    minute = _VALID_MINUTES.get(value[:16])
    if minute is None:
        minute = _minute_micros(value)
    if value[17] > "5":  # a second of 60 or more (digits only: _CANONICAL)
        raise ValueError(f"{value!r} is not a valid date and time")
    return minute + int(value[17:19] + value[20:26])


def _minute_micros(value: str) -> int:
    try:
        dt = datetime(int(value[:4]), int(value[5:7]), int(value[8:10]), int(value[11:13]),
                      int(value[14:16]), tzinfo=timezone.utc)
    except ValueError:
        raise ValueError(f"{value!r} is not a valid date and time") from None
    if len(_VALID_MINUTES) >= 4096:
        _VALID_MINUTES.clear()
    us = _VALID_MINUTES[value[:16]] = (dt - _EPOCH) // timedelta(microseconds=1)
    return us


def is_canonical(value: Any) -> bool:
    """Whether ``value`` is a time in the stored form (what loghandler's handler sends)."""
    return isinstance(value, str) and _CANONICAL.match(value) is not None


def normalize_time(value: Any) -> str:
    """The stored form of a ``_time`` value; ``ValueError`` (the reason) when it is not a time."""
    if isinstance(value, str):
        if _CANONICAL.match(value):
            # The form loghandler itself sends: only check that the date exists, once per
            # second seen (a batch's events mostly share their seconds).
            canonical_micros(value)  # the date and time exist
            return value
        m = _RFC3339.match(value)
        if m is None:
            raise ValueError(f"{value[:64]!r} is not an RFC 3339 time "
                             "(like 2024-05-01T12:00:00Z) nor an epoch number")
        year, month, day, hour, minute, second, frac, zone = m.groups()
        hour, minute, second = hour or "0", minute or "0", second or "0"
        try:
            if zone is None or zone in ("Z", "z"):
                tz = timezone.utc
            else:
                digits = zone.replace(":", "")
                minutes = int(digits[1:3]) * 60 + int(digits[3:5])
                tz = timezone(timedelta(minutes=-minutes if digits[0] == "-" else minutes))
            # A leap second (:60) is the last instant of its minute here.
            sec = int(second)
            micro = int((frac or "0").ljust(6, "0")[:6])
            if sec == 60:
                sec, micro = 59, 999_999
            dt = datetime(int(year), int(month), int(day), int(hour), int(minute), sec, micro,
                          tzinfo=tz)
            return format_datetime(dt)
        except (ValueError, OverflowError):
            raise ValueError(f"{value!r} is not a valid date and time") from None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{value!r} is not a time")
        try:
            return format_datetime(_from_epoch(value))
        except (OverflowError, ValueError):
            raise ValueError(f"{value!r} is out of the range of times") from None
    kind = "null" if value is None else type(value).__name__
    raise ValueError(f"a time must be an RFC 3339 string or an epoch number, not {kind}")


# Go's reference-time layout elements (Mon Jan 2 15:04:05 -0700 MST 2006) that map one to one to
# strptime directives, longest first so "January" is not read as "Jan" + "uary".
_GO_ELEMENTS = [
    ("January", "%B"), ("Monday", "%A"), ("Z07:00", "%z"), ("-07:00", "%z"), ("-0700", "%z"),
    ("2006", "%Y"), ("Jan", "%b"), ("Mon", "%a"), ("MST", "%Z"), ("Z0700", "%z"),
    ("01", "%m"), ("02", "%d"), ("15", "%H"), ("03", "%I"), ("04", "%M"), ("05", "%S"),
    ("06", "%y"), ("PM", "%p"), ("_2", "%d"), ("1", "%m"), ("2", "%d"), ("3", "%I"),
    ("4", "%M"), ("5", "%S"),
]
_GO_FRACTION = re.compile(r"[.,](0+|9+)")


def go_layout_to_strptime(layout: str) -> str:
    """A Go time layout (``2006-01-02 15:04:05``) as a strptime format."""
    out: list[str] = []
    i = 0
    while i < len(layout):
        m = _GO_FRACTION.match(layout, i)
        if m and out and out[-1] == "%S":
            out.append(layout[i] + "%f")
            i = m.end()
            continue
        for element, directive in _GO_ELEMENTS:
            if layout.startswith(element, i):
                out.append(directive)
                i += len(element)
                break
        else:
            # Anything else is literal text, digits included, as Go reads a layout: in
            # "2/Jan/2006:15:04:05 +0000" (the official SDK's own test) " +0000" is text the
            # value must hold, not a zone.
            ch = layout[i]
            out.append("%%" if ch == "%" else ch)
            i += 1
    if not any((part.startswith("%") and part != "%%") or part.endswith("%f") for part in out):
        raise ValueError(f"timestamp-format {layout!r} names no part of Go's reference time "
                         "Mon Jan 2 15:04:05 -0700 MST 2006")
    return "".join(out)


# ---------------------------------------------------------------------------- events

class IngestOptions:
    """The ingest request's query parameters: ``timestamp-field``, ``timestamp-format``,
    ``csv-delimiter``; ``HttpError(400)`` for a value we cannot use."""

    __slots__ = ("csv_delimiter", "strptime", "timestamp_field")

    def __init__(self, params: Mapping[str, list[str]]) -> None:
        def one(name: str) -> str | None:
            values = params.get(name)
            return values[-1] if values else None

        self.timestamp_field = one("timestamp-field") or "_time"
        fmt = one("timestamp-format")
        self.strptime: str | None = None
        if fmt:
            try:
                self.strptime = go_layout_to_strptime(fmt)
            except ValueError as exc:
                raise HttpError(400, str(exc)) from None
        self.csv_delimiter = one("csv-delimiter")


def json_kind(value: Any) -> str:
    """How an error message names a JSON value's type ("an array", "null", ...)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _parse_with_format(value: Any, fmt: str) -> str:
    if not isinstance(value, str):
        return normalize_time(value)
    try:
        dt = datetime.strptime(value, fmt)
    except ValueError:
        raise ValueError(f"{value[:64]!r} does not match the timestamp-format") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return format_datetime(dt)


# Field names the service keeps for itself: one a client sends is stored with _user_ in place
# of its leading underscore (_sysTime as _user_sysTime), its value kept.
RESERVED_FIELDS = frozenset({"_sysTime", "_rowID", "_cursor", "_source", "_blockInfo"})
# The longest string value the service stores; a longer one is replaced by TOO_LONG.
MAX_VALUE_BYTES = 1024 * 1024
TOO_LONG = "<invalid string: too long>"
# The most events one ingest request may hold.
MAX_EVENTS_PER_REQUEST = 10_000


# A string this long (in characters) may be over MAX_VALUE_BYTES once encoded (4 bytes a
# character at most); a shorter one cannot.
_MAYBE_LONG = MAX_VALUE_BYTES // 4


def _too_long(text: str) -> bool:
    return len(text.encode("utf-8", "surrogatepass")) > MAX_VALUE_BYTES


def _cap_strings(value: Any, depth: int = 0) -> Any:
    """``value`` with every string over MAX_VALUE_BYTES (encoded) replaced, nested ones too.
    One loop over a container's values: only containers and long strings cost a call."""
    if type(value) is str:
        return TOO_LONG if len(value) > _MAYBE_LONG and _too_long(value) else value
    if depth >= 64:
        return value
    if type(value) is dict:
        for k, v in value.items():
            t = type(v)
            if t is str:
                if len(v) > _MAYBE_LONG and _too_long(v):
                    value[k] = TOO_LONG
            elif t is dict or t is list:
                _cap_strings(v, depth + 1)
    elif type(value) is list:
        for i, v in enumerate(value):
            t = type(v)
            if t is str:
                if len(v) > _MAYBE_LONG and _too_long(v):
                    value[i] = TOO_LONG
            elif t is dict or t is list:
                _cap_strings(v, depth + 1)
    return value


def prepare_events(values: list[Any], options: IngestOptions, now: str,
                   labels: Mapping[str, Any] | None = None, *,
                   times: list[int] | None = None, longest: int | None = None
                   ) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """The events to store (each with a normalized ``_time``) and the failures to report.

    ``now`` (the ingest time, stored form) is the time of an event that has none, and the
    ``timestamp`` of each failure. ``labels`` (the event-labels header) are added to every
    event that lacks them. Reserved names become ``_user_<name>``; a string over 1 MB becomes
    ``<invalid string: too long>``. The dicts in ``values`` are updated in place.
    ``times`` (a list) receives each stored event's time in epoch microseconds; ``longest``
    (the longest line or body the values came from, in bytes) spares the search for strings
    over 1 MB when none can be that long.
    """
    if len(values) > MAX_EVENTS_PER_REQUEST:
        raise HttpError(400, f"a request may hold at most {MAX_EVENTS_PER_REQUEST:,} events, "
                             f"this one held {len(values):,}: send smaller batches")
    events: list[dict[str, Any]] = []
    failures: list[dict[str, str]] = []
    field = options.timestamp_field
    fmt = options.strptime
    cap = longest is None or longest > MAX_VALUE_BYTES
    now_us = canonical_micros(now) if times is not None else 0
    canonical = _CANONICAL.match
    minutes = _VALID_MINUTES
    for value in values:
        if type(value) is not dict:
            failures.append({"timestamp": now,
                             "error": f"an event must be a JSON object, not {json_kind(value)}"})
            continue
        if labels:
            for key, label in labels.items():
                value.setdefault(key, label)
        if not RESERVED_FIELDS.isdisjoint(value):
            for key in RESERVED_FIELDS.intersection(value):
                # _sysTime -> _user_sysTime, the value kept (not _user__sysTime).
                value[f"_user_{key[1:]}"] = value.pop(key)
        if too_deep(value):  # what is stored must read back (depth.py)
            failures.append({"timestamp": now, "error": "the event nests more than "
                             f"{MAX_EVENT_DEPTH} levels deep: flatten it"})
            continue
        if cap:
            _cap_strings(value)
        raw = value.get(field)
        if raw is None:
            value["_time"] = now
            if times is not None:
                times.append(now_us)
        else:
            try:
                if fmt is None and type(raw) is str and canonical(raw):
                    # Already in the stored form (what loghandler sends): checked once
                    # (canonical_micros, inlined for its common case: a minute seen before).
                    minute = minutes.get(raw[:16])
                    if minute is not None and raw[17] < "6":
                        us = minute + int(raw[17:19] + raw[20:26])
                    else:
                        us = canonical_micros(raw)
                    if field != "_time":
                        value["_time"] = raw
                else:
                    stamp = value["_time"] = (normalize_time(raw) if fmt is None
                                              else _parse_with_format(raw, fmt))
                    us = canonical_micros(stamp)
            except ValueError as exc:
                failures.append({"timestamp": now, "error": f"invalid {field}: {exc}"})
                continue
            if times is not None:
                times.append(us)
        events.append(value)
    return events, failures
