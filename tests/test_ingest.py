"""The local service's ingest rules (loghandler._local.ingest), as tables: body shapes, times."""

from __future__ import annotations

import gzip
import json
from typing import Any

import pytest

from loghandler._local.ingest import (
    HttpError,
    IngestOptions,
    decode_body,
    go_layout_to_strptime,
    normalize_time,
    parse_values,
    prepare_events,
)

NOW = "2026-01-02T03:04:05.000000Z"


class TestNormalizeTime:
    @pytest.mark.parametrize(("value", "stored"), [
        ("2024-05-01T12:00:00.123456Z", "2024-05-01T12:00:00.123456Z"),
        ("2024-05-01T12:00:00Z", "2024-05-01T12:00:00.000000Z"),
        ("2024-05-01t12:00:00z", "2024-05-01T12:00:00.000000Z"),
        ("2024-05-01 12:00:00.5Z", "2024-05-01T12:00:00.500000Z"),
        ("2024-05-01T12:00:00.123456789Z", "2024-05-01T12:00:00.123456Z"),
        ("2024-05-01T14:30:00+02:30", "2024-05-01T12:00:00.000000Z"),
        ("2024-05-01T00:00:00-0100", "2024-05-01T01:00:00.000000Z"),
        ("2016-12-31T23:59:60Z", "2016-12-31T23:59:59.999999Z"),
        (0, "1970-01-01T00:00:00.000000Z"),
        (1714564800, "2024-05-01T12:00:00.000000Z"),
        (1714564800.25, "2024-05-01T12:00:00.250000Z"),
        (1714564800123, "2024-05-01T12:00:00.123000Z"),
        (1714564800123456, "2024-05-01T12:00:00.123456Z"),
        (1714564800123456789, "2024-05-01T12:00:00.123456Z"),
        (-1, "1969-12-31T23:59:59.000000Z"),
        # ISO 8601 without an offset is UTC, as the service documents (issue 24).
        ("2024-05-01T12:00:00", "2024-05-01T12:00:00.000000Z"),
        ("2024-05-01", "2024-05-01T00:00:00.000000Z"),
    ])
    def test_times(self, value: Any, stored: str) -> None:
        """RFC 3339 in any offset and epoch numbers in s, ms, us or ns become one UTC form."""
        assert normalize_time(value) == stored

    @pytest.mark.parametrize("value", [
        "yesterday", "2024-13-01T00:00:00Z", "2024-02-30T00:00:00.000000Z",
        "2024-05-01T25:00:00Z", "2024-05-01T12:00", "2024-05", "２０２４-05-01T12:00:00Z", "",
        True, [2024], {"t": 1}, float("nan"), float("inf"), 10**30,
    ])
    def test_not_times(self, value: Any) -> None:
        """Anything else is a ValueError whose text says why."""
        with pytest.raises(ValueError, match=r"\S"):
            normalize_time(value)


class TestGoLayout:
    @pytest.mark.parametrize(("layout", "fmt"), [
        ("2006-01-02 15:04:05", "%Y-%m-%d %H:%M:%S"),
        ("2006-01-02T15:04:05.000Z07:00", "%Y-%m-%dT%H:%M:%S.%f%z"),
        ("02/Jan/2006:15:04:05 -0700", "%d/%b/%Y:%H:%M:%S %z"),
        ("Mon, 02 Jan 2006 15:04:05 MST", "%a, %d %b %Y %H:%M:%S %Z"),
        ("January 2 2006 3:04PM", "%B %d %Y %I:%M%p"),
    ])
    def test_layouts(self, layout: str, fmt: str) -> None:
        """Go's reference-time elements map to strptime directives."""
        assert go_layout_to_strptime(layout) == fmt

    def test_other_digits_are_literal_text(self) -> None:
        """As Go reads a layout: a digit that is no part of the reference time is text the
        value must hold (axiom-py's own test sends "2/Jan/2006:15:04:05 +0000")."""
        assert go_layout_to_strptime("2006-01-02 7") == "%Y-%m-%d 7"
        assert go_layout_to_strptime("2/Jan/2006:15:04:05 +0000") == "%d/%b/%Y:%H:%M:%S +0000"

    def test_a_layout_naming_no_part_of_the_time(self) -> None:
        """A layout with nothing of the reference time in it is refused, naming the layout."""
        with pytest.raises(ValueError, match="reference time"):
            go_layout_to_strptime("7")


class TestParseValues:
    @pytest.mark.parametrize(("body", "ctype", "values"), [
        (b'[{"a": 1}, {"b": 2}]', "application/json", [{"a": 1}, {"b": 2}]),
        (b'{"a": 1}', "application/json", [{"a": 1}]),
        (b'{"a": 1}\n{"b": 2}\n', "application/json", [{"a": 1}, {"b": 2}]),
        (b'{"a": 1} {"b": 2}', None, [{"a": 1}, {"b": 2}]),
        (b'{"a": 1}\n\n{"b": 2}', "application/x-ndjson", [{"a": 1}, {"b": 2}]),
        (b'{"a": 1}\r\n{"b": 2}\r\n', "application/x-ndjson; charset=utf-8",
         [{"a": 1}, {"b": 2}]),
        (b'[1, "x"]', "application/json", [1, "x"]),
        (b'\xef\xbb\xbf[{"bom": true}]', "application/json", [{"bom": True}]),
        (b"a,b\n1,x\n2,\"y,z\"\n", "text/csv", [{"a": "1", "b": "x"}, {"a": "2", "b": "y,z"}]),
        (b"a,b\n1,2,3\n", "text/csv", [{"a": "1", "b": "2", "column3": "3"}]),
        (b"a,b\n1\n", "text/csv", [{"a": "1"}]),
    ])
    def test_shapes(self, body: bytes, ctype: str | None, values: list[Any]) -> None:
        """JSON array, one object, NDJSON (either content type) and CSV give their values."""
        assert parse_values(body, ctype) == values

    def test_csv_delimiter(self) -> None:
        """csv-delimiter picks the separator."""
        assert parse_values(b"a;b\n1;2\n", "text/csv", csv_delimiter=";") == [
            {"a": "1", "b": "2"}]

    @pytest.mark.parametrize(("body", "ctype", "status", "words"), [
        (b"", "application/json", 400, "empty"),
        (b"{oops", "application/json", 400, "not valid JSON"),
        (b'{"a": 1}\n{"b": ', "application/json", 400, "NDJSON"),
        (b'{"a": 1}\nnope\n', "application/x-ndjson", 400, "line 2"),
        (b'[{"a": NaN}]', "application/json", 400, "NaN"),
        (b"\xff\xfe", "application/json", 400, "UTF-8"),
        (b"a,a\n1,2\n", "text/csv", 400, "header"),
        (b"<xml/>", "application/xml", 415, "Content-Type"),
    ])
    def test_unreadable_bodies(self, body: bytes, ctype: str, status: int, words: str) -> None:
        """A body that cannot be read at all is an HttpError naming the problem."""
        with pytest.raises(HttpError) as info:
            parse_values(body, ctype)
        assert info.value.status == status and words in info.value.message

    def test_deep_nesting_is_400(self) -> None:
        """Absurd nesting is a 400, not a RecursionError."""
        with pytest.raises(HttpError) as info:
            parse_values(b"[" * 100_000 + b"]" * 100_000, "application/json")
        assert info.value.status == 400


class TestDecodeBody:
    def test_gzip_and_identity(self) -> None:
        """gzip is undone; identity, none and axiom-py's "1" leave the body as it is."""
        assert decode_body(gzip.compress(b"[1]"), "gzip", 100) == b"[1]"
        for enc in (None, "", "identity", "1"):
            assert decode_body(b"[1]", enc, 100) == b"[1]"

    def test_zstd(self) -> None:
        """zstd is undone, and bounded by the limit."""
        zstandard = pytest.importorskip("zstandard")
        packed = zstandard.ZstdCompressor().compress(b"[" + b"1," * 5000 + b"1]")
        assert decode_body(packed, "zstd", 20_000).startswith(b"[1,1,")
        with pytest.raises(HttpError) as info:
            decode_body(packed, "zstd", 1000)
        assert info.value.status == 413
        with pytest.raises(HttpError) as info:
            decode_body(b"not zstd", "zstd", 1000)
        assert info.value.status == 400

    def test_unknown_encoding(self) -> None:
        """Any other encoding is a 415 listing the ones there are."""
        with pytest.raises(HttpError) as info:
            decode_body(b"x", "br", 100)
        assert info.value.status == 415 and "gzip" in info.value.message


class TestPrepareEvents:
    def test_failures_and_times(self) -> None:
        """Non-objects and bad times are failures; the rest get a stored _time."""
        values = [{"a": 1}, 7, {"_time": "soon"}, {"_time": 0}, {"_time": None}, [1]]
        events, failures = prepare_events(values, IngestOptions({}), NOW)
        assert events == [{"a": 1, "_time": NOW}, {"_time": "1970-01-01T00:00:00.000000Z"},
                          {"_time": NOW}]
        assert [f["timestamp"] for f in failures] == [NOW] * 3
        assert "not a number" in failures[0]["error"] and "JSON object" in failures[0]["error"]
        assert "invalid _time" in failures[1]["error"] and "soon" in failures[1]["error"]
        assert "an array" in failures[2]["error"]

    def test_timestamp_field_and_format(self) -> None:
        """timestamp-field names the time's field; timestamp-format is a Go layout."""
        options = IngestOptions({"timestamp-field": ["ts"],
                                 "timestamp-format": ["02/01/2006 15:04"]})
        events, failures = prepare_events(
            [{"ts": "01/05/2024 12:30"}, {"ts": "2024-05-01"}, {"x": 1}], options, NOW)
        assert events == [{"ts": "01/05/2024 12:30", "_time": "2024-05-01T12:30:00.000000Z"},
                          {"x": 1, "_time": NOW}]
        assert "timestamp-format" in failures[0]["error"]

    def test_bad_format_is_400(self) -> None:
        """A timestamp-format we cannot read is a 400."""
        with pytest.raises(HttpError) as info:
            IngestOptions({"timestamp-format": ["never"]})
        assert info.value.status == 400


def test_json_round_trip_of_the_status_shape() -> None:
    """The failures list is plain JSON."""
    _, failures = prepare_events(["x"], IngestOptions({}), NOW)
    assert json.loads(json.dumps(failures)) == failures
