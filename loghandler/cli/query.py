"""``loghandler query`` and ``loghandler tail`` (``-f`` follows new events).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from typing import Any

from .._errors import NotFoundError
from ._common import (
    EXIT_OK,
    Failure,
    UsageError,
    _cell,
    _client,
    _err,
    _out,
    _Parser,
)


def register(sub: Any, conn: _Parser) -> dict[str, argparse.ArgumentParser]:
    """Add ``query`` and ``tail`` to the command line."""
    query = sub.add_parser("query", parents=[conn], help="run an APL query and print its rows",
                           description="Run an APL query (POST /v1/datasets/_apl) and print "
                                       "the rows as a table, or one JSON object per line.")
    query.add_argument("apl", metavar="APL", help="the query, as in \"['app'] | where level "
                                                   "== 'error' | take 20\"")
    query.add_argument("--since", metavar="SPAN",
                       help="only events of the last SPAN (30s, 5m, 1h, 2d)")
    query.add_argument("--json", action="store_true", help="one JSON object per line")
    tail = sub.add_parser("tail", parents=[conn], help="show the newest events of a dataset",
                          description="Show the newest events of DATASET, oldest first, one "
                                      "per line; with -f keep following new ones (Ctrl+C "
                                      "stops).")
    tail.add_argument("dataset", metavar="DATASET")
    tail.add_argument("-n", "--lines", type=int, default=20, metavar="N",
                      help="how many of the newest events to show first (default 20)")
    tail.add_argument("-f", "--follow", action="store_true", help="keep following new events")
    tail.add_argument("--interval", type=float, default=1.0, metavar="SECONDS",
                      help="with -f: seconds between polls (default 1)")
    tail.add_argument("--lookback", type=float, default=5.0, metavar="SECONDS",
                      help="with -f: how late an event may arrive and still be shown "
                           "(default 5)")
    tail.add_argument("--json", action="store_true", help="one JSON object per line")
    tail.add_argument("--fields", default=None, metavar="A,B,...",
                      help="only these fields after the message (with --json: only these and "
                           "_time); default: every field but uvicorn's color_message")
    tail.add_argument("--search", default="", metavar="TEXT",
                      help="only matching events, as the web page's search: words, "
                           "\"a phrase\", level:error, status>=500, -level:debug")
    query.set_defaults(func=cmd_query)
    tail.set_defaults(func=cmd_tail)
    return {"query": query, "tail": tail}


_SPAN = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}

_SYSTEM_FIELDS = ("_time", "_sysTime", "_rowId")
# Not shown by tail unless asked for with --fields: the same message with terminal colours
# (uvicorn's records carry it).
_HIDDEN_FIELDS = ("color_message",)

_LEVEL_COLOURS = {"debug": "\x1b[2m", "info": "\x1b[32m", "warning": "\x1b[33m",
                  "warn": "\x1b[33m", "error": "\x1b[31m", "critical": "\x1b[1;31m",
                  "fatal": "\x1b[1;31m"}


def parse_span(text: str) -> float:
    """``30s``, ``5m``, ``1h``, ``2d``, ``500ms`` as seconds; UsageError otherwise."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*", text or "")
    if not m:
        raise UsageError(f"{text!r} is not a time span: use a number and a unit, as in 30s, "
                         "5m, 1h or 2d")
    return float(m.group(1)) * _SPAN[m.group(2)]


def _since(seconds: float) -> str:
    import time

    from .._time import format_epoch

    return format_epoch(time.time() - seconds)


# Control characters from an event must not reach the terminal as such: an escape sequence
# in a logged value could rewrite the screen. They are shown escaped instead.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def _text(value: Any) -> str:
    if not isinstance(value, str):
        value = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return _CONTROL.sub(lambda m: repr(m.group(0))[1:-1], value)


def _dataset_names(client: Any) -> list[str] | None:
    """The service's datasets (``GET /v1/datasets``), or None when it cannot say."""
    from .._errors import Error

    try:
        answer = client.request("GET", "/v1/datasets")
    except Error:
        return None
    if not isinstance(answer, list):
        return None
    return sorted(d["name"] for d in answer if isinstance(d, dict) and isinstance(d.get("name"),
                                                                                   str))


def _missing_dataset(client: Any, dataset: str, where: str = "the name") -> str | None:
    """A line saying ``dataset`` does not exist, naming those that do; None when it exists
    (or the service cannot tell us). ``where``: what the user typed it as."""
    names = _dataset_names(client)
    if names is None or dataset in names:
        return None
    listed = ", ".join(_text(n) for n in names[:5]) if names else "none yet"
    more = f" and {len(names) - 5} more" if len(names) > 5 else ""
    return (f"dataset {_text(dataset)!r} does not exist: check {where} (the datasets here: "
            f"{listed}{more}), or create it with loghandler datasets create {_text(dataset)}")


_SOURCES = re.compile(r"\[\s*(?:'((?:[^'\\]|\\.)*)'|\"((?:[^\"\\]|\\.)*)\")\s*\]")


# `level == error`: a bare word on the right of a comparison is a field (usually missing, so
# nothing matches), which looks like a query that finds nothing. Words APL reads otherwise:
_APL_WORDS = frozenset({"true", "false", "null", "now", "ago", "datetime", "dynamic", "int",
                        "long", "real", "string", "bool", "timespan", "and", "or", "not"})
_BARE = re.compile(r"([A-Za-z_][\w.]*)\s*(==|!=|=~|!~)\s*([A-Za-z_][\w.]*)\b(?!\s*\()")


def _bare_comparison(apl: str) -> tuple[str, str, str] | None:
    """(field, operator, word) of the first comparison with a bare word on its right."""
    text = re.sub(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"", "''", apl)  # not in strings
    for m in _BARE.finditer(text):
        if m.group(3).lower() not in _APL_WORDS:
            return m.group(1), m.group(2), m.group(3)
    return None


def cmd_query(args: argparse.Namespace) -> int:
    start = _since(parse_span(args.since)) if args.since else None
    with _client(args) as client:
        try:
            rows = client.query(args.apl, start=start)
        except NotFoundError:
            for m in _SOURCES.finditer(args.apl):
                missing = _missing_dataset(client, m.group(1) or m.group(2) or "",
                                           "the name in the query")
                if missing:
                    raise Failure(missing) from None
            raise
        if not rows:
            # No rows from a mistyped dataset look like no rows from an empty one: tell them
            # apart, and name the datasets that exist.
            for m in _SOURCES.finditer(args.apl):
                missing = _missing_dataset(client, m.group(1) or m.group(2) or "",
                                           "the name in the query")
                if missing:
                    raise Failure(missing)
    if args.json:
        for row in rows:
            _out(json.dumps(row, ensure_ascii=False))
        return EXIT_OK
    if not rows:
        _out("no rows")
        bare = _bare_comparison(args.apl)
        if bare is not None:
            left, op, word = bare
            _err(f"note: in `{left} {op} {word}`, {word} is read as a field name, not as text; "
                 f"to compare with the text, quote it: {left} {op} '{word}'")
        return EXIT_OK
    columns: dict[str, None] = {}
    for row in rows:
        for key in row:
            columns.setdefault(key)
    if "_time" in columns and "_sysTime" in columns:
        # Whole events: their _sysTime (and _rowId) would crowd the table (--json has them).
        columns.pop("_sysTime")
        columns.pop("_rowId", None)
    names = list(columns)
    table = [[_text(n) for n in names]] + [
        [_cell("null" if r.get(k) is None else _text(r.get(k)), 48) for k in names]
        for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(names))]
    for line in table:
        _out("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip())
    _out(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    _row_limit_hint(args.apl, len(rows))
    return EXIT_OK


# The rows a query gets when it names no limit of its own (the service's default).
DEFAULT_ROW_LIMIT = 1000
_OWN_LIMIT = re.compile(r"\|\s*(?:take|limit|top|summarize|count)\b", re.IGNORECASE)


def _row_limit_hint(apl: str, count: int) -> None:
    """Say so when the rows stopped at the service's default limit: more may match."""
    if count == DEFAULT_ROW_LIMIT and not _OWN_LIMIT.search(apl):
        _err(f"the query stopped at the service's default of {DEFAULT_ROW_LIMIT:,} rows; more "
             "may match: add | take N (e.g. | take 10000), | count to count them, or narrow "
             "it with --since or a where")


def format_event_line(event: dict[str, Any], colour: bool = False,
                      fields: list[str] | None = None) -> str:
    """One line for ``tail``: time, level, message, then the other fields as key=value.

    The level is ``level``, else OpenTelemetry's ``severity``; the message is ``message``, else
    structlog's ``event``, else ``msg``, else OpenTelemetry's ``body``; an ``exception`` object
    (``{type, message, stacktrace}``, or its dotted fields) follows on its own lines, as a
    traceback reads."""
    level_key = "level" if event.get("level") else "severity"
    level = str(event.get(level_key, "") or "")
    key = next((k for k in ("message", "event", "msg", "body") if isinstance(event.get(k), str)),
               None)
    message = event.get(key, "") if key else ""
    exc = event.get("exception")
    # Nested as shipped, or as dotted fields (exception.stacktrace) as the service answers.
    trace = exc.get("stacktrace") if isinstance(exc, dict) else event.get(
        "exception.stacktrace")
    traced = isinstance(trace, str)
    skip = {"level", level_key, key} | ({"exception"} if traced else set())
    if fields is not None:
        rest = " ".join(f"{k}={_text(event[k])}" for k in fields if k in event and k not in skip)
    else:
        rest = " ".join(f"{k}={_text(v)}" for k, v in event.items()
                        if k not in _SYSTEM_FIELDS and k not in skip and k not in _HIDDEN_FIELDS
                        and not (traced and k.startswith("exception.")))
    shown = f"{_text(level.upper()):<8}"
    if colour and level.lower() in _LEVEL_COLOURS:
        shown = f"{_LEVEL_COLOURS[level.lower()]}{shown}\x1b[0m"
    text = " ".join(message.split()) if isinstance(message, str) else message
    line = f"{_text(event.get('_time', ''))}  {shown} {_text(text)}"
    line = f"{line}  {rest}" if rest else line
    if isinstance(trace, str) and trace:
        line += "".join(f"\n    {_text(part)}" for part in trace.splitlines())
    return line


def _apl_name(dataset: str) -> str:
    return "['" + dataset.replace("\\", "\\\\").replace("'", "\\'") + "']"


class _Follower:
    """New events of a dataset, by ``_time`` then ``_rowId``: none twice, none skipped.

    Events do not arrive in ``_time`` order: each process ships its batches a moment after
    the events happened. So each poll looks back ``lookback`` seconds before the newest time
    shown, and recognises what it already showed by row id (or, from a service that sends
    none, by content); an event that arrives later than that is missed. Pages of ``PAGE``
    rows chain by time, so a burst larger than a page is read whole.
    """

    PAGE = 2000

    def __init__(self, client: Any, dataset: str, lookback: float = 5.0,
                 search: str = "") -> None:
        from .._time import format_micros as format_time
        from .._time import parse_micros as parse_time

        self._client = client
        self._source = _apl_name(dataset)
        if search:
            # The page's search, the same translation (a pipeline the polls append to).
            from .._search import SearchError, search_apl

            try:
                self._source = search_apl(self._source, search)
            except SearchError as exc:
                raise UsageError(f"--search: {exc}") from None
        self._parse_time = parse_time
        self._format_time = format_time
        self._lookback = int(lookback * 1_000_000)
        self._newest: int | None = None  # the newest _time shown, epoch microseconds
        self._seen: dict[str, int] = {}  # key -> _time, of the events in the look-back window

    def _query(self, apl: str) -> list[dict[str, Any]]:
        # Up to a day ahead: a query's end defaults to now, and an event a skewed clock stamped
        # in the future would never show.
        import time

        rows: list[dict[str, Any]] = self._client.query(
            apl, end=self._format_time(time.time_ns() // 1000 + 86_400_000_000))
        return rows

    @staticmethod
    def _key(event: dict[str, Any]) -> str:
        row_id = event.get("_rowId")
        return row_id if isinstance(row_id, str) and row_id else json.dumps(event,
                                                                            sort_keys=True)

    def _remember(self, events: list[dict[str, Any]]) -> None:
        for event in events:
            t = self._parse_time(event.get("_time"))
            if t is None:
                continue
            self._seen[self._key(event)] = t
            if self._newest is None or t > self._newest:
                self._newest = t

    def _forget_old(self) -> None:
        if self._newest is not None:
            horizon = self._newest - self._lookback
            self._seen = {k: t for k, t in self._seen.items() if t >= horizon}

    def newest(self, n: int) -> list[dict[str, Any]]:
        """The newest ``n`` events, oldest first; what is older counts as seen."""
        # What the look-back window holds now is old news, shown or not; then the newest n.
        self._remember(self._query(f"{self._source} | sort by _time desc, _rowId desc "
                                   f"| take 1"))
        self._scan()
        self._forget_old()
        if n <= 0:
            return []
        rows = self._query(f"{self._source} | sort by _time desc, _rowId desc | take {n}")
        rows.reverse()
        self._remember(rows)
        return rows

    def poll(self) -> list[dict[str, Any]]:
        """The events not shown yet, in order of ``_time`` then ``_rowId``."""
        out = self._scan()
        self._forget_old()
        return out

    def _scan(self) -> list[dict[str, Any]]:
        since = None if self._newest is None else self._newest - self._lookback
        out: list[dict[str, Any]] = []
        page = self.PAGE
        while True:
            where = "" if since is None else (
                f" | where _time >= datetime('{self._format_time(since)}')")
            rows = self._query(f"{self._source}{where} | sort by _time asc, _rowId asc "
                               f"| take {page}")
            fresh = [r for r in rows if self._key(r) not in self._seen]
            self._remember(fresh)
            out.extend(fresh)
            if len(rows) < page:
                return out
            last = self._parse_time(rows[-1].get("_time"))
            if last is None:
                return out  # a service whose _time we cannot read: no way to page on
            if last == since:
                page *= 2  # a whole page at one instant: ask for more of it
                if page > 64 * self.PAGE:
                    return out
            since = last


def cmd_tail(args: argparse.Namespace) -> int:
    if args.lines < 0:
        raise UsageError("-n must be 0 or more")
    if not args.interval > 0:
        raise UsageError("--interval must be a positive number of seconds")
    if not args.lookback >= 0:
        raise UsageError("--lookback must be 0 or more seconds")
    colour = (not args.json and sys.stdout.isatty() and not os.environ.get("NO_COLOR"))
    fields = None
    if args.fields is not None:
        fields = [f.strip() for f in args.fields.split(",") if f.strip()]
        if not fields:
            raise UsageError("--fields needs field names, e.g. --fields status,path")
    kept = None if fields is None else {"_time", *fields}

    def show(events: list[dict[str, Any]]) -> None:
        for row in events:
            # A query's rows have every field of the result, null where an event has none.
            event = {k: v for k, v in row.items() if v is not None}
            if args.json:
                if kept is not None:
                    event = {k: v for k, v in event.items() if k in kept}
                _out(json.dumps(event, ensure_ascii=False))
            else:
                _out(format_event_line(event, colour, fields))

    if args.follow:
        _stop_on_sigterm()
    try:
        return _tail(args, show)
    except _Terminated:  # SIGTERM at any point: the follow ends as Ctrl+C ends it
        return EXIT_OK


def _tail(args: argparse.Namespace, show: Any) -> int:
    import time

    from .._errors import TransportError

    with _client(args) as client:
        follower = _Follower(client, args.dataset, args.lookback, args.search)
        try:
            first = follower.newest(args.lines)
        except NotFoundError:
            first = []  # the real service's answer for a dataset that does not exist
        show(first)
        if not first:
            missing = _missing_dataset(client, args.dataset)
            if missing and not args.follow:
                raise Failure(missing)
            if missing:
                _err(f"{missing}; waiting for its first events (Ctrl+C stops)")
        if not args.follow:
            return EXIT_OK
        lost = False
        try:
            while True:
                time.sleep(args.interval)
                try:
                    events = follower.poll()
                except NotFoundError:
                    continue  # not created yet: said above
                except TransportError as exc:
                    # The service restarted, or the network hiccupped: keep following.
                    if not lost:
                        _err(f"lost the service ({exc}); reconnecting every "
                             f"{args.interval:g} s (Ctrl+C stops)")
                        lost = True
                    continue
                if lost:
                    _err("reconnected; following again")
                    lost = False
                show(events)
        except KeyboardInterrupt:  # Ctrl+C, or SIGTERM (_Terminated)
            return EXIT_OK


class _Terminated(KeyboardInterrupt):
    """SIGTERM while following: leave at once, as on Ctrl+C (a sleep or a request is cut
    short)."""


def _stop_on_sigterm() -> None:
    import signal
    import threading

    def stop(signum: int, frame: Any) -> None:
        raise _Terminated

    if threading.current_thread() is threading.main_thread():
        try:
            signal.signal(signal.SIGTERM, stop)
        except (ValueError, OSError):
            pass
