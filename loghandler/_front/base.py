"""What every front end shares: the shipper it owns or shares, queueing a built event, and the
``flush`` / ``close`` / ``stats`` trio that delegates to the shipper.

A front end builds its event from its own record type, then hands it here (``_queue``) when a
context is in use: the caller's context (``loghandler.context`` and the current span) is
attached, hold-until-error may keep it back, and the shipper's intake takes it. Outside a
context the front ends offer to the intake directly (the hot path).
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Callable
from typing import Any

from .._config import ENV_DATASET, resolve_send, split_options
from .._engine import compiled
from .._engine.context import in_use, snapshot
from .._engine.fastpath import CallerPlan, FastPath, HoldPlan, ItemPlan, SamplePlan, fast_path
from .._engine.guard import SENDERS, own_record
from .._engine.hold import Hold
from .._engine.ledger import Fate, Intake
from .._engine.model import CONTEXT
from .._engine.sampling import Sampler, trace_fraction
from .._engine.shipper import Shipper, make_shipper, queue_built
from .._engine.stats import Stats
from .._wire.client import Client
from .._wire.settings import ENV_TOKEN, env

__all__ = ["FrontEnd"]

# Every front end alive in the process (``loghandler.testing.capture`` sends them all
# elsewhere for a while), and what is called with each new one (a capture that is active).
LIVE: weakref.WeakSet[FrontEnd] = weakref.WeakSet()
ON_ATTACH: list[Callable[[FrontEnd], None]] = []
_told_unsent: list[bool] = []


class FrontEnd:
    """Base of a front end owning (or sharing) one ``Shipper``: ``shipper``, and its faces
    ``_intake``, ``_hold`` and ``_sampler`` kept for the hot paths."""

    __slots__ = ("__weakref__", "_hold", "_intake", "_owns_shipper", "_sampler", "shipper")

    shipper: Shipper
    _intake: Intake
    _hold: Hold | None
    _sampler: Sampler | None
    _owns_shipper: bool
    # The front end's Python path for one call (its subclass's), which the compiled code hands
    # what it does not take (fastpath.FastPath.python_path).
    _put: Callable[..., Any]

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

    def redirect(self, shipper: Shipper) -> bool:
        """Queue into ``shipper`` from now on: the one swap from outside
        (``loghandler.testing.capture`` points a live front end at a stand-in, then back at
        its original). Returns whether this front end built its original shipper itself (it
        then closes it)."""
        self._use(shipper)
        return self._owns_shipper

    def _refresh(self) -> None:
        """Recompute what a subclass derives from its shipper (its compiled fast path)."""

    def caller_plan(self) -> CallerPlan:
        """What the compiled path decides on the caller's thread (fastpath.CallerPlan)."""
        sampler, hold = self._sampler, self._hold
        intake = self._intake
        sample = None if sampler is None else SamplePlan(
            sampler.levels, sampler.loggers, sampler.rand, sampler.trace_key, sampler.static,
            lambda: intake.drop(Fate.DROPPED_SAMPLED), trace_fraction, sampler.keep_level,
            sampler.kept_levels, sampler.kept)
        return CallerPlan(self.shipper.options.trace_context is True, sample,
                          None if hold is None else HoldPlan(*hold.plan()))

    def _compiled_path(self, python_path: Callable[..., Any], plan: ItemPlan | None
                       ) -> FastPath | None:
        """This front end's compiled fast path (fastpath.FastPath): None on the Python path.
        ``python_path``: its own Python path, bound, which the compiled code hands what it
        does not take."""
        if not compiled.ACTIVE:
            return None
        return fast_path(self._intake, plan, self.caller_plan(), self._queue, self._invalid,
                         python_path)

    def _wire_path(self) -> FastPath | None:
        """The compiled fast path of a front end whose events, to be cheaper there, must be
        pre-encoded items: None on the Python path, or when the shipper offers no item plan
        (its events are then dicts, which this front end's Python path builds)."""
        plan = self.shipper.item_plan()
        if plan is None:
            return None
        return self._compiled_path(self._put, plan)

    def _own_logging(self, logger_name: str | None) -> bool:
        """True (and counted) when this record was caused by loghandler's own sending."""
        if SENDERS and own_record(logger_name):
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
            contextual = in_use(trace)
            if contextual:
                snap = snapshot(trace and self.shipper.options.trace_context)
                if snap:
                    event[CONTEXT] = snap
            return queue_built(self._intake, self._sampler, self._hold if contextual else None,
                               event, size, level, snap, sampled)
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


def _token_configured(client: Client | None, options: dict[str, Any]) -> bool:
    """Whether shipping has what it needs to authenticate: a client, a transport (which needs
    no token), ``token=``, or ``LOGHANDLER_TOKEN``."""
    return (client is not None or options.get("transport") is not None
            or bool(options.get("token")) or env(ENV_TOKEN) is not None)


class _Unsent:
    """The transport of a front end that sends nothing: never called (its shipper is closed
    before any event), and says so if it were."""

    def send(self, method: str, path: str, body: bytes | None, *, headers: Any = None,
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
