"""What every front end shares: the shipper it owns or shares, queueing a built event, and the
``flush`` / ``close`` / ``stats`` trio that delegates to the shipper.

A front end builds its event from its own record type, then hands it here (``_queue``) when a
context is in use: the caller's context (``loghandler.context`` and the current span) is
attached, hold-until-error may keep it back, and the shipper's intake takes it. Outside a
context the front ends offer to the intake directly (the hot path).
"""

from __future__ import annotations

import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any

from .. import _compiled
from .._config import ENV_DATASET, resolve_send, split_options
from .._engine.context import IN_USE, OTEL_TRACE, snapshot
from .._engine.guard import SENDERS, own_record
from .._engine.hold import Hold, level_number
from .._engine.ledger import Fate, Intake
from .._engine.model import CONTEXT, LEVELS, RECORD, SIZE
from .._engine.sampling import Sampler, span_fraction, trace_fraction
from .._engine.shipper import Shipper, make_shipper
from .._engine.stats import Stats
from .._wire.client import Client
from .._wire.settings import ENV_TOKEN, env

__all__ = ["FrontEnd"]

# Every front end alive in the process (``loghandler.testing.capture`` sends them all
# elsewhere for a while), and what is called with each new one (a capture that is active).
LIVE: weakref.WeakSet[FrontEnd] = weakref.WeakSet()
ON_ATTACH: list[Callable[[FrontEnd], None]] = []
_told_unsent: list[bool] = []

_modules = sys.modules
_get_ident = threading.get_ident


class FrontEnd:
    """Base of a front end owning (or sharing) one ``Shipper``: ``shipper``, and its faces
    ``_intake``, ``_hold`` and ``_sampler`` kept for the hot paths."""

    __slots__ = ("__weakref__", "_hold", "_intake", "_owns_shipper", "_sampler", "shipper")

    shipper: Shipper
    _intake: Intake
    _hold: Hold | None
    _sampler: Sampler | None
    _owns_shipper: bool

    def _attach(self, dataset: str | None, client: Client | None, shipper: Shipper | None,
                options: dict[str, Any]) -> None:
        """The shipper from the front end's arguments (``make_shipper``), and its faces.

        ``send`` (popped from ``options``): False, or ``"if-token-present"`` with no token
        configured, builds a shipper that sends nothing (``_unsent``)."""
        send = resolve_send(options.pop("send", None))
        if send is not True and shipper is None and (
                send is False or not _token_configured(client, options)):
            self.shipper = _unsent(dataset, options, type(self).__name__, send)
        else:
            self.shipper = make_shipper(dataset, client, shipper, options)
        self._owns_shipper = shipper is None
        self._use(self.shipper)
        LIVE.add(self)
        for hook in list(ON_ATTACH):
            hook(self)

    def _use(self, shipper: Shipper) -> None:
        """Queue into ``shipper`` from now on (``loghandler.testing.capture`` swaps it in, then
        back); the subclasses' ``_refresh`` recomputes what they derive from it."""
        self.shipper = shipper
        self._intake = shipper.intake
        self._hold = shipper.hold
        self._sampler = shipper.sampler
        self._refresh()

    def _refresh(self) -> None:
        """Recompute what a subclass derives from its shipper (its compiled fast path)."""

    def policy(self) -> tuple[bool, tuple[Any, ...] | None, tuple[int, Any] | None]:
        """What the compiled path decides on the caller's thread, as it reads it
        (``_compiled.fast_path``): ``(trace_context, sample, hold)``; ``sample``: the
        sampler's tables ``(levels, loggers, rand, trace_key, fields=' fraction, drop,
        trace_fraction, keep_level, kept_levels, kept)``, ``hold``: ``(level, take)``; None
        when not configured."""
        sampler, hold = self._sampler, self._hold
        intake = self._intake
        sample = None if sampler is None else (
            sampler.levels, sampler.loggers, sampler.rand, sampler.trace_key, sampler.static,
            lambda: intake.drop(Fate.DROPPED_SAMPLED), trace_fraction, sampler.keep_level,
            sampler.kept_levels, sampler.kept)
        return (self.shipper.options.trace_context is True, sample,
                None if hold is None else (hold.level, hold.take))

    def _wire_path(self) -> tuple[Any, ...] | None:
        """The compiled fast path of a front end whose events, to be cheaper there, must be wire
        items (``_compiled.fast_path``): None on the Python path, or when the shipper offers no
        wire (its events are then dicts, which this front end's Python path builds)."""
        wire = self.shipper.wire()
        if wire is None:
            return None
        return _compiled.fast_path(self._intake, wire, self.policy())

    def _own_logging(self, logger_name: str | None) -> bool:
        """True (and counted) when this record was caused by loghandler's own sending."""
        if SENDERS and _get_ident() in SENDERS and own_record(logger_name):
            self._intake.suppress()
            return True
        return False

    def _queue(self, event: dict[Any, Any], size: int, level: Any, trace: bool = True,
               sampled: bool = False) -> bool:
        """Queue a built event: the caller's context, sampling (unless ``sampled``: decided
        already), hold-until-error, then the intake. Never raises.

        ``trace=False``: the event has its span ids already (OpenTelemetry's records)."""
        try:
            snap = None
            contextual = IN_USE[0] or (trace and OTEL_TRACE in _modules)
            if contextual:
                snap = snapshot(trace and self.shipper.options.trace_context)
                if snap:
                    event[CONTEXT] = snap
            sampler = self._sampler
            if sampler is not None and not sampled and not _sampled_in(sampler, event, snap):
                return self._intake.drop(Fate.DROPPED_SAMPLED)
            event[SIZE] = size
            if contextual:
                hold = self._hold
                if hold is not None and hold.take(event, size, level_number(level)):
                    return True
            return self._intake.offer(event, size)
        except Exception:
            return self._invalid()

    def _invalid(self) -> bool:
        """Count an event that could not be read (``dropped_invalid``); False."""
        try:
            self._intake.drop(Fate.DROPPED_INVALID)
        except Exception:
            pass  # never break the application's logging
        return False

    def flush(self, timeout: float | None = None) -> bool:
        """Send what is queued and wait (at most ``timeout``, default ``shutdown_timeout``).

        True when everything queued at the call was delivered.
        """
        return self.shipper.flush(timeout)

    def close(self, timeout: float | None = None) -> None:
        """Flush and stop the shipper (bounded by ``timeout``); idempotent.

        A shipper passed in with ``shipper=`` belongs to the caller: it is only flushed.
        """
        if self._owns_shipper:
            self.shipper.close(timeout)
        else:
            self.shipper.flush(timeout)

    def stats(self) -> Stats:
        """The shipper's counters (see ``Shipper.stats``)."""
        return self.shipper.stats()


def _sampled_in(sampler: Sampler, event: dict[Any, Any],
                snap: tuple[dict[str, Any], int, int] | None) -> bool:
    """Does sampling keep this event (sampling.py)? Its level as shipped (a fast path's event
    holds the record's level name: item_events' rule), its logger, and the trace id it ships
    with: its own, else the span's, else the context's, else fields='s."""
    level = event.get("level")
    if RECORD in event and type(level) is str:
        level = LEVELS.get(level) or level.lower()
    rate = sampler.rate(level, event.get("logger"))
    if rate >= 1.0:
        return True
    if "trace_id" in event:
        fraction = trace_fraction(event["trace_id"])
    elif snap is not None and snap[1]:
        fraction = span_fraction(snap[1])
    elif snap is not None and "trace_id" in snap[0]:
        fraction = trace_fraction(snap[0]["trace_id"])
    else:
        fraction = sampler.static
    return sampler.keep(rate, fraction)


def _token_configured(client: Client | None, options: dict[str, Any]) -> bool:
    """Whether shipping has what it needs to authenticate: a client, a transport (which needs
    no token), ``token=``, or ``LOGHANDLER_TOKEN``."""
    return (client is not None or options.get("transport") is not None
            or bool(options.get("token")) or env(ENV_TOKEN) is not None)


class _Unsent:
    """The transport of a front end that sends nothing: never called (its shipper is closed
    before any event), and says so if it were."""

    def send(self, method: str, path: str, body: bytes, *, headers: Any = None,
             timeout: float | None = None) -> Any:
        raise RuntimeError("this loghandler front end sends nothing (send=False or no token)")

    def __repr__(self) -> str:
        return "<nothing is sent>"


def _unsent(dataset: str | None, options: dict[str, Any], kind: str,
            send: bool | str) -> Shipper:
    """A shipper that takes no event (closed at once: each is counted ``dropped_closed``), with
    the options checked as for one that ships; one line on stderr says why, once a process.
    ``loghandler.testing.capture`` still captures what such a front end would ship."""
    options = dict(options)
    options.pop("transport", None)
    _, shipper_args = split_options(options)  # the Client arguments are checked by name only
    shipper_args.update(spool_dir=None, handle_sigterm=False)
    shipper = Shipper(None, dataset or env(ENV_DATASET) or "-", transport=_Unsent(),
                      **shipper_args)
    shipper.close(0)
    if not _told_unsent:
        _told_unsent.append(True)
        why = ("send=False" if send is False else
               f'{ENV_TOKEN} is not set (send="if-token-present")')
        try:
            sys.stderr.write(f"loghandler: {why}: {kind} for dataset {shipper.dataset!r} and "
                             "the like send nothing in this process\n")
        except Exception:
            pass
    return shipper
