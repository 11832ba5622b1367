"""Shared fixtures: a clean environment, a recording ingest receiver on loopback
(pytest-httpserver), the local service (``svc``). The helpers the tests import live in
helpers.py."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from faultserver import FaultServer, Front
from helpers import TOKEN, LoggerFactory, Receiver
from pytest_httpserver import HTTPServer

ENV_NAMES = ("LOGHANDLER_TOKEN", "LOGHANDLER_ORG_ID", "LOGHANDLER_URL", "LOGHANDLER_EU_URL",
             "LOGHANDLER_REGION", "LOGHANDLER_DATASET", "LOGHANDLER_SERVICE",
             "LOGHANDLER_ENVIRONMENT", "LOGHANDLER_VERSION", "OTEL_SERVICE_NAME",
             "OTEL_RESOURCE_ATTRIBUTES", "LOGHANDLER_SCRUB", "LOGHANDLER_SEND")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test starts without LOGHANDLER_* variables (a developer's shell may have them),
    and without the identity fields (``host`` on every event), so that tests compare events
    exactly; tests/test_shaping.py turns identity back on where it tests it (subprocesses the
    tests start inherit this)."""
    for name in ENV_NAMES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LOGHANDLER_IDENTITY", "0")


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


@pytest.fixture
def svc_options(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The ``LocalService`` arguments of ``svc``: the test module's own ``TOKEN`` when it has
    one (each module names its token, and some look for it in output), else helpers'. A module
    or class that needs more (views, datasets, a body bound) overrides this fixture."""
    return {"token": getattr(request.module, "TOKEN", TOKEN)}


@pytest.fixture
def svc(svc_options: dict[str, Any]) -> Iterator[Any]:
    """A started ``loghandler.testing.LocalService`` (the package's own, as its
    ``loghandler_service`` fixture gives, with ``svc_options``), stopped after the test. A
    module that seeds it overrides ``svc`` with a fixture of that name taking ``svc``."""
    from loghandler.testing import LocalService

    with LocalService(**svc_options) as service:
        yield service


@pytest.fixture
def logger_options() -> dict[str, Any]:
    """The options of every ``make_logger`` handler unless a test passes its own: nothing is
    sent before ``flush()`` (a module that wants batches sent at once overrides this
    fixture)."""
    return {"flush_interval": 60}


@pytest.fixture
def make_logger(receiver: Receiver, logger_options: dict[str, Any]) -> Iterator[LoggerFactory]:
    """``make_logger(name="app", **options)`` -> (logger, IngestHandler shipping to the
    ``receiver``); every handler is closed after the test."""
    factory = LoggerFactory(receiver.url, logger_options)
    yield factory
    factory.close()


# The load harness (--load, LOGHANDLER_TEST_LOAD) and the `delivery` marker: tests/cpuload.py.
from cpuload import (  # noqa: E402, F401
    pytest_addoption,
    pytest_collection_modifyitems,
    pytest_configure,
    pytest_report_header,
    pytest_sessionfinish,
    pytest_terminal_summary,
    pytest_unconfigure,
)


@pytest.fixture
def make_front() -> Iterator[Callable[..., Front]]:
    """``make_front(kind, server, **options)``: a ``Front`` ("handler" or "processor") shipping
    to a ``FaultServer``, closed at the test's end."""
    made: list[Front] = []

    def make(kind: str, server: FaultServer, **options: Any) -> Front:
        front = Front(kind, server, **options)
        made.append(front)
        return front

    yield make
    for front in made:
        front.close(timeout=1.0)
