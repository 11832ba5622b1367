"""How deep a stored event may nest: the one rule ingest applies and reads rely on.

An event nested deeper than ``MAX_EVENT_DEPTH`` (objects and arrays) is turned down at ingest
(a failure in the ingest status, the rest of the batch stored). A read decodes stored events
with ``load_stored``, which never raises: an event that cannot be decoded (one stored before
this rule, or a file edited by hand) is shown as a placeholder, so one bad line cannot fail the
page, a query or facets.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["MAX_EVENT_DEPTH", "UNREADABLE", "load_stored", "too_deep"]

# Well inside what the json module's decoder and encoder manage on any thread's stack (they
# recurse, and fail near Python's limit of 1,000 frames less the frames under them), and deep
# enough for any log event.
MAX_EVENT_DEPTH = 64

# The field a placeholder for an event that cannot be read holds.
UNREADABLE = "unreadable"


def too_deep(event: dict[str, Any], limit: int = MAX_EVENT_DEPTH) -> bool:
    """True when ``event`` nests objects or arrays more than ``limit`` levels deep. A loop
    level by level, not recursion; a flat event costs one pass over its values and makes no
    list (it runs for every event ingested)."""
    level: list[Any] | None = None
    for v in event.values():
        t = type(v)
        if t is dict or t is list:
            if level is None:
                level = [v]
            else:
                level.append(v)
    depth = 2
    while level is not None:
        if depth > limit:
            return True
        below: list[Any] | None = None
        for value in level:
            for v in (value.values() if type(value) is dict else value):
                t = type(v)
                if t is dict or t is list:
                    if below is None:
                        below = [v]
                    else:
                        below.append(v)
        level = below
        depth += 1
    return False


def load_stored(body: str | bytes) -> Any:
    """A stored event's body decoded; a placeholder event when it cannot be."""
    try:
        return json.loads(body)
    except RecursionError:
        why = f"it nests more than {MAX_EVENT_DEPTH} levels deep"
    except ValueError as exc:
        why = f"it is not valid JSON ({exc})"
    return {UNREADABLE: f"this stored event cannot be shown: {why}"}
