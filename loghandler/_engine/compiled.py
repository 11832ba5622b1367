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
the compiled handle reads (``logging.LogRecord``, the threads inside loghandler's own sending,
``sys.modules``, ``context.IN_USE``, whether ``handle`` returns the record). The module keeps it
in its module state.

Who reads the decision:

- ``events.item_events`` and ``events.items_size``: ``speedups`` (``format_items``,
  ``format_record``) and ``items_size``;
- the front ends' class bodies: ``front_method`` (``handle``, ``__call__``); each front end
  builds its own fast path with ``fastpath.fast_path`` when ``ACTIVE``;
- the poster (posting.py): ``gzip_compress``, ``array_gzip``; the cutter (batches.py):
  ``array_length``.

The callers' fast-path contract (what a front end hands the compiled code, and what the
compiled code may do with the ledger's queue) is ``fastpath.py``'s: named types, whose fields
``configure`` checks against the names the C code reads.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from .._build import why_pure
from . import fastpath, model
from .context import IN_USE, OTEL_TRACE, VAR, span_source
from .guard import SENDERS
from .hold import level_number

__all__ = [
    "ACTIVE",
    "WHY_PYTHON",
    "array_gzip",
    "array_length",
    "extension",
    "format_record",
    "front_method",
    "gzip_compress",
    "gzip_extension",
    "items_size",
    "otel_put",
    "record_put",
    "speedups",
    "table",
]

# The decision, read by the modules named in the docstring (None: the Python twin runs).
speedups: Any = None  # the configured _speedups module, when in use
otel_put: Callable[..., bool] | None = None  # an OpenTelemetry record read and on its way
record_put: Callable[..., Any] | None = None
format_record: Callable[[dict[Any, Any]], bool] | None = None
items_size: Callable[[list[Any]], int] | None = None
# gzip_compress(data, level) -> bytes: _gzip.c, one step without the GIL; None on the Python
# path or when it was not built (no zlib headers), and zlib's module does it.
gzip_compress: Callable[[bytes, int], bytes] | None = None
# array_gzip(parts, level) -> bytes: the gzip stream of the JSON array of encoded events
# (``batches.join_array``), the array never made, in the same one release; array_length(parts)
# -> int: that array's length (-1 when a part is not bytes). _gzip.c; None as gzip_compress.
array_gzip: Callable[[list[bytes], int], bytes] | None = None
array_length: Callable[[list[Any]], int] | None = None

_configured: list[Any] = []


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
        # The contract's types (their fields checked against what C reads) and the one
        # attribute C reads from a front end.
        "contract": (fastpath.ItemPlan, fastpath.SamplePlan, fastpath.HoldPlan,
                     fastpath.CallerPlan, fastpath.FastPath),
        "fast_path_attribute": fastpath.ATTRIBUTE,
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


def front_method(kind: str, python: Callable[..., Any]) -> Any:
    """A front end's compiled call (``kind``: ``"handle"``, ``IngestHandler.handle``;
    ``"processor_call"``, ``IngestProcessor.__call__``; ``"sink_call"``, ``IngestSink.__call__``),
    told its Python twin ``python`` (which it calls with every call it does not take itself,
    a front end with no fast path); ``python`` itself on the Python path."""
    if speedups is None:
        return python
    return speedups.front_method(kind, python)


def _load() -> bool:
    global speedups, record_put, format_record, items_size, gzip_compress, array_gzip
    global array_length
    global WHY_PYTHON, otel_put
    if os.environ.get("LOGHANDLER_PURE_PYTHON", "") not in ("", "0"):
        WHY_PYTHON = "LOGHANDLER_PURE_PYTHON asks for it"
        return False
    not_here = why_pure()  # the rule setup.py builds by (a free-threaded build)
    if not_here is not None:
        # Not imported at all: importing it would turn the GIL back on for the whole process.
        WHY_PYTHON = not_here
        return False
    gz = gzip_extension()
    if gz is not None:
        gzip_compress, array_gzip, array_length = gz.compress, gz.array_gzip, gz.array_length
    module = extension()
    if module is None:
        WHY_PYTHON = ("the compiled part was not built (no C compiler at install time); "
                      "reinstall with one for a cheaper call")
        return False
    speedups = module
    record_put = module.record_put
    format_record = module.format_record
    items_size = module.items_size
    otel_put = module.otel_put
    return True


# Why the Python path is used, in the user's words (None when the compiled one is):
# ``loghandler doctor`` says it.
WHY_PYTHON: str | None = None
# True when the compiled path is in use.
ACTIVE = _load()
