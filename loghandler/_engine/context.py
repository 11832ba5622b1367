"""Fields on every event: ``loghandler.context(**fields)`` and OpenTelemetry trace ids.

The context lives in one ``ContextVar`` holding the merged fields of every ``context()`` entered
(each thread and asyncio task sees its own); a nested context stores a new merged dict, so a
stored dict is never changed and the caller's thread takes it by reference: its snapshot costs
nothing. The fields are merged into the event on the flusher thread (events.py "Queue items",
``merge_context``).

"A context is in use" is one test, everywhere: ``in_use()`` (a ``loghandler.context`` was
ever entered in this process, or the application imported ``opentelemetry.trace``). Until it
is true nothing here runs on the application's thread; the compiled calls read the same list
and name (``compiled.table`` hands them over). OpenTelemetry
is never imported here: it is looked up in ``sys.modules``, where the application put it.
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable
from contextvars import ContextVar, Token
from typing import Any, TypeVar

from .._encoding import to_jsonable
from . import hold as _hold
from .model import PLAIN

__all__ = ["IN_USE", "OTEL_TRACE", "VAR", "context", "in_use", "snapshot", "span_ids",
           "span_source"]

F = TypeVar("F", bound=Callable[..., Any])

_EMPTY: dict[str, Any] = {}  # shared, never written: the value outside any context
_VAR: ContextVar[dict[str, Any]] = ContextVar("loghandler_context", default=_EMPTY)
_get = _VAR.get
# The variable itself, for the compiled path (compiled.table): it reads the same merged dict.
VAR = _VAR
_TOKENS: ContextVar[tuple[tuple[Token[dict[str, Any]], Any], ...]] = ContextVar(
    "loghandler_context_tokens", default=())
# Set once, by the first context() entered, and never cleared: until then the front ends skip the
# context entirely (one list read per event). A list, so that the compiled handle reads the very
# same flag.
IN_USE = [False]
OTEL_TRACE = "opentelemetry.trace"
_modules = sys.modules
_PLAIN = PLAIN
_HOLD_ON = _hold.ENABLED


def in_use(trace: bool = True) -> bool:
    """Is a context in use (the module docstring)? ``trace=False``: the current span is not
    asked (OpenTelemetry's records carry their own)."""
    return IN_USE[0] or (trace and OTEL_TRACE in _modules)


class context:
    """Add ``fields`` to every event logged inside: a context manager and a decorator.

    ``with loghandler.context(request_id="r-1", user_id=7): log.info("paid")`` ships
    ``request_id`` and ``user_id`` with the event. Contexts nest (the inner one wins on a shared
    key) and live in ``contextvars``: each thread and each asyncio task sees its own. As a
    decorator (sync or ``async def``) every call runs inside a fresh context. Applies to
    ``IngestHandler`` and ``IngestProcessor`` events; an event's own fields (extras, structlog
    keys) win, then the current span's ``trace_id`` / ``span_id``, then the context, then the
    shipper's ``fields=``.

    Values of the plain JSON types are kept as they are; any other value is copied JSON-safe
    once, here, not per event.
    """

    __slots__ = ("_fields",)

    def __init__(self, **fields: Any) -> None:
        self._fields = {k: v if type(v) in _PLAIN else to_jsonable(v) for k, v in fields.items()}

    def __enter__(self) -> context:
        IN_USE[0] = True
        outer = _get()
        merged = {**outer, **self._fields} if outer else self._fields
        # The tokens are kept per context (thread, task), not on self: one instance may be
        # entered by several threads at once. A shipper holding events until an error
        # (hold_level) gives each entry its own buffers.
        held = _hold.enter() if _HOLD_ON[0] else None
        _TOKENS.set((*_TOKENS.get(), (_VAR.set(merged), held)))
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        tokens = _TOKENS.get()
        if tokens:
            _TOKENS.set(tokens[:-1])
            token, held = tokens[-1]
            _VAR.reset(token)
            if held is not None:
                # Left by an exception: a failure, as an error logged inside would be (the
                # framework's own error line is often logged outside the context). Not for
                # the BaseExceptions that end work without failing it (exit, cancellation).
                _hold.exit(held, exc_type is not None and issubclass(exc_type, Exception))

    def __call__(self, func: F) -> F:
        fields = self._fields
        if inspect.iscoroutinefunction(func):
            @functools.wraps(func)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                with context(**fields):
                    return await func(*args, **kwargs)

            return run_async  # type: ignore[return-value]

        @functools.wraps(func)
        def run(*args: Any, **kwargs: Any) -> Any:
            with context(**fields):
                return func(*args, **kwargs)

        return run  # type: ignore[return-value]

    def __repr__(self) -> str:
        return f"loghandler.context({', '.join(f'{k}={v!r}' for k, v in self._fields.items())})"


def snapshot(trace: bool) -> tuple[dict[str, Any], int, int] | None:
    """On the caller's thread: its context (by reference) and the current span's ids (0 when
    there is none), or None when there is neither. Never raises."""
    fields = _get()
    trace_id = span_id = 0
    if trace:
        otel = _modules.get(OTEL_TRACE)
        if otel is not None:
            try:
                span_context = otel.get_current_span().get_span_context()
                if span_context.is_valid:
                    trace_id, span_id = span_context.trace_id, span_context.span_id
                    if type(trace_id) is not int or type(span_id) is not int:
                        trace_id = span_id = 0  # not what the flusher can format
            except Exception:
                pass  # an odd OpenTelemetry (or a stub): no ids, never an error
    if trace_id or fields:
        return fields, trace_id, span_id
    return None


def span_ids(context: Any) -> tuple[int, int] | None:
    """The ids of the span current in ``context`` (an OpenTelemetry context), as ``snapshot``
    reads them in the current one; None when there is none. Never raises."""
    otel = _modules.get(OTEL_TRACE)
    if otel is None:
        return None
    try:
        span_context = otel.get_current_span(context).get_span_context()
        if span_context.is_valid:
            trace_id, span_id = span_context.trace_id, span_context.span_id
            if type(trace_id) is int and type(span_id) is int:
                return trace_id, span_id
    except Exception:
        pass
    return None


def span_source() -> tuple[Any, Any] | bool | None:
    """For the compiled path: the ``ContextVar`` OpenTelemetry keeps its current context in
    (its default runtime context), and ``span_ids``, so that a span's ids are read once per
    OpenTelemetry context (contexts are immutable: a new span is a new context). False: the
    application runs another runtime context, so ``snapshot`` is asked every time; None:
    OpenTelemetry is not imported (yet)."""
    context_module = _modules.get("opentelemetry.context")
    runtime = getattr(context_module, "_RUNTIME_CONTEXT", None)
    if _modules.get(OTEL_TRACE) is None or runtime is None:
        return None
    var = getattr(runtime, "_current_context", None)
    if type(runtime).__name__ != "ContextVarsRuntimeContext" or type(var) is not ContextVar:
        return False
    return var, span_ids
