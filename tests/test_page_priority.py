"""The web page's queries yield to the API's (issue 46, finding 2: API latency 1.4-3.4x its
time alone while the page loaded): a connection freed goes to a waiting API query before the
page's, the page holds fewer connections, and a page query pauses while an API query runs.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from loghandler._local import reader as reader_module
from loghandler._local.apl import format_time
from loghandler._local.reader import PAGE, Reader, _share, _Stop
from loghandler._local.store import Store

PAGE_CLIENT = (PAGE, "root")


def _wait(check: Any, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.005)


def test_a_freed_connection_goes_to_the_api_before_the_page(tmp_path: Any) -> None:
    store = Store(str(tmp_path / "e.sqlite"))
    # a Reader over the store's own connection and lock, driven alone (its queue order is what is
    # checked).
    reader = Reader(store.path, store._db, store._lock, store.count, readers=1)  # noqa: SLF001
    order: list[str] = []
    try:
        def take(client: Any, name: str) -> None:
            # the reader's connection queue, taken directly.
            with reader._connection(_Stop(time.monotonic() + 30, None), client):  # noqa: SLF001
                order.append(name)

        with reader._connection(_Stop(time.monotonic() + 30, None), "other"):  # noqa: SLF001
            page = threading.Thread(target=take, args=(PAGE_CLIENT, "page"))
            page.start()  # the page waits first...
            # who waits in the queue: no public view.
            _wait(lambda: len(reader._waiting) == 1, "the page waiting")  # noqa: SLF001
            api = threading.Thread(target=take, args=("root", "api"))
            api.start()  # ...and the API's query after it
            _wait(lambda: len(reader._waiting) == 2, "the API waiting")  # noqa: SLF001
        page.join(30)
        api.join(30)
        assert order == ["api", "page"]
    finally:
        reader.close()
        store.close()


def test_the_page_holds_fewer_connections() -> None:
    assert _share(8, PAGE_CLIENT) == 2 < _share(8, "root") == 4
    assert _share(1, PAGE_CLIENT) == 1


def test_a_page_query_pauses_while_an_api_query_runs(monkeypatch: Any) -> None:
    """The page's query's progress checks sleep while the API's count is above 0 (and only
    then): counted through the service's own query path."""
    store = Store()
    store.add_events("d", [{"_time": format_time(1_767_225_600_000_000 + i), "n": i}
                           for i in range(20_000)])
    slept: list[float] = []
    monkeypatch.setattr(reader_module.time, "sleep", slept.append)
    try:
        text = "['d'] | where n % 7 == 3 | count"
        store.reader.query(text, client=PAGE_CLIENT)
        assert slept == []  # no API query running: no pause
        store.reader.stats.api_started(1)  # as while an API query runs
        try:
            store.reader.query(text, client=PAGE_CLIENT)
            assert slept and set(slept) == {reader_module.PAGE_PAUSE}
            slept.clear()
            store.reader.query(text, client="root")  # the API's own query never pauses
            assert slept == []
        finally:
            store.reader.stats.api_started(-1)
    finally:
        store.close()
