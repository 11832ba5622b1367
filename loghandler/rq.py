"""RQ: a worker class whose work horses deliver what each job logged before they exit.

An RQ worker runs each job in a work horse, a process forked for the job that ends in
``os._exit()``: no atexit hook runs, so whatever the job logged and was still queued would
vanish. Run the worker with ``--worker-class loghandler.rq.Worker`` (or use
``loghandler.rq.Worker`` where you build workers yourself): after each job, in the work
horse, every shipper is closed within its ``shutdown_timeout``, delivering what is queued, and
a loss is told on stderr. In a worker that runs jobs in its own process (``SimpleWorker``), the
shippers are flushed instead, so they go on working.

``import loghandler`` does not import this module, and this module imports RQ only here.
"""

from __future__ import annotations

from typing import Any

import rq

from ._engine import lifecycle

__all__ = ["Worker", "after_job"]


def after_job(in_work_horse: bool) -> None:
    """Deliver what the job logged: close every shipper in a work horse (it exits next),
    flush them in a worker that goes on. Bounded by ``shutdown_timeout``; never raises."""
    try:
        if in_work_horse:
            lifecycle.close_all()
        else:
            for shipper in lifecycle.live_shippers():
                shipper.flush()
    except Exception:
        pass


class Worker(rq.Worker):
    """``rq.Worker`` whose work horses deliver each job's events before ``os._exit()``."""

    def perform_job(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().perform_job(*args, **kwargs)
        finally:
            after_job(bool(getattr(self, "_is_horse", False)))
