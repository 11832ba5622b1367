"""The compiled hot path's one seam: whether ``_speedups.c`` and ``_gzip.c`` stand in for their
Python twins is decided here, once, at import. Everybody else reads what was decided (plain
attributes of this module); nothing is patched or rebound from outside.

Who decides: this module. The Python path is used when ``LOGHANDLER_PURE_PYTHON=1`` is set, on a
free-threaded build (the C code is proven safe under the GIL only), or when the extension was
not built (no compiler at install time). The Python code is the reference either way:
tests/test_speedups.py proves the two equal.

What C is handed, in one ``configure(**table)`` (the table is ``table()`` below): the event model
(``model.HEAD``'s record attributes and event keys, the special and formatter key sets, the
queue items' markers, the level names, the memory model's sizes, ``FAST_ITEM_BYTES``) and what
``handle()`` reads (``logging.LogRecord``, the threads inside loghandler's own sending,
``sys.modules``, ``context.IN_USE``, whether ``handle`` returns the record). The module keeps it
in its module state.

Who reads the decision:

- ``events.item_events`` and ``events.items_size``: ``speedups`` (``format_items``,
  ``format_record``) and ``items_size``;
- ``IngestHandler``'s class body: ``handle``; each handler, for its own fast path:
  ``fast_path(intake, wire)``;
- the poster (posting.py): ``gzip_compress``.

The ledger contract (what the compiled handle does with the queue, never more): it is handed
the ledger's intake face (``Intake``, ledger/intake.py) through ``fast_path``. It reads
``intake.gate``, a list ``[queue, fast_len]`` that only the ledger writes; it appends an item to
``queue`` (a ``deque``) without the lock only while ``len(queue) < fast_len`` and the item's
size is at most ``FAST_ITEM_BYTES``, exactly as ``Intake.offer`` does; anything else goes to
``intake.put(item, size)``, the locked slow path.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import sys
import time
from collections.abc import Callable
from typing import Any, Protocol

from ._build import why_pure
from ._engine import model
from ._engine.context import IN_USE, OTEL_TRACE, VAR, span_source
from ._engine.guard import SENDERS
from ._engine.hold import level_number

__all__ = ["ACTIVE", "WHY_PYTHON", "LedgerContract", "extension", "fast_path", "format_record",
           "gzip_compress", "gzip_extension", "handle", "items_size", "otel_put",
           "processor_call", "record_put", "sink_call", "speedups", "table", "wire_view"]

# The decision, read by the modules named in the docstring (None: the Python twin runs).
speedups: Any = None  # the configured _speedups module, when in use
handle: Any = None  # IngestHandler.handle in C, a method (binds to the handler it is read on)
processor_call: Any = None  # IngestProcessor.__call__ in C, a method
sink_call: Any = None  # IngestSink.__call__ in C, a method
otel_put: Callable[..., bool] | None = None  # an OpenTelemetry record read and on its way
record_put: Callable[..., Any] | None = None
format_record: Callable[[dict[Any, Any]], bool] | None = None
items_size: Callable[[list[Any]], int] | None = None
wire_view: Callable[[bytes, tuple[str, ...]], dict[str, Any]] | None = None
# gzip_compress(data, level) -> bytes: _gzip.c, one step without the GIL; None on the Python
# path or when it was not built (no zlib headers), and zlib's module does it.
gzip_compress: Callable[[bytes, int], bytes] | None = None

_configured: list[Any] = []


class LedgerContract(Protocol):
    """What the compiled path may use of the ledger (the module docstring says how): the
    ledger's intake face (``Intake``) satisfies it."""

    gate: list[Any]

    def put(self, item: Any, size: int) -> bool: ...


def table() -> dict[str, Any]:
    """Everything the C module needs to know, from the modules that own it: what
    ``configure(**table())`` hands over. (``message_at``: where among the record attributes the
    message goes, before the one of that index.)"""
    return {
        "record_attrs": tuple(attr for attr, _ in model.RECORD_ATTRS),
        "event_keys": tuple(key for _, key in model.RECORD_ATTRS),
        "message_at": model.FAST_HEAD.index("message"),
        "special": model.SPECIAL,
        "formatter": model.FORMATTER,
        "record_marker": model.RECORD,
        "size_marker": model.SIZE,
        "context_marker": model.CONTEXT,
        "levels": dict(model.LEVELS),
        "n_init": len(model.INIT_KEYS),
        "event_size": model.FAST_EVENT_SIZE,
        "extra_size": model.FAST_EXTRA_SIZE,
        "fast_item": model.FAST_ITEM_BYTES,
        "wire_item": model.WIRE_ITEM_SIZE,
        "record_type": logging.LogRecord,
        "returns_record": sys.version_info >= (3, 12),
        "senders": SENDERS,
        "modules": sys.modules,
        "context_in_use": IN_USE,
        "otel_module": OTEL_TRACE,
        "context_var": VAR,
        "span_source": span_source,
        "loads": json.loads,
        "method_levels": dict(model.METHOD_LEVELS),
        "structlog_skip": model.STRUCTLOG_SKIP,
        "now": time.time,
        "loguru_head": tuple((lk, la) for _, attr, lk, la in model.HEAD if attr is not None),
        "level_number": level_number,
        "otel_texts": dict(model.OTEL_TEXTS),
        "otel_numbers": dict(model.OTEL_NUMBERS),
        "otel_exception": model.OTEL_EXCEPTION,
        "otel_code": dict(model.OTEL_CODE),
    }


def extension() -> Any | None:
    """The built extension, configured (once); None when it was not built. Whether it is used
    is ``ACTIVE``: the tests compare it with the Python path in both runs."""
    if _configured:
        return _configured[0]
    try:
        module: Any = importlib.import_module("loghandler._speedups")
    except ImportError:
        return None
    module.configure(**table())
    _configured.append(module)
    return module


def gzip_extension() -> Any | None:
    """The built _gzip extension; None when it was not built."""
    try:
        return importlib.import_module("loghandler._gzip")
    except ImportError:
        return None


def fast_path(intake: LedgerContract, wire: Any, policy: tuple[Any, Any, Any]
              ) -> tuple[list[Any], Any, Callable[..., bool], tuple[Any, Any, Any]] | None:
    """A front end's compiled fast path: ``(intake.gate, wire, intake.put, policy)`` (the
    ledger contract above; ``wire``: the shipper's ``wire()``, or None for event dicts;
    ``policy``: ``FrontEnd.policy()``, what the caller decides: ``(trace_context, sample,
    hold)``), or None on the Python path. Read by the compiled code from the front end that
    owns it."""
    if speedups is None:
        return None
    return intake.gate, wire, intake.put, policy


def _load() -> bool:
    global speedups, handle, record_put, format_record, items_size, wire_view, gzip_compress
    global WHY_PYTHON, processor_call, sink_call, otel_put
    if os.environ.get("LOGHANDLER_PURE_PYTHON", "") not in ("", "0"):
        WHY_PYTHON = "LOGHANDLER_PURE_PYTHON asks for it"
        return False
    not_here = why_pure()  # the rule setup.py builds by (a free-threaded build)
    if not_here is not None:
        # Not imported at all: importing it would turn the GIL back on for the whole process.
        WHY_PYTHON = not_here
        return False
    gz = gzip_extension()
    gzip_compress = gz.compress if gz is not None else None
    module = extension()
    if module is None:
        WHY_PYTHON = ("the compiled part was not built (no C compiler at install time); "
                      "reinstall with one for a cheaper call")
        return False
    speedups = module
    handle = module.handle
    record_put = module.record_put
    format_record = module.format_record
    items_size = module.items_size
    wire_view = module.wire_view
    processor_call = module.processor_call
    sink_call = module.sink_call
    otel_put = module.otel_put
    return True


# Why the Python path is used, in the user's words (None when the compiled one is):
# ``loghandler doctor`` says it.
WHY_PYTHON: str | None = None
# True when the compiled path is in use.
ACTIVE = _load()
