"""Helpers for routing structlog through the standard library to ``IngestHandler``.

``render_to_log_kwargs`` is a drop-in replacement for ``structlog.stdlib.render_to_log_kwargs``
that never makes ``logging`` raise ``KeyError: "Attempt to overwrite 'filename' in LogRecord"``
(https://github.com/hynek/structlog/issues/486): a key that ``logging`` refuses as an ``extra``
is passed as ``extra_<key>`` instead, the same name ``IngestHandler`` gives a field that clashes
with one of its own keys. No field is dropped.

This module does not import structlog (it does not need to): it is plain functions over the
event dict, importable whether or not structlog is installed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from ._encoding import free_name
from ._engine.model import METHOD_LEVELS

__all__ = ["LOG_KWARG_NAMES", "REFUSED_EXTRA_KEYS", "render_to_log_kwargs"]

# Keyword arguments of Logger.debug() & co that structlog passes through as they are.
LOG_KWARG_NAMES = ("exc_info", "stack_info", "stacklevel")

# Logger.makeRecord() raises KeyError for an extra named like a LogRecord attribute or one of
# these two. Taken from a real record so each Python version's set (taskName in 3.12+) is right.
REFUSED_EXTRA_KEYS = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {
    "message", "asctime",
}


def render_to_log_kwargs(logger: Any, method_name: str, event_dict: Mapping[str, Any]
                         ) -> dict[str, Any]:
    """Render the event dict into keyword arguments for a ``logging.Logger`` method.

    Use it as the last processor, like structlog's own: ``event`` becomes ``msg``; ``exc_info``,
    ``stack_info`` and ``stacklevel`` are passed as keyword arguments; every other key goes into
    ``extra``. Unlike structlog's, a key that ``logging`` refuses as an extra (``filename``,
    ``message``, ``name``, ``lineno``, ... see ``REFUSED_EXTRA_KEYS``) is renamed ``extra_<key>``
    (``extra_extra_<key>`` if that is taken too) instead of crashing the call.

    Two keys are left out because the record carries them already, with the same value:
    ``level`` when it equals the level of the method called (what ``add_log_level`` writes) and
    ``logger`` when it equals the stdlib logger's name (what ``add_logger_name`` writes). Any
    other value of those keys is kept.
    """
    extra: dict[str, Any] = {}
    kwargs: dict[str, Any] = {"msg": event_dict.get("event", ""), "extra": extra}
    for key, value in event_dict.items():
        if key == "event":
            continue
        if key in LOG_KWARG_NAMES:
            kwargs[key] = value
            continue
        if type(value) is str and (
            (key == "level" and value == METHOD_LEVELS.get(method_name, method_name))
            or (key == "logger" and value == getattr(logger, "name", None))
        ):
            continue
        if type(key) is not str:
            key = str(key)
        if key in REFUSED_EXTRA_KEYS:
            key = free_name(key, extra, event_dict)
        extra[key] = value
    return kwargs
