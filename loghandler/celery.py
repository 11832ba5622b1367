"""Celery: keep loghandler's handlers through Celery's logging set-up, and deliver what every
worker process logged when it exits.

Celery's worker reconfigures logging when it starts (``worker_hijack_root_logger``, on by
default, removes the root logger's handlers), and its prefork pool's processes end without
atexit hooks. After ``loghandler.celery.install()``, called once where the Celery app is made
(after the handlers are added to the root logger, with ``dictConfig`` or by hand):

- the ``IngestHandler``\\ s on the root logger are put back after Celery's set-up
  (``after_setup_logger``), in the main process and in every pool process;
- every worker process (the pool's children, and the main process of the solo and threads
  pools) delivers what it holds when it exits (``worker_process_shutdown``,
  ``worker_shutdown``), within ``shutdown_timeout``, on a warm shutdown (SIGTERM); a loss is
  told on stderr.

``import loghandler`` does not import this module; this module imports Celery's signals only.
"""

from __future__ import annotations

import logging
from typing import Any

from ._engine import lifecycle
from ._front.handler import IngestHandler

__all__ = ["install"]

_kept: list[logging.Handler] = []
_installed = False


def install(*handlers: logging.Handler) -> None:
    """Keep ``handlers`` (default: the ``IngestHandler``\\ s on the root logger now) on the
    root logger through Celery's logging set-up, and deliver at every worker process's exit.
    Idempotent: a second call only adds handlers."""
    global _installed
    chosen = handlers or tuple(h for h in logging.getLogger().handlers
                               if isinstance(h, IngestHandler))
    for h in chosen:
        if h not in _kept:
            _kept.append(h)
    if _installed:
        return
    from celery import signals  # type: ignore[import-untyped]

    signals.after_setup_logger.connect(_put_back, weak=False)
    signals.worker_process_shutdown.connect(_deliver, weak=False)
    signals.worker_shutdown.connect(_deliver, weak=False)
    _installed = True


def _put_back(logger: logging.Logger | None = None, **_: Any) -> None:
    root = logging.getLogger()
    for h in _kept:
        if h not in root.handlers:
            root.addHandler(h)


def _deliver(**_: Any) -> None:
    try:
        lifecycle.close_all()
    except Exception:
        pass
