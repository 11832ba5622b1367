"""The compiled hot path (loghandler/_speedups.c) against its reference, the Python code.

Both builds run the whole suite in CI (README's test command: once as installed, once with
``LOGHANDLER_PURE_PYTHON=1``); here the two are compared directly, on generated and on hostile
records: every queue item the compiled path makes is the Python path's, key for key and size for
size, and nothing it is given crashes the process or raises into the caller.
"""

from __future__ import annotations

import collections
import contextlib
import inspect
import json
import logging
import math
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from helpers import without_orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_event_model import records
from test_spool import wait_until

from loghandler import IngestHandler
from loghandler._encoding import encode
from loghandler._engine import compiled as _compiled
from loghandler._engine.events import RECORD, SIZE, item_events, record_to_event
from loghandler._engine.fastpath import CallerPlan, FastPath
from loghandler._engine.shaping import make_finisher
from loghandler._levels import level_names
from loghandler.testing import LocalService

TOKEN = "speedups-token"
PURE = os.environ.get("LOGHANDLER_PURE_PYTHON", "") not in ("", "0")
# The extension itself, in both runs (turned off or not, it is compared with the Python path).
EXT = _compiled.extension()


class _Dict:
    """Anything whose ``__dict__`` is the dict given: record_put reads a record's ``__dict__``."""


def record_item(ext: Any, d: dict[Any, Any], plan: Any = None) -> tuple[Any, int] | None:
    """The queue item the extension makes of a record's dict ``d`` (its ``record_put``, through
    a FastPath that keeps what it queues: no context, no policy; ``plan``: an ItemPlan, for
    pre-encoded items) as (item, size); None when it leaves the record to the careful path."""
    got: list[tuple[Any, int]] = []

    def keep(item: Any, size: int, *rest: Any) -> bool:
        got.append((item, size))
        return True

    holder = _Dict()
    holder.__dict__ = d
    fast = FastPath([collections.deque(), 0], plan, keep, CallerPlan(False, None, None), keep,
                    lambda: False, lambda *args: None)
    ext.record_put(None, holder, fast)
    return got[0] if got else None


def test_the_compiled_path_is_built_and_in_use() -> None:
    """`pip install -e .` on a machine with a compiler builds it (CI's machines have one), and
    it is used unless turned off; a build that silently fell back would pass every other test.
    _compiled alone decides, and IngestHandler's class reads its decision."""
    assert EXT is not None
    assert _compiled.ACTIVE is (not PURE)
    assert (_compiled.record_put is None) is PURE
    assert (_compiled.speedups is None) is PURE
    handle = IngestHandler.__dict__["handle"]
    assert handle is EXT.handle if not PURE else inspect.isfunction(handle)


class PythonHandler(IngestHandler):
    """A handler with an emit of its own: the compiled path steps aside for it, so it takes
    the Python path (the reference) in both runs."""

    def emit(self, record: logging.LogRecord) -> None:
        super().emit(record)


# Event dicts, not wire items: scanning text for secrets gives the flusher work per event, so
# the shipper offers no wire (wire items are compared byte for byte in test_wire_*).
DICTS = {"scrub": "all"}


@pytest.fixture(scope="module")
def handlers() -> Iterator[tuple[IngestHandler, IngestHandler]]:
    """A plain handler (the compiled handle, on the compiled path) and one on the Python path;
    neither flushes during the test, so what each queued stays at the end of its queue."""
    with LocalService(token=TOKEN) as svc:
        opts: dict[str, Any] = dict(url=svc.url, token=TOKEN, flush_interval=3600,
                                    batch_size=10_000, **DICTS)
        fast = IngestHandler("compiled", **opts)
        pure = PythonHandler("pure", **opts)
        yield fast, pure
        fast.close()
        pure.close()


def last_item(handler: IngestHandler, record: logging.LogRecord, via_emit: bool = False) -> Any:
    """The queue item ``handler`` made of ``record`` (through handle(), or emit())."""
    queue = handler.shipper.intake.queue
    before = len(queue)
    if via_emit:
        handler.emit(record)
    else:
        handler.handle(record)
    assert len(queue) == before + 1
    return queue[-1]


def compiled_item(record: logging.LogRecord) -> Any:
    """The queue item the extension makes of ``record`` (record_item: no plan), or, for what
    it leaves to the careful path, that path's (record_to_event), as the compiled handle does.
    In both runs: the extension is compared with the Python path whether it is in use or not.
    (A record of another class never reaches it: the compiled handle checks the type.)"""
    got = record_item(EXT, record.__dict__) if type(record) is logging.LogRecord else None
    if got is None:
        event, size = record_to_event(record)
        event[SIZE] = size
        return event
    assert type(got) is tuple and got[0][SIZE] == got[1]
    return got[0]


def same_item(a: dict[Any, Any], b: dict[Any, Any]) -> None:
    """Equal keys in equal order, equal values (NaN equal to NaN), equal sizes."""
    assert list(a) == list(b)
    for key in a:
        x, y = a[key], b[key]
        if isinstance(x, float) and math.isnan(x):
            assert isinstance(y, float) and math.isnan(y)
        else:
            assert x == y and type(x) is type(y), key


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(record=records(), via_emit=st.booleans())
def test_compiled_item_is_the_python_item(handlers: tuple[IngestHandler, IngestHandler],
                                          record: logging.LogRecord, via_emit: bool) -> None:
    """The extension's queue item (record_item) is the Python path's, key for key (in order)
    and size for size; and so is the item the plain handler queues (the compiled handle on
    the compiled path)."""
    fast, pure = handlers
    snapshot = dict(record.__dict__)
    want = last_item(pure, record, via_emit)
    record.__dict__.clear()
    record.__dict__.update(snapshot)
    same_item(compiled_item(record), want)
    record.__dict__.clear()
    record.__dict__.update(snapshot)
    same_item(last_item(fast, record), want)


def formatted(item: dict[Any, Any], compiled: bool, fields: Any = None,
              finish: Any = None) -> dict[str, Any]:
    """The flusher's event of a queue item: item_events with the extension's twin, or with
    the Python reference."""
    (event,) = item_events([dict(item)], fields, finish, compiled=EXT if compiled else None)
    return event


@settings(max_examples=500, deadline=None)
@given(created=st.one_of(st.floats(), st.integers(-10**12, 10**12).map(float),
                         st.floats(min_value=0, max_value=1e11)),
       level=st.one_of(st.sampled_from(sorted(level_names())), st.text(max_size=8)))
def test_compiled_formatting_is_the_python_formatting(created: float, level: str) -> None:
    """_time (any float: negative, past year 9999, NaN, a hair under a second) and level."""
    item = {"_time": created, "level": level, "message": "m", SIZE: 1, RECORD: True}
    compiled = formatted(item, True)
    expected = formatted(item, False)
    try:
        time.gmtime(math.floor(created))
    except (OverflowError, ValueError, OSError):
        # No time the calendar holds: both paths stamp the moment of formatting.
        compiled.pop("_time"), expected.pop("_time")
    assert compiled == expected


# ------------------------------------------------------------------ hostile input

class Evil:
    """A value whose truth test and text change the record they belong to."""

    def __init__(self, record: logging.LogRecord, key: str) -> None:
        self.record, self.key = record, key

    def __bool__(self) -> bool:
        self.record.__dict__.pop(self.key, None)
        self.record.__dict__.clear()
        return False

    def __str__(self) -> str:
        self.record.__dict__.clear()
        return "evil"


class EvilKey(str):
    def __hash__(self) -> int:
        return hash("msg")

    def __eq__(self, other: object) -> bool:
        return str.__eq__(self, other)


def _plain(msg: Any = "m %s", args: Any = ("x",), **extra: Any) -> logging.LogRecord:
    record = logging.LogRecord("app", logging.INFO, "/app.py", 3, msg, args, None)
    record.__dict__.update(extra)
    return record


def hostile_records() -> Iterator[tuple[str, logging.LogRecord]]:
    r = _plain()
    r.exc_info = Evil(r, "stack_info")  # type: ignore[assignment]
    yield "exc_info whose __bool__ empties the record", r
    r = _plain()
    r.args = (Evil(r, "msg"),)
    yield "an argument whose __str__ empties the record", r
    r = _plain()
    r.stack_info = Evil(r, "args")  # type: ignore[assignment]
    yield "stack_info whose __bool__ empties the record", r
    r = _plain()
    r.__dict__[7] = "a non-str key"  # type: ignore[index]
    yield "a non-str key", r
    r = _plain()
    r.__dict__[EvilKey("sneaky")] = 1
    yield "a str subclass key with its own hash", r
    yield "a 10 MB message", _plain("x" * 10_000_000, ())
    yield "a 10 MB extra", _plain(big="y" * 10_000_000)
    yield "10,000 extras", _plain(**{f"k{i}": i for i in range(10_000)})
    yield "args that do not format", _plain("%d %d", ("a",))
    yield "a dict as args", _plain("%(a)s", ({"a": 1},))
    r = _plain()
    del r.__dict__["msg"]
    yield "no msg at all", r
    r = _plain()
    del r.__dict__["lineno"]
    yield "a field missing", r
    r = _plain(extra_key="v")
    del r.__dict__["name"]  # a hole in the head: the tail walk must not trust positions
    r.__dict__["name"] = "app"
    yield "a head key deleted and re-added", r
    yield "str subclass message", _plain(type("S", (str,), {})("sub %s"))
    r = _plain()
    r.created = float("inf")
    yield "created is infinite", r
    r = _plain()
    r.created = 1e300
    yield "created past year 9999", r


def queued_or_none(handler: IngestHandler, record: logging.LogRecord) -> Any:
    """The queue item handle() made of ``record``; None when it was refused as too large."""
    refused = handler.stats().dropped_too_large
    handler.handle(record)
    if handler.stats().dropped_too_large > refused:
        return None
    return handler.shipper.intake.queue[-1]


@pytest.mark.parametrize("name,record", list(hostile_records()),
                         ids=[name for name, _ in hostile_records()])
def test_hostile_records_never_crash_and_match_python(
        handlers: tuple[IngestHandler, IngestHandler], name: str, record: logging.LogRecord
) -> None:
    """Records that change themselves while read, odd keys, huge values: the extension neither
    crashes nor raises (called directly, and as the plain handler's handle), and what it
    queues ships as the Python path's event."""
    fast, pure = handlers
    snapshot = dict(record.__dict__)
    record_item(EXT, record.__dict__)  # must neither crash nor raise
    record.__dict__.clear()
    record.__dict__.update(snapshot)
    fast_item = queued_or_none(fast, record)  # nor as handle()
    record.__dict__.clear()
    record.__dict__.update(snapshot)
    pure_item = queued_or_none(pure, record)
    if fast_item is None or pure_item is None:  # refused (too large for any request)
        assert fast_item is None and pure_item is None
        return
    if name != "a str subclass key with its own hash":
        assert list(fast_item) == list(pure_item)
        assert fast_item[SIZE] == pure_item[SIZE]
    # (That key the compiled path leaves to the careful one, whose hashing may run the
    # application's code: the queue items differ, what ships does not.)
    shipped = [json.loads(encode(formatted(item, False))) for item in (fast_item, pure_item)]
    for event in shipped:
        event.pop("_time", None)
    assert shipped[0] == shipped[1]


def test_record_item_refuses_what_it_does_not_know() -> None:
    """Called with anything but a record's dict, it answers None (the careful path), not an
    error or a crash; called wrongly, a TypeError. record_put, handed no fast path of ours,
    does nothing and says so (False: the careful path's)."""
    _speedups = EXT
    wire = (b"", frozenset(), None, None, frozenset(), 0)
    for bad in ({}, {"msg": 1}, {"msg": "m"}, {1: 2}):
        assert record_item(_speedups, bad) is None
        assert record_item(_speedups, bad, wire) is None
        assert record_item(_speedups, bad, ("x", 1, 2, 3)) is None
    record = _plain()
    for fast in (None, (), ([collections.deque(), 10], None, None), (1, 2, 3, 4),
                 ([collections.deque(), 10], None, None, (True, "x", None))):
        assert _speedups.record_put(object(), record, fast) is False
    with pytest.raises(TypeError):
        _speedups.record_put()
    for bad in (None, {}, {"_time": "x", "level": "INFO"}, {"_time": 1.0, "level": 3}):
        assert _speedups.format_record(bad) is False


def test_configure_takes_one_table_and_checks_it() -> None:
    """The extension learns the event model from configure() alone: a missing or mistyped
    item is a TypeError naming it, and a second module instance is configured by its own
    call (module state, not globals)."""
    import importlib.util

    spec = importlib.util.find_spec("loghandler._speedups")
    assert spec is not None and spec.loader is not None
    other = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(other)  # a second instance, with its own (empty) state
    assert other is not EXT
    with pytest.raises(RuntimeError, match="not configured"):
        other.record_put(None, _Dict(), None)
    table = _compiled.table()
    with pytest.raises(TypeError, match="levels"):
        other.configure(**{**table, "levels": [("INFO", "info")]})
    missing = dict(table)
    del missing["special"]
    with pytest.raises(TypeError, match="special"):
        other.configure(**missing)
    other.configure(**table)
    record = _plain(extra_key="v")
    assert record_item(other, dict(record.__dict__)) == record_item(EXT, record.__dict__)


def _run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env={**os.environ, **env})


SHIP = """
import logging, sys
from loghandler._engine import compiled as _compiled
from loghandler.testing import LocalService
import loghandler
with LocalService(token="t0") as svc:
    h = loghandler.IngestHandler("ds", url=svc.url, token="t0")
    log = logging.getLogger("x")
    log.addHandler(h)
    for i in range(100):
        log.warning("n %d", i, extra={"i": i})
    assert h.flush(10)
    print(_compiled.ACTIVE, len(svc.events("ds")))
"""


def test_pure_python_is_forced_by_the_environment() -> None:
    proc = _run(SHIP, LOGHANDLER_PURE_PYTHON="1")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "100"]


def test_a_missing_extension_falls_back_to_python() -> None:
    """No compiler at install time: no extension, and everything works the Python way."""
    block = "import sys; sys.modules['loghandler._speedups'] = None\n"
    proc = _run(block + SHIP, LOGHANDLER_PURE_PYTHON="0")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "100"]


def _raising_finish(event: dict[str, Any], plain: bool = False) -> None:
    raise RuntimeError("a scrubber bug")


FINISHERS = {
    "none": None,
    "keys": make_finisher((), "keys", (), ()),
    "keys+own": make_finisher((), "keys", ("order_id",), ()),
    "all": make_finisher((), "all", (), ()),
    "exclude": make_finisher(("module", "line"), "keys", (), ()),
    "raising": _raising_finish,
}
FIELDS = {
    "none": None,
    "plain": {"service": "checkout", "region": "eu", "message": "never wins"},
    "nested": {"deploy": {"sha": "abc", "token": "secret-value"}},
    "secret": {"api_key": "sk-12345678", "password": ""},
}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(record=records(), finisher=st.sampled_from(sorted(FINISHERS)),
       fields=st.sampled_from(sorted(FIELDS)))
def test_compiled_batch_is_the_python_batch(handlers: tuple[IngestHandler, IngestHandler],
                                            record: logging.LogRecord, finisher: str,
                                            fields: str) -> None:
    """item_events in C (markers, _time, level, the shipper's fields, the scrubber's plain path
    skipped when every key is known clean, a failing scrubber) ships what the Python one ships,
    for every kind of queue item the handler makes."""
    _, pure = handlers
    a = last_item(pure, record)
    b = last_item(pure, record)
    finish = FINISHERS[finisher]
    got = formatted(a, True, FIELDS[fields], finish)
    want = formatted(b, False, FIELDS[fields], finish)
    if got.get("_time") != want.get("_time"):  # both stamped "now" (no time of its own)
        got.pop("_time"), want.pop("_time")
    assert json.loads(encode(got)) == json.loads(encode(want))
    assert list(got) == list(want)


class _Sub(logging.LogRecord):
    pass


@pytest.mark.skipif(PURE, reason="the compiled handle is IngestHandler's on the compiled path "
                                 "only (its parts are compared in both runs above)")
def test_the_compiled_handle_queues_what_the_python_handle_does() -> None:
    """IngestHandler.handle in C: for the plain record and for each case it hands to the
    Python handle (filters, a record subclass, a context, a non-plain extra), the queue holds
    the same items as the Python path's, in the same order."""
    import loghandler

    assert IngestHandler.__dict__["handle"] is EXT.handle

    def make(i: int, cls: type[logging.LogRecord] = logging.LogRecord,
             **extra: Any) -> logging.LogRecord:
        record = cls("t", logging.INFO, "f.py", 3, "order %s", (i,), None)
        record.__dict__.update(extra)
        return record

    def queued(h: IngestHandler) -> list[dict[str, Any]]:
        """The events as they would ship: a wire item's JSON, or an event dict formatted by
        the flusher's item_events with the shipper's fields."""
        fields = h.shipper.options.fields
        return [json.loads(item if type(item) is bytes
                           else encode(formatted(item, False, fields)))
                for item in h.shipper.intake.queue]

    parked = dict(token=TOKEN, url="http://127.0.0.1:9", flush_interval=3600,
                  batch_size=10_000, shutdown_timeout=0.1)
    compiled, python = IngestHandler("ds", **parked), PythonHandler("ds", **parked)

    def both(record: logging.LogRecord) -> None:
        # The same answer too: the record on Python 3.12+ (True before), a filter's refusal.
        got, want = compiled.handle(record), python.handle(record)
        assert got is want if isinstance(want, (bool, logging.LogRecord)) else got == want

    try:
        for record in [make(0), make(1, k=2), make(2, o=object()), make(3, _Sub)]:
            both(record)
        with loghandler.context(user=7):
            both(make(4))
        for h in (compiled, python):
            h.addFilter(lambda r: r.args != (5,))
        for i in (5, 6):
            both(make(i))
        got, want = queued(compiled), queued(python)
        for a, b in zip(got, want, strict=True):
            assert a.pop("_time") == b.pop("_time")
        assert got == want  # 5 was filtered out:
        assert [e["message"] for e in got] == [f"order {i}" for i in (0, 1, 2, 3, 4, 6)]
    finally:
        compiled.close()
        python.close()


# ------------------------------------------------------------------ wire items

PARKED = dict(token=TOKEN, url="http://127.0.0.1:9", flush_interval=3600, batch_size=10_000,
              shutdown_timeout=0.1, handle_sigterm=False)
WIRE_SHIPPERS = {
    "defaults": {},
    "fields": {"fields": {"service": "checkout", "region": "eu", "n": 3, "message": "never"}},
    "no scrubbing, no identity": {"scrub": False, "identity": False},
    # Exclusions: the writer leaves the fields out (the head's, extras, the context's).
    "exclusions": {"exclude_fields": ["module", "file", "request_id", "tenant", "_time"],
                   "scrub_keys": ["patient_id"]},
    # field_names: the head's fields and the span's ids renamed (last, in the mapping's
    # order), one chained, one renamed to a name an extra or a context field may hold.
    "names": {"field_names": {"message": "msg", "level": "severity", "logger": "level",
                              "trace_id": "trace.id", "host": "host.name", "region": "zone"},
              "exclude_fields": ["function"]},
}


@pytest.fixture(scope="module")
def wire_handlers() -> Iterator[dict[str, tuple[IngestHandler, IngestHandler]]]:
    """Parked handlers (nothing is sent) whose shippers allow wire items, by configuration,
    each with a twin on the Python path (the reference) configured alike."""
    made = {name: (IngestHandler("ds", **PARKED, **opts), PythonHandler("ds", **PARKED, **opts))
            for name, opts in WIRE_SHIPPERS.items()}
    yield made
    for pair in made.values():
        for h in pair:
            h.close()


def python_wire(pair: tuple[IngestHandler, IngestHandler],
                record: logging.LogRecord) -> tuple[bytes, bytes]:
    """What the Python path ships for ``record``: its event dict, through item_events and the
    encoder, as the flusher would (the reference a wire item is held to), written by orjson
    and by the standard library's encoder."""
    twin = pair[1]
    item = last_item(twin, record, via_emit=True)
    o = twin.shipper.options
    finish = make_finisher(o.exclude_fields, o.scrub, o.scrub_keys, o.scrub_patterns,
                           o.field_names)
    fast = encode(formatted(item, False, o.fields, finish))
    with without_orjson():
        std = encode(formatted(item, False, o.fields, finish))
    return fast, std


def compiled_wire(handler: IngestHandler, record: logging.LogRecord) -> Any:
    """record_item's item for ``record`` with the shipper's item plan (queued nowhere)."""
    wire = handler.shipper.item_plan()
    assert wire is not None
    got = record_item(EXT, record.__dict__, wire)
    return None if got is None else got[0]


PLAIN_VALUES = st.one_of(
    st.text(max_size=30), st.integers(min_value=-2**65, max_value=2**65), st.floats(),
    st.floats(min_value=-1e6, max_value=1e6), st.booleans(), st.none(),
    # Not numbers JSON can carry: null on every path, whatever else the event holds (35.8).
    st.sampled_from([math.nan, math.inf, -math.inf]))


@st.composite
def plain_records(draw: st.DrawFn) -> logging.LogRecord:
    """Records of the kind wire items are made of (plain extras, a %-message), with text that
    needs escaping, any Unicode, odd floats and ints, names that clash, created anywhere."""
    args: tuple[Any, ...] = ()
    msg = draw(st.one_of(st.text(max_size=40), st.sampled_from(["café", "Zürich", "日本語"])))
    if draw(st.booleans()):
        # Conversions the writer takes (%s of a str or an int, %d of an int, %%), and ones it
        # leaves to str % (%r, widths, %d of a str, too few or too many arguments, a bool).
        pieces = draw(st.lists(st.sampled_from(["%s", "%s", "%d", "%%", "é", "\n", "x", "%r",
                                                "%5d"]), max_size=5))
        msg += " " + "".join(pieces)
        arg = st.one_of(st.text(max_size=10), st.integers(-10**20, 10**20), st.booleans())
        args = tuple(draw(st.lists(arg, min_size=1, max_size=4)))
    level = draw(st.sampled_from([logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR,
                                  logging.CRITICAL, 5]))
    name = draw(st.sampled_from(["app", "app.db", "wire \"quoted\"\n", "ünï"]))
    record = logging.LogRecord(name, level, draw(st.sampled_from(["/app.py", "C:\\x\\é.py"])),
                               draw(st.integers(0, 10**6)), msg, args or None, None)
    keys = st.one_of(st.text(min_size=1, max_size=10),
                     st.sampled_from(["request_id", "password", "host", "service", "line",
                                      "message", "asctime", "é", "a\"b", "\x00"]))
    record.__dict__.update(draw(st.dictionaries(keys, PLAIN_VALUES, max_size=6)))
    if draw(st.booleans()):
        record.created = draw(st.floats(min_value=-1e10, max_value=3e11))
    return record


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(record=st.one_of(plain_records(), records()),
       shipper=st.sampled_from(sorted(WIRE_SHIPPERS)))
def test_wire_item_is_what_the_python_path_ships(
        wire_handlers: dict[str, tuple[IngestHandler, IngestHandler]],
        record: logging.LogRecord, shipper: str) -> None:
    """A wire item is, byte for byte, the JSON the flusher makes of the Python path's event,
    with orjson and without it (the standard library's encoder, which sends an event with a
    NaN to the exact path); the others stay event dicts."""
    pair = wire_handlers[shipper]
    snapshot = dict(record.__dict__)
    got = compiled_wire(pair[0], record)
    record.__dict__.clear()
    record.__dict__.update(snapshot)
    if type(got) is not bytes:
        return  # the dict path's (compared with the Python path's above)
    fast, std = python_wire(pair, record)
    assert got == std
    if encoding_has_orjson():
        assert got == fast


def shipped(item: Any, handler: IngestHandler) -> bytes:
    """The JSON the flusher makes of a queue item of ``handler``'s (a wire item is it)."""
    if type(item) is bytes:
        return item
    o = handler.shipper.options
    finish = make_finisher(o.exclude_fields, o.scrub, o.scrub_keys, o.scrub_patterns,
                           o.field_names)
    return encode(formatted(item, False, o.fields, finish))


@contextlib.contextmanager
def caller_context(contexts: list[dict[str, Any]], span: tuple[int, int] | None
                   ) -> Iterator[None]:
    """Nested ``loghandler.context``s (the inner wins on a shared key), inside an
    OpenTelemetry span (``span``: its ids; (0, 0): an invalid one; None: no span)."""
    import loghandler

    with contextlib.ExitStack() as stack:
        if span is not None:
            from opentelemetry import trace

            ctx = trace.SpanContext(trace_id=span[0], span_id=span[1], is_remote=False,
                                    trace_flags=trace.TraceFlags(1))
            stack.enter_context(trace.use_span(trace.NonRecordingSpan(ctx)))
        for fields in contexts:
            stack.enter_context(loghandler.context(**fields))
        yield


CONTEXT_KEYS = st.one_of(
    st.text(min_size=1, max_size=8),
    # A head field's name (the head wins), the span's ids' (the span wins), fields=' and
    # identity's (merged on the flusher), an extra's (the extra wins), a secret's, a record
    # attribute's, one to exclude, one that needs escaping.
    st.sampled_from(["logger", "message", "trace_id", "span_id", "host", "service", "region",
                     "request_id", "password", "name", "args", "tenant", "module", "é", "a\"b"]))
CONTEXTS = st.lists(st.dictionaries(CONTEXT_KEYS, st.one_of(
    PLAIN_VALUES, st.just({"nested": [1, "x"]})), max_size=5), max_size=3)
SPANS = st.one_of(st.none(), st.just((0, 0)),
                  st.tuples(st.integers(1, 2**128 - 1), st.integers(1, 2**64 - 1)))


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(record=st.one_of(plain_records(), records()), contexts=CONTEXTS, span=SPANS,
       shipper=st.sampled_from(sorted(WIRE_SHIPPERS)))
def test_wire_item_in_a_context_is_what_the_python_path_ships(
        wire_handlers: dict[str, tuple[IngestHandler, IngestHandler]],
        record: logging.LogRecord, contexts: list[dict[str, Any]],
        span: tuple[int, int] | None, shipper: str) -> None:
    """Inside contexts (nested, with keys of every kind of clash) and spans, what the compiled
    handle queues (a wire item with the span's ids and the context's fields written into it,
    or an event dict) ships as the very bytes the Python path's event does: the span's ids,
    then the context's fields, each where the event lacks it."""
    fast, twin = wire_handlers[shipper]
    snapshot = dict(record.__dict__)
    with caller_context(contexts, span):
        got = last_item(fast, record)
        record.__dict__.clear()
        record.__dict__.update(snapshot)
        want = last_item(twin, record, via_emit=True)
    assert shipped(got, fast) == shipped(want, twin)


def test_a_plain_context_and_a_span_keep_wire_items(
        wire_handlers: dict[str, tuple[IngestHandler, IngestHandler]]) -> None:
    """Inside a context of plain values and a span, a plain record is still a wire item: the
    context's fields and the span's ids are in it, as they ship."""
    fast, _ = wire_handlers["defaults"]
    with caller_context([{"user_id": 7, "tenant": "acme"}], (0x4BF92F3577B34DA6A3CE929D0E0E4736,
                                                             0x00F067AA0BA902B7)):
        item = last_item(fast, _plain(request_id="r-1"))
    assert (type(item) is bytes) is (not PURE)
    event = json.loads(shipped(item, fast))
    assert event["user_id"] == 7 and event["tenant"] == "acme"
    assert event["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert event["span_id"] == "00f067aa0ba902b7"
    assert list(event)[-5:] == ["trace_id", "span_id", "user_id", "tenant", "host"]


def test_context_json_is_made_once_per_context_and_kept_for_a_few() -> None:
    """Contexts alternating between threads (more than the compiled path keeps at once), a
    context changed by a nested one, a span replaced: every event still ships with its own
    caller's fields and ids."""
    import threading

    import loghandler

    h = IngestHandler("ds", **PARKED)
    twin = PythonHandler("ds", **PARKED)
    try:
        got: list[tuple[Any, Any]] = []
        lock = threading.Lock()

        def work(n: int) -> None:
            with loghandler.context(worker=n, tenant=f"t{n}"):
                for i in range(30):
                    step = loghandler.context(step=i) if i % 3 == 0 else contextlib.nullcontext()
                    with step, lock:
                        a = last_item(h, _plain("w %s", (n,)))
                        b = last_item(twin, _plain("w %s", (n,)), via_emit=True)
                        got.append((shipped(a, h), shipped(b, twin)))

        threads = [threading.Thread(target=work, args=(n,)) for n in range(7)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(got) == 210
        for a, b in got:
            assert json.loads(a).keys() - {"_time"} == json.loads(b).keys() - {"_time"}
            x, y = json.loads(a), json.loads(b)
            x.pop("_time"), y.pop("_time")
            assert x == y and "worker" in x and x["tenant"] == f"t{x['worker']}"
    finally:
        h.close()
        twin.close()


@pytest.mark.usefixtures("fresh_process")
def test_an_opentelemetry_that_fails_or_is_not_its_own_leaves_no_ids(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A tracer whose span raises, or an OpenTelemetry whose runtime context is not the
    default one: events ship (without ids, as on the Python path), nothing raises."""
    import types

    class Broken:
        def get_span_context(self) -> Any:
            raise RuntimeError("no")

    fake = types.ModuleType("opentelemetry.trace")
    fake.get_current_span = lambda context=None: Broken()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "opentelemetry.trace", fake)
    EXT.configure(**_compiled.table())  # (forgets what it found of the real one)
    try:
        h = IngestHandler("ds", **PARKED)
        try:
            item = last_item(h, _plain())
            event = json.loads(shipped(item, h))
            assert "trace_id" not in event and event["message"] == "m x"
        finally:
            h.close()
    finally:
        monkeypatch.undo()
        EXT.configure(**_compiled.table())


def sampled_pair(**opts: Any) -> tuple[IngestHandler, IngestHandler]:
    """A compiled handler and its Python twin whose samplers draw the same random numbers."""
    import random

    from loghandler import Shipper
    from loghandler.testing import MemoryTransport

    pair = []
    for cls in (IngestHandler, PythonHandler):
        shipper = Shipper(None, "ds", transport=MemoryTransport(), flush_interval=3600,
                          batch_size=10_000, handle_sigterm=False, **opts)
        assert shipper.sampler is not None
        shipper.sampler.rand = random.Random(11).random
        pair.append(cls(shipper=shipper))
    return pair[0], pair[1]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rates=st.dictionaries(st.sampled_from(["debug", "info", "warning", "error", "level 5"]),
                             st.sampled_from([0.0, 0.3, 0.5, 1.0]), max_size=3),
       loggers=st.dictionaries(st.sampled_from(["app", "app.db", "wire", "ünï"]),
                               st.sampled_from([0.0, 0.25, 1.0]), max_size=2),
       calls=st.lists(st.tuples(
           plain_records(),
           st.one_of(st.none(), st.text(max_size=20),
                     st.integers(0, 2**128).map(lambda i: f"{i:032x}"),
                     st.sampled_from(["0x0123456789abcdef", " 1234567890abcdef", "x" * 20])),
           CONTEXTS, SPANS), min_size=1, max_size=12))
def test_sampling_decides_on_both_paths_alike(
        rates: dict[str, float], loggers: dict[str, float],
        calls: list[tuple[logging.LogRecord, Any, list[dict[str, Any]], Any]]) -> None:
    """Sampling on the caller's thread: the compiled decision (by level, logger, and the trace
    id the event ships with: its own, the span's, the context's) is the Python one's, event
    for event, with the same random numbers."""
    if not rates and not loggers:
        rates = {"info": 0.5}
    fast, twin = sampled_pair(sample_levels=rates, sample_loggers=loggers)
    try:
        for record, trace, contexts, span in calls:
            if trace is not None:
                record.trace_id = trace
            snapshot = dict(record.__dict__)
            with caller_context(contexts, span):
                fast.handle(record)
                record.__dict__.clear()
                record.__dict__.update(snapshot)
                twin.emit(record)
        a = [shipped(i, fast) for i in fast.shipper.intake.queue]
        b = [shipped(i, twin) for i in twin.shipper.intake.queue]
        strip = [[{k: v for k, v in json.loads(x).items() if k != "_time"} for x in q]
                 for q in (a, b)]
        assert strip[0] == strip[1]
        assert fast.stats().dropped_sampled == twin.stats().dropped_sampled
    finally:
        fast.close()
        twin.close()


class _ChangesItsRecord:
    """An argument whose formatting changes the record it is logged in: the application's code
    running while the message is made (getMessage's ``%``)."""

    record: logging.LogRecord

    def __str__(self) -> str:
        self.record.levelname, self.record.levelno = "ERROR", logging.ERROR
        self.record.name, self.record.module = "renamed", "elsewhere"
        return "changed"


@pytest.mark.parametrize("opts", [{}, {"sample_loggers": {"other": 0.5}}],
                         ids=["no policy", "sampling"])
def test_a_record_changed_while_its_message_is_made_ships_as_changed(
        opts: dict[str, Any]) -> None:
    """What the record's way read for sampling (level name, logger) goes to the wire writer,
    not read again; when making the message runs the application's code, the head is read
    again: the event is the record as it is after, as on the Python path, not what was read
    before (sampling still decided on what it read). Without sampling, the writer's own read
    is the one after the message."""
    from loghandler import Shipper
    from loghandler.testing import MemoryTransport

    got = []
    for cls in (IngestHandler, PythonHandler):
        shipper = Shipper(None, "ds", transport=MemoryTransport(), flush_interval=3600,
                          batch_size=10_000, handle_sigterm=False, **opts)
        handler = cls(shipper=shipper)
        try:
            arg = _ChangesItsRecord()
            arg.record = logging.LogRecord("app", logging.INFO, "/app.py", 1, "m %s", (arg,),
                                           None)
            queue = shipper.intake.queue
            handler.handle(arg.record)
            assert len(queue) == 1
            if cls is IngestHandler and not PURE:
                assert type(queue[0]) is bytes  # the wire writer's, read again
            event = json.loads(shipped(queue[0], handler))
            got.append({k: v for k, v in event.items() if k != "_time"})
        finally:
            handler.close()
    assert got[0] == got[1]
    assert (got[0]["level"], got[0]["logger"], got[0]["module"], got[0]["message"]) == (
        "error", "renamed", "elsewhere", "m changed")


REPEAT_EVENTS = st.lists(st.tuples(
    st.sampled_from(["a", "b", "c", 'q"uote', "é"]), st.sampled_from(["info", "error", None]),
    st.sampled_from(["app", "db", None]), st.booleans(), st.booleans(),
    st.floats(0, 5)), max_size=40)


@settings(max_examples=400, deadline=None)
@given(events=REPEAT_EVENTS, limit=st.integers(1, 3), window=st.sampled_from([1.0, 2.5]),
       max_keys=st.integers(1, 4))
def test_repeats_of_wire_items_and_dicts_are_decided_as_in_python(
        events: list[tuple[Any, ...]], limit: int, window: float, max_keys: int) -> None:
    """The compiled repeat loop (admit_repeats) keeps, suppresses, summarizes and leaves its
    windows as Selector's Python loop does, for event dicts and wire items alike (a wire
    item's key is read from its JSON), through windows that end and keys evicted for room."""
    from loghandler._engine.shaping import Selector

    def batch(k: int) -> list[Any]:
        out: list[Any] = []
        for message, level, logger, as_event, wire, _ in events[k::3]:
            e: dict[str, Any] = {"_time": "2024-01-01T00:00:00.000000Z"}
            if level is not None:
                e["level"] = level
            if logger is not None:
                e["logger"] = logger
            e["event" if as_event else "message"] = message
            out.append(encode(e) if wire else e)
        return out

    runs = []
    for admit in (EXT.admit_repeats, None):
        sel = Selector(limit, window, max_keys=max_keys)
        got = []
        for k, now in enumerate((0.0, 1.0, 3.0)):
            got.append(sel.select(batch(k), now, admit=admit))
        got.append(sel.flush_all())
        runs.append(got)
    assert runs[0] == runs[1]


@pytest.mark.parametrize("seed", range(4))
def test_repeats_of_long_streams_are_decided_as_in_python(seed: int) -> None:
    """Thousands of events over hundreds of messages, some repeated, most seen once: the
    compiled loop's table of first sightings (probes, deletions by backward shift, new
    generations) decides as the Python loop's dicts, and so do the windows opened from it."""
    import random

    from loghandler._engine.shaping import Selector

    rng = random.Random(seed)
    names = [f"m{i}" if i % 3 else f"w\u00e9 \\ {i}" for i in range(400)]
    stream = []
    for _ in range(40):
        batch: list[Any] = []
        for _ in range(rng.randrange(0, 120)):
            e = {"level": rng.choice(["info", "error"]), "logger": rng.choice(["a", "b"]),
                 "message": rng.choice(names[:rng.choice([20, 400])]), "_time": "t"}
            batch.append(encode(e) if rng.random() < 0.7 else e)
        stream.append(batch)
    limit, max_keys = rng.randrange(1, 4), rng.choice([7, 50, 300])
    runs = []
    for admit in (EXT.admit_repeats, None):
        sel = Selector(limit, 2.0, max_keys=max_keys)
        runs.append([sel.select(list(b), k * 0.25, admit=admit)
                     for k, b in enumerate(stream)] + [sel.flush_all()])
    assert runs[0] == runs[1]
    assert sum(r[1] for r in runs[0][:-1]) > 0  # some were suppressed


def test_repeat_windows_are_left_to_reference_counting() -> None:
    """The compiled repeat loop's windows (a key of str or None, an entry of a float, an int,
    the last event and the key) can be part of no cycle: they are untracked by the garbage
    collector, whose passes walked each of them (some 460 instructions an event with every
    message new), while a key holding a container stays tracked, and a suppressed event is
    still freed with its window."""
    import gc
    import weakref

    from loghandler._engine.shaping import Selector

    class Value:
        pass

    sel = Selector(2, 60.0)
    held = Value()
    gone = weakref.ref(held)
    events = [encode({"message": f"m{i // 2}", "level": "info", "logger": "x"})
              for i in range(6)]  # each twice: a window each
    level = ("info", Value())  # a level of the application's making: may be in a cycle
    odd = {"message": "odd", "level": level, "logger": "x"}
    same = {"message": "same", "level": "info", "logger": "x"}
    events += [odd, dict(odd), same, dict(same), {**same, "v": held}]
    kept, repeats, _ = sel.select(events, 0.0, admit=EXT.admit_repeats)
    assert repeats == 1 and len(kept) == 10
    # The windows' own entries are what this checks (no public view of them): each holds
    # its (logger, level, message) last.
    seen = sel._seen  # noqa: SLF001
    assert [e[3] for e in sel._order] == list(seen)  # noqa: SLF001
    keys = [e[4] for e in seen.values()]
    atomic = [(k, e) for k, e in zip(keys, seen.values(), strict=True) if k[1] is not level]
    assert len(atomic) == 4 and not any(gc.is_tracked(k) or gc.is_tracked(e) for k, e in atomic)
    # m0, m1, m2, odd, same: the one key holding the application's object stays tracked
    assert [gc.is_tracked(k) for k in keys] == [False, False, False, True, False]
    del held, events, atomic
    (summary,) = sel.flush_all()
    assert summary["repeats_suppressed"] == 1
    assert gone() is None


def test_nan_beside_non_ascii_ships_the_same_bytes_on_both_paths(
        wire_handlers: dict[str, tuple[IngestHandler, IngestHandler]]) -> None:
    """Issue 35.8: an event with NaN or infinity beside non-ASCII text is the same bytes
    whichever path wrote it: UTF-8 and null (the exact path used to escape the whole event
    as \\uXXXX once the standard library's encoder refused the NaN)."""
    pair = wire_handlers["no scrubbing, no identity"]
    for value in (math.nan, math.inf, -math.inf):
        record = _plain("café %s", ("naïve",), ratio=value, city="Zürich")
        got = compiled_wire(pair[0], record)
        fast, std = python_wire(pair, record)
        assert type(got) is bytes and b'"ratio":null' in got and "Zürich".encode() in got
        assert std == got
        if encoding_has_orjson():
            assert fast == got


def encoding_has_orjson() -> bool:
    from loghandler import _encoding

    return _encoding.HAVE_ORJSON


def _wire_of(pair: tuple[IngestHandler, IngestHandler], **extra: Any) -> Any:
    record = _plain("m", (), **extra)
    return compiled_wire(pair[0], record)


@settings(max_examples=2000, deadline=None)
@given(value=st.one_of(st.floats(), st.floats(min_value=-1e16, max_value=1e16),
                       st.integers(-10**6, 10**6).map(lambda i: i / 1000),
                       st.integers(min_value=-2**70, max_value=2**70), st.booleans(),
                       st.none(), st.text(max_size=40)))
def test_wire_values_are_written_as_orjson_writes_them(
        wire_handlers: dict[str, tuple[IngestHandler, IngestHandler]], value: Any) -> None:
    """Floats (shortest digits; exponent forms left to the encoder), ints (past 64 bits left),
    strings (escapes, control characters, any Unicode; lone surrogates left)."""
    got = _wire_of(wire_handlers["no scrubbing, no identity"], v=value)
    if type(got) is not bytes:
        # Left to the dict path: only what the fast writer does not write the encoder's way.
        assert (type(value) is float and "e" in repr(value)) or (
            type(value) is int and not -2**63 <= value < 2**63) or (
            type(value) is str and any(0xD800 <= ord(c) < 0xE000 for c in value))
        return
    assert got.endswith(b',"v":' + encode(value) + b"}")


def test_wire_items_leave_to_the_dict_path_what_the_flusher_must_see(
        wire_handlers: dict[str, tuple[IngestHandler, IngestHandler]]) -> None:
    """A secret's key (scrubbed on the flusher), a message too large to copy on the caller's
    thread: event dicts; a value that is not plain: the careful path's. A new key is learned
    once (the scrubber decides), then written."""
    pair = wire_handlers["defaults"]
    assert type(_wire_of(pair, password="hunter2")) is dict
    assert _wire_of(pair, payload={"a": 1}) is None  # the careful path's
    assert type(compiled_wire(pair[0], _plain("x" * 100_000, ()))) is dict
    wire = pair[0].shipper.item_plan()
    assert wire is not None
    clean = wire[2]  # the scrubber's set of keys it has nothing to do for
    assert "brand_new_key" not in clean
    assert type(_wire_of(pair, brand_new_key=1)) is bytes
    assert "brand_new_key" in clean


@pytest.mark.parametrize(("shipper", "extra"), [
    ("defaults", {"host": "mine"}),  # identity's field
    ("fields", {"region": "us"}),
    ("fields", {"service": "own", "n": 4}),
    ("names", {"region": "us", "host": "mine"}),  # names fields= renames (zone, host.name)
])
def test_an_extra_named_like_a_fields_key_is_written_and_wins(
        wire_handlers: dict[str, tuple[IngestHandler, IngestHandler]], shipper: str,
        extra: dict[str, Any]) -> None:
    """One rule for every front end's event (the one writer's): an event's own field that
    fields= also names is written into the wire item, and fields= adds only what the event
    lacks, as item_events does for the Python path's dict: the same bytes."""
    pair = wire_handlers[shipper]
    record = _plain("m %s", ("x",), **extra)
    got = compiled_wire(pair[0], record)
    _, std = python_wire(pair, record)
    assert type(got) is bytes and got == std
    event = json.loads(got)
    names = WIRE_SHIPPERS[shipper].get("field_names", {})
    assert all(event[names.get(k, k)] == v for k, v in extra.items())


@pytest.fixture
def fresh_process(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """As in a process that never entered a loghandler.context nor imported OpenTelemetry
    (earlier tests did both): until the test enters one, events take the plain path."""
    from loghandler._engine.context import IN_USE

    monkeypatch.delitem(sys.modules, "opentelemetry.trace", raising=False)
    saved, IN_USE[0] = IN_USE[0], False
    try:
        yield
    finally:
        IN_USE[0] = saved


@pytest.mark.usefixtures("fresh_process")
def test_no_wire_when_the_flusher_has_work_per_event() -> None:
    """Scanning text for secrets, a json_default, a nested or secret fields= value: the
    shipper offers no wire; a handler with a formatter takes the careful path (its events are
    dicts). Sampling (decided on the caller's thread), repeats (read from the wire item) and
    exclusions (left out by the writer) keep wire items."""
    for opts in ({"scrub": "all"}, {"json_default": str}, {"fields": {"deploy": {"sha": "abc"}}},
                 {"fields": {"api_key": "sk-1"}}):
        h = IngestHandler("ds", **PARKED, **opts)
        try:
            assert h.shipper.item_plan() is None, opts
            h.handle(_plain())
            assert type(h.shipper.intake.queue[-1]) is dict, opts
        finally:
            h.close()
    for opts in ({}, {"sample_levels": {"debug": 0.5}}, {"repeat_limit": 10},
                 {"exclude_fields": ["file"]}):
        h = IngestHandler("ds", **PARKED, **opts)
        try:
            assert h.shipper.item_plan() is not None
            h.handle(_plain())
            assert (type(h.shipper.intake.queue[-1]) is bytes) is (not PURE), opts
            h.setFormatter(logging.Formatter("%(message)s"))
            h.handle(_plain())
            assert type(h.shipper.intake.queue[-1]) is dict
        finally:
            h.close()


@pytest.mark.usefixtures("fresh_process")
def test_wire_items_and_dicts_ship_together() -> None:
    """End to end through the local service: wire items and event dicts (a secret, a nested
    value, a context) in one batch; every event arrives as the object it was, secrets
    scrubbed."""
    import loghandler
    from loghandler._engine.context import IN_USE

    with LocalService(token=TOKEN) as svc:
        h = IngestHandler("ds", url=svc.url, token=TOKEN, flush_interval=3600)
        log = logging.getLogger("wire.mixed")
        log.propagate = False
        log.handlers[:] = [h]
        log.setLevel(logging.INFO)
        try:
            log.info("plain %s", 1, extra={"n": 1.5})
            log.info("secret", extra={"password": "hunter2"})
            log.info("nested", extra={"payload": {"a": [1, 2]}})
            with loghandler.context(tenant="acme"):
                log.info("in context")
            IN_USE[0] = False  # (as in a process that never entered one)
            log.info("plain %s", 2, extra={"n": 2.5})
            kinds = [type(item) for item in h.shipper.intake.queue]
            assert (bytes in kinds) is (not PURE) and dict in kinds
            assert h.flush(10)
            got = {e["message"]: e for e in svc.events("ds")}
            assert set(got) == {"plain 1", "secret", "nested", "in context", "plain 2"}
            assert got["plain 1"]["n"] == 1.5 and got["plain 2"]["n"] == 2.5
            assert got["secret"]["password"] == "[redacted]"
            assert got["nested"]["payload"] == {"a": [1, 2]}
            assert got["in context"]["tenant"] == "acme"
            assert all(e["level"] == "info" and e["logger"] == "wire.mixed"
                       for e in got.values())
            st_ = h.stats()
            assert st_.delivered == 5 and st_.dropped == 0
        finally:
            h.close()


def test_wire_items_are_sized_and_spooled(tmp_path: Any) -> None:
    """The queue's byte bound counts a wire item as its length and WIRE_ITEM_SIZE; a spool
    file holds it as it is, and its replay delivers it."""
    from loghandler._engine.events import WIRE_ITEM_SIZE, items_size, size_of

    item, event = b'{"message":"m"}', {"message": "m", SIZE: 600}
    assert size_of(item) == len(item) + WIRE_ITEM_SIZE and size_of(event) == 600
    if not PURE:
        assert items_size([item, event, item]) == 2 * (len(item) + WIRE_ITEM_SIZE) + 600
    spool = tmp_path / "spool"
    h = IngestHandler("ds", token=TOKEN, url="http://127.0.0.1:9", spool_dir=str(spool),
                      flush_interval=3600, shutdown_timeout=0.5, handle_sigterm=False)
    log = logging.getLogger("wire.spool")
    log.propagate = False
    log.handlers[:] = [h]
    log.setLevel(logging.INFO)
    for i in range(50):
        log.info("spooled %s", i, extra={"i": i})
    queued = list(h.shipper.intake.queue)
    assert sum(map(size_of, queued)) == items_size(queued)
    h.close()  # nothing listens: everything goes to the spool
    assert h.stats().spooled == 50
    with LocalService(token=TOKEN) as svc:
        h2 = IngestHandler("ds", token=TOKEN, url=svc.url, spool_dir=str(spool),
                           handle_sigterm=False)
        try:
            assert wait_until(lambda: h2.stats().replayed == 50)
            assert sorted(e["i"] for e in svc.events("ds")) == list(range(50))
        finally:
            h2.close()


def test_gzip_is_zlibs_gzip_in_one_step() -> None:
    """_gzip.c: the bytes zlib's module writes (levels 1-9; level 0's stored blocks may be cut
    elsewhere, and read back the same), or a clear error for what it cannot take."""
    import random
    import zlib

    from loghandler._engine import compiled as _compiled

    gz = _compiled.gzip_extension()
    assert gz is not None  # built wherever zlib's headers are (CI's machines)
    assert (_compiled.gzip_compress is None) is PURE
    rnd = random.Random(7)
    for size in (0, 1, 100, 40_000, 300_000):
        data = bytes(rnd.getrandbits(8) for _ in range(size // 4)) + b"ab" * (size // 2)
        for level in (-1, 0, 1, 6, 9):
            out = gz.compress(data, level)
            assert zlib.decompress(out, 31) == data
            if level:
                comp = zlib.compressobj(level, zlib.DEFLATED, 31)
                assert out == comp.compress(data) + comp.flush()
    for bad in ((b"x", 10), (b"x", -2), ("text", 1), (None, 1)):
        with pytest.raises((ValueError, TypeError)):
            gz.compress(*bad)


def test_array_gzip_is_the_joined_arrays_gzip() -> None:
    """_gzip.c's array_gzip: the bytes zlib writes for ``b"[" + b",".join(parts) + b"]"``
    (the body never made: parts copied through a 64 KiB stage, so parts that straddle it, one
    larger than it, empty ones and none at all), and array_length that body's length; a part
    that is not bytes is refused (array_length says -1: the cutter then goes event by event)."""
    import random
    import zlib

    from loghandler._engine.batches import join_array

    gz = _compiled.gzip_extension()
    assert gz is not None
    assert (_compiled.array_gzip is None) is PURE
    rnd = random.Random(11)
    cases: list[list[bytes]] = [[], [b""], [b"a"], [b"ab", b"cd"], [b"x" * 70_000],
                                [b"y" * 65_535, b"", b"z" * 65_537, b"w"]]
    cases.append([bytes(rnd.getrandbits(8) for _ in range(rnd.randrange(400)))
                  for _ in range(3000)])
    for parts in cases:
        body = join_array(parts)
        assert body == b"[" + b",".join(parts) + b"]"
        assert gz.array_length(parts) == len(body)
        for level in (1, 6):
            out = gz.array_gzip(parts, level)
            comp = zlib.compressobj(level, zlib.DEFLATED, 31)
            assert out == comp.compress(body) + comp.flush()
    assert gz.array_length([b"a", {"b": 1}]) == -1
    for bad in (([b"a", "b"], 1), ((b"a",), 1), ([b"a"], 10), ([b"a"], -2)):
        with pytest.raises((ValueError, TypeError)):
            gz.array_gzip(*bad)
    with pytest.raises(TypeError):
        gz.array_length((b"a",))


# ------------------------------------------------------------------ records read by position
#
# The compiled path reads a LogRecord's attributes at the places __init__ put them in its dict
# (record_attr), taking the value there only when the key there is the one expected, and by key
# otherwise. Each record below has its attributes where a real application may put them. Those
# whose attributes moved and which the compiled path takes (a wire item or its event dict) ship
# another attribute's value when read at the old places without the key's check: every one of
# their tests failed so (checked by hand, with the check taken out of record_attr). A record
# whose attributes moved one place on (set before __init__) goes to the careful path (an
# attribute of __init__'s is found where extras are) after sampling read its level name, which
# would then be its arguments' place: not a str, left to the Python path's decision.


def _pinned(record: logging.LogRecord) -> logging.LogRecord:
    """The record's times set in place (their keys keep their places): the same event twice."""
    for attr, value in (("created", 1.7e9 + 0.25), ("msecs", 250.0), ("relativeCreated", 5.0)):
        if attr in record.__dict__:
            record.__dict__[attr] = value
    return record


def _at_rest(name: str) -> logging.LogRecord:
    return logging.LogRecord(name, logging.INFO, "/app.py", 3, "m %s", ("x",), None)


def _readded(name: str) -> logging.LogRecord:
    """Attributes deleted and set again (a filter's or a middleware's): they go last."""
    record = _at_rest(name)
    for attr in ("name", "msg", "levelname"):
        record.__dict__[attr] = record.__dict__.pop(attr)
    return record


def _one_deleted(name: str) -> logging.LogRecord:
    """An attribute the event does not carry, deleted: those after it move up one place."""
    record = _at_rest(name)
    del record.relativeCreated
    return record


class _Tagged(logging.LogRecord):
    """A subclass that sets an attribute before LogRecord.__init__ runs."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.tenant = "acme"
        super().__init__(*args, **kwargs)


def _subclass(name: str) -> logging.LogRecord:
    return _Tagged(name, logging.INFO, "/app.py", 3, "m %s", ("x",), None)


def _factory_made(name: str) -> logging.LogRecord:
    """The same as an exact LogRecord (a record factory's), which the compiled handle takes:
    every attribute of __init__'s one place further."""
    record = logging.LogRecord.__new__(logging.LogRecord)
    record.tenant = "acme"
    record.__init__(name, logging.INFO, "/app.py", 3, "m %s", ("x",), None)  # type: ignore[misc]
    return record


def _made(name: str) -> logging.LogRecord:
    """logging.makeLogRecord of a dict whose keys come in another order than __init__'s."""
    return logging.makeLogRecord({"custom": 1, "lineno": 3, "args": ("x",), "msg": "m %s",
                                  "levelno": logging.INFO, "levelname": "INFO", "name": name,
                                  "pathname": "/app.py", "module": "app"})


def _reordered(name: str) -> logging.LogRecord:
    """A record whose __dict__ was replaced by one in the opposite order."""
    record = _at_rest(name)
    record.__dict__ = dict(reversed(record.__dict__.items()))
    return record


def _extras(name: str) -> logging.LogRecord:
    """Extras (makeRecord puts them after __init__'s attributes) that shadow nothing."""
    return logging.getLogger(name).makeRecord(name, logging.INFO, "/app.py", 3, "m %s", ("x",),
                                              None, extra={"request_id": 7, "user": "ann"})


def _sets(record: logging.LogRecord) -> bool:
    """A filter that replaces the message, its arguments and the level name in place."""
    record.msg, record.args, record.levelname = "set %s", ("y",), "WARNING"
    return True


def _moves(record: logging.LogRecord) -> bool:
    """A filter that replaces them by deleting them first: they go last."""
    for attr, value in (("msg", "moved %s"), ("args", ("z",)), ("levelname", "ERROR")):
        delattr(record, attr)
        setattr(record, attr, value)
    return True


# case: (the record of a logger's name, a filter or None, whether the compiled path takes it
# (else the careful path does: a subclass, or an attribute of __init__'s found among extras),
# whether the attributes read moved)
POSITION_CASES: dict[str, tuple[Any, Any, bool, bool]] = {
    "deleted and re-added": (_readded, None, True, True),
    "one deleted": (_one_deleted, None, True, True),
    "a subclass that sets an attribute first": (_subclass, None, False, True),
    "an exact record with an attribute set first": (_factory_made, None, False, True),
    "makeLogRecord": (_made, None, True, False),
    "__dict__ replaced, reversed": (_reordered, None, True, True),
    "extras that shadow nothing": (_extras, None, True, False),
    "a filter that sets msg, args, levelname": (_at_rest, _sets, True, False),
    "a filter that deletes and sets them": (_at_rest, _moves, True, True),
}
POSITION_SHIPPERS: dict[str, dict[str, Any]] = {
    "wire items": {},
    "event dicts": DICTS,
    # Sampling reads the level name and the logger first (RecordHead): a logger's name read
    # from another attribute's place would keep what the policy drops.
    "sampling": {"sample_loggers": {"app": 0.0}, "sample_levels": {"debug": 0.0}},
}


@pytest.mark.parametrize("shipper", sorted(POSITION_SHIPPERS))
@pytest.mark.parametrize("case", sorted(POSITION_CASES))
def test_records_with_attributes_moved_ship_as_on_the_python_path(case: str,
                                                                  shipper: str) -> None:
    """Through the handler (the compiled handle on the compiled path, its filters run by the
    Python handle before the compiled record_put): a record of logger "app" and one of "web",
    each as the case makes it, ship the same events as on the Python path, and sampling drops
    the same (the policy drops "app"'s)."""
    from loghandler import Shipper
    from loghandler.testing import MemoryTransport

    make, check, compiled_takes, _ = POSITION_CASES[case]
    got = []
    for cls in (IngestHandler, PythonHandler):
        ship = Shipper(None, "ds", transport=MemoryTransport(), flush_interval=3600,
                       batch_size=10_000, handle_sigterm=False, **POSITION_SHIPPERS[shipper])
        handler = cls(shipper=ship)
        if check is not None:
            handler.addFilter(check)
        try:
            for name in ("app", "web"):
                handler.handle(make(name))
            queue = list(ship.intake.queue)
            assert queue  # (sampling keeps "web"'s, and any record at warning or above)
            if cls is IngestHandler and not PURE and compiled_takes:
                # The compiled path made them (a wire item, or its event dict: RECORD).
                assert all(type(i) is bytes if shipper != "event dicts" else i.get(RECORD)
                           for i in queue), queue
            events = [json.loads(shipped(item, handler)) for item in queue]
            for event in events:
                event.pop("_time")
            got.append((events, handler.stats().dropped_sampled))
        finally:
            handler.close()
    assert got[0] == got[1]
    assert got[0][0][-1]["logger"] == "web"


@pytest.mark.parametrize("case", sorted(POSITION_CASES))
def test_the_extension_reads_moved_records_as_python_does(
        handlers: tuple[IngestHandler, IngestHandler],
        wire_handlers: dict[str, tuple[IngestHandler, IngestHandler]], case: str) -> None:
    """The extension itself, in both runs (record_put on the record's dict, whatever its
    class, its filter applied first): its wire item is the Python path's JSON byte for byte,
    its event dict the Python path's item key for key; the cases it takes, it takes."""
    make, check, compiled_takes, _ = POSITION_CASES[case]

    def fresh() -> logging.LogRecord:
        record = make("web")
        if check is not None:
            check(record)
        return _pinned(record)

    pair = wire_handlers["defaults"]
    got = record_item(EXT, fresh().__dict__, pair[0].shipper.item_plan())
    assert (got is not None and type(got[0]) is bytes) is compiled_takes
    if got is not None:
        assert got[0] == python_wire(pair, fresh())[1]
    item = record_item(EXT, fresh().__dict__)
    assert (item is not None) is compiled_takes
    if item is not None:
        same_item(item[0], last_item(handlers[1], fresh()))
