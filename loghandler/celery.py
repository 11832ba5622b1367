"""Celery: keep loghandler's handlers through Celery's logging set-up, and deliver what every
worker process logged when it exits.

Celery's worker reconfigures logging when it starts (``worker_hijack_root_logger``, on by
default, removes the root logger's handlers), and its prefork pool's processes end without
atexit hooks. After ``loghandler.celery.install()``, called once where the Celery app is made
(after the handlers are added to the root logger, with ``dictConfig`` or by hand):

- the ``IngestHandler``\\ s on the root logger are put back after Celery's set-up
  (``after_setup_logger``), in the main process and in every pool process, and put on Celery's
  task logger too (``get_task_logger``'s loggers propagate there, not to the root);
- the level the application gave the root logger is kept: the worker's ``--loglevel``
  (WARNING by default) sets the root logger's level, which would hide the application's INFO
  events from every handler. When the application's level is the lower one, the root logger
  and the task logger keep it, and the worker's own output keeps the ``--loglevel``: Celery's
  console handlers and its own loggers (``celery.*``) get the worker's level;
- every worker process (the pool's children, and the main process of the solo and threads
  pools) delivers what it holds when it exits (``worker_process_shutdown``,
  ``worker_shutdown``), within ``shutdown_timeout``, on a warm shutdown (SIGTERM); a loss is
  told on stderr.

With ``install(task_reports=True)``, every task runs inside ``loghandler.context(task_id=...)``
(every line it logs carries the task's id) and each run logs one report on the logger
``loghandler.task``: ``"{task name} {state} in {duration} ms"`` with ``celery.task.name``,
``celery.task.id``, ``celery.task.state`` (SUCCESS, FAILURE, RETRY), ``celery.task.retries``,
``duration_ms``, and the exception on failure; ERROR for FAILURE, WARNING for RETRY, INFO for
SUCCESS. Eager tasks (``task_always_eager``, ``apply()``) too: the same signals fire.

``import loghandler`` does not import this module; this module imports Celery's signals only.
"""

from __future__ import annotations

import logging
import threading
from time import perf_counter
from typing import Any

from . import _reports
from ._engine import lifecycle
from ._engine.context import context
from ._front.handler import IngestHandler

__all__ = ["install"]

_kept: list[logging.Handler] = []
_installed = False
_reporting = False
# The root logger's level and handlers as the application set them, before the worker's
# logging set-up: its level is kept through the set-up, its handlers are not Celery's.
_app_level = logging.NOTSET
_app_handlers: list[logging.Handler] = []


def install(*handlers: logging.Handler, task_reports: bool = False) -> None:
    """Keep ``handlers`` (default: the ``IngestHandler``\\ s on the root logger now) on the
    root logger through Celery's logging set-up, and deliver at every worker process's exit.
    ``task_reports=True``: each task runs inside ``loghandler.context(task_id=...)`` and logs
    one report per run on ``loghandler.task``. Idempotent: a second call only adds handlers
    (and turns the task reports on, when it asks for them)."""
    global _installed, _app_level, _reporting
    if type(task_reports) is not bool:
        from ._errors import ConfigurationError

        raise ConfigurationError(
            f"loghandler.celery.install: task_reports must be True or False, not "
            f"{task_reports!r}")
    if task_reports and not _reporting:
        from celery import signals  # type: ignore[import-untyped]

        signals.task_prerun.connect(_task_started, weak=False)
        signals.task_postrun.connect(_task_ended, weak=False)
        signals.task_failure.connect(_task_failed, weak=False)
        signals.task_retry.connect(_task_retried, weak=False)
        _reporting = True
    root = logging.getLogger()
    chosen = handlers or tuple(h for h in root.handlers if isinstance(h, IngestHandler))
    for h in chosen:
        if h not in _kept:
            _kept.append(h)
    _app_level = root.level
    _app_handlers[:] = root.handlers
    if _installed:
        return
    from celery import signals

    signals.after_setup_logger.connect(_put_back, weak=False)
    signals.after_setup_task_logger.connect(_put_back_on_task_logger, weak=False)
    signals.worker_process_shutdown.connect(_deliver, weak=False)
    signals.worker_shutdown.connect(_deliver, weak=False)
    _installed = True


def _put_back(logger: logging.Logger | None = None, loglevel: int | None = None,
              **_: Any) -> None:
    root = logging.getLogger()
    _keep_levels(root, loglevel)
    if _quieter_than_the_application(loglevel):
        # Celery's own loggers speak as the worker's --loglevel says, as they did.
        celery_logger = logging.getLogger("celery")
        if celery_logger.level == logging.NOTSET:
            celery_logger.setLevel(loglevel or logging.WARNING)


def _put_back_on_task_logger(logger: logging.Logger | None = None,
                             loglevel: int | None = None, **_: Any) -> None:
    # Celery's task logger does not propagate: get_task_logger()'s events end there.
    if logger is not None:
        _keep_levels(logger, loglevel)


def _quieter_than_the_application(loglevel: int | None) -> bool:
    """The worker's level hides events at the level the application set."""
    return bool(loglevel) and _app_level != logging.NOTSET and _app_level < (loglevel or 0)


def _keep_levels(logger: logging.Logger, loglevel: int | None) -> None:
    """Our handlers on ``logger``; when the worker's level is above the application's, the
    application's level on ``logger`` and the worker's on the handlers Celery added there."""
    added_by_celery = [h for h in logger.handlers if h not in _kept and h not in _app_handlers]
    for h in _kept:
        if h not in logger.handlers:
            logger.addHandler(h)
    if _quieter_than_the_application(loglevel):
        for h in added_by_celery:
            if h.level == logging.NOTSET:
                h.setLevel(loglevel or logging.WARNING)
        logger.setLevel(_app_level)


def _deliver(**_: Any) -> None:
    try:
        lifecycle.close_all()
    except Exception:
        pass


# ---------------------------------------------------------------- task reports

_TASK_LOGGER = logging.getLogger("loghandler.task")


class _Run:
    """One task run: its context (entered at prerun, left at postrun, on the worker's thread),
    its start, and its exception."""

    __slots__ = ("context", "exc", "started")

    def __init__(self, task_id: str) -> None:
        self.context = context(task_id=task_id)
        self.started = perf_counter()
        self.exc: BaseException | None = None


# The runs under way on this thread, by task id: a task may run another eagerly inside.
_runs = threading.local()


def _table() -> dict[str, _Run]:
    table: dict[str, _Run] | None = getattr(_runs, "table", None)
    if table is None:
        table = _runs.table = {}
    return table


def _task_started(task_id: str | None = None, **_: Any) -> None:
    try:
        if task_id is None:
            return
        run = _table()[task_id] = _Run(task_id)
        run.context.__enter__()
    except Exception as error:
        _reports.fault("the task's report", error)


def _task_failed(task_id: str | None = None, exception: BaseException | None = None,
                 **_: Any) -> None:
    run = _table().get(task_id) if task_id is not None else None
    if run is not None:
        run.exc = exception


def _task_retried(request: Any = None, reason: Any = None, **_: Any) -> None:
    run = _table().get(getattr(request, "id", None) or "")
    if run is not None and isinstance(reason, BaseException):
        run.exc = reason


def _task_ended(task_id: str | None = None, task: Any = None, state: str | None = None,
                **_: Any) -> None:
    try:
        run = _table().pop(task_id, None) if task_id is not None else None
        if run is None:
            return
        duration = perf_counter() - run.started
        name = str(getattr(task, "name", None) or "?")
        retries = getattr(getattr(task, "request", None), "retries", None)
        state = str(state or "SUCCESS")
        args = (_TASK_LOGGER, name, task_id, state, retries if type(retries) is int else 0,
                duration, run.exc)
        exc = run.exc if state == "FAILURE" else None
        if state == "FAILURE":
            # Inside the context: the lines it held ship before the report.
            _reports.task_report(*args)  # type: ignore[arg-type]
        if exc is not None:
            run.context.__exit__(type(exc), exc, exc.__traceback__)
        else:
            run.context.__exit__(None, None, None)
        if state != "FAILURE":
            _reports.task_report(*args)  # type: ignore[arg-type]
    except Exception as error:
        _reports.fault("the task's report", error)
