"""The lean exchange: one ingest POST and its answer over HTTP/1.1, without http.client.

A shipper's request cost about 1.1 million instructions through urllib3 and http.client, most
of it their machinery for any request (the request written header by header, the answer's
headers parsed through ``email.parser``), not the bytes: docs/performance.md. Here the request
is written once (its head, worked out once per path and headers, then ``Content-Length`` and
the body: one ``sendall``), and the answer read by us, bounded at every step: its head (the
status line and at most ``MAX_HEADERS`` headers in ``MAX_HEAD_BYTES``), then its body by
``Content-Length``, chunks, or to the end of the connection, at most ``max_bytes + 1`` bytes.

The connection is still urllib3's: taken from and given back to the client's pool, opened by
urllib3 (TLS verified as for every other request), watched by the watchdog. The client keeps
the deadline, the idle-close re-send and the error messages (``client.py``); this module only
speaks the protocol, and says how it failed by the exception's type.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

__all__ = ["MAX_HEADERS", "MAX_HEAD_BYTES", "Cut", "Headers", "Malformed", "NoAnswer",
           "exchange", "request_head"]

# http.client's own bounds: 100 headers; 64 KiB for the whole head (it bounds each line so).
MAX_HEADERS = 100
MAX_HEAD_BYTES = 64 * 1024
# 1xx answers (100 Continue, 103 Early Hints) skipped before the real one, at most this many.
MAX_INTERIM = 8
_RECV = 64 * 1024


class NoAnswer(ConnectionResetError):
    """The connection ended before any byte of an answer (http.client's RemoteDisconnected)."""


class Malformed(OSError):
    """The answer's head is not HTTP/1.x, or is over its bounds."""


class Cut(OSError):
    """The answer's body ended or broke before its end (its head was read)."""


class Headers(dict[str, str]):
    """An answer's headers, looked up in any case (keys kept in lower case)."""

    __slots__ = ()

    def get(self, key: str, default: Any = None) -> Any:
        return dict.get(self, key.lower(), default)

    def __getitem__(self, key: str) -> str:
        return dict.__getitem__(self, key.lower())

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and dict.__contains__(self, key.lower())


def request_head(method: str, uri: str, host: str, headers: Mapping[str, str]) -> bytes | None:
    """The request's head up to its ``Content-Length`` value (appended per request), or None
    when a header could not be written as it is (CR, LF or non-Latin-1 characters: urllib3's
    way, which refuses them, then says what is wrong)."""
    lines = [f"{method} {uri} HTTP/1.1", f"Host: {host}", "Accept-Encoding: identity"]
    lines.extend(f"{name}: {value}" for name, value in headers.items())
    text = "\r\n".join(lines)
    if "\n" in text.replace("\r\n", "") or "\r" in text.replace("\r\n", ""):
        return None
    try:
        return (text + "\r\nContent-Length: ").encode("latin-1")
    except UnicodeEncodeError:
        return None


class _Reader:
    """Reads a socket through one buffer (the head and the body usually come in one recv)."""

    __slots__ = ("buf", "got", "sock")

    def __init__(self, sock: Any) -> None:
        self.sock = sock
        self.buf = bytearray()
        self.got = 0  # bytes received in all: none means no answer at all

    def fill(self) -> bool:
        chunk = self.sock.recv(_RECV)
        if not chunk:
            return False
        self.got += len(chunk)
        self.buf += chunk
        return True

    def line(self, bound: int, what: str) -> bytes:
        """One line (its CRLF or LF dropped); Cut at the end of the connection."""
        start = 0
        while True:
            end = self.buf.find(b"\n", start)
            if end >= 0:
                line = bytes(self.buf[:end])
                del self.buf[:end + 1]
                return line[:-1] if line.endswith(b"\r") else line
            if len(self.buf) > bound:
                raise Malformed(f"{what} is longer than {bound} bytes")
            start = len(self.buf)
            if not self.fill():
                raise Cut(f"the connection ended within {what}")

    def take(self, n: int) -> bytes:
        while len(self.buf) < n:
            if not self.fill():
                raise Cut(f"the connection ended {n - len(self.buf)} bytes before the body's end")
        data = bytes(self.buf[:n])
        del self.buf[:n]
        return data

    def rest(self, bound: int) -> tuple[bytes, bool]:
        """Up to ``bound`` bytes to the end of the connection; whether it ended there."""
        while len(self.buf) < bound:
            if not self.fill():
                return bytes(self.buf), True
        return bytes(self.buf[:bound]), False


def _head(reader: _Reader) -> tuple[int, bool, Headers]:
    """The status, whether the answer is HTTP/1.1, and its headers."""
    budget = MAX_HEAD_BYTES
    for _ in range(MAX_INTERIM + 1):
        line = None
        try:
            line = reader.line(budget, "the answer's status line")
        except Cut:
            pass
        except ConnectionError as exc:
            if reader.got == 0:
                raise  # reset before any byte of an answer: the client may send it again
            raise Malformed(f"the connection broke within the answer's head ({exc})") from None
        if line is None:
            # Raised here, not in the handler: the client reads the root cause of an error
            # (__context__ too) to tell the service's idle close apart.
            if reader.got == 0:
                raise NoAnswer("the service closed the connection without an answer")
            raise Malformed("the connection ended within the answer's head")
        budget -= len(line) + 2
        parts = line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not (
                len(parts[1]) == 3 and parts[1].isdigit()):
            raise Malformed(f"not an HTTP/1.x status line: {line[:40]!r}")
        status = int(parts[1])
        headers = Headers()
        count = 0
        last = ""
        while True:
            try:
                line = reader.line(budget, "the answer's head")
            except Cut:
                raise Malformed("the connection ended within the answer's head") from None
            budget -= len(line) + 2
            if budget < 0:
                raise Malformed(f"the answer's head is longer than {MAX_HEAD_BYTES} bytes")
            if not line:
                break
            if line[:1] in (b" ", b"\t") and last:  # obsolete folding: continues the last one
                more = line.strip().decode("latin-1")
                headers[last] = f"{dict.__getitem__(headers, last)} {more}"
                continue
            count += 1
            if count > MAX_HEADERS:
                raise Malformed(f"the answer has more than {MAX_HEADERS} headers")
            name, sep, value = line.partition(b":")
            if not sep or not name or name != name.strip():
                raise Malformed(f"not a header line: {line[:40]!r}")
            last = name.decode("latin-1").lower()
            text = value.strip().decode("latin-1")
            old = dict.get(headers, last)
            headers[last] = text if old is None else f"{old}, {text}"
        if status >= 200 or status == 101:
            return status, parts[0] == b"HTTP/1.1", headers
    raise Malformed(f"more than {MAX_INTERIM} interim (1xx) answers")


def _chunks(reader: _Reader, bound: int) -> Iterator[bytes]:
    """A chunked body's data, until its last chunk and trailers (Cut if it ends before)."""
    left = bound
    while True:
        size_line = reader.line(1024, "a chunk's size line")
        try:
            size = int(size_line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise Cut(f"not a chunk size: {size_line[:40]!r}") from None
        if size < 0:
            raise Cut(f"not a chunk size: {size_line[:40]!r}")
        if size == 0:
            for _ in range(MAX_HEADERS + 1):
                if not reader.line(8192, "the body's trailers"):
                    return
            raise Cut("too many trailers after the body")
        if size > left:
            yield reader.take(left)
            return
        left -= size
        yield reader.take(size)
        if reader.line(2, "a chunk's end"):
            raise Cut("a chunk longer than its size")


def _decoded(raw: bytes, encoding: str | None, bound: int) -> bytes:
    """The body decoded as urllib3 decodes it (gzip, deflate), at most ``bound`` bytes."""
    if not encoding or encoding == "identity":
        return raw
    kind = encoding.strip().lower()
    if kind in ("gzip", "x-gzip"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(raw, bound)
    if kind == "deflate":
        try:
            return zlib.decompressobj().decompress(raw, bound)
        except zlib.error:  # raw deflate, without the zlib wrapper
            return zlib.decompressobj(-zlib.MAX_WBITS).decompress(raw, bound)
    return raw  # an encoding urllib3 does not decode either


def exchange(sock: Any, data: bytes, max_bytes: int, max_success_bytes: int | None = None,
             after_write: Callable[[], None] | None = None
             ) -> tuple[int, Headers, bytes, bool, bool]:
    """Write ``data`` (the whole request) on ``sock``, read the answer: (status, headers, body
    of at most ``max_bytes`` bytes (``max_success_bytes`` for a 2xx, when given), whether the
    body was read whole, whether the connection can carry another request).

    ``after_write``: called once the request is written whole, before its answer is read
    (the shipper prepares its next batch while the service works); it must not raise.

    Raises OSError: from ``sendall`` (when no answer follows), ``NoAnswer`` (nothing came
    back), ``Malformed`` (the head), ``Cut`` (the body), a socket time-out."""
    reader = _Reader(sock)
    failed: OSError | None = None
    try:
        sock.sendall(data)
    except (BrokenPipeError, ConnectionResetError) as exc:
        # A service may answer before it reads the whole body (413) and close: its answer is
        # still readable. Without one, the write's own error says what happened.
        failed = exc
    if failed is None:
        if after_write is not None:
            after_write()
        status, http11, headers = _head(reader)
    else:
        try:
            status, http11, headers = _head(reader)
        except OSError:
            answered = False
        else:
            answered = True
        if not answered:
            raise failed
    if max_success_bytes is not None and 200 <= status < 300:
        max_bytes = max_success_bytes
    bound = max_bytes + 1
    reusable = http11 and "close" not in headers.get("connection", "").lower()
    complete = True
    if status in (204, 304) or status < 200:
        raw = b""
    elif "chunked" in headers.get("transfer-encoding", "").lower():
        raw = b"".join(_chunks(reader, bound))
        complete = len(raw) <= max_bytes
    elif (length := headers.get("content-length")) is not None:
        values = {v.strip() for v in length.split(",")}
        if len(values) != 1 or not ((n := values.pop()).isascii() and n.isdigit()):
            raise Cut(f"not a Content-Length: {length[:40]!r}")
        size = int(n)
        raw = reader.take(min(size, bound))
        complete = size <= max_bytes
    else:
        raw, ended = reader.rest(bound)
        reusable = False
        complete = ended and len(raw) <= max_bytes
    if reader.buf:  # bytes after the answer: nothing this connection says can be trusted
        reusable = False
    encoding = headers.get("content-encoding")
    if encoding is not None and raw:
        try:
            raw = _decoded(raw, encoding, bound)
        except zlib.error as exc:
            raise Cut(f"the body is not valid {encoding} ({exc})") from None
        complete = complete and len(raw) <= max_bytes
    return status, headers, raw[:max_bytes], complete, reusable and complete
