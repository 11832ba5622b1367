"""What loghandler's own sending causes, and whether logging's lock is held.

Records that loghandler's own sending causes are never shipped (no feedback loops), and only
those: while a thread is inside loghandler's HTTP call, the records of its HTTP stack's loggers
(urllib3's debug lines); while it runs the user's ``on_error``, everything that logs. Anything
else logged on the flusher thread -- a ``__del__`` the cyclic GC happens to run there, a value's
``__repr__`` while a batch is encoded -- is the application's, and ships.
"""

from __future__ import annotations

import sys
import threading

from .._wire.watchdog import block_sigterm_in_this_thread

__all__ = ["SENDERS", "after_fork_in_child", "block_sigterm_in_this_thread", "in_sender_thread",
           "logging_lock_held", "own_record"]

HTTP = 1  # inside loghandler's HTTP call: urllib3's records are ours
CALLBACK = 2  # inside on_error: everything logged is ours

# Threads doing loghandler's own sending right now: ident -> HTTP or CALLBACK. Set only around
# the call itself, so the check on the hot path (`SENDERS and own_record(name)` in the front
# ends, the dict's size read by the compiled calls) is almost always an empty dict.
SENDERS: dict[int, int] = {}
_SENDERS = SENDERS  # the name the engine's own modules import
# Threads running a shipper's sending loop (flusher threads, a closing thread that sends at
# interpreter exit): they must never wait for a flusher, which would be waiting for themselves.
_FLUSHERS: set[int] = set()
_get_ident = threading.get_ident
_sys_modules = sys.modules  # kept: late in shutdown, `import` fails (logging_lock_held)
_OWN_LOGGERS = ("urllib3",)


def after_fork_in_child() -> None:
    """In a forked child: no thread of the parent sends there."""
    _SENDERS.clear()
    _FLUSHERS.clear()


def in_sender_thread() -> bool:
    """True on a thread running a shipper's sending loop (never wait for a flusher there)."""
    return _get_ident() in _FLUSHERS


def own_record(name: str | None) -> bool:
    """True when a record (logger ``name``; None for an event without one) logged now on this
    thread was caused by loghandler's own sending: the one rule, which every front end and
    ``Shipper.submit`` ask as ``SENDERS and own_record(name)`` (an empty dict, the usual case,
    costs them no call; the compiled calls test the same emptiness)."""
    mode = _SENDERS.get(_get_ident())
    if mode is None:
        return False
    if mode == CALLBACK:
        return True
    return isinstance(name, str) and name.split(".", 1)[0] in _OWN_LOGGERS


class sending:
    """``with sending(HTTP):`` marks this thread as doing loghandler's own sending (nestable)."""

    __slots__ = ("_ident", "_mode", "_prev")

    def __init__(self, mode: int) -> None:
        self._mode = mode

    def __enter__(self) -> None:
        self._ident = ident = _get_ident()
        self._prev = _SENDERS.get(ident)
        _SENDERS[ident] = max(self._mode, self._prev or 0)

    def __exit__(self, *exc: object) -> None:
        if self._prev is None:
            _SENDERS.pop(self._ident, None)
        else:
            _SENDERS[self._ident] = self._prev


def logging_lock_held() -> bool:
    # dictConfig() and logging.shutdown(handlers) call flush()/close() holding logging's module
    # lock; a flusher that logs (urllib3) may be waiting for that lock. Waiting for it from there
    # would deadlock, so such calls hand the work to the flusher and return at once.
    logging = _sys_modules.get("logging")
    if logging is None:
        return False
    owned = getattr(getattr(logging, "_lock", None), "_is_owned", None)
    try:
        return bool(owned and owned())
    except Exception:
        return False
