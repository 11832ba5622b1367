"""Testing helpers for your own tests: the local service in a background thread, and a
transport that keeps what a shipper sends in memory.

    from loghandler.testing import LocalService

    with LocalService(token="t") as svc:
        handler = loghandler.IngestHandler("app", url=svc.url, token=svc.token)
        ...
        handler.flush()
        assert svc.events("app")[0]["message"] == "hello"

    from loghandler.testing import MemoryTransport

    transport = MemoryTransport(answers=[503, 200])   # no socket, no token
    handler = loghandler.IngestHandler("app", transport=transport)
    ...
    handler.flush()
    assert transport.events("app")[0]["message"] == "hello"

With pytest, the ``loghandler_service`` fixture gives a started ``LocalService``.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import unquote

from ._errors import ConfigurationError
from ._local.service import HttpError, RequestRecord, Server, make_server
from ._output import register_secret
from ._status import is_success
from ._wire.answer import Answer
from ._wire.client import Client
from ._wire.settings import check_token
from ._wire.views import View

__all__ = ["LocalService", "MemoryTransport", "RequestRecord", "SentRequest"]

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


# ---------------------------------------------------------------------------- MemoryTransport


@dataclasses.dataclass(frozen=True)
class SentRequest:
    """One request a shipper sent to a ``MemoryTransport``.

    ``method`` and ``path`` (``/v1/datasets/<name>/ingest``, with its query when there is
    one); ``headers`` as the shipper set them (``Content-Type``, ``Content-Encoding``; the
    token is never among them); ``events``: the request's events, decoded (gzip, a JSON array,
    or NDJSON); ``status``: what it was answered (None: no answer, a ``TransportError``).
    """

    method: str
    path: str
    headers: Mapping[str, str]
    events: list[dict[str, Any]]
    status: int | None = None

    @property
    def dataset(self) -> str | None:
        """The dataset of an ingest path, else None."""
        parts = self.path.split("?", 1)[0].split("/")
        if len(parts) == 5 and parts[:3] == ["", "v1", "datasets"] and parts[4] == "ingest":
            return unquote(parts[3])
        return None


# What ``answers`` may hold: a status, (status, headers) or (status, headers, body), an
# exception to raise (no answer: ``loghandler.TransportError``), or a callable that receives
# the request and returns one of those.
Scripted = int | tuple[Any, ...] | BaseException | Callable[[SentRequest], Any] | Answer


class MemoryTransport:
    """A transport that keeps every request in memory and answers as scripted: no socket, no
    token, no service. Pass it as ``transport=`` to ``IngestHandler``, ``IngestProcessor``,
    ``IngestSink``, ``IngestLogRecordProcessor`` or ``Shipper``; one may serve several
    shippers (the path names each request's dataset).

    Args:
        answers: what to answer. None (the default): 200 with the service's full ingest status
            for every request. A callable: called with each request (a ``SentRequest``), it
            returns the answer. A list (any iterable): the answers of the first requests, in
            order, then 200 for the rest. An answer is a status code (``503``), a tuple
            ``(status, headers)`` or ``(status, headers, body)`` (``(429, {"Retry-After":
            "2"})``), an exception (``loghandler.TransportError(...)``: the request gets no
            answer), or a callable as above. A 2xx without a body gets the full ingest status
            of the request's events; any other status, the service's error body.

    ``requests`` lists what was sent (the latest 10,000), ``events(dataset=None)`` what a 2xx
    took (less the events an ingest status you scripted turned down), ``clear()`` forgets both.
    """

    def __init__(self, answers: Iterable[Scripted] | Callable[[SentRequest], Any] | None = None
                 ) -> None:
        self._lock = threading.Lock()
        self._every: Callable[[SentRequest], Any] | None = None
        self._script: deque[Scripted] = deque()
        if callable(answers):
            self._every = answers
        elif answers is not None:
            if isinstance(answers, (int, tuple, BaseException, str, bytes)):
                raise ConfigurationError(
                    "answers must be a list of answers (e.g. [503, 200]) or a callable, not "
                    f"one {type(answers).__name__}")
            self._script.extend(answers)
        self._requests: deque[SentRequest] = deque(maxlen=MAX_RECORDED_REQUESTS)
        self._stored: list[tuple[str | None, dict[str, Any]]] = []
        self._pid = os.getpid()

    def __repr__(self) -> str:
        return f"MemoryTransport({len(self.requests)} requests)"

    @property
    def requests(self) -> list[SentRequest]:
        """The requests answered so far, oldest first (the latest 10,000)."""
        with self._lock:
            return list(self._requests)

    def events(self, dataset: str | None = None) -> list[dict[str, Any]]:
        """The events the 2xx answers took, in arrival order (of ``dataset``, when given)."""
        with self._lock:
            return [e for d, e in self._stored if dataset is None or d == dataset]

    def clear(self) -> None:
        """Forget the requests and events (the script of answers goes on)."""
        with self._lock:
            self._requests.clear()
            self._stored.clear()

    # ------------------------------------------------------------------ the transport

    def send(self, method: str, path: str, body: bytes, *,
             headers: Mapping[str, str] | None = None,
             timeout: float | None = None) -> Answer:
        """Record the request and answer it (the transport's one call; ``timeout`` is not
        needed: nothing here waits)."""
        headers = dict(headers or {})
        raw = _unzip(body, headers)
        request = SentRequest(method, path, headers, _decode(raw, headers))
        if self._pid != os.getpid():  # a forked child: the parent's lock may be held
            self._pid, self._lock = os.getpid(), threading.Lock()
        with self._lock:
            scripted = self._script.popleft() if self._script else self._every
        try:
            answer = _answer(200 if scripted is None else scripted, request, len(raw))
        except BaseException:
            with self._lock:
                self._requests.append(request)  # no answer: status None
            raise
        with self._lock:
            self._requests.append(dataclasses.replace(request, status=answer.status))
            if is_success(answer.status) and answer.complete:
                turned_down = _failed(answer.body)
                kept = request.events[:max(0, len(request.events) - turned_down)]
                self._stored.extend((request.dataset, e) for e in kept)
        return answer


def _unzip(body: bytes, headers: Mapping[str, str]) -> bytes:
    """The body, gunzipped when its headers say so."""
    for key, value in headers.items():
        if key.lower() == "content-encoding" and "gzip" in value:
            return gzip.decompress(body)
    return body


def _decode(body: bytes, headers: Mapping[str, str]) -> list[dict[str, Any]]:
    """The events of an (uncompressed) request body: a JSON array, one JSON object, or
    NDJSON."""
    lower = {k.lower(): v for k, v in headers.items()}
    if "ndjson" in lower.get("content-type", ""):
        return [json.loads(line) for line in body.splitlines() if line.strip()]
    value = json.loads(body)
    return value if isinstance(value, list) else [value]


def _answer(scripted: Any, request: SentRequest, size: int) -> Answer:
    """The ``Answer`` a scripted item means for ``request`` (``size``: its body's bytes,
    uncompressed)."""
    if callable(scripted) and not isinstance(scripted, (Answer, BaseException)):
        scripted = scripted(request)
    if isinstance(scripted, Answer):
        return scripted
    if isinstance(scripted, BaseException):
        raise scripted
    status, headers, body = scripted, None, None
    if isinstance(scripted, tuple):
        status, headers, body = (*scripted, None, None)[:3]
    if isinstance(status, bool) or not isinstance(status, int):
        raise ConfigurationError(f"a scripted answer is a status code, (status, headers), "
                                 f"(status, headers, body), an exception or a callable, not "
                                 f"{scripted!r}")
    if body is None:
        body = (_ingest_status(request, size) if is_success(status)
                else {"code": status, "message": f"scripted {status} (MemoryTransport)"})
    return Answer.of(status, headers, body)


def _ingest_status(request: SentRequest, size: int) -> dict[str, Any]:
    """The service's full ingest status for a request whose every event was taken."""
    return {"ingested": len(request.events), "failed": 0, "failures": [],
            "processedBytes": size, "blocksCreated": 0, "walLength": len(request.events)}


def _failed(body: Any) -> int:
    failed = body.get("failed") if isinstance(body, dict) else None
    return failed if type(failed) is int and failed > 0 else 0
