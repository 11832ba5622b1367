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
