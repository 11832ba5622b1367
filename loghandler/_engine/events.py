"""Building events, cheaply: what the application thread copies, and what the flusher builds.

The event model's tables are ``model.py``'s (re-exported here): the record-to-event mapping
(``HEAD``), the plain JSON types, the level tables, the memory model's sizes. Here: the rules
that read them. ``fast_head`` (the handler's fast path's event head, made from ``HEAD``),
``record_to_event`` (a LogRecord's event on the careful path; a property test holds the two
equal), ``add_fields`` and the free-name rule for a field that clashes (``free_name``), and
``item_events`` (the final event, on the flusher thread).

Values of the plain JSON types are taken as they are; anything else (a dict, a list, an object)
is turned into a JSON-safe copy right away, because the application may change or free it after
the call, and its ``repr`` may not be safe to run on another thread.

Queue items. The shipper's queue holds the event dicts themselves, each with private keys that no
field can be (unique objects, not strings): ``SIZE``, its rough size (for ``max_queue_bytes``),
and, on an event from a fast path, ``RECORD``: its ``_time`` is still the record's epoch seconds
and its ``level`` still its level's name, and ``item_events`` formats both on the flusher
thread, so that the caller's thread does not. ``CONTEXT``, when present, is the caller's
context snapshot ``(fields, trace_id, span_id)`` (``context.snapshot``, taken on the caller's
thread only while ``context.in_use``): ``item_events`` adds those the event lacks, then the
shipper's ``fields=``.

Wire items. On the compiled path (``_speedups.c``), when the shipper allows it
(``Shipper.item_plan``: no ``json_default``, no scanning of text, plain ``fields=``) and the
event's keys are ones the scrubber has cleared, every front end's fast path queues the event's
final JSON instead: a ``bytes`` item, exactly what ``item_events`` and the encoder would have
made of the dict (an event's own field wins over ``fields=``), built on the caller's thread in
C by one writer from what each front end reads of its source. The flusher only joins such
items into a request body, so its work under the GIL per event is a few pointer copies. Its
size is its length and ``WIRE_ITEM_SIZE``; ``items_size`` and ``size_of`` read both kinds.

Why dicts and not tuples: a dict holding only strings, numbers and None (and these keys) holds no
reference the cyclic GC must follow, so CPython leaves it untracked, and a full GC pass over a
queue of 100,000 events costs one visit per item. A tuple holding a dict is never untracked:
every full pass walked every queued tuple, and a logging call that triggered one during an
outage stalled for 20-35 ms.
"""

from __future__ import annotations

import itertools
import logging
import time
import traceback
from collections.abc import Callable, Mapping
from operator import itemgetter
from typing import Any

from .._encoding import free_name, key_to_str, to_jsonable
from .._time import format_epoch
from . import compiled
from .model import (
    CONTEXT,
    COPIED_ATTRS,
    COPIED_EXTRA_SIZE,
    COPIED_FIELD_SIZE,
    DEEP_SIZE_NODES,
    DEEP_SIZE_REST,
    EXTRA_SIZE,
    FAST_EVENT_SIZE,
    FAST_EXTRA_SIZE,
    FAST_HEAD,
    FIELD_SIZE,
    FORMATTER,
    HEAD,
    INIT_KEYS,
    LEVELS,
    METHOD_LEVELS,
    PLAIN,
    RECORD,
    RECORD_EVENT_SIZE,
    RESERVED,
    SIZE,
    SPECIAL,
    STANDARD,
    STRUCTLOG_EVENT_SIZE,
    SUBMIT_EVENT_SIZE,
    SUBMIT_FIELD_SIZE,
    TAKEN_EXTRA_SIZE,
    WIRE_ITEM_SIZE,
)

__all__ = [
    "CONTEXT",
    "FAST_EVENT_SIZE",
    "FAST_EXTRA_SIZE",
    "FAST_HEAD",
    "FIELD_SIZE",
    "FORMATTER",
    "INIT_KEYS",
    "LEVELS",
    "METHOD_LEVELS",
    "PLAIN",
    "RECORD",
    "RECORD_EVENT_SIZE",
    "RESERVED",
    "SIZE",
    "SPECIAL",
    "STANDARD",
    "STRUCTLOG_EVENT_SIZE",
    "SUBMIT_EVENT_SIZE",
    "SUBMIT_FIELD_SIZE",
    "WIRE_ITEM_SIZE",
    "add_exception",
    "add_fields",
    "admit_repeats",
    "deep_size",
    "exception_fields",
    "fast_head",
    "free_name",
    "item_events",
    "item_size",
    "items_size",
    "known_clean",
    "loguru_head",
    "merge_context",
    "record_message",
    "record_to_event",
    "rfc3339",
    "size_of",
    "wire_view",
]

item_size = itemgetter(SIZE)
# The one time form (_time.py): epoch seconds as RFC 3339.
rfc3339 = format_epoch
_N_INIT = len(INIT_KEYS)
_INIT_SET = frozenset(INIT_KEYS)
_islice = itertools.islice


# ------------------------------------------------------------------ the head, from HEAD

def _head_builder(name: str, value: Callable[[str, str | None, str, str | None], str]
                  ) -> Callable[[Any, str], dict[Any, Any]]:
    """``name(r, message)``: an event's head as one dict display, each value read as
    ``value(key, attribute, loguru key, loguru attribute)`` writes it, made once from ``HEAD``
    (as ``dataclasses`` makes an ``__init__``): a hot path then pays nothing for reading a
    table, where a loop over it per record costs twice the display (measured)."""
    items = ", ".join(f"{key!r}: " + ("message" if attr is None else value(key, attr, lk, la))
                      for key, attr, lk, la in HEAD)
    source = f"def {name}(r, message):\n    return {{{items}, RECORD: True}}\n"
    namespace: dict[str, Any] = {"RECORD": RECORD}
    exec(compile(source, f"<loghandler.events.{name}>", "exec"), namespace)
    built: Callable[[Any, str], dict[Any, Any]] = namespace[name]
    built.__doc__ = (f"The head of a fast-path event, from HEAD ({name}): ``_time`` and "
                     "``level`` raw (RECORD: the flusher formats them).")
    return built


# fast_head(record.__dict__, message): the handler's fast path (and _speedups.c's twin).
fast_head = _head_builder("fast_head", lambda key, attr, lk, la: f"r[{attr!r}]")
# loguru_head(loguru's record, message): the loguru sink's fast path.
loguru_head = _head_builder(
    "loguru_head",
    lambda key, attr, lk, la: f"r[{lk!r}]" + (".timestamp()" if key == "_time" else
                                             f".{la}" if la else ""))


# ------------------------------------------------------------------ sizes

def _items_size(items: list[Any]) -> int:
    try:
        return sum(map(item_size, items))
    except TypeError:  # a wire item among them (the Python path makes none)
        return sum(map(size_of, items))


# The queue items' estimated sizes, summed (the ledger's byte bound): the compiled twin when
# compiled.py chose it (it reads wire items too, which only that path makes).
items_size: Callable[[list[Any]], int] = (
    compiled.items_size if compiled.items_size is not None else _items_size)


def wire_view(item: bytes, names: tuple[str, ...]) -> dict[str, Any]:
    """The fields ``names`` a wire item has, decoded: what the flusher's selector reads of a
    wire item (its repeat key, the last ``_time``). Its JSON is read whole: a twin in C that
    read only those fields saved 48 of the repeat row's 70,558 instructions a call
    (docs/performance.md), and was removed."""
    import json

    event = json.loads(item)
    return {name: event[name] for name in names if name in event}


# admit_repeats(events, seen, order, head, now, window, limit, max_keys, names): the compiled
# twin of shaping.Selector's repeat loop over a batch; None on the Python path.
admit_repeats: Callable[..., tuple[list[Any], int, list[tuple[Any, list[Any]]], int]] | None = (
    compiled.speedups.admit_repeats if compiled.speedups is not None else None)


def size_of(item: Any) -> int:
    """One queue item's estimated size (see "Queue items" and "Wire items")."""
    if type(item) is bytes:
        return len(item) + WIRE_ITEM_SIZE
    return item[SIZE]  # type: ignore[no-any-return]


# ------------------------------------------------------------------ the flusher's side

def item_events(items: Any, fields: Mapping[str, Any] | None = None,
                finish: Callable[..., None] | None = None, *,
                compiled: Any = compiled.speedups) -> list[Any]:
    """The events of queue items (see "Queue items"), on the flusher thread; a wire item is
    its event's JSON already, and stays as it is.

    ``fields`` (the shipper's ``fields=``) are added to every event that lacks them, after the
    item's context: the event's own fields win, then the context, then ``fields``. ``finish``
    (the shipper's exclusions and scrubbing, ``shaping.Finisher``) runs last on each event.
    ``compiled``: the compiled twin (``compiled.speedups``, what ``_compiled`` chose), or None
    for the Python reference (the property tests run both).
    """
    if compiled is None:
        return _item_events(items, fields, finish, None)
    static = tuple(fields.items()) if fields else ()
    plain = all(type(v) in PLAIN for _, v in static)
    # Checked once a batch, not per event: the static fields' keys, and the fast path's fixed
    # head, which then need not be looked at.
    clean = known_clean(finish, static, plain)
    skip = len(FAST_HEAD) if clean is not None and clean.issuperset(FAST_HEAD) else 0
    fmt = compiled.format_record
    return compiled.format_items(  # type: ignore[no-any-return]
        items, static, plain, finish, clean,
        lambda item: _item_events((item,), fields, finish, fmt)[0], skip)


def known_clean(finish: Callable[..., None] | None, static: tuple[tuple[str, Any], ...],
                plain: bool) -> set[Any] | None:
    """The keys ``finish`` has nothing to do for on a flat event (``Finisher.clean_keys``),
    once it was taught the fixed ones: the fast path's head and the shipper's fields. The
    scrubber learns them from one event of them alone (a secret's name it never learns), so
    even the first batch skips the call. None: no such set (no finisher, exclusions, scanning
    text), or a field of the shipper's is a secret's, so that every event takes the call."""
    clean_keys = getattr(finish, "clean_keys", None)
    clean = clean_keys() if clean_keys is not None else None
    if clean is None or finish is None:
        return None
    keys = [key for key, _ in static]
    if not (clean.issuperset(keys) and clean.issuperset(FAST_HEAD)):
        finish({**dict.fromkeys(FAST_HEAD), **dict(static)}, plain)
    return clean if clean.issuperset(keys) else None


def _item_events(items: Any, fields: Mapping[str, Any] | None,
                 finish: Callable[..., None] | None,
                 format_record: Callable[[dict[Any, Any]], bool] | None) -> list[Any]:
    out: list[Any] = []
    append = out.append
    levels = LEVELS
    static = tuple(fields.items()) if fields else ()
    static_plain = all(type(v) in PLAIN for _, v in static)
    pop = dict.pop
    fmt = format_epoch
    for event in items:
        if type(event) is bytes:  # a wire item: final already
            append(event)
            continue
        pop(event, SIZE, None)
        snap = pop(event, CONTEXT, None)
        if snap is not None:
            try:
                merge_context(event, snap)
            except Exception:
                pass  # the event goes out without its context rather than not at all
        record = pop(event, RECORD, None) is not None
        # Flat (for the scrubber): the fast path's plain values, and nothing nested added.
        plain = record and snap is None and static_plain
        if record and (format_record is None or not format_record(event)):
            try:
                level = event["level"]
                event["level"] = levels.get(level) or str(level).lower()
            except Exception:
                event["level"] = to_jsonable(event.get("level"))
            try:
                event["_time"] = fmt(event["_time"])
            except KeyError:  # (a filter took it away): now, as for a time that is no time
                event["_time"] = fmt(time.time())
        if static:
            for key, value in static:
                if key not in event:
                    event[key] = value
        if finish is not None:
            try:
                finish(event, plain)
            except Exception:
                # Never ship what could not be checked for secrets: the event stays, its
                # values do not.
                for key in list(event):
                    if key not in ("_time", "level", "logger"):
                        event[key] = "[not shipped: scrubbing failed]"
        append(event)
    return out


# ------------------------------------------------------------------ the caller's side

def deep_size(value: Any) -> int:
    """Rough bytes a JSON-safe value holds, nested values included (for ``max_queue_bytes``).

    Bounded work: at most ``DEEP_SIZE_NODES`` values are visited; what is left unvisited counts
    ``DEEP_SIZE_REST`` bytes each, so a huge structure is never walked whole on the caller's
    thread, and its estimate stays large, never small. Never raises."""
    total = 0
    stack = [value]
    visits = 0
    try:
        while stack and visits < DEEP_SIZE_NODES:
            v = stack.pop()
            visits += 1
            t = type(v)
            if t is str:
                total += 49 + len(v)
            elif t is dict:
                total += 64 + 104 * len(v)
                for k, item in v.items():
                    if type(k) is str:
                        total += len(k)
                    stack.append(item)
            elif t is list or t is tuple:
                total += 56 + 8 * len(v)
                stack.extend(v)
            elif t is bytes or t is bytearray:
                total += 33 + len(v)
            else:
                total += 32
    except Exception:
        return total + DEEP_SIZE_REST
    return total + len(stack) * DEEP_SIZE_REST


def add_fields(event: dict[str, Any], items: Any) -> int:
    """Copy (key, value) pairs into ``event``, JSON-safe. Returns a rough size of what was added.

    A key that is already in ``event`` is renamed ``extra_<key>``: a field is never silently
    lost, whether it clashes with one of the event's own keys or with another key once
    converted to a string (``1`` and ``"1"``, ``None`` and ``"null"``).
    """
    size = 0
    plain = PLAIN
    for key, value in items:
        if type(key) is not str:
            key = key_to_str(key)
        if key in event:
            key = free_name(key, event)
        t = type(value)
        if t is str:
            size += len(value)
        elif t is float:
            if value != value or value in (float("inf"), float("-inf")):
                value = None
        elif t not in plain:
            value = to_jsonable(value)
            size += COPIED_FIELD_SIZE + deep_size(value)
        event[key] = value
        size += FIELD_SIZE
    return size


def merge_context(event: dict[str, Any], snap: tuple[dict[str, Any], int, int]) -> None:
    """On the flusher thread: add what an event lacks of a context snapshot (``_context``):
    the span's ids (lowercase hex, W3C form), then the context's fields."""
    fields, trace_id, span_id = snap
    if trace_id:
        # The span's ids are the live ones: they win over a context field of the same name.
        if "trace_id" not in event:
            event["trace_id"] = format(trace_id, "032x")
        if "span_id" not in event:
            event["span_id"] = format(span_id, "016x")
    for key, value in fields.items():
        if key not in event:
            event[key] = value


def exception_fields(exc_info: Any, text: str | None = None) -> dict[str, Any] | None:
    """``{type, message, stacktrace}`` for an exc_info tuple, an exception, or True."""
    try:
        if exc_info is True:
            import sys

            exc_info = sys.exc_info()
        if isinstance(exc_info, BaseException):
            exc_info = (type(exc_info), exc_info, exc_info.__traceback__)
        if not isinstance(exc_info, tuple) or len(exc_info) != 3 or exc_info[0] is None:
            return None
        etype, value, tb = exc_info
        name = getattr(etype, "__qualname__", None) or getattr(etype, "__name__", "Exception")
        module = getattr(etype, "__module__", "builtins")
        if module not in ("builtins", "__main__", None):
            name = f"{module}.{name}"
        try:
            message = str(value)
        except Exception:
            message = f"<unprintable {name}>"
        if text is None:
            text = "".join(traceback.format_exception(etype, value, tb))
        return {"type": name, "message": message, "stacktrace": text.rstrip("\n")}
    except Exception:
        return None


def add_exception(event: dict[str, Any], exc: Any) -> int:
    """Add ``exception`` for a structlog-style ``exc_info`` value; returns the size added.

    ``exc`` may be True (the exception being handled: resolved here, on the thread that
    logged), an exc_info tuple or an exception. An ``exception`` already rendered by
    ``format_exc_info`` / ``dict_tracebacks`` is kept as it is; a value we do not understand is
    shipped as ``exc_info`` rather than lost.
    """
    info = exception_fields(exc) if "exception" not in event else None
    if info:
        event["exception"] = info
        return len(info["stacktrace"])
    if exc is not True and not isinstance(exc, (tuple, BaseException)):
        return add_fields(event, (("exc_info", exc),))
    return 0


# ------------------------------------------------------------------ log records

def record_message(record: logging.LogRecord) -> str:
    """``record.getMessage()``; a record whose arguments do not fit still gives a message."""
    try:
        return record.getMessage()
    except Exception as exc:
        # Broken %-arguments must not cost the event: ship the template and the arguments.
        try:
            return f"{record.msg!s} % {record.args!r} (message formatting failed: " \
                   f"{type(exc).__name__}: {exc})"
        except Exception:
            return f"<unformattable message: {type(exc).__name__}>"


def _add_extras(event: dict[str, Any], d: dict[str, Any], tail: dict[str, Any]) -> int:
    """Extras the fast path could not take as they are: a clash, a non-plain value, or a
    formatter's attributes ("message", "asctime") among them. Returns their rough size."""
    size = 0
    displaced = False
    for key, value in tail.items():
        if key in STANDARD:
            displaced = displaced or key in _INIT_SET
            continue
        if key in event:  # only the event's own keys can be there yet: rename, not lose
            key = free_name(key, event)
        t = type(value)
        if t is str:
            size += TAKEN_EXTRA_SIZE + len(value)
        elif t not in PLAIN:
            # Copied JSON-safe now: the caller may change or free it after the call.
            value = to_jsonable(value)
            size += COPIED_EXTRA_SIZE + deep_size(value)
        else:
            size += TAKEN_EXTRA_SIZE
        event[key] = value
    if displaced:
        # A custom record factory set attributes before LogRecord.__init__ did: extras may
        # sit anywhere. Rare; look at every key.
        size += add_fields(event, [(k, v) for k, v in d.items()
                                   if k not in STANDARD and k not in event])
    return size


def record_to_event(record: logging.LogRecord) -> tuple[dict[str, Any], int]:
    """The event for a LogRecord, and a rough size for the queue's byte bound.

    The record itself is never modified, and nothing about it makes this raise: a record class
    whose attributes raise gets an event built one attribute at a time (``_careful_event``).
    """
    try:
        return _record_to_event(record)
    except Exception:
        return _careful_event(record)


def _careful_event(record: logging.LogRecord) -> tuple[dict[str, Any], int]:
    # Each attribute on its own, so that one broken property costs only its own field.
    def get(name: str) -> Any:
        try:
            return getattr(record, name)
        except Exception as exc:
            return f"<{name} unavailable: {type(exc).__name__}>"

    try:
        message = record_message(record)
    except Exception as exc:
        message = f"<message unavailable: {type(exc).__name__}>"
    levelname = get("levelname")
    try:
        level = LEVELS.get(levelname) or str(levelname).lower()
    except Exception:
        level = to_jsonable(levelname)
    event: dict[str, Any] = {"_time": format_epoch(get("created")), "level": level,
                             "message": message}
    size = RECORD_EVENT_SIZE + add_fields(event, [(key, get(attr)) for attr, key in COPIED_ATTRS])
    try:
        d = dict(record.__dict__)
    except Exception:
        d = {}
    exc_info = d.get("exc_info")
    if exc_info:
        info = exception_fields(exc_info, d.get("exc_text"))
        if info:
            event["exception"] = info
    stack = d.get("stack_info")
    if stack:
        event["stack"] = to_jsonable(stack)
    # After the record's own exception and stack: an extra of either name is renamed.
    size += add_fields(event, [(k, v) for k, v in d.items() if k not in STANDARD])
    return event, size


def _record_to_event(record: logging.LogRecord) -> tuple[dict[str, Any], int]:
    d = record.__dict__
    msg = record.msg
    level = LEVELS.get(record.levelname) or str(record.levelname).lower()
    if type(msg) is not str and isinstance(msg, dict):
        # structlog routed through stdlib (ProcessorFormatter.wrap_for_formatter): the event
        # dict's keys are the fields, as they are ("event" stays "event"; a "filename",
        # "message" or "level" key is an ordinary field, so nothing collides); the record adds
        # the context the dict lacks. Copied first: the application may reuse the dict.
        event: dict[str, Any] = {}
        fields = dict(msg)
        exc = fields.pop("exc_info", None)
        for key in ("_record", "_from_structlog"):  # ProcessorFormatter's bookkeeping
            fields.pop(key, None)
        size = RECORD_EVENT_SIZE + add_fields(event, fields.items())
        # The head the dict lacks, from the record.
        event.setdefault("_time", format_epoch(record.created))
        event.setdefault("level", level)
        for attr, key in COPIED_ATTRS:
            if key not in event:
                event[key] = getattr(record, attr)
        if exc:
            size += add_exception(event, exc)
    else:
        message = record_message(record)
        # The careful path (the handler's fast path builds its events with fast_head):
        # attribute access, so that a record class keeping these in properties works too.
        event = {"_time": format_epoch(record.created), "level": level, "message": message}
        for attr, key in COPIED_ATTRS:
            event[key] = getattr(record, attr)
        size = RECORD_EVENT_SIZE + len(message)
    # The record's own exception and stack first: an extra of the same name is then renamed
    # extra_<name> below, and neither is lost.
    if record.exc_info and "exception" not in event:
        info = exception_fields(record.exc_info, record.exc_text)
        if info:
            event["exception"] = info
            size += len(info["stacktrace"])
    if record.stack_info and "stack" not in event:
        event["stack"] = record.stack_info
        size += len(record.stack_info)
    if len(d) > _N_INIT:
        # makeRecord() adds extras after __init__'s attributes, so only the tail can hold them.
        # Inlined: plain JSON values are taken as they are (the usual case); _add_extras does
        # the rest. (A loop measured cheaper here than a chain of C-level set operations.)
        for key in _islice(d, _N_INIT, None):
            value = d[key]
            if type(value) in PLAIN and key not in STANDARD and key not in event:
                event[key] = value
                size += EXTRA_SIZE
            else:
                size += _add_extras(event, d, {key: value})
    return event, size
