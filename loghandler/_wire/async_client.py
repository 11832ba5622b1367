"""``AsyncClient``: the request/response side of ``Client`` for asyncio applications.

Each call runs the ``Client`` call of the same name on a small thread pool of the client's own
and awaits it, so the event loop never blocks on the network, and every argument, setting,
bound (``timeout`` bounds each request as a whole) and error is exactly ``Client``'s: one
implementation of the wire, not two. No new dependency.

The shippers (``IngestHandler``, ``IngestProcessor``, ``Shipper``) need no async variant: a
logging call only appends to a bounded queue and returns, on any thread, event loop included.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

from .._documented import documented
from .._output import shown
from .client import Client
from .settings import CLIENT_ARGS_DOC

__all__ = ["AsyncClient"]

# Requests one AsyncClient runs at once; more wait for a free thread (a bound, not a queue of
# threads: an application that fires 10,000 queries at once gets 4 threads).
MAX_CONCURRENT = 4


class _Namespace:
    """``client.views`` / ``client.datasets`` with each method awaitable."""

    __slots__ = ("_run", "_target")

    def __init__(self, run: Callable[..., Awaitable[Any]], target: Any) -> None:
        self._run = run  # the owning AsyncClient's bounded runner
        self._target = target

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self._target, name)
        if name.startswith("_") or not callable(method):
            raise AttributeError(name)

        @functools.wraps(method)
        async def call(*args: Any, **kwargs: Any) -> Any:
            return await self._run(method, *args, **kwargs)

        return call


@documented(('Args (each falls back to its environment variable; docs/configuration.md):',
             CLIENT_ARGS_DOC))
class AsyncClient:
    """``Client`` for asyncio: the same arguments and calls, as coroutines.

    ``await client.ingest(dataset, events)``, ``await client.query(apl)``,
    ``await client.views.list()`` (and ``get``, ``create``, ``update``, ``delete``), ``await
    client.datasets.list()`` (and the rest of ``Client.datasets``), ``await client.aclose()``,
    ``async with AsyncClient(...) as client``. Errors are ``Client``'s (``ApiError``,
    ``AuthenticationError``, ``RateLimitError``, ``TransportError``, ...). A cancelled call
    stops waiting at once; its request still ends within ``timeout``.

    Raises:
        ConfigurationError: as ``Client``: a missing token or address, an unknown region,
            whitespace in the token, plain http:// to another host than loopback.
    """

    def __init__(self, token: str | None = None, *, org_id: str | None = None,
                 url: str | None = None, region: str | None = None, timeout: float = 10.0,
                 allow_http: bool = False) -> None:
        self._client = Client(token, org_id=org_id, url=url, region=region, timeout=timeout,
                              allow_http=allow_http)
        self._executor: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self.views = _Namespace(self._run, self._client.views)

    @property
    def datasets(self) -> _Namespace:
        """``Client.datasets``, awaitable."""
        return _Namespace(self._run, self._client.datasets)

    @property
    def client(self) -> Client:
        """The synchronous ``Client`` underneath (for a ``Shipper``, say)."""
        return self._client

    @property
    def url(self) -> str:
        return self._client.url

    def _pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(MAX_CONCURRENT,
                                                    thread_name_prefix="loghandler-async")
            return self._executor

    async def _run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool(), functools.partial(fn, *args, **kwargs))

    async def ingest(self, dataset: str, events: Iterable[dict[str, Any]]) -> Any:
        """``Client.ingest``: one POST of the events; the service's JSON answer."""
        return await self._run(self._client.ingest, dataset, list(events))

    async def query(self, apl: str, *, start: datetime | str | None = None,
                    end: datetime | str | None = None) -> Any:
        """``Client.query``: the rows of an APL query."""
        return await self._run(self._client.query, apl, start=start, end=end)

    async def aclose(self) -> None:
        """Close the pooled connections and the threads; idempotent."""
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            await asyncio.get_running_loop().run_in_executor(
                None, functools.partial(executor.shutdown, wait=True))
        self._client.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"<AsyncClient url={shown(self._client.url)}>"
