"""The event model's constants: one table each, read by the Python code and handed to the
compiled path (``loghandler/_compiled.py``, ``configure``) as they are.

- ``HEAD``: the record-to-event mapping. Every event of a log record starts with these keys,
  in this order, taken from the stdlib's ``LogRecord`` and from loguru's record as the columns
  say. The handler's fast path, ``record_to_event``, the loguru sink and ``_speedups.c`` all
  read it; nothing else names a record's attributes.
- ``PLAIN``: the JSON types an event takes as they are; ``INIT_KEYS``, ``STANDARD`` and
  ``RESERVED``: which of a record's attributes are extras, and which extras must be renamed.
- ``LEVELS``, ``METHOD_LEVELS``: level names.
- The queue items' private keys (``SIZE``, ``RECORD``, ``CONTEXT``; events.py "Queue items")
  and the memory model (rough bytes a queued event holds, for ``max_queue_bytes``).
- ``FAST_ITEM_BYTES``: the largest item the ledger's lock-free admission takes.

A leaf: it imports nothing of the package but the leaf ``_levels`` (the stdlib's level names),
so that every other module (and the compiled path's seam) can read it without an import cycle.
"""

from __future__ import annotations

import logging
from typing import Any

from .._levels import level_names

__all__ = [
    "CONTEXT", "COPIED_ATTRS", "FAST_HEAD", "FAST_ITEM_BYTES", "FORMATTER", "HEAD", "INIT_KEYS",
    "LEVELS", "METHOD_LEVELS", "OTEL_CODE", "OTEL_EXCEPTION", "OTEL_NUMBERS", "OTEL_SEVERITY",
    "OTEL_TEXTS", "PLAIN", "RECORD", "RECORD_ATTRS", "RESERVED", "SIZE", "SPECIAL", "STANDARD",
    "STRUCTLOG_SKIP",
]

# Plain object() instances: equal only to themselves, so no field name can be them, and not a GC
# type, so a dict using them as keys can stay untracked (an instance of any class of ours is).
SIZE: Any = object()  # the item's rough size (events.py "Queue items")
RECORD: Any = object()  # _time and level still raw: the flusher formats them
CONTEXT: Any = object()  # the caller's context snapshot, merged by the flusher

# The record-to-event mapping: (event key, LogRecord attribute, loguru record key, attribute of
# that value). "message" is made, not copied (getMessage(); loguru's "message"); "_time" is
# loguru's datetime as epoch seconds (its timestamp()). The order is the event's.
HEAD: tuple[tuple[str, str | None, str, str | None], ...] = (
    ("_time", "created", "time", None),
    ("level", "levelname", "level", "name"),
    ("message", None, "message", None),
    ("logger", "name", "name", None),
    ("module", "module", "module", None),
    ("function", "funcName", "function", None),
    ("line", "lineno", "line", None),
    ("file", "pathname", "file", "path"),
    ("process", "process", "process", "id"),
    ("thread", "threadName", "thread", "name"),
)
# The head's keys in order (a fast-path event's first keys); the LogRecord attributes read into
# them, as (attribute, key), the message aside; and those among them taken as they are (all
# but _time and level, which are formatted).
FAST_HEAD = tuple(key for key, _, _, _ in HEAD)
RECORD_ATTRS = tuple((attr, key) for key, attr, _, _ in HEAD if attr is not None)
COPIED_ATTRS = tuple((attr, key) for attr, key in RECORD_ATTRS if key not in ("_time", "level"))

# Immutable JSON values: taken into an event as they are (nothing to copy, nothing the
# application can change afterwards). A float may be NaN or infinite: add_fields makes it None
# at once; the handler leaves it to the encoder, which writes null as well.
PLAIN = frozenset({str, int, float, bool, type(None)})

# Attributes every LogRecord has; anything else in record.__dict__ came from extra=. The
# attributes LogRecord.__init__ sets come first in record.__dict__: makeRecord() adds the
# extras after them.
INIT_KEYS = list(logging.LogRecord("", 0, "", 0, "", (), None).__dict__)
STANDARD = frozenset(INIT_KEYS) | {
    "message", "asctime", "taskName",
    # set by structlog's ProcessorFormatter.wrap_for_formatter / by formatters
    "_logger", "_name", "_from_structlog", "_record",
}
# Keys of the event itself: an extra with one of these names is renamed, not lost.
RESERVED = frozenset(FAST_HEAD) | {"exception", "stack"}
# Extras the fast path leaves to the careful one (event keys to rename, a record's own
# attributes out of place), and among them the attributes formatters set, which are no
# extras at all.
SPECIAL = STANDARD | RESERVED
FORMATTER = STANDARD - frozenset(INIT_KEYS)

# Levels. A record's levelname is kept, lowercased ("WARN" stays "warn"); a structlog method name
# becomes the level it logs at (structlog's add_log_level maps the first two the same way; "msg"
# is the info-level method of PrintLogger and friends; "fatal" logs at critical).
LEVELS = {name: name.lower() for name in level_names()}
METHOD_LEVELS = {"warn": "warning", "exception": "error", "msg": "info", "fatal": "critical"}
# OpenTelemetry's log records (_front/otel.py): severity_number ranges (the log data model:
# 1-4 trace ... 21-24 fatal); its texts for the stdlib's levels, named as IngestHandler names
# them, so that a dataset fed by both reads one set of levels; the level numbers hold takes;
# the code attributes, renamed to the event's fields; the exception attributes (the
# exception object).
OTEL_SEVERITY = ((4, "trace"), (8, "debug"), (12, "info"), (16, "warning"), (20, "error"),
                 (24, "critical"))
OTEL_TEXTS = {"warn": "warning", "fatal": "critical"}
OTEL_NUMBERS = {"trace": 5, "debug": 10, "info": 20, "warn": 30, "warning": 30, "error": 40,
                "fatal": 50, "critical": 50}
OTEL_CODE = {"code.filepath": "file", "code.file.path": "file", "code.function": "function",
             "code.function.name": "function", "code.lineno": "line",
             "code.line.number": "line"}
OTEL_EXCEPTION = frozenset({"exception.type", "exception.message", "exception.stacktrace"})
# Keys of a structlog event dict that steer a processing step and carry no data of their own:
# ``exc_info`` becomes the ``exception`` object; the other two are the bookkeeping
# ProcessorFormatter adds to its copy (the processor's careful path reads them).
STRUCTLOG_SKIP = frozenset({"exc_info", "_record", "_from_structlog"})

# The memory model: rough bytes a queued event holds, for max_queue_bytes (about three times its
# encoded JSON; measured with tracemalloc and RSS). The encoded size itself is measured on the
# flusher thread, where it bounds the batches.
RECORD_EVENT_SIZE = 900  # an event record_to_event built, with its queue item
FAST_EVENT_SIZE = 600  # one the handler's fast path built: its dict of ten fields, the queue
#                        item, the created float, the process int, the message's header
FAST_EXTRA_SIZE = 100  # an extra on the fast path (the dict grows past ten keys; a float value
#                        is a new object); a str also counts its length, here and below
EXTRA_SIZE = 96  # a plain extra record_to_event takes as it is
TAKEN_EXTRA_SIZE = 80  # a plain extra _add_extras takes (renamed, or beside a copied one)
COPIED_EXTRA_SIZE = 144  # an extra copied JSON-safe (to_jsonable)
STRUCTLOG_EVENT_SIZE = 240  # a structlog event dict's copy and its queue item, before fields
FIELD_SIZE = 48  # a field add_fields copies: its dict entry and a number's object
COPIED_FIELD_SIZE = 64  # more for a field add_fields copies JSON-safe
SUBMIT_EVENT_SIZE = 400  # Shipper.submit's shallow copy of an event dict
SUBMIT_FIELD_SIZE = 80  # each of its fields
# deep_size: what a nested value holds. Containers cost their slots, strings their length;
# the walk visits at most DEEP_SIZE_NODES values and counts the rest at DEEP_SIZE_REST each.
DEEP_SIZE_NODES = 2048
DEEP_SIZE_REST = 256
WIRE_ITEM_SIZE = 40  # a wire item beyond its length: the bytes object's header, its queue slot

# The largest item (by estimated size) the ledger's lock-free admission takes; larger ones lock.
FAST_ITEM_BYTES = 8 * 1024
