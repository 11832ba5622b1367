"""events.py: the timestamp formatting of the flusher's hot loop."""

from __future__ import annotations

import random
import subprocess
import sys
from datetime import datetime, timezone

from loghandler._engine.events import RECORD, SIZE, item_events, rfc3339


def _reference(created: float) -> str:
    # Whole seconds by floor (also before 1970), microseconds truncated.
    sec = int(created)
    if created < sec:
        sec -= 1
    day = datetime.fromtimestamp(sec, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    return day + ".%06dZ" % ((created - sec) * 1e6)


EDGES = [0, 0.0, 0.5, 0.999999, 0.9999999, 1.000001, -0.5, -1.0, -1.25, 1_700_000_000,
         1_700_000_000.123456, 1_700_000_000.999_999_9, 4_102_444_800.000_001, 951_782_400.5]


def test_rfc3339_matches_the_reference_on_edges_and_random_times() -> None:
    rng = random.Random(7)
    values = EDGES + [rng.uniform(-2e9, 4e9) for _ in range(20_000)]
    values += [1_790_000_000 + rng.random() for _ in range(20_000)]  # one second, many micros
    for created in values:
        assert rfc3339(created) == _reference(created), created


def test_item_events_formats_record_items_like_rfc3339() -> None:
    rng = random.Random(11)
    values = EDGES + [1_790_000_000 + rng.random() * 3 for _ in range(5_000)]
    items = [{"_time": c, "level": "WARNING", SIZE: 1, RECORD: True} for c in values]
    events = item_events(items)
    assert [e["_time"] for e in events] == [_reference(c) for c in values]
    assert {e["level"] for e in events} == {"warning"}


def test_item_events_first_time_before_1970() -> None:
    for created in (-1.0, -1.5, -0.25):
        (event,) = item_events([{"_time": created, "level": "INFO", SIZE: 1, RECORD: True}])
        assert event["_time"] == _reference(created)


def test_rfc3339_first_time_before_1970() -> None:
    """The first timestamp a fresh process formats may be the second before 1970."""
    code = "from loghandler._engine.events import rfc3339; print(rfc3339(-0.5))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "1969-12-31T23:59:59.500000Z"


# ------------------------------------------------------------------ one mapping table

def test_the_head_is_built_from_the_one_table() -> None:
    """model.HEAD is the record-to-event mapping: the handler's fast path (fast_head), the
    careful path (record_to_event), the loguru sink (loguru_head) and the compiled path (its
    configure() table) all read it, in its order."""
    import logging
    import types

    from loghandler._engine import compiled as _compiled
    from loghandler._engine.events import fast_head, loguru_head, record_to_event
    from loghandler._engine.model import FAST_HEAD, HEAD, RECORD_ATTRS

    assert tuple(key for key, _, _, _ in HEAD) == FAST_HEAD
    record = logging.LogRecord("app.db", logging.WARNING, "/srv/app.py", 7, "paid %s", ("o",),
                               None, func="pay")
    head = fast_head(record.__dict__, "paid o")
    assert list(head)[:len(FAST_HEAD)] == list(FAST_HEAD) and head[RECORD] is True
    assert all(head[key] == getattr(record, attr) for attr, key in RECORD_ATTRS)
    event, _ = record_to_event(record)
    assert list(event) == list(FAST_HEAD)
    assert {k: v for k, v in event.items() if k not in ("_time", "level")} == \
        {k: v for k, v in head.items() if k not in ("_time", "level", RECORD)}

    ns = types.SimpleNamespace
    loguru = {"time": ns(timestamp=lambda: 12.5), "level": ns(name="WARNING"),
              "name": "app.db", "module": "app", "function": "pay", "line": 7,
              "file": ns(path="/srv/app.py"), "process": ns(id=42), "thread": ns(name="T")}
    got = loguru_head(loguru, "paid o")
    assert list(got)[:len(FAST_HEAD)] == list(FAST_HEAD)
    assert got["_time"] == 12.5 and got["level"] == "WARNING" and got["file"] == "/srv/app.py"

    table = _compiled.table()
    assert table["record_attrs"] == tuple(attr for attr, _ in RECORD_ATTRS)
    assert table["event_keys"] == tuple(key for _, key in RECORD_ATTRS)
    assert table["message_at"] == FAST_HEAD.index("message")


def test_item_events_formats_with_the_time_module_on_both_paths() -> None:
    """The flusher's formatting is _time.format_epoch's, in Python and in its C twin, for
    times the C twin leaves to Python too (before 1970, no time at all)."""
    from loghandler._engine import compiled as _compiled
    from loghandler._time import format_epoch

    ext = _compiled.extension()
    values = [0.0, 1_790_000_000.25, -1.5, 253402300799.999999, float("nan")]
    for compiled in (None, ext):
        items = [{"_time": c, "level": "ERROR", SIZE: 1, RECORD: True} for c in values]
        got = item_events(items, compiled=compiled)
        for created, event in zip(values, got, strict=True):
            if created == created:  # (NaN: now, on both)
                assert event["_time"] == format_epoch(created), (compiled, created)
            assert event["level"] == "error"


def test_an_event_without_its_time_or_with_an_odd_level_still_ships() -> None:
    """A fast-path event a filter left without ``_time`` gets now; a level that is no name
    becomes its text; on both paths."""
    from loghandler._engine import compiled as _compiled
    from loghandler._time import parse_micros

    for compiled in (None, _compiled.extension()):
        (event,) = item_events([{"level": 7, "message": "m", SIZE: 1, RECORD: True}],
                               compiled=compiled)
        assert parse_micros(event["_time"]) is not None and event["level"] == "7"
