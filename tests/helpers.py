"""Helpers shared by the tests: a recording ingest receiver, a closed port, threads, waiting
for a condition, loggers with a handler (``make_logger``), a redis-server.

Imported by the tests (``from helpers import ...``); conftest.py only holds the fixtures.
"""

from __future__ import annotations

import contextlib
import gzip
import itertools
import json
import logging
import shutil
import subprocess
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

TOKEN = "xaat-test-token-5f3c9e"


# ---------------------------------------------------------------------------- request bodies


def _header(headers: Mapping[str, str], name: str) -> str:
    """A header's value whatever its case in ``headers`` (werkzeug's, a dict, a SentRequest's),
    else ""."""
    name = name.lower()
    for key, value in headers.items():
        if key.lower() == name:
            return str(value)
    return ""


def decoded(raw: bytes, headers: Mapping[str, str]) -> bytes:
    """A request body with its ``Content-Encoding`` undone: none (``identity``, or ``1``,
    axiom-py's name for it), ``gzip``, ``deflate`` or ``zstd``; any other is a ValueError (a
    test server answers it 400), never read as JSON."""
    encoding = _header(headers, "Content-Encoding").strip().lower()
    if encoding in ("", "identity", "1"):
        return raw
    if encoding == "gzip":
        return gzip.decompress(raw)
    if encoding == "deflate":
        return zlib.decompress(raw)
    if encoding == "zstd":
        import zstandard

        return bytes(zstandard.ZstdDecompressor().decompressobj().decompress(raw))
    raise ValueError(f"unknown Content-Encoding {encoding!r}")


def body_events(raw: bytes, headers: Mapping[str, str]) -> Any:
    """The events of a request body, decoded (``decoded``): its JSON value, or a list of the
    JSON values of its lines when ``Content-Type`` names NDJSON."""
    body = decoded(raw, headers)
    if "ndjson" in _header(headers, "Content-Type"):
        return [json.loads(line) for line in body.splitlines() if line.strip()]
    return json.loads(body)


_RECEIVERS = itertools.count(1)


class Receiver:
    """Records every ingest request; answers from a script of statuses, then 200."""

    def __init__(self, server: HTTPServer) -> None:
        self.server = server
        # Each receiver answers under a path of its own on the session's one server: a shipper
        # an earlier test left retrying (its close timed out on a starved host) must not
        # deliver its events into a later test's receiver on the same port.
        self.prefix = f"/r{next(_RECEIVERS)}"
        self.url = server.url_for(self.prefix).rstrip("/")
        self.lock = threading.Lock()
        self.events: list[dict[str, Any]] = []
        self.requests: list[dict[str, Any]] = []
        self.script: list[Any] = []
        self.arrived = threading.Condition(self.lock)
        server.expect_request(self.prefix + "/v1/datasets/ds/ingest",
                              method="POST").respond_with_handler(
            self._handle
        )

    def _handle(self, request: Request) -> Response:
        raw = request.get_data()
        body = decoded(raw, request.headers)
        batch = json.loads(body)
        with self.lock:
            status = self.script.pop(0) if self.script else 200
            headers = {}
            if isinstance(status, tuple):
                status, headers = status
            self.requests.append({"status": status, "events": len(batch), "bytes": len(body),
                                  "wire_bytes": len(raw), "headers": dict(request.headers)})
            if status == 200:
                self.events.extend(batch)
            self.arrived.notify_all()
        return Response(json.dumps({"ingested": len(batch)} if status == 200 else
                                   {"message": f"scripted {status}"}),
                        status, headers=headers, content_type="application/json")

    def wait_requests(self, n: int, timeout: float = 5.0) -> bool:
        with self.lock:
            return self.arrived.wait_for(lambda: len(self.requests) >= n, timeout)


def balanced(st: Any) -> bool:
    """The accounting invariant of a ``stats()`` snapshot: every event submitted is delivered,
    dropped, failed, spooled, still queued, or unconfirmed (sent, its answer cut off by a
    deadline)."""
    return st.submitted == (st.delivered + st.dropped + st.failed + st.spooled + st.queued
                            + st.unconfirmed)


@contextlib.contextmanager
def without_orjson() -> Iterator[None]:
    """The encoder as it runs where orjson is not installed: the standard library's in
    orjson's place, with the exact path for what it refuses. The one place tests swap it."""
    from loghandler import _encoding

    saved = _encoding._encode_fast  # noqa: SLF001
    _encoding._encode_fast = _encoding._encode_std  # noqa: SLF001
    try:
        yield
    finally:
        _encoding._encode_fast = saved  # noqa: SLF001


def service_store(svc: Any) -> Any:
    """The store of a ``LocalService`` (its events, and the reader's query counters): the one
    place tests reach past its public face, to watch a query run or break a write."""
    return svc._server.store  # noqa: SLF001


def store_db(store: Any) -> Any:
    """The store's own SQLite connection: what ingest writes to its side tables (the counts,
    the rollups, the word index) has no public view, and the tests of those tables read them
    there. The one place tests take it."""
    return store._db  # noqa: SLF001


def number_plan(store: Any, dataset: str) -> Any:
    """Which fields the store's number counts keep for ``dataset`` (decided at ingest, shown
    nowhere public)."""
    return store._numbers.plan(dataset)  # noqa: SLF001


def narrow_kept(store: Any) -> Any:
    """The fields the store's narrow table keeps, per dataset (decided at ingest, shown
    nowhere public)."""
    return store._narrow.kept  # noqa: SLF001


def known_fields(store: Any) -> Any:
    """The store's record of each dataset's fields (``wide``), which decides what the value
    counts keep (shown nowhere public)."""
    return store._known  # noqa: SLF001


def query_stats(svc: Any) -> Any:
    """The local service's query counters (``running``, ``cancelled``, ``timed_out``)."""
    return service_store(svc).reader.stats


def closed_port_url() -> str:
    """An http URL on loopback where nothing listens (connection refused)."""
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}"


def run_in_threads(target: Any, n: int = 8) -> None:
    """Run target(0) .. target(n - 1) on n threads and wait for all of them."""
    threads = [threading.Thread(target=target, args=(t,)) for t in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def wait_until(predicate: Callable[[], Any], timeout: float = 20.0) -> bool:
    """Poll ``predicate`` until it is true (True) or ``timeout`` seconds pass (False): for what
    has no call to wait on (a counter the flusher moves, a replay round, another process).
    Callers assert the result, saying what did not happen."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        threading.Event().wait(0.01)
    return True


class LoggerFactory:
    """``make(name="app", **options)`` -> (a fresh logger, its IngestHandler to ``url``): the
    ``make_logger`` fixture (conftest.py). ``defaults``: options every handler gets unless the
    call gives its own. ``close()`` takes each handler off its logger and closes it."""

    def __init__(self, url: str, defaults: dict[str, Any]) -> None:
        self.url = url
        self.defaults = defaults
        self.made: list[tuple[logging.Logger, Any]] = []

    def __call__(self, name: str = "app", **options: Any) -> tuple[logging.Logger, Any]:
        from loghandler import IngestHandler

        # The receiver's address unless the test gives its own (url=).
        handler = IngestHandler("ds", token=TOKEN, **{"url": self.url, **self.defaults, **options})
        logger = logging.getLogger(f"test.{name}.{len(self.made)}")
        logger.handlers[:] = [handler]
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
        self.made.append((logger, handler))
        return logger, handler

    def close(self) -> None:
        for logger, handler in self.made:
            logger.removeHandler(handler)
            handler.close()


class RedisServer:
    """A redis-server of our own on a free loopback port, for the job-runner tests: no
    persistence, stopped (and waited for) at the end. Debian's ``redis-server``; CI installs it
    (the tests fail there when it is missing, and skip elsewhere)."""

    def __init__(self) -> None:
        import os
        import shutil
        import socket
        import subprocess

        binary = shutil.which("redis-server")
        if binary is None:
            import pytest

            if os.environ.get("CI"):
                pytest.fail("redis-server is missing in CI: .ci/run installs it")
            pytest.skip("redis-server is not installed (apt-get install redis-server)")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc = subprocess.Popen(
            [binary, "--bind", "127.0.0.1", "--port", str(self.port), "--save", "",
             "--appendonly", "no", "--protected-mode", "yes"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        import time

        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as c:
                    c.sendall(b"PING\r\n")
                    if c.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("redis-server did not start")
            time.sleep(0.05)  # waiting for another process to listen: nothing to wait on

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except Exception:
            self.proc.kill()


def self_signed_certificate(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 that no CA vouches for, and its key, made by openssl."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make a self-signed certificate")
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1", "-addext",
         "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )
    return cert, key
