"""``Wake``: how the application's threads wake the flusher, safe against Ctrl+C.

``threading.Event`` guards its flag with a ``Condition`` whose ``__enter__`` is Python code: a
signal handler that raises (Ctrl+C's ``KeyboardInterrupt``) just after the lock is taken and
before the ``with`` block begins leaves that lock held for ever, and every later ``set()`` and
``wait()`` of that event hangs, ``close()`` at exit included. The application's threads set
these events on the logging call's slow path, so an interrupt landing there once (seen in one
run of 60,000 interrupted calls) hung the process. ``Wake`` keeps the same four operations on a
flag and a ``queue.SimpleQueue``, whose ``put`` and ``get`` are single C calls that leave no
lock behind, whatever interrupts them.
"""

from __future__ import annotations

import queue
import time

__all__ = ["Wake"]

_monotonic = time.monotonic
_Empty = queue.Empty


class Wake:
    """``set()``, ``is_set()``, ``clear()``, ``wait(timeout)`` as ``threading.Event``'s.

    A ``set()`` cut short by an interrupt between its two steps leaves the flag set without a
    token: a waiter then sees it at its timeout, not at once (late, never lost)."""

    __slots__ = ("_flag", "_tokens")

    def __init__(self) -> None:
        self._flag = False
        self._tokens: queue.SimpleQueue[None] = queue.SimpleQueue()

    def is_set(self) -> bool:
        return self._flag

    def set(self) -> None:
        if not self._flag:
            self._flag = True
            self._tokens.put(None)

    def clear(self) -> None:
        # The flag first: a set() that comes after it leaves a token the drain may take, but
        # then the flag says set, which is what wait() reads.
        self._flag = False
        get = self._tokens.get_nowait
        try:
            while True:
                get()
        except _Empty:
            pass

    def wait(self, timeout: float) -> bool:
        """True once set (at once if it is), False when ``timeout`` seconds pass first."""
        if self._flag:
            return True
        deadline = _monotonic() + timeout
        while True:
            remaining = deadline - _monotonic()
            if remaining <= 0:
                return self._flag
            try:
                self._tokens.get(timeout=remaining)
            except _Empty:
                return self._flag
            if self._flag:
                self._tokens.put(None)  # for any other waiter; clear() takes it back
                return True
            # A token a clear() raced with: not a wake-up, wait on.
