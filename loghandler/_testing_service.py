"""``loghandler.testing.LocalService``: the local service on a free loopback port in a
background thread. Its own module so that ``import loghandler.testing`` (for
``MemoryTransport`` or ``capture``) does not load the local service (some 30 modules and
sqlite3): ``loghandler.testing`` imports this one when ``LocalService`` is first used.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable
from typing import Any

from ._errors import ConfigurationError
from ._local.service import HttpError, RequestRecord, Server, make_server
from ._output import register_secret
from ._wire.client import Client
from ._wire.settings import check_token
from ._wire.views import View

__all__ = ["MAX_RECORDED_REQUESTS", "LocalService", "RequestRecord"]

# .requests keeps the latest ones only: a benchmark can send millions.
MAX_RECORDED_REQUESTS = 10_000


class LocalService:
    """The local service on a free loopback port, running in a daemon thread.

    ``LocalService(token="t", views=None, max_body_bytes=None, host="127.0.0.1", port=0,
    db=None, datasets=None, rate_limit=None, ingest_limit=None, max_fields=256,
    create_datasets=None)``: ``views``
    seeds views (``View`` objects or the
    service's JSON dicts; those without an id get "1", "2", ...); ``max_body_bytes`` is the
    request size limit (413 above it, 10 MiB by default); ``db`` a SQLite file to keep the data
    in (default: memory); ``datasets`` datasets that exist from the start; ``create_datasets``
    whether an ingest into a dataset nobody created creates it (default: yes, unless
    ``datasets`` names the datasets that exist; ``False`` answers such an ingest 404, as the real
    service does);
    ``rate_limit`` requests per minute, answered 429 past it, every answer carrying
    ``X-RateLimit-Scope/-Limit/-Remaining/-Reset`` (default: no limit, no such headers);
    ``ingest_limit`` bytes of ingest a month, answered 430 past it with
    ``X-IngestLimit-Limit/-Remaining/-Reset``; ``max_fields`` the fields a dataset may hold (an
    event past it is turned down in the ingest status).
    It starts at construction; ``stop()`` (or leaving the ``with`` block) stops it.
    """

    def __init__(
        self,
        token: str = "t",
        views: Iterable[View | dict[str, Any]] | None = None,
        max_body_bytes: int | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        db: str | None = None,
        datasets: Iterable[str] | None = None,
        rate_limit: int | None = None,
        ingest_limit: int | None = None,
        max_fields: int = 256,
        create_datasets: bool | None = None,
    ) -> None:
        register_secret(check_token(token, "token="))
        self.token = token
        self._requests: deque[RequestRecord] = deque(maxlen=MAX_RECORDED_REQUESTS)
        self._requests_lock = threading.Lock()
        seed = [v.to_dict() if isinstance(v, View) else v for v in (views or ())]
        try:
            self._server: Server = make_server(
                host, port, tokens=[token], db=db, views=seed,
                max_body_bytes=max_body_bytes, on_request=self._record,
                datasets=datasets, rate_limit=rate_limit, ingest_limit=ingest_limit,
                max_fields=max_fields,
                create_datasets=datasets is None if create_datasets is None
                else create_datasets,
            )
        except HttpError as exc:
            raise ConfigurationError(f"bad seed view: {exc.message}") from None
        except (ValueError, TypeError) as exc:
            raise ConfigurationError(f"cannot start the local service: {exc}") from None
        self.url = self._server.url
        self._stopped = False
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05},
                                        name="loghandler-local-service", daemon=True)
        self._thread.start()

    def __repr__(self) -> str:
        return f"LocalService(url={self.url!r}, token=***)"

    def _record(self, record: RequestRecord) -> None:
        with self._requests_lock:
            self._requests.append(record)

    # ------------------------------------------------------------------ what arrived

    def events(self, dataset: str) -> list[dict[str, Any]]:
        """The events stored in ``dataset`` in arrival order, each with its ``_time`` (the
        ingest time when it was sent without one)."""
        return self._server.store.events(dataset)

    def datasets(self) -> dict[str, int]:
        """Every dataset that received events, with its event count."""
        return self._server.store.datasets()

    def wait_for_events(self, dataset: str, count: int = 1, timeout: float = 5.0) -> list[
            dict[str, Any]]:
        """Wait until ``dataset`` holds at least ``count`` events and return them.

        For code whose handler you cannot ``flush()`` (another process); raises
        ``TimeoutError`` when they do not arrive in time.
        """
        if not self._server.store.wait_for(dataset, count, timeout):
            have = self._server.store.count(dataset)
            raise TimeoutError(f"dataset {dataset!r} has {have} events after {timeout:g} s, "
                               f"expected {count}")
        return self.events(dataset)

    @property
    def views(self) -> list[View]:
        """The stored views."""
        return [View.from_dict(v) for v in self._server.store.views()]

    @property
    def requests(self) -> list[RequestRecord]:
        """The requests answered so far (the latest 10,000): method, path, status, dataset,
        events (how many were stored) and error (the error message, for non-2xx)."""
        with self._requests_lock:
            return list(self._requests)

    def clear(self) -> None:
        """Forget the stored events and the recorded requests (views are kept)."""
        self._server.store.clear_events()
        with self._requests_lock:
            self._requests.clear()

    def client(self, **kwargs: Any) -> Client:
        """A ``loghandler.Client`` for this service (extra arguments go to ``Client``)."""
        return Client(self.token, url=self.url, **kwargs)

    # ------------------------------------------------------------------ lifecycle

    def stop(self) -> None:
        """Stop serving and close the store. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
        self._server.store.close()

    def __enter__(self) -> LocalService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
