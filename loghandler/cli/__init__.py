"""The ``loghandler`` command: serve, ingest, views.

Exit status: 0 success, 1 service error (or something not ingested), 2 usage or configuration
error. Every error is one line on stderr, written by ``output.stderr_line`` (which scrubs the
token) like every other line loghandler prints.
``import loghandler`` never imports this module; tqdm is imported only for a progress bar.
"""

from __future__ import annotations

import argparse
import codecs
import gzip
import json
import os
import re
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import IO, Any, NoReturn

from .. import __version__
from .._errors import ConfigurationError, Error
from .._output import clip, printable, register_secret, stderr_line

EXIT_OK, EXIT_SERVICE, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """A usage or configuration problem: exit status 2."""


class Failure(Exception):
    """A service problem already explained: exit status 1."""


def _err(message: str) -> None:
    stderr_line(f"loghandler: {message}")


def _out(line: str = "") -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


class _Parser(argparse.ArgumentParser):
    # The parsers of the commands ("ingest", "views list", ...), for messages about their options.
    commands: dict[str, argparse.ArgumentParser]

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


def build_parser() -> _Parser:
    conn = _connection_options()
    parser = _Parser(prog="loghandler", parents=[conn],
                     description="Ship events to a dataset, manage views, or run the local "
                                 "service.")
    parser.add_argument("--version", action="version", version=f"loghandler {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    serve = sub.add_parser("serve", help="run the local service (for development and tests)",
                           description="Run the local service: ingest and views (list, get, "
                                       "create, update, delete), on loopback, data in SQLite.")
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
    serve.add_argument("--dataset", action="append", metavar="NAME", dest="datasets",
                       help="a dataset that exists (repeatable); others answer 404 like the "
                            "real service (default: any name, created on first ingest)")
    serve.add_argument("--rate-limit", type=int, default=None, metavar="N",
                       help="requests per minute; past it 429 with X-RateLimit-* headers "
                            "(default: no limit)")

    ingest = sub.add_parser(
        "ingest", parents=[conn], help="ship NDJSON, JSON or text lines to a dataset",
        usage="loghandler ingest [-d DATASET | DATASET] [FILE ...] [options]",
        description="Ship events to a dataset. Each FILE (or stdin) is NDJSON (one object per "
                    "line), JSON (an array of objects, or objects, in any layout) or plain text "
                    "(each line becomes {\"message\": line}); gzip is decompressed. The "
                    "dataset is -d NAME, else the first argument when it is not a file "
                    "(an existing path, one with a /, or a name ending in "
                    f"{', '.join(_INPUT_SUFFIXES)}), else LOGHANDLER_DATASET.")
    ingest.add_argument("inputs", nargs="*", metavar="FILE",
                        help="input files (gzip or not); - or none: stdin")
    ingest.add_argument("-d", "--dataset", default=None,
                        help="dataset to ship to (default: LOGHANDLER_DATASET)")
    ingest.add_argument("--format", choices=FORMATS, default="auto",
                        help="input format (default auto: judged by parsing the start)")
    ingest.add_argument("--batch-size", type=int, default=1000, help="events per request")
    ingest.add_argument("--max-retries", type=int, default=5,
                        help="retries of a failed request (default 5); a refused connection "
                             "at the start is retried twice within 1.5 s, then ingest stops")
    ingest.add_argument("--no-progress", action="store_true", help="no progress bar")
    ingest.add_argument("--field", action="append", type=_field_arg, default=[],
                        metavar="KEY=VALUE", help="add this field (a string) to every event "
                        "that lacks it; repeatable")

    views = sub.add_parser("views", help="list, show, create, update or delete views")
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
    vget = vsub.add_parser("get", parents=[conn], help="show one view")
    vget.add_argument("id", metavar="ID")
    vget.add_argument("--json", action="store_true", help="print the service's JSON")
    vnew = vsub.add_parser("create", parents=[conn], help="create a view",
                           description="Create a view; the service gives it its id.")
    vnew.add_argument("--name", required=True)
    vnew.add_argument("--apl-query", required=True)
    vnew.add_argument("--datasets", metavar="A,B", help="comma-separated dataset names")
    vnew.add_argument("--description")
    vnew.add_argument("--json", action="store_true", help="print the result as JSON")
    vdel = vsub.add_parser("delete", parents=[conn], help="delete a view")
    vdel.add_argument("id", metavar="ID")
    query, tail = _add_query_commands(sub, conn)
    parser.commands = {"serve": serve, "ingest": ingest, "views": views, "views list": vlist,
                       "views update": vup, "views get": vget, "views create": vnew,
                       "views delete": vdel, "query": query, "tail": tail}
    return parser


def _unknown_arguments(parser: _Parser, args: argparse.Namespace,
                       extras: list[str]) -> NoReturn:
    """One line on what was not understood, a suggestion, and the usage of that command."""
    import difflib

    name = " ".join(n for n in (args.command, getattr(args, "views_command", None)) if n)
    command = parser.commands.get(name, parser)
    options = [e for e in extras if e.startswith("-") and e != "-"]
    if options:
        given = options[0].split("=", 1)[0]
        known = [o for a in command._actions for o in a.option_strings if o.startswith("--")]
        close = difflib.get_close_matches(given, known, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]}?)" if close else f" (see: {command.prog} --help)"
        _err(f"unknown option {given}{hint}")
    else:
        _err(f"unexpected argument{'s' if len(extras) > 1 else ''}: {' '.join(extras)} "
             f"(see: {command.prog} --help)")
    sys.stderr.write(command.format_usage())
    raise SystemExit(EXIT_USAGE)


def _add_query_commands(sub: Any, conn: _Parser) -> tuple[_Parser, _Parser]:
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
    return query, tail


def _client(args: argparse.Namespace) -> Any:
    from .._client import Client

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
                args.inputs = [*args.inputs, *extras]
            else:
                _unknown_arguments(parser, args, extras)
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
            if args.views_command == "get":
                return cmd_views_get(args)
            if args.views_command == "create":
                return cmd_views_create(args)
            if args.views_command == "delete":
                return cmd_views_delete(args)
            parser.error("views needs an action: list, get, create, update or delete")
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
        _err(_refused_token(exc) or str(exc))
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

    from .._config import check_token
    from .._local.service import make_server

    token = getattr(args, "token", None) or os.environ.get("LOGHANDLER_TOKEN") or None
    generated = token is None
    if token is None:
        token = secrets.token_urlsafe(18)
    check_token(token, "--token or LOGHANDLER_TOKEN")
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port must be between 0 and 65535, not {args.port}")
    if args.max_body_bytes is not None and args.max_body_bytes < 1:
        raise UsageError("--max-body-bytes must be a positive number of bytes")
    if args.rate_limit is not None and args.rate_limit < 1:
        raise UsageError("--rate-limit must be a positive number of requests per minute")
    if args.datasets is not None and not all(d.strip() for d in args.datasets):
        raise UsageError("--dataset must name a dataset")
    seed = _read_views_file(args.views) if args.views else None

    print_lock = threading.Lock()

    def log_request(rec: Any) -> None:
        if rec.status < 400 and rec.path in ("/v1/datasets/_apl", "/v1/datasets"):
            return  # the web page reads several times a second: only failed reads are news

        # Everything here comes from the client: escaped and clipped, so that a request cannot
        # forge log lines, send terminal escapes or print 100 KB (output.printable).
        def safe(value: Any, limit: int = 200) -> str:
            return clip(printable(str(value)), limit)

        where = f" dataset={safe(rec.dataset)}" if rec.dataset is not None else ""
        events = f" events={rec.events}" if rec.dataset is not None else ""
        if rec.failed:
            events += f" failed={rec.failed}"
        why = f" ({safe(rec.error, 500)})" if rec.error else ""
        with print_lock:
            try:
                _out(f"{safe(rec.method, 20)} {safe(rec.path, 300)}{where}{events} -> "
                     f"{rec.status}{why}")
            except (OSError, ValueError):
                pass

    from .._local.service import HttpError

    try:
        server = make_server(args.host, args.port, tokens=[token], db=args.db, views=seed,
                             max_body_bytes=args.max_body_bytes,
                             on_request=None if args.quiet else log_request,
                             datasets=args.datasets, rate_limit=args.rate_limit)
    except HttpError as exc:
        raise UsageError(f"{args.views}: {exc.message}") from None
    except OSError as exc:
        raise UsageError(f"cannot listen on {args.host}:{args.port}: "
                         f"{exc.strerror or exc}") from None
    except Exception as exc:  # sqlite3.Error for an unusable --db file
        raise UsageError(f"cannot open the local service ({args.db or 'memory'}): "
                         f"{exc}") from None

    from .._config import is_loopback

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1},
                              name="loghandler-serve", daemon=True)
    thread.start()
    try:
        url = server.url
        if not is_loopback(args.host):
            _err(f"warning: serving on {args.host}, not loopback: the service is reachable from "
                 "other machines; anyone who can reach it and knows the token can read and "
                 "write its data, over plain http")
        where = args.db or "memory"
        _out(f"loghandler local service listening on {url} (data: {where}; Ctrl+C to stop)")
        if generated:
            # Our own throw-away token for a server we just started: printing it is the point.
            _out(f"token: {token}")
            _out(f"  export LOGHANDLER_URL={url} LOGHANDLER_TOKEN={token}")
        else:
            _out(f"  export LOGHANDLER_URL={url}  (token: the one you passed)")
        if not is_loopback(args.host):
            port = server.server_address[1]
            others = _machine_addresses() if server.wildcard else [args.host]
            for addr in others:
                host = f"[{addr}]" if ":" in addr else addr
                _out(f"  from other machines: http://{host}:{port} (clients there need "
                     "--allow-http / allow_http=True)")
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


def _machine_addresses() -> list[str]:
    """This machine's own non-loopback addresses (for the 0.0.0.0 notice); [] if unknown."""
    import socket

    found: list[str] = []

    def look() -> None:
        try:
            infos = socket.getaddrinfo(socket.gethostname(), None, type=socket.SOCK_STREAM)
        except OSError:
            return
        for info in infos:
            addr = str(info[4][0])
            if addr not in found and not addr.startswith(("127.", "::1", "fe80:")):
                found.append(addr)

    # The host name's lookup may go to a slow resolver: the notice is not worth a wait.
    t = threading.Thread(target=look, daemon=True, name="loghandler-serve-addresses")
    t.start()
    t.join(1.0)
    return list(found)


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


FORMATS = ("auto", "ndjson", "json", "text")
# A first argument that exists, contains a path separator or ends like an input file is never a
# dataset name: `ingest events.ndjson` must not ship stdin to a dataset called "events.ndjson".
_INPUT_SUFFIXES = (".ndjson", ".jsonl", ".json", ".log", ".txt", ".gz", ".csv", ".out")
_CHUNK = 256 * 1024  # characters read at a time: memory stays bounded whatever the layout
_SNIFF_MAX = 1024 * 1024  # at most this much is looked at to tell the format
_MAX_ELEMENT_CHARS = 64 * 1024 * 1024  # one JSON value larger than this is refused
_WS = " \t\r\n\ufeff"
# Refused connections: retries before ingest gives up, and the waits between them. A one-shot
# command should say at once that nothing listens (the library itself keeps its patience).
CONNECT_RETRY_DELAYS = (0.5, 1.0)


def _looks_like_input(arg: str) -> bool:
    return (arg == "-" or os.path.lexists(arg) or "/" in arg or os.sep in arg
            or arg.lower().endswith(_INPUT_SUFFIXES))


def _dataset_and_files(args: argparse.Namespace) -> tuple[str, list[str]]:
    """The dataset and the inputs, by a rule that is never ambiguous (README "Command line")."""
    inputs = list(args.inputs)
    if args.dataset is not None:
        dataset = args.dataset
    elif inputs and not _looks_like_input(inputs[0]):
        dataset = inputs.pop(0)
    else:
        dataset = os.environ.get("LOGHANDLER_DATASET") or ""
        if not dataset:
            if inputs:
                raise UsageError(f"{inputs[0]} is an input file, not a dataset: give the dataset "
                                 "with -d NAME or LOGHANDLER_DATASET")
            raise UsageError("no dataset: give it with -d NAME or set LOGHANDLER_DATASET")
    if not dataset.strip():
        raise UsageError("the dataset name (-d or LOGHANDLER_DATASET) must not be empty")
    return dataset, inputs or ["-"]


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


_DESCRIBE = {"ndjson": "NDJSON", "json": "JSON", "text": "text lines"}


def iter_events(source: _Input, name: str, fmt: str, counts: _Counts) -> Iterator[dict[str, Any]]:
    """Events from one input in ``fmt`` ("ndjson", "json" or "text")."""
    if fmt == "json":
        yield from _iter_json(source, name, counts)
        return
    lineno = source.skipped_lines
    for line in source.lines():
        lineno += 1
        text = line.rstrip("\r")
        if not text.strip():
            continue
        if fmt == "text":
            yield {"message": text}
            continue
        try:
            obj = json.loads(text)
        except ValueError as exc:
            counts.bad += 1
            _err(f"{name}:{lineno}: not JSON ({_json_reason(exc)}); line skipped")
            continue
        if isinstance(obj, dict):
            yield obj
        else:
            counts.bad += 1
            _err(f"{name}:{lineno}: not a JSON object; line skipped")


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
    detected = source.sniff() if fmt == "auto" else fmt
    if detected == "empty":
        detected = "ndjson"
        how = "empty"
    else:
        how = _DESCRIBE[detected] + (" (--format)" if fmt != "auto" else "")
    name = "<stdin>" if path == "-" else path
    _err(f"reading {name} ({'gzip, ' if gz else ''}{how})")
    return source, detected, raw


def _check_reachable(url: str) -> None:
    """Fail fast, with one line, when nothing listens at ``url`` (a short, stated budget)."""
    import socket
    import time
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    started = time.monotonic()
    tries = 0
    while True:
        tries += 1
        try:
            socket.create_connection((host, port), timeout=2.0).close()
            return
        except ConnectionRefusedError:
            if tries > len(CONNECT_RETRY_DELAYS):
                took = time.monotonic() - started
                raise Failure(f"nothing is listening at {url} (connection refused, {tries} tries "
                              f"in {took:.1f} s): start the service, or check --url or "
                              "LOGHANDLER_URL") from None
            time.sleep(CONNECT_RETRY_DELAYS[tries - 1])
        except socket.gaierror as exc:
            raise Failure(f"cannot find the host {host!r} of {url} ({exc.strerror}): check "
                          "--url or LOGHANDLER_URL") from None
        except OSError as exc:
            raise Failure(f"cannot connect to {url} ({exc.strerror or exc}): check --url or "
                          "LOGHANDLER_URL, and that the service is up") from None


def _refused_token(exc: BaseException, url: str | None = None) -> str | None:
    """A 401/403 in the command line's words (the library's speaks of arguments), else None."""
    from .._errors import AuthenticationError

    if not isinstance(exc, AuthenticationError):
        return None
    at = f" at {url}" if url else ""
    return (f"the service{at} refused the token (HTTP {exc.status}): check --token or "
            "LOGHANDLER_TOKEN (a personal access token also needs --org-id)")


def _explain(exc: BaseException, dataset: str, url: str) -> str:
    """The ingest failure in the user's words: what happened and what to do, one line."""
    from .._errors import ApiError, NotFoundError, TransportError

    refused = _refused_token(exc, url)
    if refused:
        return refused
    if isinstance(exc, NotFoundError):
        return (f"dataset {dataset!r} does not exist at {url} (HTTP 404): create it in the "
                "service first, or check the name given with -d or LOGHANDLER_DATASET")
    if isinstance(exc, TransportError):
        return f"{exc}; the service stopped answering: check that it is up, then run again"
    if isinstance(exc, ApiError):
        return f"{exc}; run again later, or with more --max-retries"
    return str(exc)


def _field_arg(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, not {text!r}")
    return key.strip(), value


def cmd_ingest(args: argparse.Namespace) -> int:
    from .._engine.shipper import Shipper
    from .._errors import ApiError, PartialIngestError
    from .._output import captured_lines

    dataset, files = _dataset_and_files(args)
    for path in files:
        if path == "-":
            continue
        if os.path.isdir(path):
            raise UsageError(f"cannot read {path}: is a directory (give the files in it)")
        if not os.path.isfile(path):
            raise UsageError(f"cannot read {path}: no such file")
    if args.batch_size < 1:
        raise UsageError("--batch-size must be at least 1")
    if args.max_retries < 0:
        raise UsageError("--max-retries must be 0 or more")
    client = _client(args)
    _check_reachable(client.url)
    counts = _Counts()
    stop_reading = threading.Event()
    shippers: list[Shipper] = []

    def on_error(exc: BaseException) -> None:
        # Runs on the flusher thread. A bad event (400), a too large one (413) or events the
        # service turned down in its ingest status cost those events only; anything else
        # (token, dataset, service down) would fail every batch after it: stop reading, and
        # begin closing so a submit blocked on the full queue returns.
        if isinstance(exc, PartialIngestError) or (
            isinstance(exc, ApiError) and exc.status in (400, 413)
        ):
            return
        counts.fatal = counts.fatal or exc
        stop_reading.set()
        for s in shippers:
            s.close(0.5)

    with captured_lines() as engine_lines:
        shipper = Shipper(
            client, dataset, batch_size=args.batch_size, flush_interval=0.2,
            max_queue_size=max(10 * args.batch_size, 10_000), overflow="block",
            block_timeout=600.0, shutdown_timeout=30.0, max_retries=args.max_retries,
            on_error=on_error, fields=dict(args.field) or None,
            # Moving existing data, not logging: it arrives as it is in the files (no host of
            # the machine that happens to run the command, nothing rewritten).
            identity=False, scrub=False,
        )
        shippers.append(shipper)
        bar = _progress_bar(args, dataset)
        try:
            for path in files:
                if stop_reading.is_set():
                    break
                _ingest_one(path, args.format, shipper, counts, stop_reading, bar)
        finally:
            shipper.close(2.0 if stop_reading.is_set() else None)
            if bar is not None:
                bar.update(counts.read % 500)
                bar.close()
    if counts.fatal is not None:
        # Said in the user's words, once; the engine's lines say the same in the library's.
        _err(_explain(counts.fatal, dataset, client.url))
    else:
        for line in engine_lines:
            _err(line.removeprefix("loghandler: "))
    return _summarize(dataset, counts, shipper.stats())


def _ingest_one(path: str, fmt: str, shipper: Any, counts: _Counts,
                stop_reading: threading.Event, bar: Any) -> None:
    name = "<stdin>" if path == "-" else path
    try:
        source, detected, raw = _open_input(path, fmt)
    except OSError as exc:
        counts.bad += 1
        _err(f"cannot read {name}: {exc.strerror or exc}")
        return
    try:
        for event in iter_events(source, name, detected, counts):
            counts.read += 1
            shipper.submit(event)
            if bar is not None and counts.read % 500 == 0:
                bar.update(500)
            if stop_reading.is_set():
                break
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        counts.bad += 1
        _err(f"cannot read {name}: {getattr(exc, 'strerror', None) or exc}")
    finally:
        if path != "-":
            raw.close()


def _summarize(dataset: str, counts: _Counts, st: Any) -> int:
    # The reason of a service refusal is on stderr already (the engine's line, once).
    rejected = st.failed_rejected + st.dropped_too_large + st.failed_by_service
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


def _progress_bar(args: argparse.Namespace, dataset: str) -> Any:
    if args.no_progress or not sys.stderr.isatty():
        return None
    try:
        from tqdm import tqdm  # type: ignore[import-untyped,unused-ignore]
    except ImportError:  # the bar is a nicety: install loghandler[cli] to get it
        return None
    return tqdm(unit=" events", unit_scale=True, desc=f"ingest {dataset}", leave=False)


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
    from .._views import FIELDS, View

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
        updated: View = client.views.update(args.id, **changes)
    if args.json:
        _out(json.dumps(updated.to_dict(), indent=2, ensure_ascii=False))
    else:
        _out(f"updated view {updated.id}:")
        _print_view(updated)
    return EXIT_OK


def _show_view(view: Any, as_json: bool, title: str) -> None:
    if as_json:
        _out(json.dumps(view.to_dict(), indent=2, ensure_ascii=False))
    else:
        _out(title)
        _print_view(view)


def cmd_views_get(args: argparse.Namespace) -> int:
    with _client(args) as client:
        view = client.views.get(args.id)
    _show_view(view, args.json, f"view {view.id}:")
    return EXIT_OK


def cmd_views_create(args: argparse.Namespace) -> int:
    from .._views import View

    if not args.name.strip() or not args.apl_query.strip():
        raise UsageError("--name and --apl-query must not be empty")
    datasets = [d.strip() for d in (args.datasets or "").split(",") if d.strip()]
    view = View(name=args.name, apl_query=args.apl_query, datasets=datasets,
                description=args.description or "")
    with _client(args) as client:
        created = client.views.create(view)
    _show_view(created, args.json, f"created view {created.id or '(no id returned)'}:")
    return EXIT_OK


def cmd_views_delete(args: argparse.Namespace) -> int:
    with _client(args) as client:
        client.views.delete(args.id)
    _out(f"deleted view {args.id}")
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
        from .._time import format_micros as format_time
        from .._time import parse_micros as parse_time

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
