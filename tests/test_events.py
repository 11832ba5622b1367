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
