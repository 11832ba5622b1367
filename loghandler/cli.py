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
    ingest.add_argument("--field", action="append", type=_field_arg, default=[],
                        metavar="KEY=VALUE", help="add this field (a string) to every event "
                        "that lacks it; repeatable")

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
    return parser


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


def _field_arg(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, not {text!r}")
    return key.strip(), value


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
        on_error=on_error, fields=dict(args.field) or None,
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


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
