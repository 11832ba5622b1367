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

    from loghandler.testing import capture

    with capture() as shipped:                # every front end of the process, even those
        logging.config.dictConfig(LOGGING)    # the application's own configuration builds
        logging.getLogger("app").info("hello")
    assert shipped.events()[0]["message"] == "hello"

With pytest, the ``loghandler_service`` fixture gives a started ``LocalService``, and
``loghandler_capture`` an active ``capture()``.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from ._errors import ConfigurationError
from ._status import is_success
from ._wire.answer import Answer

if TYPE_CHECKING:
    from ._testing_service import LocalService, RequestRecord

__all__ = ["Capture", "LocalService", "MemoryTransport", "RequestRecord", "SentRequest",
           "capture"]

# .requests keeps the latest ones only: a benchmark can send millions.
MAX_RECORDED_REQUESTS = 10_000


def __getattr__(name: str) -> Any:
    # The local service (and sqlite3) is loaded when a test first uses it, not by every
    # ``import loghandler.testing``.
    if name in ("LocalService", "RequestRecord"):
        from . import _testing_service

        value = getattr(_testing_service, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


# ---------------------------------------------------------------------------- MemoryTransport


@dataclasses.dataclass(frozen=True)
class SentRequest:
    """One request a shipper sent to a ``MemoryTransport``.

    ``method`` and ``path`` (``/v1/datasets/<name>/ingest``, with its query when there is
    one); ``headers`` as the sender set them (``Content-Type``, ``Content-Encoding``; the
    token is never among them); ``events``: an ingest request's events, decoded (gzip, a JSON
    array, or NDJSON), else empty; ``status``: what it was answered (None: no answer, a
    ``TransportError``); ``body``: another request's JSON body, decoded (a ``Client``'s query,
    a view it creates), else None.
    """

    method: str
    path: str
    headers: Mapping[str, str]
    events: list[dict[str, Any]]
    status: int | None = None
    body: Any = None

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
    shippers (the path names each request's dataset). Pass it to ``Client(transport=...)``
    for the client's own calls (``client.views``, ``client.datasets``, ``query``, ``ingest``):
    each returns what is scripted, e.g. ``(200, {}, [{"id": "v1", ...}])`` for
    ``client.views.list()``.

    Args:
        answers: what to answer. None (the default): 200 with the service's full ingest status
            for every request. A callable: called with each request (a ``SentRequest``), it
            returns the answer. A list (any iterable): the answers of the first requests, in
            order, then 200 for the rest. An answer is a status code (``503``), a tuple
            ``(status, headers)`` or ``(status, headers, body)`` (``(429, {"Retry-After":
            "2"})``), an exception (``loghandler.TransportError(...)``: the request gets no
            answer), or a callable as above. A 2xx without a body gets the full ingest status
            of the request's events on an ingest path, and no body on another; any other
            status, the service's error body.

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

    def send(self, method: str, path: str, body: bytes | None, *,
             headers: Mapping[str, str] | None = None,
             timeout: float | None = None) -> Answer:
        """Record the request and answer it (the transport's one call; ``timeout`` is not
        needed: nothing here waits)."""
        # A Client hands over its token's header with the request: never kept.
        headers = {k: v for k, v in (headers or {}).items() if k.lower() != "authorization"}
        raw = _unzip(body or b"", headers)
        request = SentRequest(method, path, headers, [])
        if request.dataset is not None:
            request = dataclasses.replace(request, events=_decode(raw, headers))
        elif raw:
            request = dataclasses.replace(request, body=json.loads(raw))
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
            if is_success(answer.status) and answer.complete and request.dataset is not None:
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
    if body is None and not is_success(status):
        body = {"code": status, "message": f"scripted {status} (MemoryTransport)"}
    elif body is None and request.dataset is not None:
        body = _ingest_status(request, size)
    return Answer.of(status, headers, body)


def _ingest_status(request: SentRequest, size: int) -> dict[str, Any]:
    """The service's full ingest status for a request whose every event was taken."""
    return {"ingested": len(request.events), "failed": 0, "failures": [],
            "processedBytes": size, "blocksCreated": 0, "walLength": len(request.events)}


def _failed(body: Any) -> int:
    failed = body.get("failed") if isinstance(body, dict) else None
    return failed if type(failed) is int and failed > 0 else 0


# ---------------------------------------------------------------------------- capture


class Capture:
    """What ``capture()`` gives: while active, every ``IngestHandler``, ``IngestProcessor``,
    ``IngestSink`` and ``IngestLogRecordProcessor`` of the process (those built before it, and
    those built while it is active, e.g. by the application's ``dictConfig``) ships into
    ``transport``, one ``MemoryTransport``, instead of the network; each with its own dataset
    and options (fields, scrubbing, field names, ... as configured). On exit each goes back to
    what it shipped through before. A front end built with ``send="if-token-present"`` and no
    token is captured too.

    ``events(dataset=None)`` flushes every captured front end first, then returns what they
    shipped (of ``dataset``, when given); ``requests`` the requests sent; ``clear()`` forgets
    both.
    """

    def __init__(self, flush_timeout: float = 5.0) -> None:
        self.transport = MemoryTransport()
        self._flush_timeout = flush_timeout
        self._lock = threading.Lock()
        # id(original shipper) -> (original, its stand-in); front end -> its original shipper
        self._shippers: dict[int, tuple[Any, Any]] = {}
        self._fronts: list[tuple[Any, Any]] = []
        self._active = False

    def __repr__(self) -> str:
        return f"<loghandler capture: {len(self._fronts)} front ends, {self.transport!r}>"

    def _take(self, front: Any) -> None:
        from ._engine.shipper import Shipper

        with self._lock:
            if not self._active or any(f is front for f, _ in self._fronts):
                return
            original = front.shipper
            entry = self._shippers.get(id(original))
            if entry is None or entry[0] is not original:
                options = {f.name: getattr(original.options, f.name)
                           for f in dataclasses.fields(original.options)}
                # As configured, but nothing on disk, no signal handler, and the identity
                # fields as they are already merged into ``fields``.
                options.update(spool_dir=None, handle_sigterm=False, identity=False)
                entry = (original, Shipper(None, original.dataset, transport=self.transport,
                                           **options))
                self._shippers[id(original)] = entry
            self._fronts.append((front, original))
        front.redirect(entry[1])

    def __enter__(self) -> Capture:
        from ._front import base

        with self._lock:
            if self._active:
                raise RuntimeError("this capture is active already")
            self._active = True
        base.ON_ATTACH.append(self._take)
        for front in list(base.LIVE):
            self._take(front)
        return self

    def __exit__(self, *exc: object) -> None:
        from ._front import base

        try:
            base.ON_ATTACH.remove(self._take)
        except ValueError:
            pass
        with self._lock:
            self._active = False
            fronts, self._fronts = self._fronts, []
            shippers = list(self._shippers.values())
            self._shippers.clear()
        for front, original in fronts:
            try:
                stand_in = front.shipper
                owns = front.redirect(original)
                if owns and stand_in is not original and stand_in.closed:
                    original.close(0)  # closed while captured (dictConfig replaced it)
            except Exception:
                pass
        for _, stand_in in shippers:
            stand_in.close(self._flush_timeout)

    def flush(self, timeout: float | None = None) -> bool:
        """Deliver what the captured front ends queued (into ``transport``); True when all."""
        with self._lock:
            stand_ins = [s for _, s in self._shippers.values()]
        wait = self._flush_timeout if timeout is None else timeout
        return all([s.flush(wait) for s in stand_ins])

    def events(self, dataset: str | None = None) -> list[dict[str, Any]]:
        """Flush, then the events shipped while capturing (of ``dataset``, when given)."""
        self.flush()
        return self.transport.events(dataset)

    @property
    def requests(self) -> list[SentRequest]:
        """The requests the captured front ends sent (see ``MemoryTransport.requests``)."""
        return self.transport.requests

    def clear(self) -> None:
        """Forget what was captured so far (flushed first, so nothing older arrives later)."""
        self.flush()
        self.transport.clear()


def capture(flush_timeout: float = 5.0) -> Capture:
    """Capture what every loghandler front end of the process ships, like ``caplog`` for the
    application's real logging configuration (a context manager; see ``Capture``)::

        with loghandler.testing.capture() as shipped:
            logging.config.dictConfig(settings.LOGGING)   # or built before: the same
            logging.getLogger("shop").warning("low stock", extra={"sku": "A-1"})
        assert shipped.events()[0]["sku"] == "A-1"

    ``flush_timeout``: how long ``events()`` and the exit wait for the front ends' queues.
    With pytest, the ``loghandler_capture`` fixture gives an active one.
    """
    return Capture(flush_timeout)
