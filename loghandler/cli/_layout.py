"""``ingest --timestamp-format``: a strftime format (``%Y-%m-%d %H:%M:%S``), as Python users
write one, translated to the Go layout the service reads (``2006-01-02 15:04:05``).

A Go layout has no escapes: any text in it that looks like part of the reference time (``Mon
Jan 2 15:04:05 -0700 MST 2006``: digits, ``Jan``, ``Mon``, ``MST``, ``PM``) is read as that
part. So a strftime format whose literal text holds such a thing cannot be said as a layout,
and is refused with the reason rather than sent to mean something else.
"""

from __future__ import annotations

import re

__all__ = ["LayoutError", "to_go_layout"]

# strftime directive -> Go layout element. Only directives with an exact Go counterpart that
# the service parses; the others are refused by name. glibc's "%-d" (no padding) forms map to
# Go's unpadded elements.
_DIRECTIVES = {
    "Y": "2006", "y": "06", "m": "01", "-m": "1", "d": "02", "-d": "2", "e": "_2",
    "H": "15", "-H": "15", "I": "03", "-I": "3", "M": "04", "-M": "4", "S": "05", "-S": "5",
    "p": "PM", "b": "Jan", "h": "Jan", "B": "January", "a": "Mon", "A": "Monday",
    "z": "-0700", ":z": "-07:00", "Z": "MST",
    "F": "2006-01-02", "T": "15:04:05", "R": "15:04", "D": "01/02/06",
}
_DIRECTIVE = re.compile(r"%(-?[A-Za-z]|:z|%)")
# Literal text the service would read as part of a time.
_READ_AS_TIME = re.compile(r"[0-9]|Jan|Mon|MST|PM|pm")
# Java / moment.js spellings, a common first guess.
_OTHER_SPELLING = re.compile(r"yyyy|YYYY|HH:mm|MM/dd|dd/MM")


class LayoutError(ValueError):
    """A --timestamp-format the service could not be given: the message says why."""


def to_go_layout(text: str) -> tuple[str, bool]:
    """(the Go layout for ``text``, whether ``text`` was a strftime format).

    ``text`` holding a ``%`` directive is read as strftime; else as a Go layout, passed on as
    it is.
    """
    if not _DIRECTIVE.search(text):
        if _OTHER_SPELLING.search(text):
            raise LayoutError(f"--timestamp-format {text!r} is neither a strftime format "
                              "('%Y-%m-%d %H:%M:%S') nor a Go layout ('2006-01-02 15:04:05'): "
                              "write it as one of those")
        return text, False
    out: list[str] = []
    pos = 0
    for m in _DIRECTIVE.finditer(text):
        _literal(text[pos:m.start()], text, out)
        code = m.group(1)
        if code == "%":
            out.append("%")
        elif code == "f":
            # Go writes a fraction as part of the seconds: ".000000" right after them.
            seconds = out[-2] if len(out) > 1 else ""
            if not (out[-1:] in ([","], ["."]) and (seconds == "5" or seconds.endswith("05"))):
                raise LayoutError(f"--timestamp-format {text!r}: %f must follow the seconds "
                                  "and a dot or comma ('%S.%f'), as the service reads fractions")
            out[-1] += "000000"
        elif code in _DIRECTIVES:
            out.append(_DIRECTIVES[code])
        else:
            raise LayoutError(f"--timestamp-format {text!r}: %{code} has no equivalent in the "
                              "service's layout; use %Y %m %d %H %M %S %f %z (or a Go layout)")
        pos = m.end()
    _literal(text[pos:], text, out)
    return "".join(out), True


def _literal(part: str, text: str, out: list[str]) -> None:
    found = _READ_AS_TIME.search(part)
    if found:
        raise LayoutError(f"--timestamp-format {text!r}: the text {found.group()!r} would be "
                          "read as part of a time by the service's layout; leave it out")
    out.extend(part)  # one character each, so that %f can find the dot before it
