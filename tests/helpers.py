"""Helpers shared by the tests: a recording ingest receiver, a closed port, threads.

Imported by the tests (``from helpers import ...``); conftest.py only holds the fixtures.
"""

from __future__ import annotations

import gzip
import json
import threading
from typing import Any

from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

TOKEN = "xaat-test-token-5f3c9e"


class Receiver:
    """Records every ingest request; answers from a script of statuses, then 200."""

    def __init__(self, server: HTTPServer) -> None:
        self.server = server
        self.url = server.url_for("").rstrip("/")
        self.lock = threading.Lock()
        self.events: list[dict[str, Any]] = []
        self.requests: list[dict[str, Any]] = []
        self.script: list[Any] = []
        self.arrived = threading.Condition(self.lock)
        server.expect_request("/v1/datasets/ds/ingest", method="POST").respond_with_handler(
            self._handle
        )

    def _handle(self, request: Request) -> Response:
        raw = request.get_data()
        body = gzip.decompress(raw) if request.headers.get("Content-Encoding") == "gzip" else raw
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


def wait_until(predicate: Any, timeout: float = 10.0, what: str = "") -> bool:
    """Poll ``predicate`` until it holds (True) or ``timeout`` seconds pass (False): for a
    condition another thread or process moves and nothing signals (a counter, a file). The
    timeout is a deadline for what ``what`` names, not a guess of how long it takes: pass the
    bound the test measures, or a generous one for "eventually" (a busy host is slow)."""
    import time

    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        threading.Event().wait(0.01)  # nothing to wait on: a short poll, not a timing guess
    return True


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


class MemoryTransport:
    """An in-memory transport (``loghandler._engine.transport.Transport``): answers each
    request by ``rule(events, index)`` -> ``Answer`` (or raises ``TransportError``), keeps the
    events of each delivered request, and records every request's size and status.
    ``attach(shipper)`` puts it in place of the shipper's HTTP transport."""

    def __init__(self, rule: Any) -> None:
        self.rule = rule
        self.lock = threading.Lock()
        self.stored: list[dict[str, Any]] = []
        self.requests: list[dict[str, Any]] = []

    def attach(self, shipper: Any) -> Any:
        shipper._sender.transport = self
        return shipper

    def post(self, body: bytes, headers: Any, timeout: float | None) -> Any:
        from loghandler._engine.policy import Answer, ingest_status

        if headers and headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        events = json.loads(body)
        with self.lock:
            index = len(self.requests)
            self.requests.append({"events": len(events), "status": None})
        answer = self.rule(events, index)
        if isinstance(answer, BaseException):
            raise answer
        if not isinstance(answer, Answer):
            answer = Answer.of(*answer)
        with self.lock:
            self.requests[index]["status"] = answer.status
            if 200 <= answer.status < 300 and answer.complete:
                status = ingest_status(answer.body)
                # Like the service: the events it does not turn down are stored.
                self.stored.extend(events[: len(events) - (status[1] if status else 0)])
        return answer

    def statuses(self) -> list[int | None]:
        with self.lock:
            return [r["status"] for r in self.requests]


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
