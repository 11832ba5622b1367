"""What every front end beyond the stdlib handler shares: queueing a built event, and the
``flush`` / ``close`` / ``stats`` trio that delegates to the shipper.

The loguru sink and the OpenTelemetry processor build their event from their own record type,
then hand it here: the caller's context (``loghandler.context`` and the current span) is
attached, hold-until-error may keep it back, and the shipper's ledger takes it. (The stdlib
handler and the structlog processor inline the same steps on their hot paths.)
"""

from __future__ import annotations

import sys
from typing import Any

from ._engine.context import USED as _CONTEXT_USED
from ._engine.context import snapshot as _snapshot
from ._engine.events import CONTEXT, SIZE
from ._engine.guard import _SENDERS, _get_ident, own_record
from ._engine.hold import level_number
from ._engine.ledger import Fate
from ._engine.shipper import Shipper
from ._engine.stats import Stats

__all__ = ["FrontEnd"]

_modules = sys.modules
_OTEL_TRACE = "opentelemetry.trace"


class FrontEnd:
    """Base of a front end owning (or sharing) one ``Shipper``."""

    __slots__ = ("_owns_shipper", "shipper")

    shipper: Shipper
    _owns_shipper: bool

    def _own_logging(self, logger_name: str | None) -> bool:
        """True (and counted) when this record was caused by loghandler's own sending."""
        if _get_ident() in _SENDERS and own_record(logger_name):
            self.shipper._suppress()
            return True
        return False

    def _queue(self, event: dict[Any, Any], size: int, level: Any, trace: bool = True) -> bool:
        """Queue a built event: context, hold-until-error, then the ledger. Never raises.

        ``trace=False``: the event has its span ids already (OpenTelemetry's records)."""
        shipper = self.shipper
        try:
            if _CONTEXT_USED[0] or (trace and _OTEL_TRACE in _modules):
                snap = _snapshot(trace and shipper.options.trace_context)
                if snap:
                    event[CONTEXT] = snap
                hold = shipper._hold
                if hold is not None:
                    event[SIZE] = size
                    if hold.take(event, size, level_number(level)):
                        return True
            event[SIZE] = size
            return shipper._ledger.offer(event, size)
        except Exception:
            return self._invalid()

    def _invalid(self) -> bool:
        try:
            self.shipper._ledger.drop(Fate.DROPPED_INVALID)
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
