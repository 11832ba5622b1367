"""The search syntax of the local service's page and of ``loghandler tail --search``, as APL:
one translation, shared by both, so the query line shows exactly what ran, against the whole
dataset, not the rows on screen.

    declined                 events holding the word anywhere        search "declined"
    "card declined"          the phrase                              search "card declined"
    level:error              a field equal to a value (any case)     where level =~ "error"
    user_id:17               numbers match as numbers or as text     where (user_id == 17 or ...)
    path:/api/*              a prefix                                where path startswith "/api/"
    status>=500              comparisons: > >= < <=                  where status >= 500
    duration_ms > 1000       the same with spaces                    where duration_ms > 1000
    status=500, status!=200  as status:500, -status:200
    -level:debug, -timeout   leave out                               where not(...)

Terms are ANDed. A left-out word is looked for in ``message`` (``search`` cannot be negated).
"""

from __future__ import annotations

import json
import re

__all__ = ["MAX_TERMS", "SearchError", "search_apl"]


_FIELD = re.compile(r"[A-Za-z_@$][\w.@$-]*\Z")
_COMPARE = re.compile(r"([A-Za-z_@$][\w.@$-]*)(>=|<=|>|<)(.+)\Z", re.S)
_EQUALS = re.compile(r"([A-Za-z_@$][\w.@$-]*)(==|=)(.*)\Z", re.S)
_NUMBER = re.compile(r"-?\d+(\.\d+)?\Z")
# At most this many terms: a pasted log line is not a query.
MAX_TERMS = 32


class SearchError(ValueError):
    """A search that cannot be turned into a query; the message says why."""


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        if text[i].isspace():
            i += 1
            continue
        j = i
        token = []
        while j < n and not text[j].isspace():
            if text[j] == '"':
                end = text.find('"', j + 1)
                if end < 0:
                    raise SearchError("a quote is not closed: close it, as in \"card declined\"")
                token.append(text[j:end + 1])
                j = end + 1
            else:
                token.append(text[j])
                j += 1
        out.append("".join(token))
        i = j
    return out


_OPERATORS = (">=", "<=", "!=", "==", ">", "<", "=", ":")


def _joined(tokens: list[str]) -> list[str]:
    """A comparison typed with spaces is one term: ``duration_ms > 1000``,
    ``duration_ms >1000``, ``duration_ms> 1000`` and ``level: error`` read as
    ``duration_ms>1000`` and ``level:error``."""
    out: list[str] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        nxt = tokens[i + 1] if i + 1 < len(tokens) else None
        after = tokens[i + 2] if i + 2 < len(tokens) else None
        if nxt in _OPERATORS and after is not None and _FIELD.match(token.lstrip("-")):
            out.append(token + nxt + after)  # name op value
            i += 3
        elif nxt is not None and token.endswith(_OPERATORS) and _FIELD.match(
                token.lstrip("-").rstrip("><=!:")) and not token.startswith('"'):
            out.append(token + nxt)  # name> value
            i += 2
        elif nxt is not None and nxt.startswith(_OPERATORS[:-1]) and _FIELD.match(
                token.lstrip("-")) and nxt not in _OPERATORS:
            out.append(token + nxt)  # name >value
            i += 2
        else:
            out.append(token)
            i += 1
    return out


def _unquote(value: str) -> str:
    return value[1:-1] if len(value) >= 2 and value[0] == value[-1] == '"' else value


def _string(value: str) -> str:
    return json.dumps(value)  # APL's double-quoted strings take JSON's escapes


def _field(name: str) -> str:
    if _FIELD.match(name):
        return name
    return "['" + name.replace("\\", "\\\\").replace("'", "\\'") + "']"


def _term(token: str) -> tuple[str, bool, str | None]:
    """(the APL condition, whether it is a free-text search term, the term) of one token."""
    eq = _EQUALS.match(token)
    if eq and ":" not in eq.group(1):  # name=value, name==value: as name:value
        token = eq.group(1) + ":" + eq.group(3)
    m = _COMPARE.match(token)
    if m and ":" not in m.group(1):
        name, op, value = m.group(1), m.group(2), _unquote(m.group(3))
        if not _NUMBER.match(value):
            raise SearchError(f"{token!r}: a comparison needs a number, as in status>=500")
        return f"{_field(name)} {op} {value}", False, None
    if ":" in token and not token.startswith('"'):
        name, _, value = token.partition(":")
        value = _unquote(value)
        if not name or not _FIELD.match(name):
            raise SearchError(f"{token!r}: name a field before the colon, as in level:error")
        if value == "":
            return f"isnull({_field(name)})", False, None
        if value.endswith("*") and len(value) > 1:
            return f"{_field(name)} startswith {_string(value[:-1])}", False, None
        if _NUMBER.match(value):
            return (f"({_field(name)} == {value} or {_field(name)} == {_string(value)})",
                    False, None)
        return f"{_field(name)} =~ {_string(value)}", False, None
    text = _unquote(token)
    return f"message contains {_string(text)}", True, text


def search_apl(source: str, text: str, tail: str = "") -> str:
    """The APL for ``text`` (the search syntax above) over ``source`` (``['name']``), with
    ``tail`` (``| sort ... | take N``) after; the source alone for an empty search."""
    tokens = []
    for token in _joined(_tokens(text)):
        ne = re.match(r"(-?)([A-Za-z_@$][\w.@$-]*)!=(.*)\Z", token, re.S)
        # name!=value: leave out name:value
        tokens.append(("" if ne.group(1) else "-") + ne.group(2) + ":" + ne.group(3)
                      if ne else token)
    if len(tokens) > MAX_TERMS:
        raise SearchError(f"at most {MAX_TERMS} terms; narrow the search")
    parts = [source]
    for token in tokens:
        negated = token.startswith("-") and len(token) > 1
        condition, free, term = _term(token[1:] if negated else token)
        if free and not negated:
            parts.append(f"search {_string(term or '')}")
        elif negated:
            parts.append(f"where not({condition})")
        else:
            parts.append(f"where {condition}")
    return " | ".join(parts) + (" " + tail if tail else "")
