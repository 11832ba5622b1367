"""The compiled hot path (``_speedups.c``), when it was built and is not turned off.

``record_event``, ``record_put``, ``format_record`` and ``gzip_compress`` are None when the
extension is missing (no compiler at install time) or ``LOGHANDLER_PURE_PYTHON=1`` is set; the
callers then run their Python code, which is the reference the compiled one is proved equal to
(tests/test_speedups.py). The event model's constants are handed over here, from events.py, so
they live in one place.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Any

from ._engine import events
from ._engine.events import (
    CONTEXT,
    FAST_EVENT_SIZE,
    FAST_EXTRA_SIZE,
    INIT_KEYS,
    LEVELS,
    RECORD,
    RESERVED,
    SIZE,
    STANDARD,
    WIRE_ITEM_SIZE,
)
from ._engine.ledger import FAST_ITEM_BYTES

__all__ = ["ACTIVE", "extension", "format_record", "gzip_compress", "gzip_extension",
           "record_event", "record_put", "speedups"]

record_event: Callable[[Any], tuple[dict[Any, Any], int] | None] | None = None
record_put: Callable[..., Any] | None = None
format_record: Callable[[Any], bool] | None = None
# The extension itself when in use: _handler.py installs its handle() as IngestHandler's.
speedups: Any = None
# gzip_compress(data, level) -> bytes: _gzip.c, one step without the GIL (sender.py); None on
# the Python path or when it was not built (no zlib headers), and zlib's module does it.
gzip_compress: Callable[[bytes, int], bytes] | None = None


def extension() -> Any | None:
    """The built extension, configured; None when it was not built. (Whether it is used is
    ``ACTIVE``: the tests compare it with the Python path in both runs.)"""
    try:
        module: Any = importlib.import_module("loghandler._speedups")
    except ImportError:
        return None
    module.configure(STANDARD | RESERVED, STANDARD - frozenset(INIT_KEYS), RECORD, dict(LEVELS),
                     SIZE, CONTEXT, len(INIT_KEYS), FAST_EVENT_SIZE, FAST_EXTRA_SIZE,
                     FAST_ITEM_BYTES, WIRE_ITEM_SIZE)
    return module


def gzip_extension() -> Any | None:
    """The built _gzip extension; None when it was not built."""
    try:
        return importlib.import_module("loghandler._gzip")
    except ImportError:
        return None


def _load() -> bool:
    global record_event, record_put, format_record, speedups, gzip_compress
    if os.environ.get("LOGHANDLER_PURE_PYTHON", "") not in ("", "0"):
        return False
    gz = gzip_extension()
    gzip_compress = gz.compress if gz is not None else None
    module = extension()
    if module is None:
        return False
    record_event = module.record_event
    record_put = module.record_put
    format_record = module.format_record
    speedups = module
    events.use_compiled(format_record, module.format_items, module.items_size)
    return True


# True when the compiled path is in use (``loghandler doctor`` says which).
ACTIVE = _load()
