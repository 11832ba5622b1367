"""What loghandler prints, and the one rule for all of it: the token never shows.

``register_secret`` remembers each token; ``redact`` scrubs them from any text (a third-party
message or the service's error body may echo one back); ``print_line`` writes a diagnostic line
on stderr, through ``redact``, never raising. The command line writes its lines here too.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

# Tokens known to this process, so any text we print can be scrubbed of them even when a
# third-party message (urllib3, the service's error body) echoes one back.
_SECRETS: set[str] = set()


_SECRETS_ORDERED: tuple[str, ...] = ()


def register_secret(secret: str | None) -> None:
    """Remember a token so that ``redact`` scrubs it from every message from now on."""
    global _SECRETS_ORDERED
    # Very short values would scrub ordinary words; a real token is never that short.
    if isinstance(secret, str) and len(secret) >= 4 and secret not in _SECRETS:
        _SECRETS.add(secret)
        # Longest first, so a token that contains another registered one is removed whole.
        _SECRETS_ORDERED = tuple(sorted(_SECRETS, key=len, reverse=True))


def redact(text: str) -> str:
    """``text`` with every registered token replaced by ``***``."""
    for secret in _SECRETS_ORDERED:
        if secret in text:
            text = text.replace(secret, "***")
    return text


def redact_value(value: Any, _depth: int = 0) -> Any:
    """A copy of a parsed JSON body with every registered token scrubbed from its strings
    (the value itself while no token is registered)."""
    if not _SECRETS_ORDERED:
        return value
    if isinstance(value, str):
        return redact(value)
    if _depth > 32:  # absurd nesting: flatten it rather than let a token through
        return redact(repr(value))
    if isinstance(value, dict):
        return {redact_value(k, _depth + 1): redact_value(v, _depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_value(v, _depth + 1) for v in value]
    return value


# Characters that must never reach a terminal or a log line from text we echo (a service's
# error body, a dataset name, a client's request line): C0 and C1 controls (escape sequences,
# carriage returns and newlines that forge lines), DEL, line and paragraph separators, and the
# bidirectional overrides that reorder what a reader sees.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e"
                     "\u2066-\u2069]")
# The longest line or message we print: a 70,000-character dataset name or a megabyte of error
# body must not become a 140 KB stderr line.
MAX_LINE = 2000


def printable(text: str) -> str:
    """``text`` with every control character escaped (``\\x1b``, ``\\n``, ``\\u202e``)."""
    return _UNSAFE.sub(_escape, text)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 256 else f"\\u{code:04x}"


def clip(text: str, limit: int) -> str:
    """``text``, cut to ``limit`` characters with a "…" when longer."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def shown(name: object, limit: int = 80) -> str:
    """A name (dataset, path) as shown in messages: quoted, escaped, clipped, token scrubbed."""
    return repr(clip(redact(str(name)), limit))


_WS = re.compile(r"\s+")
_TAGS = re.compile(r"<[^>]*>")


def service_message(body: Any) -> str | None:
    """The service's own error text from a JSON error body, if it has one."""
    if isinstance(body, dict):
        for key in ("message", "error", "detail", "msg"):
            value = body.get(key)
            if isinstance(value, str) and value:
                return clip(printable(value), 500)
    return None


def excerpt(text: str, limit: int = 200) -> str:
    """A short one-line excerpt of a non-JSON body (HTML tags and whitespace folded)."""
    text = printable(_WS.sub(" ", _TAGS.sub(" ", text)).strip())
    return clip(text, limit)


def body_detail(body: Any) -> str:
    """": <what the service said>" for a message, or "" when the body says nothing."""
    msg = service_message(body)
    if msg:
        return f": {msg}"
    if isinstance(body, str) and body:
        return f": {excerpt(body)}"
    return ""


# Where print_line's lines go instead of stderr while a caller captures them (the command line
# words its own errors, and prints the engine's lines only when it has not explained them).
_capture: list[str] | None = None


@contextmanager
def captured_lines() -> Iterator[list[str]]:
    """Collect print_line's lines in the yielded list instead of writing them to stderr."""
    global _capture
    previous, _capture = _capture, []
    try:
        yield _capture
    finally:
        _capture = previous


def print_line(line: str) -> None:
    """One diagnostic line on stderr (or to ``captured_lines``), token scrubbed; never raises."""
    captured = _capture
    if captured is not None:
        captured.append(clip(printable(redact(line)), MAX_LINE))
        return
    stderr_line(line)


_write_fd = os.write


def stderr_line(line: str) -> None:
    """One line on stderr, token scrubbed; never raises (stderr may be closed or gone: late in
    interpreter shutdown it is written to file descriptor 2 directly)."""
    try:
        text = clip(printable(redact(line)), MAX_LINE) + "\n"
        stream = sys.stderr or sys.__stderr__
        if stream is not None:
            stream.write(text)
            stream.flush()
        else:
            _write_fd(2, text.encode("utf-8", "replace"))
    except Exception:
        pass
