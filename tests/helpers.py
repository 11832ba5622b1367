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
