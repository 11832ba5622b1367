"""Process-wide lifecycle of shippers: one exit hook, and a fresh start in a forked child.

Both hold shippers through weak references, so registering never keeps one alive.
"""

from __future__ import annotations

import atexit
import functools
import os
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from .output import print_line

if TYPE_CHECKING:
    from .shipper import Shipper

_live: weakref.WeakSet[Shipper] = weakref.WeakSet()


def register(shipper: Shipper) -> None:
    _live.add(shipper)


def live_shippers() -> list[Shipper]:
    return list(_live)


def close_all(timeout: float | None = None, *, report: bool = True) -> None:
    """Close every live shipper within one overall time limit, then report what was not sent.

    ``timeout`` defaults to the largest ``shutdown_timeout`` among them: the exit of the whole
    process is bounded by it, not one timeout per shipper. Runs from atexit, before
    ``logging.shutdown`` (atexit is LIFO and logging registered first), so by the time logging
    calls ``flush()`` and ``close()`` on the handlers there is nothing left to wait for.
    """
    shippers = [s for s in list(_live) if not s._closed]
    if not shippers:
        return
    now = time.monotonic()
    if timeout is None:
        timeout = max(s.options.shutdown_timeout for s in shippers)
    deadline = now + timeout
    for s in shippers:
        s._exit_summary = report
        s._begin_close(min(deadline, now + s.options.shutdown_timeout))
    for s in shippers:
        s._wait_closed()
    if report:
        _report_undelivered(shippers)


def _report_undelivered(shippers: list[Shipper]) -> None:
    parts = []
    for s in shippers:
        st = s.stats()
        lost = st.dropped + st.failed + st.queued
        if lost or st.spooled:
            bits = []
            if st.dropped:
                reasons = [f"{n} {r}" for r, n in (
                    ("queue full", st.dropped_queue_full), ("at exit", st.dropped_shutdown),
                    ("too large", st.dropped_too_large), ("after close", st.dropped_closed),
                    ("invalid", st.dropped_invalid)) if n]
                bits.append(f"{st.dropped} dropped ({', '.join(reasons)})")
            if st.failed:
                bits.append(f"{st.failed} failed")
            if st.queued:
                bits.append(f"{st.queued} still queued")
            if st.spooled:
                bits.append(f"{st.spooled} spooled to {s.options.spool_dir} for later delivery")
            cause = f" ({s._exit_cause})" if s._exit_cause else ""
            parts.append(f"dataset {s.dataset!r}: {st.delivered} of {st.submitted} delivered, "
                         + ", ".join(bits) + cause)
    if parts:
        print_line("loghandler: at exit: " + "; ".join(parts) + " (see stats())")


def _at_exit() -> None:
    try:
        close_all()
    except Exception:  # never disturb the interpreter's exit
        pass


def _after_fork_in_child() -> None:
    from .guard import _SENDERS

    _SENDERS.clear()
    for s in list(_live):
        try:
            s._after_fork_in_child()
        except Exception:
            pass


atexit.register(_at_exit)
os.register_at_fork(after_in_child=_after_fork_in_child)


F = TypeVar("F", bound=Callable[..., Any])


class flushing:  # lower case: used like a function, `with flushing(h):` or `@flushing(h)`
    """Flush handlers, processors or shippers when a block or function ends.

    For serverless functions, whose process is frozen between invocations, so nothing is sent
    in the background while it sleeps::

        @flushing(handler, timeout=2.0)
        def lambda_handler(event, context): ...

    With no targets, every live shipper of the process is flushed.
    """

    def __init__(self, *targets: Any, timeout: float | None = 2.0) -> None:
        self._targets = targets
        self._timeout = timeout
        self.delivered: bool | None = None

    def __enter__(self) -> flushing:
        return self

    def __exit__(self, *exc: object) -> None:
        self.delivered = self.flush()

    def flush(self) -> bool:
        targets = self._targets or tuple(live_shippers())
        deadline = None if self._timeout is None else time.monotonic() + self._timeout
        ok = True
        for target in targets:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                ok = bool(target.flush(remaining)) and ok
            except Exception:
                ok = False
        return ok

    def __call__(self, func: F) -> F:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self:
                return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]
