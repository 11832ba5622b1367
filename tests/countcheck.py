"""The check shared by the tests of the counts kept at ingest (test_valuecounts.py,
test_numbercounts.py): a query answered from the counts must equal the scan's answer, over
ranges whose ends fall inside a minute, and the counts must be used exactly when expected."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

from loghandler._local import rollups
from loghandler._local.apl import format_time
from loghandler._local.search import histogram_query
from loghandler._local.store import Store

DAY = 86_400_000_000
BASE = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z


def spied_and_scan(monkeypatch: pytest.MonkeyPatch, owner: ModuleType | type, name: str,
                   run: Callable[[], dict[str, Any]]
                   ) -> tuple[dict[str, Any], dict[str, Any], bool]:
    """``run()``'s answer with ``owner.name`` (a module's function or a class's method: a
    shortcut that answers None when it cannot) as it is, its answer with the shortcut
    answering None (the scan), each without its elapsedTime, and whether the shortcut's first
    call answered. The one spy of the counts', the word index's and the narrow table's tests."""
    used = []
    real = getattr(owner, name)

    def spy(*args: Any) -> Any:
        got = real(*args)
        used.append(got is not None)
        return got

    def clean() -> dict[str, Any]:
        answer = run()
        answer["status"].pop("elapsedTime")
        return answer

    with monkeypatch.context() as m:
        m.setattr(owner, name, spy)
        fast = clean()
    with monkeypatch.context() as m:
        m.setattr(owner, name, lambda *a, **k: None)
        scan = clean()
    return fast, scan, bool(used and used[0])


def fast_and_scan(store: Store, monkeypatch: pytest.MonkeyPatch, text: str,
                  start: str | None, end: str, fmt: str = "tabular"
                  ) -> tuple[dict[str, Any], dict[str, Any], bool]:
    """The answer with the counts, the answer by the scan, and whether the counts answered."""
    return spied_and_scan(monkeypatch, rollups, "answer_rows",
                          lambda: store.query(text, start, end, fmt))


def ranges() -> list[tuple[str | None, str]]:
    """All time, hours with mid-minute ends, and one minute."""
    return [(None, format_time(BASE + 2 * DAY)),
            (format_time(BASE + 3_600_000_123), format_time(BASE + 20 * 3_600_000_000 + 59)),
            (format_time(BASE + 61_000_000), format_time(BASE + 62_000_000))]


def check(store: Store, monkeypatch: pytest.MonkeyPatch, searches: list[str], counted: bool,
          fmt: str = "tabular") -> None:
    """Each search's histogram and count in dataset "d", over every range: the scan's answer,
    from the counts exactly when ``counted``."""
    for search in searches:
        hist = histogram_query("d", search, None, 900_000_000)
        for text in (hist, hist.replace("by bin(_time, 15m), level", "")):
            for start, end in ranges():
                fast, scan, used = fast_and_scan(store, monkeypatch, text, start, end, fmt)
                assert fast == scan, (text, start, end)
                assert used == counted, (text, used)
