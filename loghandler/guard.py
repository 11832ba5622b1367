"""Which threads are loghandler's own, and whether logging's lock is held.

Records logged on our own threads are never shipped (no feedback loops); waits are skipped where
they could deadlock against logging's module lock.
"""

from __future__ import annotations

import threading

__all__ = ["in_sender_thread", "logging_lock_held"]

# Threads currently doing loghandler's own I/O (the flusher threads, and a closing thread that
# sends synchronously at interpreter exit). Anything they log -- urllib3's debug lines, a user's
# on_error callback -- is never shipped: that is how a handler on the root logger at DEBUG
# avoids shipping its own HTTP logs, forever.
_SENDERS: set[int] = set()
_get_ident = threading.get_ident


def in_sender_thread() -> bool:
    return _get_ident() in _SENDERS


def logging_lock_held() -> bool:
    # dictConfig() and logging.shutdown(handlers) call flush()/close() holding logging's module
    # lock; a flusher that logs (urllib3) may be waiting for that lock. Waiting for it from there
    # would deadlock, so such calls hand the work to the flusher and return at once.
    import logging

    owned = getattr(logging._lock, "_is_owned", None)  # type: ignore[attr-defined]
    try:
        return bool(owned and owned())
    except Exception:
        return False
