"""``AsyncClient``: Client's calls as coroutines, against the local service and a fault server
(time-outs, 429, 403), with Client's errors; the event loop is never blocked."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from faultserver import FaultServer, sleep, status

import loghandler
from loghandler import (
    AsyncClient,
    AuthenticationError,
    ConfigurationError,
    RateLimitError,
    TransportError,
    View,
)
from loghandler.testing import LocalService

TOKEN = "async-token-3c4d"


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_ingest_query_and_views_against_the_local_service():
    """ingest, query and views work as awaitables and give Client's answers."""
    with LocalService(token=TOKEN) as svc:
        async def main() -> tuple[Any, list[Any], list[View]]:
            async with AsyncClient(url=svc.url, token=TOKEN) as client:
                answer = await client.ingest("app", [{"n": i} for i in range(10)])
                rows = await client.query("['app'] | where n >= 5 | sort by n asc")
                created = await client.views.create(View(name="big", apl_query="['app']",
                                                          datasets=["app"]))
                views = await client.views.list()
                await client.views.delete(created.id)
                return answer, rows, views

        answer, rows, views = run(main())
        assert answer["ingested"] == 10 and answer["failed"] == 0
        assert [r["n"] for r in rows] == [5, 6, 7, 8, 9]
        assert [v.name for v in views] == ["big"]


def test_calls_run_concurrently_without_blocking_the_loop():
    """Four slow requests overlap, and the loop keeps ticking while they wait."""
    with FaultServer(default=sleep(0.3, then=200)) as srv:
        async def main() -> tuple[float, int]:
            ticks = 0
            done = asyncio.Event()

            async def ticker() -> None:
                nonlocal ticks
                while not done.is_set():
                    ticks += 1
                    await asyncio.sleep(0.01)

            async with AsyncClient(url=srv.url, token=TOKEN) as client:
                task = asyncio.create_task(ticker())
                started = time.monotonic()
                await asyncio.gather(*(client.ingest("ds", [{"i": i}]) for i in range(4)))
                elapsed = time.monotonic() - started
                done.set()
                await task
            return elapsed, ticks

        elapsed, ticks = run(main())
        assert elapsed < 1.0  # not 4 x 0.3 s in a row
        assert ticks >= 10  # the loop ran while the requests waited


@pytest.mark.parametrize(("behaviour", "error"), [
    (status(403, {"code": 403, "message": "invalid token"}), AuthenticationError),
    (status(429, {"code": 429, "message": "slow down"}, {"Retry-After": "7"}), RateLimitError),
])
def test_errors_are_clients(behaviour, error):
    with FaultServer([behaviour]) as srv:
        async def main() -> None:
            async with AsyncClient(url=srv.url, token=TOKEN) as client:
                await client.ingest("ds", [{"a": 1}])

        with pytest.raises(error) as info:
            run(main())
        if error is RateLimitError:
            assert info.value.retry_after == 7
        assert TOKEN not in str(info.value)


def test_timeout_bounds_the_request():
    """timeout= bounds the whole request: a service that never answers is a TransportError."""
    with FaultServer(default=sleep(5)) as srv:
        async def main() -> None:
            async with AsyncClient(url=srv.url, token=TOKEN, timeout=0.5) as client:
                await client.ingest("ds", [{"a": 1}])

        started = time.monotonic()
        with pytest.raises(TransportError):
            run(main())
        assert time.monotonic() - started < 3


def test_configuration_errors_and_repr():
    with pytest.raises(ConfigurationError):
        AsyncClient(url="http://example.invalid", token=TOKEN)
    client = AsyncClient(url="http://127.0.0.1:1", token=TOKEN)
    assert TOKEN not in repr(client)
    assert loghandler.AsyncClient is AsyncClient
