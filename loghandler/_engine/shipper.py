"""``Shipper``: the engine shared by the logging handler and the structlog processor.

One ``Shipper`` per dataset: a bounded queue that application threads append to in O(1), and one
daemon flusher thread that cuts batches, encodes them, compresses them and posts them, retrying
with backoff. Nothing here ever blocks an application thread on I/O or raises into it.

The engine is split by who owns the data (``docs/architecture.md``):

- ``ledger/``: the queue, its bounds, the sequence numbers and the counters (``stats()``), with
  the accounting invariant ``submitted == delivered + dropped + failed + spooled + queued``;
- ``worker.py``: the flusher thread's loop (take a batch, post it, settle; replay the spool);
  ``posting.py`` one request's tries, ``spilling.py`` what cannot be delivered (the spool or a
  count); ``batches.py`` cuts batches, ``bisector.py`` splits what the service refuses,
  ``policy.py`` says what each answer means, ``transport.py`` carries a request to the service
  (``transport=``);
- ``reporter.py``: the stderr lines, ``on_error`` and the exit summary;
- ``spool.py``: the disk spool (``spoolfiles.py`` its files, ``spoolreplay.py`` its replay);
  ``lifecycle.py``: exit, fork, SIGTERM;
- ``flusher.py``: the ``Flusher``, the flusher thread and the parts it works with, which is
  what ``lifecycle.py`` closes at exit and after a fork, and what delivers the events of a
  shipper dropped without ``close()``;
- this module: ``Shipper``, the facade (``submit``, ``flush``, ``close``, ``stats`` and what
  users read: ``dataset``, ``client``, ``closed``, ``options``), and the one queueing step of
  a built event (``queue_built``).
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from .._config import (
    SHIPPING_OPTIONS_DOC,
    documented,
    resolve_dataset,
    shipper_options,
    split_options,
)
from .._errors import ConfigurationError
from .._output import redact, shown
from .._wire.client import Client, shared_client
from .._wire.imports import preload_http
from . import lifecycle as lifecycle
from .events import RECORD as _RECORD
from .events import SIZE as _SIZE
from .events import SUBMIT_EVENT_SIZE, SUBMIT_FIELD_SIZE, deep_size
from .fastpath import ItemPlan, item_plan
from .flusher import Flusher
from .guard import _SENDERS, logging_lock_held, own_record
from .hold import Hold, level_number
from .identity import with_identity
from .ledger import FAST_ITEM_BYTES, Count, Fate, Intake
from .model import LEVELS
from .sampling import ABSENT, Sampler
from .stats import Stats
from .transport import HttpTransport, Transport

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from .._options import ShippingOptions

__all__ = ["FAST_ITEM_BYTES", "Shipper", "Stats", "make_shipper", "queue_built"]

_monotonic = time.monotonic


@documented(('Options (keyword arguments; docs/configuration.md: why each default):',
             SHIPPING_OPTIONS_DOC))
class Shipper:
    """Queue events and ship them in the background to one dataset.

    ``submit(event)`` is O(1) and never raises; one daemon thread batches, compresses and posts,
    retrying with backoff. ``flush(timeout)``, ``close(timeout)`` and ``stats()`` as on the
    handler; an exit hook delivers what is queued within ``shutdown_timeout``. (The front ends
    queue through its faces for them: ``intake``, ``hold`` and ``wire()``.)

    Args:
        client (Client | None): the connection (token, address) to ship through; shared
            freely. May be None with a ``transport``.
        dataset (str | None): the dataset to ship to. Default: ``LOGHANDLER_DATASET``.

    Raises:
        ConfigurationError: a missing dataset, an unknown or invalid option, or a Client
            argument (``token=``, ``url=``, ...) given here instead of to the Client.
    """

    def __init__(self, client: Client | None = None, dataset: str | None = None, *,
                 transport: Transport | None = None,
                 **options: Unpack[ShippingOptions]) -> None:
        if client is not None and not isinstance(client, Client):
            raise ConfigurationError("client must be a loghandler.Client")
        if transport is None:
            if client is None:
                raise ConfigurationError(
                    "pass the client to ship through (a loghandler.Client), or a transport= "
                    "(e.g. loghandler.testing.MemoryTransport() in tests)")
        elif not callable(getattr(transport, "send", None)):
            raise ConfigurationError(
                "transport must have a send(method, path, body, *, headers, timeout) method "
                "returning the service's answer, as loghandler.testing.MemoryTransport has")
        self._client = client
        self.dataset = resolve_dataset(dataset)
        self.options = with_identity(shipper_options(options))
        if transport is None:
            assert client is not None
            # The HTTP stack is imported now, on the thread that builds the shipper, not by the
            # flusher's first request: at full speed each file an import reads hands the GIL to
            # the application, which gives it back a switch interval (5 ms) later. Some 1,300
            # system calls of imports held up the first delivery for over half a second while
            # the queue filled (20,000 events dropped of 200,000 in benchmark scenario 1).
            if client.transport is None:  # a client's own transport= needs no HTTP stack
                preload_http()
            transport = HttpTransport(client, self.options.batch_size)
        self.transport = transport
        # The flusher holds no reference to the shipper: a shipper the application drops
        # without close() can be collected, and then its flusher delivers what it holds and
        # ends (Flusher.orphaned).
        flusher = self._flusher = Flusher(client, self.dataset, self.options, transport)
        self._ledger = flusher.ledger
        self._sender = flusher.worker
        o = self.options
        # Hold-until-error (hold.py): the front ends look here inside a context only.
        self._hold = (Hold(o.hold_level, o.hold_size, o.hold_total, self._ledger)
                      if o.hold_level else None)
        # Sampling (sampling.py), decided by the front ends on the callers' threads.
        self._sampler = (Sampler(o.sample_levels, o.sample_loggers,
                                 trace_key="trace_id" not in o.exclude_fields, fields=o.fields,
                                 keep_level=o.keep_level)
                         if o.sample_levels or o.sample_loggers else None)
        flusher.hold = self._hold  # what it holds is counted when the shipper closes
        if o.ingest_params:  # read by the service from each ingest request's query
            self._sender.poster.set_query(dict(o.ingest_params))
        lifecycle.register(flusher, o.handle_sigterm)
        finalizer = weakref.finalize(self, flusher.orphaned)
        finalizer.atexit = False  # at exit the exit hook closes the live ones
        flusher.start_if_spooled()

    def __repr__(self) -> str:
        where = (f"url={self._client.url!r}" if self._client is not None
                 else f"transport={self.transport!r}")
        return redact(f"Shipper(dataset={shown(self.dataset)}, {where})")

    @property
    def client(self) -> Client | None:
        """The client shipped through (None when only a ``transport=`` was given)."""
        return self._client

    @property
    def owns_client(self) -> bool:
        """Whether ``close()`` closes the client too, with the last shipper using it: True for
        one the library built from plain arguments (a handler's ``token=``, ``url=``); a
        client the user passed in is theirs to close."""
        return self._flusher.owns_client

    @owns_client.setter
    def owns_client(self, value: bool) -> None:
        self._flusher.owns_client = value

    @property
    def closed(self) -> bool:
        """True once ``close()`` began; later submits are dropped."""
        return self._ledger.closed

    # ------------------------------------------------------------------ front ends' faces

    @property
    def intake(self) -> Intake:
        """The queue, as the front ends use it (``offer``, ``put``, ``drop``, ``suppress``, the
        fast path's ``gate``): the same object for the shipper's life, also after fork."""
        return self._ledger

    @property
    def hold(self) -> Hold | None:
        """Hold-until-error (``hold_level``), which a front end asks inside a context; None
        when not configured."""
        return self._hold

    @property
    def sampler(self) -> Sampler | None:
        """Sampling (``sample_levels``, ``sample_loggers``), which a front end decides before
        queueing; None when not configured."""
        return self._sampler

    def item_plan(self) -> ItemPlan | None:
        """What the compiled fast path needs to queue events as their final JSON
        (fastpath.ItemPlan), or None when the flusher has work to do per event."""
        return item_plan(self.options, self._sender.finish)

    # ------------------------------------------------------------------ application side

    def submit(self, event: Mapping[str, Any]) -> bool:
        """Queue one event (a dict). O(1); never blocks on I/O and never raises.

        Returns False when the event was dropped (queue full, closed, not a mapping).
        The event is copied shallowly; values JSON cannot carry are converted when the batch is
        encoded on the flusher thread.
        """
        try:
            if _SENDERS and own_record(None):
                return self._suppress()
            if type(event) is not dict:
                if not isinstance(event, Mapping):
                    return self._ledger.drop(Fate.DROPPED_INVALID)
                event = dict(event)
            else:
                event = event.copy()
            return queue_built(self._ledger, self._sampler, self._hold, event, _estimate(event),
                               event.get("level"))
        except Exception:
            return False

    def _suppress(self) -> bool:
        """Count a record logged on the flusher thread (urllib3, on_error), never shipped. False."""
        self._ledger.count(Count.SUPPRESSED)
        return False

    # ------------------------------------------------------------------ flush / close / stats

    def flush(self, timeout: float | None = None) -> bool:
        """Send what is queued now and wait until it is settled.

        Returns True when everything queued at the call was delivered; False when any of it was
        dropped, failed or spooled, or when ``timeout`` (default: ``shutdown_timeout``) passed.
        An event refused since the last flush as too large for any request also makes it False.
        """
        try:
            return self._flusher.flush(timeout)
        except Exception:
            return False

    def close(self, timeout: float | None = None) -> None:
        """Flush, then stop the flusher thread. Idempotent; bounded by ``timeout``.

        ``timeout`` defaults to ``shutdown_timeout``. What cannot be delivered in time is spooled
        (with ``spool_dir``) or counted as ``dropped_shutdown``. Later submits are dropped.
        """
        try:
            what = "shutdown_timeout" if timeout is None else "close()'s timeout"
            timeout = self.options.shutdown_timeout if timeout is None else max(0.0, timeout)
            flusher = self._flusher
            flusher.begin_close(_monotonic() + timeout, what=what, seconds=timeout)
            if not logging_lock_held():
                flusher.wait_closed()
                flusher.release_client()
                lifecycle.end_idle_threads()
        except Exception:
            pass

    def stats(self) -> Stats:
        """A consistent snapshot of the counters."""
        st = self._ledger.snapshot()
        spool = self._flusher.spool
        if spool is not None and spool.unsynced:  # the spool's own count (Spool.sync)
            st = replace(st, spool_unsynced=spool.unsynced)
        return st

    def __enter__(self) -> Shipper:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _estimate(event: dict[str, Any]) -> int:
    # Rough memory cost of a queued event (events.py, "the memory model").
    size = SUBMIT_EVENT_SIZE
    for value in event.values():
        size += SUBMIT_FIELD_SIZE
        t = type(value)
        if t is str:
            size += len(value)
        elif t is dict or t is list or t is tuple:
            size += deep_size(value)  # held by reference until encoded: it counts whole
    return size


def queue_built(intake: Intake, sampler: Sampler | None, hold: Hold | None,
                event: dict[Any, Any], size: int, level: Any,
                snap: tuple[dict[str, Any], int, int] | None = None,
                sampled: bool = False) -> bool:
    """The one queueing step of a built event (``Shipper.submit``, every front end's
    ``FrontEnd._queue``): sampling (``Sampler.decide``; unless ``sampled``: decided already),
    its size, hold-until-error (inside a context), then the intake. ``snap``: the caller's
    context (``context.snapshot``), whose span and fields give the trace id sampling reads."""
    if sampler is not None and not sampled:
        # The level as shipped: a fast path's event holds the record's level name
        # (item_events' rule).
        shipped = event.get("level")
        if _RECORD in event and type(shipped) is str:
            shipped = LEVELS.get(shipped) or shipped.lower()
        own = event.get("trace_id", ABSENT)
        if not (sampler.decide(shipped, event.get("logger"), own) if snap is None else
                sampler.decide(shipped, event.get("logger"), own, snap[1],
                               snap[0].get("trace_id", ABSENT))):
            return intake.drop(Fate.DROPPED_SAMPLED)
    event[_SIZE] = size
    if hold is not None and hold.take(event, size, level_number(level)):
        return True
    return intake.offer(event, size)


def make_shipper(dataset: str | None, client: Client | None, shipper: Shipper | None,
                 options: dict[str, Any]) -> Shipper:
    """The shipper for a front end (handler, processor) built from its arguments."""
    if shipper is not None:
        if options or client is not None or dataset is not None:
            raise ConfigurationError(
                "pass either shipper=... or dataset/client/options, not both: the shipper "
                "already has its dataset, client and options"
            )
        if not isinstance(shipper, Shipper):
            raise ConfigurationError("shipper must be a loghandler.Shipper")
        return shipper
    options = dict(options)
    transport = options.pop("transport", None)
    client_args, shipper_args = split_options(options)
    if client is not None:
        if client_args:
            raise ConfigurationError(
                f"pass either client=... or Client arguments ({', '.join(sorted(client_args))}), "
                "not both"
            )
        return Shipper(client, dataset, transport=transport, **shipper_args)
    if transport is not None and not client_args:
        return Shipper(None, dataset, transport=transport, **shipper_args)
    # With Client arguments and a transport, the client built here is the transport's too
    # (its own calls go where the shipper's do), so it is not the one shared by address.
    built = (shared_client(**client_args) if transport is None
             else Client(**client_args, transport=transport))
    shipper = Shipper(built, dataset, transport=transport, **shipper_args)
    shipper.owns_client = True
    return shipper
