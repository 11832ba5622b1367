"""The ``loghandler`` command: serve, ingest, views.

Exit status: 0 success, 1 service error (or something not ingested), 2 usage or configuration
error. Every error is one line on stderr, passed through ``redact`` so the token never shows.
``import loghandler`` never imports this module; tqdm is imported only for a progress bar.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import IO, Any, NoReturn

from . import __version__
from .errors import ConfigurationError, Error, redact, register_secret

EXIT_OK, EXIT_SERVICE, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """A usage or configuration problem: exit status 2."""


class Failure(Exception):
    """A service problem already explained: exit status 1."""


def _err(message: str) -> None:
    try:
        sys.stderr.write(redact(f"loghandler: {message}") + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def _out(line: str = "") -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line, not argparse's usage block plus the error.
        _err(f"{message} (see: {self.prog} --help)")
        raise SystemExit(EXIT_USAGE)


# --------------------------------------------------------------------------- arguments

def _connection_options() -> _Parser:
    # SUPPRESS: the options work before or after the command without one erasing the other.
    p = _Parser(add_help=False)
    g = p.add_argument_group("connection (default: the LOGHANDLER_* environment variables)")
    g.add_argument("--url", default=argparse.SUPPRESS, help="base address (LOGHANDLER_URL)")
    g.add_argument("--token", default=argparse.SUPPRESS,
                   help="token (LOGHANDLER_TOKEN; prefer the variable: flags show in ps)")
    g.add_argument("--org-id", default=argparse.SUPPRESS, help="organization id "
                   "(LOGHANDLER_ORG_ID), needed with a personal access token")
    g.add_argument("--region", default=argparse.SUPPRESS, help="us or eu (LOGHANDLER_REGION)")
    g.add_argument("--allow-http", action="store_true", default=argparse.SUPPRESS,
                   help="allow plain http:// to a host other than loopback")
    return p


def build_parser() -> argparse.ArgumentParser:
    conn = _connection_options()
    parser = _Parser(prog="loghandler", parents=[conn],
                     description="Ship events to a dataset, manage views, or run the local "
                                 "service.")
    parser.add_argument("--version", action="version", version=f"loghandler {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    serve = sub.add_parser("serve", help="run the local service (for development and tests)",
                           description="Run the local service: ingest, list and update views, "
                                       "on loopback, data in SQLite.")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8080, help="port (default 8080; 0: any)")
    serve.add_argument("--db", metavar="FILE", help="SQLite file to keep data across restarts "
                                                    "(default: in memory)")
    serve.add_argument("--token", default=argparse.SUPPRESS, help="the token to accept "
                       "(default: LOGHANDLER_TOKEN, else a random one, printed)")
    serve.add_argument("--views", metavar="FILE", help="JSON file with a list of views to seed")
    serve.add_argument("--max-body-bytes", type=int, default=None, metavar="N",
                       help="largest request body accepted (default 10 MiB); 413 above")
    serve.add_argument("--quiet", action="store_true", help="no line per request")

    ingest = sub.add_parser("ingest", parents=[conn], help="ship NDJSON, a JSON array or text "
                            "lines to a dataset",
                            description="Ship events to DATASET. Each FILE (or stdin) is a JSON "
                            "array, NDJSON (one object per line), or plain text (each line "
                            "becomes {\"message\": line}).")
    ingest.add_argument("dataset", metavar="DATASET")
    ingest.add_argument("files", nargs="*", metavar="FILE", help="input files; - or none: stdin")
    ingest.add_argument("--batch-size", type=int, default=1000, help="events per request")
    ingest.add_argument("--max-retries", type=int, default=5,
                        help="retries of a failed request (default 5)")
    ingest.add_argument("--no-progress", action="store_true", help="no progress bar")

    views = sub.add_parser("views", help="list or update views")
    vsub = views.add_subparsers(dest="views_command", metavar="ACTION", parser_class=_Parser)
    vlist = vsub.add_parser("list", parents=[conn], help="list the views")
    vlist.add_argument("--json", action="store_true", help="print the service's JSON")
    vup = vsub.add_parser("update", parents=[conn], help="update a view",
                          description="Update a view: fields not given keep their value.")
    vup.add_argument("id", metavar="ID")
    vup.add_argument("--name")
    vup.add_argument("--apl-query")
    vup.add_argument("--description")
    vup.add_argument("--datasets", metavar="A,B", help="comma-separated dataset names")
    vup.add_argument("--shared-by-org")
    vup.add_argument("--shared-by-org-name")
    vup.add_argument("--from-json", metavar="FILE",
                     help="view fields as the service's JSON object (- for stdin); flags win")
    vup.add_argument("--json", action="store_true", help="print the result as JSON")
    _add_query_commands(sub, conn)
    return parser


def _add_query_commands(sub: Any, conn: _Parser) -> None:
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


def _client(args: argparse.Namespace) -> Any:
    from .client import Client

    token = getattr(args, "token", None)
    register_secret(token)
    return Client(token, org_id=getattr(args, "org_id", None), url=getattr(args, "url", None),
                  region=getattr(args, "region", None),
                  allow_http=bool(getattr(args, "allow_http", False)))


# --------------------------------------------------------------------------- main

def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = build_parser()
    try:
        args, extras = parser.parse_known_args(argv)
        if extras:
            # argparse cannot put files after an option back into `ingest DATASET FILE...`
            # (`ingest ds --token X a.log`): they come back as extras; only those are allowed.
            if args.command == "ingest" and not any(e.startswith("-") and e != "-"
                                                    for e in extras):
                args.files = [*args.files, *extras]
            else:
                parser.error(f"unrecognized arguments: {' '.join(extras)}")
        register_secret(getattr(args, "token", None))
        if args.command == "serve":
            return cmd_serve(args)
        if args.command == "ingest":
            return cmd_ingest(args)
        if args.command == "views":
            if args.views_command == "list":
                return cmd_views_list(args)
            if args.views_command == "update":
                return cmd_views_update(args)
            parser.error("views needs an action: list or update")
        if args.command == "query":
            return cmd_query(args)
        if args.command == "tail":
            return cmd_tail(args)
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    except (UsageError, ConfigurationError) as exc:
        _err(str(exc))
        return EXIT_USAGE
    except Failure as exc:
        if str(exc):
            _err(str(exc))
        return EXIT_SERVICE
    except Error as exc:
        _err(str(exc))
        return EXIT_SERVICE
    except KeyboardInterrupt:
        _err("interrupted")
        return 130
    except BrokenPipeError:
        # `loghandler views list | head`: the reader left; not an error worth a traceback.
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silence the exit-time flush
        except OSError:
            pass
        return EXIT_OK
    except Exception as exc:  # never a traceback: one line, redacted
        _err(f"unexpected error: {type(exc).__name__}: {exc}")
        return EXIT_SERVICE


# --------------------------------------------------------------------------- serve

def cmd_serve(args: argparse.Namespace) -> int:
    import secrets

    from .service import make_server

    token = getattr(args, "token", None) or os.environ.get("LOGHANDLER_TOKEN") or None
    generated = token is None
    if token is None:
        token = secrets.token_urlsafe(18)
    if any(c.isspace() or ord(c) < 32 for c in token):
        raise UsageError("the token (--token or LOGHANDLER_TOKEN) contains whitespace or "
                         "control characters")
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port must be between 0 and 65535, not {args.port}")
    if args.max_body_bytes is not None and args.max_body_bytes < 1:
        raise UsageError("--max-body-bytes must be a positive number of bytes")
    seed = _read_views_file(args.views) if args.views else None

    print_lock = threading.Lock()

    def log_request(rec: Any) -> None:
        if rec.status < 400 and rec.path in ("/v1/datasets/_apl", "/v1/datasets"):
            return  # the web page reads several times a second: only failed reads are news
        where = f" dataset={rec.dataset}" if rec.dataset is not None else ""
        events = f" events={rec.events}" if rec.dataset is not None else ""
        why = f" ({rec.error})" if rec.error else ""
        with print_lock:
            try:
                _out(f"{rec.method} {rec.path}{where}{events} -> {rec.status}{why}")
            except (OSError, ValueError):
                pass

    from .service import HttpError

    try:
        server = make_server(args.host, args.port, tokens=[token], db=args.db, views=seed,
                             max_body_bytes=args.max_body_bytes,
                             on_request=None if args.quiet else log_request)
    except HttpError as exc:
        raise UsageError(f"{args.views}: {exc.message}") from None
    except OSError as exc:
        raise UsageError(f"cannot listen on {args.host}:{args.port}: "
                         f"{exc.strerror or exc}") from None
    except Exception as exc:  # sqlite3.Error for an unusable --db file
        raise UsageError(f"cannot open the local service ({args.db or 'memory'}): "
                         f"{exc}") from None

    from .config import is_loopback

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1},
                              name="loghandler-serve", daemon=True)
    thread.start()
    try:
        url = server.url
        if not is_loopback(args.host):
            _err(f"warning: serving on {args.host}, not loopback: anyone who can reach it "
                 "and knows the token can read and write its data, over plain http")
        where = args.db or "memory"
        _out(f"loghandler local service listening on {url} (data: {where}; Ctrl+C to stop)")
        if generated:
            # Our own throw-away token for a server we just started: printing it is the point.
            _out(f"token: {token}")
            _out(f"  export LOGHANDLER_URL={url} LOGHANDLER_TOKEN={token}")
        else:
            _out(f"  export LOGHANDLER_URL={url}  (token: the one you passed)")
        # The token rides in the fragment, which the browser never sends to the server.
        from urllib.parse import quote

        shown = quote(token, safe="-_.~") if generated else "<your token>"
        _out(f"web page: {url}/#token={shown}")
        while not stop.wait(0.5):
            pass
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
        server.store.close()
    with print_lock:
        _out("stopped")
    return EXIT_OK


def _load_json_file(path: str, flag: str) -> Any:
    """The JSON in ``path`` ("-": stdin), or a UsageError naming the flag."""
    try:
        if path == "-":
            return json.load(sys.stdin)
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as exc:
        raise UsageError(f"cannot read {flag} {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise UsageError(f"{flag} {path} is not valid JSON: {exc}") from None


def _read_views_file(path: str) -> list[dict[str, Any]]:
    data = _load_json_file(path, "--views")
    if isinstance(data, dict) and isinstance(data.get("views"), list):
        data = data["views"]
    if not isinstance(data, list) or not all(isinstance(v, dict) for v in data):
        raise UsageError(f"--views {path} must hold a JSON list of view objects")
    return data


# --------------------------------------------------------------------------- ingest

@dataclass
class _Counts:
    read: int = 0
    bad: int = 0
    fatal: BaseException | None = None


_MAX_ELEMENT_CHARS = 64 * 1024 * 1024  # one JSON array element larger than this is refused


def _open_text(path: str) -> IO[str]:
    if path == "-":
        return io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace")
    return open(path, encoding="utf-8", errors="replace")


def iter_events(stream: IO[str], name: str, counts: _Counts) -> Iterator[dict[str, Any]]:
    """Events from one input, whatever its format, reading it line by line (or in chunks)."""
    first = ""
    lineno = 0
    for line in stream:
        lineno += 1
        if line.strip():
            first = line
            break
    else:
        return
    if first.lstrip().startswith("["):
        yield from _iter_array(stream, first, lineno, name, counts)
        return
    json_lines = first.lstrip().startswith("{")
    line = first
    while True:
        text = line.rstrip("\r\n")
        if text.strip():
            if json_lines:
                try:
                    obj = json.loads(text)
                except ValueError as exc:
                    counts.bad += 1
                    _err(f"{name}:{lineno}: not JSON ({exc}); skipped")
                else:
                    if isinstance(obj, dict):
                        yield obj
                    else:
                        counts.bad += 1
                        _err(f"{name}:{lineno}: not a JSON object; skipped")
            else:
                yield {"message": text}
        line = stream.readline()
        if not line:
            return
        lineno += 1


def _iter_array(stream: IO[str], first: str, first_line: int, name: str,
                counts: _Counts) -> Iterator[dict[str, Any]]:
    # Streaming: decode one element at a time from a sliding buffer, so memory is bounded by the
    # largest element, not the file.
    decoder = json.JSONDecoder()
    buf = first[first.index("[") + 1:]
    base_line = first_line  # line number of buf[0]
    pos = 0
    eof = False
    index = 0
    expect_value = True  # after '[' or ','
    allow_close = True  # ']' is fine right after '[' or after a value

    def more() -> bool:
        nonlocal buf, pos, base_line, eof
        if eof:
            return False
        chunk = stream.read(256 * 1024)
        if not chunk:
            eof = True
            return False
        base_line += buf.count("\n", 0, pos)
        buf = buf[pos:] + chunk
        pos = 0
        return True

    def where(at: int) -> str:
        return f"{name}:{base_line + buf.count(chr(10), 0, at)}"

    while True:
        while pos < len(buf) and buf[pos] in " \t\r\n":
            pos += 1
        if pos >= len(buf):
            if not more():
                counts.bad += 1
                _err(f"{where(pos)}: the JSON array ends before its closing ']'; "
                     "the rest of this file is skipped")
                return
            continue
        ch = buf[pos]
        if ch == "]" and allow_close:
            return
        if not expect_value:
            if ch != ",":
                counts.bad += 1
                _err(f"{where(pos)}: not JSON (expected ',' or ']' after element {index}); "
                     "the rest of this file is skipped")
                return
            pos += 1
            expect_value, allow_close = True, False
            continue
        try:
            value, end = decoder.raw_decode(buf, pos)
        except ValueError as exc:
            if more() and len(buf) < _MAX_ELEMENT_CHARS:
                continue
            counts.bad += 1
            _err(f"{where(pos)}: not JSON ({exc.args[0].split(':')[0]}); "
                 "the rest of this file is skipped")
            return
        if end >= len(buf) and not eof and more():
            continue  # a number may go on in the next chunk: decode it again, whole
        at = pos
        pos = end
        expect_value, allow_close = False, True
        if isinstance(value, dict):
            yield value
        else:
            counts.bad += 1
            _err(f"{where(at)}: element {index} of the array is not a JSON object; skipped")
        index += 1


def cmd_ingest(args: argparse.Namespace) -> int:
    from .errors import ApiError
    from .shipper import Shipper

    files = args.files or ["-"]
    for path in files:
        if path != "-" and not os.path.isfile(path):
            raise UsageError(f"cannot read {path}: no such file")
    if args.batch_size < 1:
        raise UsageError("--batch-size must be at least 1")
    if args.max_retries < 0:
        raise UsageError("--max-retries must be 0 or more")
    if not args.dataset.strip():
        raise UsageError("DATASET must not be empty")
    client = _client(args)
    counts = _Counts()
    stop_reading = threading.Event()
    shippers: list[Shipper] = []

    def on_error(exc: BaseException) -> None:
        # Runs on the flusher thread. A bad event (400) or a too large one (413) costs that
        # event only; anything else (token, dataset, service down) would fail every batch after
        # it: stop reading, and begin closing so a submit blocked on the full queue returns.
        if isinstance(exc, ApiError) and exc.status in (400, 413):
            return
        counts.fatal = counts.fatal or exc
        stop_reading.set()
        for s in shippers:
            s.close(0.5)

    shipper = Shipper(
        client, args.dataset, batch_size=args.batch_size, flush_interval=0.2,
        max_queue_size=max(10 * args.batch_size, 10_000), overflow="block",
        block_timeout=600.0, shutdown_timeout=30.0, max_retries=args.max_retries,
        on_error=on_error,
    )
    shippers.append(shipper)
    bar = _progress_bar(args)
    try:
        for path in files:
            if stop_reading.is_set():
                break
            name = "<stdin>" if path == "-" else path
            try:
                stream = _open_text(path)
            except OSError as exc:
                counts.bad += 1
                _err(f"cannot read {name}: {exc.strerror or exc}")
                continue
            try:
                for event in iter_events(stream, name, counts):
                    counts.read += 1
                    shipper.submit(event)
                    if bar is not None and counts.read % 500 == 0:
                        bar.update(500)
                    if stop_reading.is_set():
                        break
            except OSError as exc:
                counts.bad += 1
                _err(f"cannot read {name}: {exc.strerror or exc}")
            finally:
                if path != "-":
                    stream.close()
    finally:
        shipper.close(2.0 if stop_reading.is_set() else None)
        if bar is not None:
            bar.update(counts.read % 500)
            bar.close()
    st = shipper.stats()
    return _summarize(args.dataset, counts, st)


def _summarize(dataset: str, counts: _Counts, st: Any) -> int:
    # The engine has already printed the reason of a service failure on stderr (once).
    rejected = st.failed_rejected + st.dropped_too_large
    undelivered = counts.read - st.delivered - rejected
    parts = [f"{counts.read} events read", f"{st.delivered} delivered to {dataset!r}"]
    if rejected:
        parts.append(f"{rejected} rejected by the service")
    if undelivered:
        parts.append(f"{undelivered} not delivered")
    if counts.bad:
        parts.append(f"{counts.bad} bad input line(s) skipped")
    _out(", ".join(parts))
    ok = st.delivered == counts.read and not counts.bad and counts.fatal is None
    return EXIT_OK if ok else EXIT_SERVICE


def _progress_bar(args: argparse.Namespace) -> Any:
    if args.no_progress or not sys.stderr.isatty():
        return None
    try:
        from tqdm import tqdm  # type: ignore[import-untyped,unused-ignore]
    except ImportError:  # the bar is a nicety: install loghandler[cli] to get it
        return None
    return tqdm(unit=" events", unit_scale=True, desc=f"ingest {args.dataset}", leave=False)


# --------------------------------------------------------------------------- views

def cmd_views_list(args: argparse.Namespace) -> int:
    with _client(args) as client:
        views = client.views.list()
    if args.json:
        _out(json.dumps([v.to_dict() for v in views], indent=2, ensure_ascii=False))
        return EXIT_OK
    if not views:
        _out("no views")
        return EXIT_OK
    rows = [("ID", "NAME", "DATASETS", "QUERY")] + [
        (v.id or "-", _cell(v.name, 30), _cell(", ".join(v.datasets), 30),
         _cell(v.apl_query, 60)) for v in views]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for r in rows:
        _out("  ".join(c.ljust(w) for c, w in zip(r[:3], widths, strict=True)) + "  " + r[3])
    return EXIT_OK


def _cell(text: str, width: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"


_FLAG_FIELDS = ("name", "apl_query", "description", "shared_by_org", "shared_by_org_name")


def cmd_views_update(args: argparse.Namespace) -> int:
    import dataclasses

    from .views import FIELDS, View

    changes: dict[str, Any] = {}
    if args.from_json:
        changes.update(_read_view_json(args.from_json, FIELDS))
    for name in _FLAG_FIELDS:
        value = getattr(args, name)
        if value is not None:
            changes[name] = value
    if args.datasets is not None:
        changes["datasets"] = [d.strip() for d in args.datasets.split(",") if d.strip()]
    if not changes:
        raise UsageError("nothing to update: give --name, --apl-query, --description, "
                         "--datasets, ... or --from-json FILE")
    with _client(args) as client:
        current = client.views.get(args.id)
        updated: View = client.views.update(args.id, dataclasses.replace(current, **changes))
    if args.json:
        _out(json.dumps(updated.to_dict(), indent=2, ensure_ascii=False))
    else:
        _out(f"updated view {updated.id}:")
        _print_view(updated)
    return EXIT_OK


def _read_view_json(path: str, fields: dict[str, str]) -> dict[str, Any]:
    data = _load_json_file(path, "--from-json")
    if not isinstance(data, dict):
        raise UsageError(f"--from-json {path} must hold one JSON object (a view)")
    by_json = {js: py for py, js in fields.items()}
    changes: dict[str, Any] = {}
    for key, value in data.items():
        if key == "id":
            continue
        py = by_json.get(key)
        if py is None:
            raise UsageError(f"--from-json {path}: unknown view field {key!r}; the fields are "
                             f"{', '.join(fields.values())}")
        ok = (isinstance(value, list) and all(isinstance(d, str) for d in value)
              if py == "datasets" else isinstance(value, str))
        if not ok:
            kind = "a list of strings" if py == "datasets" else "a string"
            raise UsageError(f"--from-json {path}: {key} must be {kind}")
        changes[py] = value
    return changes


def _print_view(view: Any) -> None:
    for label, value in (("name", view.name), ("datasets", ", ".join(view.datasets)),
                         ("apl query", view.apl_query), ("description", view.description),
                         ("shared by org", view.shared_by_org),
                         ("shared by org name", view.shared_by_org_name)):
        _out(f"  {label + ':':<20}{value}")


# --------------------------------------------------------------------------- query, tail

_SPAN = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
_SYSTEM_FIELDS = ("_time", "_sysTime", "_rowId")
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
    import datetime as dt

    start = dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=seconds)
    return start.isoformat().replace("+00:00", "Z")


# Control characters from an event must not reach the terminal as such: an escape sequence
# in a logged value could rewrite the screen. They are shown escaped instead.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def _text(value: Any) -> str:
    if not isinstance(value, str):
        value = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return _CONTROL.sub(lambda m: repr(m.group(0))[1:-1], value)


def cmd_query(args: argparse.Namespace) -> int:
    start = _since(parse_span(args.since)) if args.since else None
    with _client(args) as client:
        rows = client.query(args.apl, start=start)
    if args.json:
        for row in rows:
            _out(json.dumps(row, ensure_ascii=False))
        return EXIT_OK
    if not rows:
        _out("no rows")
        return EXIT_OK
    columns: dict[str, None] = {}
    for row in rows:
        for key in row:
            columns.setdefault(key)
    if all(name in columns for name in _SYSTEM_FIELDS):
        # Whole events: their _sysTime and _rowId would crowd the table (--json has them).
        columns.pop("_sysTime")
        columns.pop("_rowId")
    names = list(columns)
    table = [[_text(n) for n in names]] + [
        [_cell("" if r.get(k) is None else _text(r.get(k)), 48) for k in names] for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(names))]
    for line in table:
        _out("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip())
    _out(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return EXIT_OK


def format_event_line(event: dict[str, Any], colour: bool = False) -> str:
    """One line for ``tail``: time, level, message, then the other fields as key=value."""
    level = str(event.get("level", "") or "")
    message = event.get("message", event.get("msg", ""))
    rest = " ".join(f"{k}={_text(v)}" for k, v in event.items()
                    if k not in _SYSTEM_FIELDS and k not in ("level", "message", "msg"))
    shown = f"{_text(level.upper()):<8}"
    if colour and level.lower() in _LEVEL_COLOURS:
        shown = f"{_LEVEL_COLOURS[level.lower()]}{shown}\x1b[0m"
    text = " ".join(message.split()) if isinstance(message, str) else message
    line = f"{_text(event.get('_time', ''))}  {shown} {_text(text)}"
    return f"{line}  {rest}" if rest else line


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

    def __init__(self, client: Any, dataset: str, lookback: float = 5.0) -> None:
        from .apl import format_time, parse_time

        self._client = client
        self._source = _apl_name(dataset)
        self._parse_time = parse_time
        self._format_time = format_time
        self._lookback = int(lookback * 1_000_000)
        self._newest: int | None = None  # the newest _time shown, epoch microseconds
        self._seen: dict[str, int] = {}  # key -> _time, of the events in the look-back window

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
        self._remember(self._client.query(f"{self._source} | sort by _time desc, _rowId desc "
                                          f"| take 1"))
        self._scan()
        self._forget_old()
        if n <= 0:
            return []
        rows = self._client.query(f"{self._source} | sort by _time desc, _rowId desc "
                                  f"| take {n}")
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
            rows = self._client.query(f"{self._source}{where} | sort by _time asc, _rowId asc "
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

    def show(events: list[dict[str, Any]]) -> None:
        for row in events:
            # A query's rows have every field of the result, null where an event has none.
            event = {k: v for k, v in row.items() if v is not None}
            _out(json.dumps(event, ensure_ascii=False) if args.json
                 else format_event_line(event, colour))

    import time

    with _client(args) as client:
        follower = _Follower(client, args.dataset, args.lookback)
        show(follower.newest(args.lines))
        if not args.follow:
            return EXIT_OK
        try:
            while True:
                time.sleep(args.interval)
                show(follower.poll())
        except KeyboardInterrupt:
            return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
