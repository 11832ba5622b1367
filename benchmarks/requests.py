"""Instructions per request with and without the request reports, counted by valgrind's
callgrind (the machine's noise cannot move them), beside one ordinary logging call.

    PYTHONHASHSEED=0 python -m benchmarks.requests            # every row
    PYTHONHASHSEED=0 python -m benchmarks.requests --no-valgrind   # the children only, once

Each row runs the same loop in a fresh process twice, with 200 and with 1,200 requests (or
calls); the difference divided by 1,000 is the cost of one, start-up excluded. The requests are
made in-process, no server: a minimal Starlette app (one route, a plain-text answer) driven by
an ASGI loop, and a minimal WSGI app (a function) called as a WSGI server calls it (the body
iterated, then closed). An ``IngestHandler`` on the root logger takes every event, its flusher
parked (application thread only: the caller's work, as benchmarks/instructions.py's first
column). The request logs nothing of its own: what a row with reports adds over its twin is
the middleware, the context, and the report's logging call.

The ``log`` row is one ordinary logging call (a message with one argument and two extras) into
the same handler: the unit the report's cost is compared with.

Needs valgrind (Debian: apt-get install valgrind).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile

CHILD = r"""
import asyncio, logging, os, sys
mode, n = sys.argv[1], int(sys.argv[2])
import loghandler
handler = loghandler.IngestHandler(
    "bench", token="t", url="http://127.0.0.1:9", flush_interval=3600, batch_size=10_000,
    max_queue_size=10**7, max_queue_bytes=10**12, max_batch_bytes=10**12, compression=None)
root = logging.getLogger()
root.addHandler(handler)
root.setLevel(logging.INFO)
reports = mode.endswith(("-reports", "-quiet"))
if mode.endswith("-quiet"):  # the middleware without its report's logging call
    logging.getLogger("loghandler.request").setLevel(logging.WARNING)
if mode == "log":
    log = logging.getLogger("bench")
    for i in range(n):
        log.info("user %s logged in", i, extra={"request_id": "r-1", "latency_ms": 1.5})
elif mode == "report":
    from time import perf_counter
    from loghandler import _reports
    o = _reports.configure({}, "bench")
    for i in range(n):
        _reports.report(o, 20, "GET", "/items/{item_id}", "/items/7", 200, perf_counter(),
                        None, 2, "bench/1", "0af7651916cd43dd8448eb211c80319c", None, None,
                        None)
elif mode.startswith("starlette"):
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    async def item(request):
        return PlainTextResponse("ok")

    app = Starlette(routes=[Route("/items/{item_id}", item)])
    if reports:
        from loghandler.asgi import RequestReports
        app.add_middleware(RequestReports)
    template = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.4"},
                "http_version": "1.1", "method": "GET", "scheme": "http",
                "path": "/items/7", "raw_path": b"/items/7", "query_string": b"",
                "root_path": "", "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 80),
                "headers": [(b"host", b"example.com"), (b"user-agent", b"bench/1"),
                            (b"accept", b"*/*")]}
    request = {"type": "http.request", "body": b"", "more_body": False}

    async def receive():
        return request

    async def send(message):
        pass

    async def main():
        for i in range(n):
            await app(dict(template), receive, send)

    asyncio.run(main())
else:
    def app(environ, start_response):
        start_response("200 OK", [("content-type", "text/plain")])
        return [b"ok"]
    if reports:
        from loghandler.wsgi import RequestReports
        app = RequestReports(app)
    template = {"REQUEST_METHOD": "GET", "PATH_INFO": "/items/7", "SCRIPT_NAME": "",
                "QUERY_STRING": "", "SERVER_NAME": "example.com", "SERVER_PORT": "80",
                "SERVER_PROTOCOL": "HTTP/1.1", "REMOTE_ADDR": "127.0.0.1",
                "HTTP_HOST": "example.com", "HTTP_USER_AGENT": "bench/1", "HTTP_ACCEPT": "*/*",
                "wsgi.url_scheme": "http"}

    def start_response(status, headers, exc_info=None):
        return None

    for i in range(n):
        body = app(dict(template), start_response)
        for chunk in body:
            pass
        close = getattr(body, "close", None)
        if close is not None:
            close()
s = handler.stats()
assert s.submitted == (n if mode in ("log", "report") or mode.endswith("-reports")
                       else 0), (mode, s)
os._exit(0)
"""

ROWS = ("log", "report", "starlette", "starlette-reports", "starlette-quiet", "wsgi",
        "wsgi-reports", "wsgi-quiet")
SMALL, LARGE = 200, 1200


def _count(script: str, mode: str, n: int) -> int:
    proc = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable,
         script, mode, str(n)], capture_output=True, text=True, timeout=1800)
    match = re.search(r"Collected : (\d+)", proc.stderr)
    if proc.returncode != 0 or not match:
        raise RuntimeError(f"{mode}: {proc.stderr[-800:]}")
    return int(match.group(1))


def measure(valgrind: bool = True, rows: tuple[str, ...] = ROWS) -> dict[str, float]:
    """Instructions per request (or call) of each row; without valgrind, each child is run
    once (a check that it works, no figures)."""
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "child.py")
        with open(script, "w") as f:
            f.write(CHILD)
        for mode in rows:
            if not valgrind:
                subprocess.run([sys.executable, script, mode, "50"], check=True, timeout=300)
                continue
            per = (_count(script, mode, LARGE) - _count(script, mode, SMALL)) / (LARGE - SMALL)
            results[mode] = per
            print(f"  {mode}: {per:,.0f}", file=sys.stderr, flush=True)
    return results


def table(r: dict[str, float]) -> str:
    log = r["log"]
    lines = ["| app | without | with the reports | added | added / one logging call |",
             "|---|---|---|---|---|"]
    for app, label in (("starlette", "Starlette, one route"), ("wsgi", "WSGI, a function")):
        bare, with_ = r[app], r[f"{app}-reports"]
        lines.append(f"| {label} | {bare:,.0f} | {with_:,.0f} | {with_ - bare:,.0f} | "
                     f"{(with_ - bare) / log:.2f} |")
    lines.append(f"| one logging call (`log.info` with two extras) | – | – | {log:,.0f} | "
                 f"1.00 |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    rows = tuple(a for a in args if a in ROWS) or ROWS
    if "--no-valgrind" in args:
        measure(valgrind=False, rows=rows)
        print("ok")
        return 0
    if shutil.which("valgrind") is None:
        print("valgrind is not installed: apt-get install valgrind")
        return 1
    results = measure(rows=rows)
    print(table(results) if set(ROWS) <= results.keys() else results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
