"""The input reader of ``loghandler ingest``: NDJSON, JSON of any layout (streamed in bounded
chunks), text lines, gzip; the format told by parsing the start.
"""

from __future__ import annotations

import codecs
import gzip
import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

from ._common import (
    _err,
)
from .times import text_event


@dataclass
class _Counts:
    read: int = 0
    bad: int = 0
    fatal: BaseException | None = None


FORMATS = ("auto", "ndjson", "json", "text", "csv")

# A first argument that exists, contains a path separator or ends like an input file is never a
# dataset name: `ingest events.ndjson` must not ship stdin to a dataset called "events.ndjson".
_INPUT_SUFFIXES = (".ndjson", ".jsonl", ".json", ".log", ".txt", ".gz", ".csv", ".out")

_CHUNK = 256 * 1024  # characters read at a time: memory stays bounded whatever the layout

_SNIFF_MAX = 1024 * 1024  # at most this much is looked at to tell the format

_MAX_ELEMENT_CHARS = 64 * 1024 * 1024  # one JSON value larger than this is refused

_WS = " \t\r\n\ufeff"


def _looks_like_input(arg: str) -> bool:
    return (arg == "-" or os.path.lexists(arg) or "/" in arg or os.sep in arg
            or arg.lower().endswith(_INPUT_SUFFIXES))


class _Input:
    """One input, decoded as it arrives (what is there, at most a chunk at a time: a pipe from
    ``tail -f`` ships each line as it comes), with what was looked at to tell its format kept."""

    def __init__(self, binary: Any) -> None:
        self.binary = binary  # has read1: io.BufferedReader, gzip.GzipFile
        self.decoder = codecs.getincrementaldecoder("utf-8-sig")(errors="replace")
        self.buf = ""
        self.eof = False
        self.skipped_lines = 0  # blank lines dropped while looking for the first value

    def read(self, size: int = _CHUNK) -> str:
        """Up to ``size`` bytes' worth of text, waiting only while nothing is there; "" at EOF."""
        while not self.eof:
            data = self.binary.read1(size)
            if not data:
                self.eof = True
                return self.decoder.decode(b"", final=True)
            text = self.decoder.decode(data)
            if text:
                return str(text)
        return ""

    def sniff(self) -> str:
        """"ndjson", "json", "text" or "empty", judged by parsing the start of the input."""
        while True:
            text = self.buf.lstrip(_WS)
            if not text:
                # Only blank space so far: forget it (keeping count of its lines), read on.
                self.skipped_lines += self.buf.count("\n")
                self.buf = self.read()
                if not self.buf:
                    return "empty"
                continue
            verdict = _judge(text, self.eof)
            if verdict is not None:
                return verdict
            chunk = self.read()
            if not chunk:
                return _judge(text, True) or "json"
            self.buf += chunk
            if len(self.buf) > _SNIFF_MAX:
                return "json"

    def lines(self) -> Iterator[str]:
        """The lines (without their line ends), a long line kept in pieces until it ends."""
        parts: list[str] = []
        chunk, self.buf = self.buf, ""
        while True:
            if not chunk:
                chunk = self.read()
                if not chunk:
                    if parts:
                        yield "".join(parts)
                    return
            pieces = chunk.split("\n")
            if len(pieces) > 1:
                parts.append(pieces[0])
                yield "".join(parts)
                parts = []
                yield from pieces[1:-1]
            if pieces[-1]:
                parts.append(pieces[-1])
            chunk = ""


_decoder = json.JSONDecoder()


def _judge(text: str, eof: bool) -> str | None:
    """The format of an input that starts with ``text`` (no leading blanks); None: read more."""
    end = text.find("\n")
    if end >= 0 or eof:
        try:
            value = json.loads(text if end < 0 else text[:end])
        except ValueError:
            pass
        else:
            return "ndjson" if isinstance(value, dict) else (
                "json" if isinstance(value, list) else "text")
    if text[0] not in "[{":
        return "text"
    # A value over several lines (pretty-printed), or a first line longer than what was read:
    # parse the first value (of an array: its first element) to tell JSON from a log line that
    # merely starts with a bracket ("[INFO] ...", "{worker-1} ...").
    i = 0
    if text[0] == "[":
        i = len(text) - len(text[1:].lstrip(_WS))
        if i >= len(text):
            return "json" if eof else None
        if text[i] == "]":
            return "json"
    try:
        _, i = _decoder.raw_decode(text, i)
    except json.JSONDecodeError as exc:
        cut = exc.pos >= len(text.rstrip(_WS)) or exc.msg.startswith("Unterminated string")
        return None if cut and not eof else "text"
    if text[0] == "{":
        return "json"
    rest = text[i:].lstrip(_WS)
    if not rest:
        return "json" if eof else None
    return "json" if rest[0] in ",]" else "text"


_DESCRIBE = {"ndjson": "NDJSON", "json": "JSON", "text": "text lines", "csv": "CSV"}


def iter_events(source: _Input, name: str, fmt: str, counts: _Counts) -> Iterator[dict[str, Any]]:
    """Events from one input in ``fmt`` ("ndjson", "json" or "text")."""
    if fmt == "json":
        yield from _iter_json(source, name, counts)
        return
    if fmt == "csv":
        yield from _iter_csv(source, name, counts)
        return
    lineno = source.skipped_lines
    decode = _decoder.decode
    for line in source.lines():
        lineno += 1
        text = line.rstrip("\r")
        if not text.strip():
            continue
        if fmt == "text":
            yield text_event(text)
            continue
        try:
            obj = decode(text)  # the module's decoder: json.loads builds its call each time
        except ValueError as exc:
            counts.bad += 1
            _err(f"{name}:{lineno}: not JSON ({_json_reason(exc)}); line skipped")
            continue
        if isinstance(obj, dict):
            yield obj
        else:
            counts.bad += 1
            _err(f"{name}:{lineno}: not a JSON object; line skipped")


def _iter_csv(source: _Input, name: str, counts: _Counts) -> Iterator[dict[str, Any]]:
    """CSV with a header line: each row an event of its columns (strings; an empty cell is
    left out). Read a line at a time, so memory stays bounded (a quoted cell may span lines)."""
    import csv

    rows = csv.reader(line + "\n" for line in source.lines())
    header: list[str] | None = None
    for row in rows:
        if not row or not any(cell.strip() for cell in row):
            continue
        if header is None:
            header = [h.strip() for h in row]
            continue
        if len(row) > len(header):
            counts.bad += 1
            _err(f"{name}:{rows.line_num}: {len(row)} cells for {len(header)} columns; "
                 "row skipped")
            continue
        yield {key: cell for key, cell in zip(header, row, strict=False) if key and cell != ""}


def _json_reason(exc: ValueError) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} at column {exc.colno}"
    return str(exc)


def _iter_json(source: _Input, name: str, counts: _Counts) -> Iterator[dict[str, Any]]:
    # JSON values of any layout: arrays (their elements are the events), objects, one after the
    # other. Decoded one value at a time from a bounded, sliding buffer, so memory is bounded by
    # the largest element, not by the file or its longest line.
    buf, source.buf = source.buf, ""
    base_line = source.skipped_lines + 1  # line number of buf[0]
    pos = 0
    in_array = False
    expect_value = allow_close = True
    index = 0

    def more(grow: bool = False) -> bool:
        nonlocal buf, pos, base_line
        pending = len(buf) - pos
        # An element still incomplete past a chunk: read until what is pending has doubled,
        # so a huge element is parsed again only log(n) times, not once per chunk.
        want = pending if grow and pending > _CHUNK else 1
        chunks: list[str] = []
        got = 0
        while got < want:
            chunk = source.read(max(_CHUNK, want - got))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        if not chunks:
            return False
        base_line += buf.count("\n", 0, pos)
        buf = buf[pos:] + "".join(chunks)
        pos = 0
        return True

    def where(at: int) -> str:
        return f"{name}:{base_line + buf.count(chr(10), 0, at)}"

    while True:
        while pos < len(buf) and buf[pos] in _WS:
            pos += 1
        if pos >= len(buf):
            if more():
                continue
            if in_array:
                counts.bad += 1
                _err(f"{where(pos)}: the JSON array ends before its closing ']'; "
                     "the rest of this input is skipped")
            return
        ch = buf[pos]
        if in_array:
            if ch == "]" and allow_close:
                pos += 1
                in_array = False
                continue
            if not expect_value:
                if ch != ",":
                    counts.bad += 1
                    _err(f"{where(pos)}: not JSON (expected ',' or ']' after element {index}); "
                         "the rest of this input is skipped")
                    return
                pos += 1
                expect_value, allow_close = True, False
                continue
        elif ch == "[":
            pos += 1
            in_array, expect_value, allow_close, index = True, True, True, 0
            continue
        try:
            value, end = _decoder.raw_decode(buf, pos)
        except json.JSONDecodeError as exc:
            if len(buf) - pos < _MAX_ELEMENT_CHARS and more(grow=True):
                continue
            counts.bad += 1
            _err(f"{where(exc.pos)}: not JSON ({exc.msg}); the rest of this input is skipped")
            return
        if end >= len(buf) and type(value) in (int, float) and more():
            continue  # a number may go on in the next chunk: decode it again, whole
        at = pos
        pos = end
        if in_array:
            expect_value, allow_close = False, True
        if isinstance(value, dict):
            yield value
        else:
            counts.bad += 1
            what = f"element {index} of the array" if in_array else "a top-level JSON value"
            _err(f"{where(at)}: {what} is not a JSON object; skipped")
        index += 1


def _open_input(path: str, fmt: str) -> tuple[_Input, str, IO[bytes]]:
    """The input, its format (judged when ``fmt`` is "auto") and the binary file to close."""
    raw: IO[bytes]
    if path == "-":
        raw = sys.stdin.buffer
        if sys.stdin.isatty():
            _err("reading from standard input (Ctrl-D to end)")
    else:
        raw = open(path, "rb")  # noqa: SIM115 - closed by the caller
    binary: IO[bytes] = raw
    gz = False
    peek = getattr(raw, "peek", None)
    if peek is not None and peek(2)[:2] == b"\x1f\x8b":
        binary = gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[assignment]
        gz = True
    source = _Input(binary)
    base = path.lower().removesuffix(".gz")
    if fmt == "auto" and base.endswith(".csv"):
        fmt = "csv"  # by its name: CSV's start could pass for text lines
        how_csv = "CSV, by its name"
    else:
        how_csv = ""
    detected = source.sniff() if fmt == "auto" else fmt
    if detected == "empty":
        detected = "ndjson"
        how = "empty"
    else:
        how = how_csv or (_DESCRIBE[detected] + (" (--format)" if fmt != "auto" else ""))
    name = "<stdin>" if path == "-" else path
    _err(f"reading {name} ({'gzip, ' if gz else ''}{how})")
    return source, detected, raw
