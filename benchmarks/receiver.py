"""A minimal ingest receiver for the benchmarks, meant to run in its own process.

Paths are ``/{mode}/{tag}/...``: ``mode`` is ``t`` (answer at once) or ``slow`` (answer after
``SLOW_SECONDS``, per request: the server is threaded), ``tag`` names one benchmark run so its
counts are kept apart from any other run's late traffic. What follows is the protocol:

- ``.../v1/datasets/{name}/ingest``: a JSON array, maybe gzip; answers ``200 {}``
- ``.../v1/logs``: OTLP/HTTP logs (protobuf); log records are counted
- ``.../logtail``: logtail-python's msgpack array

``GET /count/{tag}`` answers ``{"events", "requests", "bytes"}`` (bytes: request bodies as sent).

``python -m benchmarks.receiver`` serves (prints ``PORT <n>``); ``python -m benchmarks.receiver
blast PORT SECONDS`` measures the receiver's own ceiling from a separate process.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

try:
    import orjson

    _loads: Any = orjson.loads
except ImportError:  # pragma: no cover - depends on the environment
    _loads = json.loads

SLOW_SECONDS = 1.0
_lock = threading.Lock()
_counts: dict[str, list[int]] = {}


def _count_otlp(body: bytes) -> int:
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

    req = ExportLogsServiceRequest()
    req.ParseFromString(body)
    return sum(len(s.log_records) for r in req.resource_logs for s in r.scope_logs)


def _count_msgpack(body: bytes) -> int:
    import msgpack

    return len(msgpack.unpackb(body, raw=False))


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive
    disable_nagle_algorithm = True
    # The answer's head and body in one write, as a real service (Go's net/http, nginx) writes
    # a small answer: unbuffered, http.server sends them in two, and the shipper pays a second
    # receive for it (docs/performance.md, "Sixth pass"). Flushed after each request.
    wbufsize = 64 * 1024

    def log_message(self, format: str, *args: Any) -> None:
        pass  # one stderr line per request would cost more than the request

    def _answer(self, status: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        parts = self.path.strip("/").split("/")
        if len(parts) == 2 and parts[0] == "count":
            with _lock:
                events, requests, nbytes = _counts.get(parts[1], (0, 0, 0))
            self._answer(200, json.dumps(
                {"events": events, "requests": requests, "bytes": nbytes}).encode())
        else:
            self._answer(404, b"{}")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        parts = self.path.strip("/").split("/", 2)
        if len(parts) < 3 or parts[0] not in ("t", "slow"):
            self._answer(404, b'{"message":"unknown path"}')
            return
        mode, tag, rest = parts
        if mode == "slow":
            time.sleep(SLOW_SECONDS)
        try:
            raw = body
            if self.headers.get("Content-Encoding") in ("gzip", "deflate"):
                raw = zlib.decompress(body, 47)  # 47: gzip or zlib header, detected
            if rest.endswith("/ingest"):
                n, answer, ctype = len(_loads(raw)), b"{}", "application/json"
            elif rest.endswith("v1/logs"):
                n, answer, ctype = _count_otlp(raw), b"", "application/x-protobuf"
            elif rest.endswith("logtail"):
                n, answer, ctype = _count_msgpack(raw), b"{}", "application/json"
            else:
                self._answer(404, b'{"message":"unknown path"}')
                return
        except Exception as exc:
            self._answer(400, json.dumps({"message": str(exc)}).encode())
            return
        with _lock:
            c = _counts.setdefault(tag, [0, 0, 0])
            c[0] += n
            c[1] += 1
            c[2] += len(body)
        self._answer(200, answer, ctype)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # children exit with requests in flight (broken pipes): expected, not news


@contextlib.contextmanager
def start_receiver() -> Iterator[str]:
    """Run the receiver in its own process (so it never competes for our GIL); yields its URL."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.Popen([sys.executable, "-m", "benchmarks.receiver"], cwd=here,
                            stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        yield f"http://127.0.0.1:{int(line.split()[1])}"
    finally:
        proc.terminate()
        proc.wait(5)


def serve(port: int = 0) -> None:
    server = _Server(("127.0.0.1", port), _Handler)
    print(f"PORT {server.server_address[1]}", flush=True)
    server.serve_forever(poll_interval=0.5)


def count(port: int, tag: str) -> dict[str, int]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", f"/count/{tag}")
        return json.loads(conn.getresponse().read())
    finally:
        conn.close()


def sample_batch(n: int = 1000) -> bytes:
    """A JSON array shaped like the events IngestHandler sends for the benchmark's call."""
    events = [{
        "_time": f"2026-01-01T00:00:00.{i:06d}Z", "level": "info",
        "message": f"user {i} logged in", "logger": "bench", "module": "scenarios",
        "function": "call", "line": 42, "file": "/work/main/benchmarks/scenarios.py",
        "process": 12345, "thread": "MainThread", "request_id": f"req-{i:08x}-{i * 7:08x}",
        "latency_ms": (i * 0.25) % 500,
    } for i in range(n)]
    return json.dumps(events, separators=(",", ":")).encode()


def blast(port: int, seconds: float, gzip: bool, batch: int = 1000) -> float:
    """Events per second the receiver accepts from one keep-alive connection."""
    body = sample_batch(batch)
    headers = {"Content-Type": "application/json"}
    if gzip:
        comp = zlib.compressobj(1, zlib.DEFLATED, 31)
        body = comp.compress(body) + comp.flush()
        headers["Content-Encoding"] = "gzip"
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    sent = 0
    start = time.perf_counter()
    end = start + seconds
    while time.perf_counter() < end:
        conn.request("POST", "/t/blast/v1/datasets/blast/ingest", body, headers)
        resp = conn.getresponse()
        resp.read()
        if resp.status == 200:
            sent += batch
    elapsed = time.perf_counter() - start
    conn.close()
    return sent / elapsed


def main(argv: list[str]) -> None:
    if argv and argv[0] == "blast":
        port, seconds = int(argv[1]), float(argv[2])
        result = {"plain": blast(port, seconds, False), "gzip": blast(port, seconds, True)}
        print("RESULT " + json.dumps(result), flush=True)
        return
    serve(int(argv[0]) if argv else 0)


if __name__ == "__main__":
    main(sys.argv[1:])
