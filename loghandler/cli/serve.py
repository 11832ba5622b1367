"""``loghandler serve``: the local service in the foreground (it imports the local service,
and only it does).
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
from typing import Any

from .._output import clip, printable
from ._common import (
    EXIT_OK,
    UsageError,
    _err,
    _load_json_file,
    _out,
    _Parser,
)


def _token_file(db: str | None) -> str | None:
    """Where the token made up for ``--db FILE`` is kept: ``FILE.token``; None for memory."""
    if not db or db == ":memory:" or db.startswith("file:"):
        return None
    return db + ".token"


def _kept_token(path: str) -> str | None:
    """The token kept at ``path`` (made private again if its mode let others read it), or
    None when there is none or it cannot be read."""
    import stat

    try:
        with open(path, encoding="utf-8") as f:
            token = f.read(512).strip()
        if os.stat(path).st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            os.chmod(path, 0o600)
    except OSError:
        return None
    return token or None


def _keep_token(path: str, token: str) -> bool:
    """Write the token to ``path``, readable by its owner only (mode 600). False (and one
    line) when it cannot be written: the token then lasts this run only."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(token + "\n")
        os.chmod(path, 0o600)
        return True
    except OSError as exc:
        _err(f"cannot keep the token in {path} ({exc.strerror or exc}): the next start makes "
             "up another; pass --token to keep one")
        return False


def cmd_serve(args: argparse.Namespace) -> int:
    import secrets

    from .._local.service import make_server
    from .._wire.settings import check_token

    token = getattr(args, "token", None) or os.environ.get("LOGHANDLER_TOKEN") or None
    from_env = not getattr(args, "token", None) and token is not None
    generated = token is None
    kept_in = None
    if token is None:
        # With a --db file, the made-up token is kept beside it: a restart on the same data
        # takes the same token, so the clients pointed at it keep working.
        kept_in = _token_file(args.db)
        token = _kept_token(kept_in) if kept_in else None
        if token is None:
            token = secrets.token_urlsafe(18)
            if kept_in and not _keep_token(kept_in, token):
                kept_in = None
    check_token(token, "--token or LOGHANDLER_TOKEN")
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port must be between 0 and 65535, not {args.port}")
    if args.max_body_bytes is not None and args.max_body_bytes < 1:
        raise UsageError("--max-body-bytes must be a positive number of bytes")
    if args.rate_limit is not None and args.rate_limit < 1:
        raise UsageError("--rate-limit must be a positive number of requests per minute")
    if args.ingest_limit is not None and args.ingest_limit < 1:
        raise UsageError("--ingest-limit must be a positive number of bytes")
    if args.max_fields < 1:
        raise UsageError("--max-fields must be a positive number")
    if args.max_connections is not None and args.max_connections < 1:
        raise UsageError("--max-connections must be a positive number")
    for flag, value in (("--request-timeout", args.request_timeout),
                        ("--idle-timeout", args.idle_timeout)):
        if not value > 0:
            raise UsageError(f"{flag} must be a positive number of seconds")
    if args.datasets is not None and not all(d.strip() for d in args.datasets):
        raise UsageError("--dataset must name a dataset")
    # The datasets created at start: --dataset, else LOGHANDLER_DATASET (the dataset the
    # application ships to), so that the quickstart is two commands.
    names = args.datasets if args.datasets is not None else [
        d for d in [os.environ.get("LOGHANDLER_DATASET", "").strip()] if d]
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
                             datasets=names, create_datasets=args.create_datasets,
                             rate_limit=args.rate_limit,
                             ingest_limit=args.ingest_limit, max_fields=args.max_fields,
                             max_connections=args.max_connections,
                             request_timeout=args.request_timeout,
                             idle_timeout=args.idle_timeout)
    except HttpError as exc:
        raise UsageError(f"{args.views}: {exc.message}") from None
    except OSError as exc:
        import errno

        hint = (": another program uses that port; pick another with --port, or --port 0 for "
                "any free one" if exc.errno == errno.EADDRINUSE else "")
        raise UsageError(f"cannot listen on {args.host}:{args.port}: "
                         f"{exc.strerror or exc}{hint}") from None
    except Exception as exc:  # sqlite3.Error for an unusable --db file
        raise UsageError(f"cannot open the local service ({args.db or 'memory'}): "
                         f"{exc}") from None

    from .._wire.settings import is_loopback

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1},
                              name="loghandler-serve", daemon=True)
    thread.start()
    try:
        url = server.url
        if not is_loopback(args.host):
            _err(f"warning: serving on {args.host}, reachable from other machines over plain "
                 "http: use --host 127.0.0.1 unless others must reach it")
        where = args.db or "memory"
        existing = [d["name"] for d in server.store.dataset_list()]
        if args.create_datasets:
            datasets = "any dataset is created by its first ingest"
        else:
            datasets = (f"datasets: {', '.join(clip(printable(n), 60) for n in existing[:5])}"
                        f"{' ...' if len(existing) > 5 else ''}; " if existing else
                        "no datasets yet; ")
            datasets += ("create others with `loghandler datasets create NAME` (or --dataset "
                         "NAME, --create-datasets)")
        _out(f"loghandler local service listening on {url} (data: {where}; {datasets}; "
             "Ctrl+C to stop)")
        if generated:
            # Our own throw-away token for a server we just started: printing it is the point.
            _out(f"token: {token}" + (f" (kept in {kept_in} for the next start)" if kept_in
                                      else ""))
            _out(f"  export LOGHANDLER_URL={url} LOGHANDLER_TOKEN={token}")
        elif from_env:
            # The token is the user's and is never printed: every line still pastes as it is.
            _out(f"  export LOGHANDLER_URL={url}    # LOGHANDLER_TOKEN is set already")
        else:
            _out(f"  export LOGHANDLER_URL={url} LOGHANDLER_TOKEN=...    # the --token you "
                 "passed")
        if not is_loopback(args.host):
            port = server.server_address[1]
            others = _machine_addresses() if server.wildcard else [args.host]
            for addr in others:
                host = f"[{addr}]" if ":" in addr else addr
                _out(f"  from other machines: http://{host}:{port} (clients there need "
                     "--allow-http / allow_http=True)")
        # The token rides in the fragment, which the browser never sends to the server.
        from urllib.parse import quote

        if generated:
            _out(f"web page: {url}/#token={quote(token, safe='-_.~')}")
        elif from_env:
            # The user's token is never printed: the page asks for it once.
            _out(f"web page: {url}/    (it asks for the token: the value of LOGHANDLER_TOKEN)")
        else:
            _out(f"web page: {url}/    (it asks for the token: the --token you passed)")
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


def _read_views_file(path: str) -> list[dict[str, Any]]:
    data = _load_json_file(path, "--views")
    if isinstance(data, dict) and isinstance(data.get("views"), list):
        data = data["views"]
    if not isinstance(data, list) or not all(isinstance(v, dict) for v in data):
        raise UsageError(f"--views {path} must hold a JSON list of view objects")
    return data


def register(sub: Any, conn: _Parser) -> dict[str, argparse.ArgumentParser]:
    """Add ``serve`` to the command line."""
    serve = sub.add_parser(
        "serve", help="run the local service (for development and tests)",
        description="Run the local service on loopback, data in SQLite: ingest "
                    "(POST /v1/datasets/NAME/ingest), the query API (POST /v1/datasets/_apl, "
                    "an APL subset: `loghandler query` and `loghandler tail` use it), "
                    "datasets (GET /v1/datasets), views (/v2/views), and a web page at / to "
                    "look at what arrived (its address, with the token, is printed at start).")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8080, help="port (default 8080; 0: any)")
    serve.add_argument("--db", metavar="FILE", help="SQLite file to keep data across restarts "
                                                    "(default: in memory)")
    serve.add_argument("--token", default=argparse.SUPPRESS, help="the token to accept "
                       "(default: LOGHANDLER_TOKEN, else a random one, printed, and kept "
                       "in FILE.token beside --db FILE for the next start)")
    serve.add_argument("--views", metavar="FILE", help="JSON file with a list of views to seed")
    serve.add_argument("--max-body-bytes", type=int, default=None, metavar="N",
                       help="largest request body accepted (default 10 MiB); 413 above")
    serve.add_argument("--quiet", action="store_true", help="no line per request")
    serve.add_argument("--dataset", action="append", metavar="NAME", dest="datasets",
                       help="a dataset to create at start (repeatable; default: "
                            "LOGHANDLER_DATASET); an ingest into a dataset nobody created "
                            "answers 404, as the real service does")
    serve.add_argument("--create-datasets", action="store_true",
                       help="create a dataset on its first ingest instead of answering 404")
    serve.add_argument("--rate-limit", type=int, default=None, metavar="N",
                       help="requests per minute; past it 429 with X-RateLimit-* headers "
                            "(default: no limit)")
    serve.add_argument("--ingest-limit", type=int, default=None, metavar="BYTES",
                       help="bytes of ingest a month; past it 430 with X-IngestLimit-* headers "
                            "(default: no limit)")
    serve.add_argument("--max-fields", type=int, default=256, metavar="N",
                       help="fields a dataset may hold (default 256, the service's); an event "
                            "past it is turned down in the ingest status")
    serve.add_argument("--max-connections", type=int, default=None, metavar="N",
                       help="connections at once (default 256, fewer under a low open-files "
                            "limit); past it the one waiting longest for its client is "
                            "closed, or 503 when all are being answered")
    serve.add_argument("--request-timeout", type=float, default=60.0, metavar="SECONDS",
                       help="time a request's headers and body may take to arrive, however "
                            "slowly they trickle in (default 60); 408 past it")
    serve.add_argument("--idle-timeout", type=float, default=60.0, metavar="SECONDS",
                       help="time a connection may wait for its next request (default 60)")
    serve.set_defaults(func=cmd_serve)
    return {"serve": serve}
