"""One event model: the handler's inlined fast path builds, once the flusher has formatted it
(item_events), the very event record_to_event builds, for any record (property tests)."""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loghandler import IngestHandler
from loghandler._encoding import encode
from loghandler._engine.events import (
    METHOD_LEVELS,
    PLAIN,
    RECORD,
    SIZE,
    free_name,
    item_events,
    record_to_event,
)
from loghandler._levels import level_names
from loghandler.testing import LocalService

TOKEN = "event-model-token"


class SubRecord(logging.LogRecord):
    """A LogRecord subclass, as libraries define them: the handler's fast path leaves it to
    record_to_event."""

    kind = "sub"


def _factory_after(*args: Any, **kwargs: Any) -> logging.LogRecord:
    # The documented pattern: the old factory, then attributes added to its record.
    record = logging.LogRecord(*args, **kwargs)
    record.hostname = "web-7"
    return record


def _factory_before(*args: Any, **kwargs: Any) -> logging.LogRecord:
    # Attributes set before LogRecord.__init__: the extras no longer sit after its attributes.
    record = logging.LogRecord.__new__(logging.LogRecord)
    record.__dict__["region"] = "eu"
    logging.LogRecord.__init__(record, *args, **kwargs)
    return record


FACTORIES = {"plain": logging.LogRecord, "subclass": SubRecord, "after": _factory_after,
             "before": _factory_before}
# Names an extra may have that collide with something: event keys, formatter attributes,
# renamed names, a record attribute the factory sets.
ODD_KEYS = ["message", "level", "_time", "logger", "file", "thread", "exception", "stack",
            "extra_level", "asctime", "taskName", "hostname", "region", "trace_id"]

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.text(max_size=20),
    st.floats(allow_nan=True, allow_infinity=True),
)
values = st.one_of(
    scalars,
    st.lists(scalars, max_size=3),
    st.dictionaries(st.text(max_size=5), scalars, max_size=3),
    st.datetimes(timezones=st.just(dt.timezone.utc)),
    st.frozensets(st.integers(), max_size=3),
)
messages = st.one_of(
    st.tuples(st.text(max_size=30).filter(lambda s: "%" not in s), st.just(())),
    st.tuples(st.just("user %s paid %d"), st.tuples(st.text(max_size=10), st.integers())),
    st.tuples(st.just("%(who)s left"), st.tuples(st.fixed_dictionaries({"who": scalars}))),
    st.tuples(st.just("broken %d %d"), st.tuples(st.text(max_size=5))),  # formatting fails
    st.tuples(st.integers(), st.just(())),  # a non-str msg
    st.tuples(st.fixed_dictionaries({"event": st.text(max_size=10)},  # structlog via stdlib
                                    optional={"level": st.text(max_size=5), "n": scalars}),
              st.just(())),
)


@st.composite
def records(draw: st.DrawFn) -> logging.LogRecord:
    msg, args = draw(messages)
    level = draw(st.sampled_from([logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR,
                                  logging.CRITICAL, 5, 25, 60]))
    exc_info = None
    if draw(st.booleans()) and draw(st.booleans()):
        try:
            raise ValueError(draw(st.text(max_size=10)))
        except ValueError:
            exc_info = sys.exc_info()
    stack = "Stack (most recent call last):\n  x" if draw(st.integers(0, 5)) == 0 else None
    extra = draw(st.dictionaries(st.one_of(st.text(min_size=1, max_size=8),
                                           st.sampled_from(ODD_KEYS)), values, max_size=5))
    logger = logging.getLogger(draw(st.sampled_from(["app", "app.db", "root"])))
    factory = FACTORIES[draw(st.sampled_from(sorted(FACTORIES)))]
    old = logging.getLogRecordFactory()
    logging.setLogRecordFactory(factory)
    try:
        # makeRecord as Logger._log calls it, with the keys it refuses left out.
        probe = factory("", 0, "", 0, "", (), None).__dict__
        extra = {k: v for k, v in extra.items() if k not in probe
                 and k not in ("message", "asctime")}
        record = logger.makeRecord(logger.name, level, "/app/shop.py", 42, msg, args,
                                   exc_info, "pay", extra, stack)
    finally:
        logging.setLogRecordFactory(old)
    if draw(st.booleans()):
        record.created = draw(st.floats(min_value=-2e9, max_value=4e9))
    if draw(st.integers(0, 3)) == 0:
        # A handler ahead of ours formatted it: "message" and "asctime" are on the record now.
        try:
            logging.Formatter("%(asctime)s %(message)s").format(record)
        except Exception:
            pass
    return record


@pytest.fixture(scope="module")
def handler() -> Iterator[IngestHandler]:
    with LocalService(token=TOKEN) as svc:
        # The flusher never wakes during the test (an hour's interval, no full batch): what
        # emit() queued stays at the end of the queue.
        # identity=False: the shipper adds no fields of its own (a wire item would carry them).
        h = IngestHandler("model", url=svc.url, token=TOKEN, flush_interval=3600,
                          batch_size=10_000, identity=False)
        yield h
        h.close()


def queued(handler: IngestHandler, record: logging.LogRecord) -> Any:
    """The final event of a record that went through handle(): the queue item the fast path
    built, formatted by the flusher's item_events (a wire item, on the compiled path, is its
    final JSON already)."""
    handler.handle(record)
    item = handler.shipper.intake.queue[-1]
    if type(item) is bytes:
        return json.loads(item)
    # A copy: item_events takes the queue's own keys out of the item it formats.
    (event,) = item_events([dict(item)])
    return event


def as_sent(event: dict[str, Any]) -> Any:
    return json.loads(encode(event))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(record=records())
def test_fast_path_equals_record_to_event(handler: IngestHandler,
                                          record: logging.LogRecord) -> None:
    """For any record (subclasses and record factories included) the event the handler ships
    is the one record_to_event builds, byte for byte once encoded."""
    before = dict(record.__dict__)
    expected, _ = record_to_event(record)
    assert as_sent(queued(handler, record)) == as_sent(expected)
    assert record.__dict__.keys() == before.keys()  # neither path modified the record


@settings(max_examples=100, deadline=None)
@given(created=st.floats(min_value=-2e9, max_value=4e9),
       level=st.sampled_from(sorted(level_names())))
def test_item_events_formats_like_record_to_event(created: float, level: str) -> None:
    """The flusher's formatting of a fast-path item (raw created, raw levelname) gives the
    _time and level record_to_event gives."""
    record = logging.LogRecord("app", logging.INFO, "/f.py", 1, "m", (), None)
    record.created, record.levelname = created, level
    expected, _ = record_to_event(record)
    (event,) = item_events([{"_time": created, "level": level, SIZE: 1, RECORD: True}])
    assert (event["_time"], event["level"]) == (expected["_time"], expected["level"])


class TestRecordToEvent:
    def test_plain_record(self) -> None:
        """Every field of the documented shape, from a record made as Logger._log makes it."""
        log = logging.getLogger("shop")
        record = log.makeRecord("shop", logging.WARNING, "/app/pay.py", 7, "paid %s", ("o-1",),
                                None, "pay", {"amount": 4.5, "tags": ["a"]}, None)
        record.created = 0.25
        event, size = record_to_event(record)
        assert event == {"_time": "1970-01-01T00:00:00.250000Z", "level": "warning",
                         "message": "paid o-1", "logger": "shop", "module": "pay",
                         "function": "pay", "line": 7, "file": "/app/pay.py",
                         "process": record.process, "thread": record.threadName,
                         "amount": 4.5, "tags": ["a"]}
        assert size > 900  # the record event's base size, plus its message and extras

    def test_factory_setting_attributes_before_init(self) -> None:
        """A record factory that sets attributes before LogRecord.__init__: those land in the
        event too (the displaced branch), and nothing else does."""
        old = logging.getLogRecordFactory()
        logging.setLogRecordFactory(_factory_before)
        try:
            record = logging.getLogger("x").makeRecord("x", logging.INFO, "/f.py", 1, "hi", (),
                                                       None, extra={"user": 7})
        finally:
            logging.setLogRecordFactory(old)
        event, _ = record_to_event(record)
        assert event["region"] == "eu" and event["user"] == 7
        assert not {"msg", "args", "levelno", "created"} & event.keys()

    def test_clashing_extra_is_renamed(self) -> None:
        """An extra named like an event key is shipped as extra_<key>; an extra that then
        finds its own name taken moves on to the next free one: nothing is lost."""
        record = logging.LogRecord("x", logging.INFO, "/f.py", 1, "hi", (), None)
        record.level = "custom"
        record.extra_level = "taken"
        event, _ = record_to_event(record)
        assert event["level"] == "info"
        assert event["extra_level"] == "custom" and event["extra_extra_level"] == "taken"


class TestModel:
    def test_free_name_skips_every_taken_container(self) -> None:
        """free_name looks in every container it is given."""
        assert free_name("a") == "extra_a"
        assert free_name("a", {"extra_a": 1}, ["extra_extra_a"]) == "extra_extra_extra_a"

    def test_plain_is_the_immutable_json_scalars(self) -> None:
        """PLAIN holds exactly the types taken into an event as they are."""
        assert {str, int, float, bool, type(None)} == PLAIN

    def test_method_levels_match_structlog(self) -> None:
        """The structlog method names that are no level names map to the level they log at."""
        assert METHOD_LEVELS == {"warn": "warning", "exception": "error", "msg": "info",
                                 "fatal": "critical"}
