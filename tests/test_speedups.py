"""The compiled hot path (loghandler/_speedups.c) against its reference, the Python code.

Both builds run the whole suite in CI (README's test command: once as installed, once with
``LOGHANDLER_PURE_PYTHON=1``); here the two are compared directly, on generated and on hostile
records: every queue item the compiled path makes is the Python path's, key for key and size for
size, and nothing it is given crashes the process or raises into the caller.
"""

from __future__ import annotations

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
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_event_model import records
from test_spool import wait_until

from loghandler import IngestHandler, _compiled
from loghandler._encoding import encode
from loghandler._engine import events
from loghandler._engine.events import RECORD, SIZE, item_events
from loghandler._engine.shaping import make_finisher
from loghandler.testing import LocalService

TOKEN = "speedups-token"
PURE = os.environ.get("LOGHANDLER_PURE_PYTHON", "") not in ("", "0")
# The extension itself, in both runs (turned off or not, it is compared with the Python path).
EXT = _compiled.extension()


def test_the_compiled_path_is_built_and_in_use() -> None:
    """`pip install -e .` on a machine with a compiler builds it (CI's machines have one), and
    it is used unless turned off; a build that silently fell back would pass every other test."""
    assert EXT is not None
    assert _compiled.ACTIVE is (not PURE)
    assert (_compiled.record_put is None) is PURE


@pytest.fixture(scope="module")
def handlers() -> Iterator[tuple[IngestHandler, IngestHandler]]:
    """A handler on the compiled path and one forced onto the Python path; neither flushes
    during the test, so what each queued stays at the end of its queue."""
    with LocalService(token=TOKEN) as svc:
        opts: dict[str, Any] = dict(url=svc.url, token=TOKEN, flush_interval=3600,
                                    batch_size=10_000)
        fast = IngestHandler("compiled", **opts)
        fast._compiled_put = EXT.record_put
        fast._wire = None  # event dicts, compared key for key (wire items: test_wire_*)
        pure = IngestHandler("pure", **opts)
        pure._compiled_put = None
        yield fast, pure
        fast.close()
        pure.close()


def last_item(handler: IngestHandler, record: logging.LogRecord, via_emit: bool = False) -> Any:
    ledger = handler.shipper._ledger
    before = len(ledger.queue)
    if via_emit:
        handler.emit(record)
    else:
        handler.handle(record)
    assert len(ledger.queue) == before + 1
    return ledger.queue[-1]


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
    fast, pure = handlers
    same_item(last_item(fast, record, via_emit), last_item(pure, record, via_emit))


def formatted(item: dict[Any, Any], compiled: bool, fields: Any = None,
              finish: Any = None) -> dict[str, Any]:
    saved = events._compiled_format, events._compiled_items
    if compiled:
        events.use_compiled(EXT.format_record, EXT.format_items)
    else:
        events.use_compiled(None, None)
    try:
        (event,) = item_events([dict(item)], fields, finish)
    finally:
        events.use_compiled(*saved)
    return event


@settings(max_examples=500, deadline=None)
@given(created=st.one_of(st.floats(), st.integers(-10**12, 10**12).map(float),
                         st.floats(min_value=0, max_value=1e11)),
       level=st.one_of(st.sampled_from(sorted(logging._nameToLevel)), st.text(max_size=8)))
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
    return handler.shipper._ledger.queue[-1]


@pytest.mark.parametrize("name,record", list(hostile_records()),
                         ids=[name for name, _ in hostile_records()])
def test_hostile_records_never_crash_and_match_python(
        handlers: tuple[IngestHandler, IngestHandler], name: str, record: logging.LogRecord
) -> None:
    fast, pure = handlers
    snapshot = dict(record.__dict__)
    fast_item = queued_or_none(fast, record)  # must neither crash nor raise
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


def test_record_event_refuses_what_it_does_not_know() -> None:
    """Called with anything but a record's dict, it answers None (the careful path), not an
    error or a crash."""
    _speedups = EXT
    for bad in (None, 1, "s", [], {}, {"msg": 1}, {"msg": "m"}, {1: 2}):
        assert _speedups.record_event(bad) is None
        assert _speedups.record_put(bad, [], 10) is None
    assert _speedups.record_put() is None
    for bad in (None, {}, {"_time": "x", "level": "INFO"}, {"_time": 1.0, "level": 3}):
        assert _speedups.format_record(bad) is False


def _run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env={**os.environ, **env})


SHIP = """
import logging, sys
from loghandler import _compiled
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


def test_the_compiled_handle_queues_what_the_python_handle_does() -> None:
    """IngestHandler.handle in C: for the plain record and for each case it hands to the
    Python handle (filters, a record subclass, a context, a non-plain extra), the queue holds
    the same items as the Python handle's, in the same order. In both runs: the extension's
    handle is compared with the Python one whether it is installed or not."""
    import loghandler
    from loghandler import _handler
    from loghandler._engine.ledger import Ledger
    from loghandler._handler import IngestHandler as Handler

    assert EXT is not None
    python_handle = getattr(Handler, "_python_handle", Handler.handle)
    assert (Handler.handle is python_handle) is PURE  # installed on the compiled path only
    if PURE:  # configured as _handler does it, for this comparison
        EXT.configure_handle(python_handle, _handler._SENDERS, vars(_handler), sys.modules,
                             logging.LogRecord, _handler._HANDLE_RETURNS_RECORD, Ledger,
                             Ledger.__dict__["queue"], Ledger.__dict__["fast_len"])
    c_handle = EXT.handle

    def make(i: int, cls: type[logging.LogRecord] = logging.LogRecord,
             **extra: Any) -> logging.LogRecord:
        record = cls("t", logging.INFO, "f.py", 3, "order %s", (i,), None)
        record.__dict__.update(extra)
        return record

    def queued(h: Handler) -> list[dict[str, Any]]:
        return [json.loads(item) if type(item) is bytes  # a wire item (the same for both)
                else {k: v for k, v in item.items() if isinstance(k, str)}
                for item in h.shipper._ledger.queue]

    parked = dict(token=TOKEN, url="http://127.0.0.1:9", flush_interval=3600,
                  batch_size=10_000, shutdown_timeout=0.1)
    compiled, python = Handler("ds", **parked), Handler("ds", **parked)
    compiled._compiled_put = python._compiled_put = EXT.record_put
    try:
        cases = [make(0), make(1, k=2), make(2, o=object()), make(3, _Sub)]
        for record in cases:
            c_handle(compiled, record)
            python_handle(python, record)
        with loghandler.context(user=7):
            c_handle(compiled, make(4))
            python_handle(python, make(4))
        for h in (compiled, python):
            h.addFilter(lambda r: r.args != (5,))
        for i in (5, 6):
            c_handle(compiled, make(i))
            python_handle(python, make(i))
        got, want = queued(compiled), queued(python)
        for a, b in zip(got, want, strict=True):
            a.pop("_time", None), b.pop("_time", None)
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
}


@pytest.fixture(scope="module")
def wire_handlers() -> Iterator[dict[str, IngestHandler]]:
    """Parked handlers (nothing is sent) whose shippers allow wire items, by configuration."""
    made = {name: IngestHandler("ds", **PARKED, **opts) for name, opts in WIRE_SHIPPERS.items()}
    yield made
    for h in made.values():
        h.close()


def python_wire(handler: IngestHandler, record: logging.LogRecord) -> bytes:
    """What the Python path ships for ``record``: its event dict, through item_events and the
    encoder, as the flusher would (the reference a wire item is held to)."""
    handler._compiled_put = None
    try:
        item = last_item(handler, record, via_emit=True)
    finally:
        handler.shipper._ledger.queue.pop()
    sender = handler.shipper._sender
    return encode(formatted(item, False, handler.shipper.options.fields, sender.finish))


def compiled_wire(handler: IngestHandler, record: logging.LogRecord) -> Any:
    """record_put's item for ``record`` with the shipper's wire (queued nowhere)."""
    wire = handler.shipper._sender.wire()
    assert wire is not None
    got = EXT.record_put(record.__dict__, [], 0, wire)
    return None if got is None else got[0]


PLAIN_VALUES = st.one_of(
    st.text(max_size=30), st.integers(min_value=-2**65, max_value=2**65), st.floats(),
    st.floats(min_value=-1e6, max_value=1e6), st.booleans(), st.none())


@st.composite
def plain_records(draw: st.DrawFn) -> logging.LogRecord:
    """Records of the kind wire items are made of (plain extras, a %-message), with text that
    needs escaping, any Unicode, odd floats and ints, names that clash, created anywhere."""
    args: tuple[Any, ...] = ()
    msg = draw(st.text(max_size=40))
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
def test_wire_item_is_what_the_python_path_ships(wire_handlers: dict[str, IngestHandler],
                                                 record: logging.LogRecord,
                                                 shipper: str) -> None:
    """A wire item is, byte for byte, the JSON the flusher makes of the Python path's event
    (orjson's), for every record it takes; the others stay event dicts."""
    handler = wire_handlers[shipper]
    snapshot = dict(record.__dict__)
    got = compiled_wire(handler, record)
    record.__dict__.clear()
    record.__dict__.update(snapshot)
    if type(got) is not bytes:
        return  # the dict path's (compared with the Python path's above)
    want = python_wire(handler, record)
    if encoding_has_orjson():
        assert got == want
    else:  # the stdlib encoder writes the same values (exponents aside)
        assert json.loads(got) == json.loads(want)


def encoding_has_orjson() -> bool:
    from loghandler import _encoding

    return _encoding.HAVE_ORJSON


def _wire_of(handler: IngestHandler, **extra: Any) -> Any:
    record = _plain("m", (), **extra)
    return compiled_wire(handler, record)


@settings(max_examples=2000, deadline=None)
@given(value=st.one_of(st.floats(), st.floats(min_value=-1e16, max_value=1e16),
                       st.integers(-10**6, 10**6).map(lambda i: i / 1000),
                       st.integers(min_value=-2**70, max_value=2**70), st.booleans(),
                       st.none(), st.text(max_size=40)))
def test_wire_values_are_written_as_orjson_writes_them(
        wire_handlers: dict[str, IngestHandler], value: Any) -> None:
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
        wire_handlers: dict[str, IngestHandler]) -> None:
    """A secret's key (scrubbed on the flusher), a key fields= names (merged there), a message
    too large to copy on the caller's thread: event dicts; a value that is not plain: the
    careful path's. A new key is learned once (the scrubber decides), then written."""
    h = wire_handlers["defaults"]
    assert type(_wire_of(h, password="hunter2")) is dict
    assert type(_wire_of(h, host="mine")) is dict  # identity's field: the event's own wins
    assert _wire_of(h, payload={"a": 1}) is None  # the careful path's
    assert type(compiled_wire(h, _plain("x" * 100_000, ()))) is dict
    clean = h.shipper._sender.finish.clean_keys()
    assert "brand_new_key" not in clean
    assert type(_wire_of(h, brand_new_key=1)) is bytes
    assert "brand_new_key" in clean
    assert type(_wire_of(wire_handlers["fields"], region="us")) is dict


def test_no_wire_when_the_flusher_has_work_per_event() -> None:
    """Sampling or repeats, exclusions, scanning text for secrets, a json_default, a nested
    or secret fields= value: the shipper offers no wire; a handler with a formatter uses none."""
    for opts in ({"sample_levels": {"debug": 0.5}}, {"repeat_limit": 10},
                 {"exclude_fields": ["file"]}, {"scrub": "all"},
                 {"json_default": str}, {"fields": {"deploy": {"sha": "abc"}}},
                 {"fields": {"api_key": "sk-1"}}):
        h = IngestHandler("ds", **PARKED, **opts)
        try:
            assert h.shipper._sender.wire() is None, opts
            assert h._wire is None
        finally:
            h.close()
    h = IngestHandler("ds", **PARKED)
    try:
        assert (h._wire is not None) is (not PURE)
        h.setFormatter(logging.Formatter("%(message)s"))
        assert h._wire is None and h._compiled_put is None
    finally:
        h.close()


def test_wire_items_and_dicts_ship_together(monkeypatch: pytest.MonkeyPatch) -> None:
    """End to end through the local service: wire items and event dicts (a secret, a nested
    value, a context) in one batch; every event arrives as the object it was, secrets
    scrubbed."""
    import loghandler
    from loghandler import _handler

    # Once a context was entered anywhere, or OpenTelemetry imported (earlier tests), every
    # event takes the context's path (a dict): as in a fresh process, until this test enters one.
    monkeypatch.setattr(_handler, "_context_on", False)
    monkeypatch.delitem(sys.modules, "opentelemetry.trace", raising=False)

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
            _handler._context_on = True  # as entering the first context sets it
            with loghandler.context(tenant="acme"):
                log.info("in context")
            _handler._context_on = False
            log.info("plain %s", 2, extra={"n": 2.5})
            kinds = [type(item) for item in h.shipper._ledger.queue]
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
    queued = list(h.shipper._ledger.queue)
    assert h.shipper._ledger.queued_bytes() == sum(map(size_of, queued))
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

    from loghandler import _compiled

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
