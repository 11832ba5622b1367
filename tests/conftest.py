"""Shared fixtures: a clean environment, a recording ingest receiver on loopback
(pytest-httpserver). The helpers the tests import live in helpers.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from helpers import Receiver
from pytest_httpserver import HTTPServer

ENV_NAMES = ("LOGHANDLER_TOKEN", "LOGHANDLER_ORG_ID", "LOGHANDLER_URL", "LOGHANDLER_EU_URL",
             "LOGHANDLER_REGION", "LOGHANDLER_DATASET")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test starts without LOGHANDLER_* variables (a developer's shell may have them)."""
    for name in ENV_NAMES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="session")
def _receiver_server() -> Iterator[HTTPServer]:
    # One server for the session: starting and stopping werkzeug costs ~0.5 s per test.
    server = HTTPServer(host="127.0.0.1", port=0)
    server.start()
    yield server
    server.clear()
    server.stop()


@pytest.fixture
def receiver(_receiver_server: HTTPServer) -> Iterator[Receiver]:
    _receiver_server.clear()
    yield Receiver(_receiver_server)
    _receiver_server.clear()
