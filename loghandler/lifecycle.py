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

from .reporter import print_exit_summary

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
    shippers = [s for s in list(_live) if not s.closed]
    if not shippers:
        return
    now = time.monotonic()
    if timeout is None:
        timeout = max(s.options.shutdown_timeout for s in shippers)
    deadline = now + timeout
    for s in shippers:
        s.begin_close(min(deadline, now + s.options.shutdown_timeout), at_exit=report)
    for s in shippers:
        s.wait_closed()
    if report:
        print_exit_summary([part for s in shippers if (part := s.exit_summary())])


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
            s.after_fork_in_child()
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
