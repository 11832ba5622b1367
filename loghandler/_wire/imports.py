"""What the wire imports late, and keeps: urllib3 and ssl are imported on the first request (they
were a third of what ``import loghandler`` cost), and the modules are kept for requests made
late in interpreter shutdown (``ImportsRestored``).
"""

from __future__ import annotations

import sys
import weakref
from typing import Any

from .watchdog import watched_pool_classes

__all__ = ["ImportsRestored", "keep_modules", "lazy_module", "preload_http"]

_kept_modules: dict[str, Any] = {}
# Bound now: late in interpreter shutdown the lookup through ``sys`` may be gone.
_is_finalizing = sys.is_finalizing


def lazy_module(name: str) -> Any:
    """``name`` imported on first use (urllib3 and ssl are a third of ``import loghandler``'s
    cost), then kept here: late in interpreter shutdown (a ``__del__`` that logs) an ``import``
    statement fails, a kept reference still works."""
    module = _kept_modules.get(name)
    if module is None:
        import importlib

        module = _kept_modules[name] = importlib.import_module(name)
    return module


def preload_http() -> None:
    """Import what the first request needs (urllib3, the host-name codec, the watched
    connection classes), on the calling thread: a shipper calls this when it is built, so that
    its flusher does not import them while the application runs (see Shipper)."""
    for name in ("urllib3", "encodings.idna", "urllib3.connectionpool", "http.client"):
        lazy_module(name)
    watched_pool_classes()


# The modules as the exit hook saw them (keep_modules), held weakly: see ImportsRestored.
_modules_at_exit: dict[str, weakref.ref[Any]] = {}


def keep_modules() -> None:
    """Remember the loaded modules (the exit hook calls this, while imports still work).

    Weakly: holding them would change the order in which the interpreter tears them down, and
    a ``__del__`` that logs could then run after ``logging`` itself is gone. The wire's modules
    are imported first (no request may have been made yet)."""
    for name in ("urllib3", "encodings.idna"):
        lazy_module(name)
    for name, module in list(sys.modules.items()):
        try:
            _modules_at_exit[name] = weakref.ref(module)
        except TypeError:  # not a module (a lazy loader's stand-in)
            pass


class ImportsRestored:
    """While a request is sent late in interpreter shutdown (a ``__del__`` that logs), the
    modules the exit hook saw are back in ``sys.modules``, and are taken out again after.

    By then the interpreter has emptied ``sys.modules``, and urllib3 imports a module of its own
    inside ``getresponse()``: without this, the request went out, its answer could not be read,
    and the events it carried were neither counted delivered nor lost.
    """

    __slots__ = ("_put_back",)

    def __enter__(self) -> None:
        self._put_back: list[tuple[str, Any]] = []
        if not _is_finalizing():
            return
        modules = sys.modules
        missing = object()
        for name, ref in _modules_at_exit.items():
            before = modules.get(name, missing)
            if before is None or before is missing:
                module = ref()
                if module is not None:
                    self._put_back.append((name, before))
                    modules[name] = module

    def __exit__(self, *exc: object) -> None:
        modules: dict[str, Any] = sys.modules  # entries may be None: the interpreter's marks
        for name, before in self._put_back:
            if before is None:
                modules[name] = None
            else:
                modules.pop(name, None)
        self._put_back.clear()
