"""Local service queries over many stored events: ``python -m benchmarks.local_query``.

Stores N events (1,000,000 by default) through ``Store.add_events`` in batches of 10,000 (the
ingest path: one ``executemany`` per batch), then times, over HTTP to a running local service
(so the figures include parsing, SQL, JSON and the answer), the queries a user and the web page
run most: the newest 100 events (``tail``), a filtered ``count``, a count by level, and the
histogram the page draws. Each query runs ``--repeat`` times; the table shows the best and the
median. ``--events 20000`` for a quick run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

from loghandler._local.service import make_server
from loghandler._wire.client import Client

LEVELS = ("debug", "info", "info", "info", "warning", "error")
QUERIES = [
    ("tail of 100", "['bench'] | sort by _time desc | take 100"),
    ("filtered count (level == error)", "['bench'] | where level == 'error' | count"),
    ("filtered count (contains)", "['bench'] | where message contains 'user 4242' | count"),
    ("count by level (all events)", "['bench'] | summarize count() by level"),
    ("histogram, last hour (the page's)",
     "['bench'] | where _time >= ago(1h) | summarize count() by bin(_time, 1m), level"),
    ("histogram, all events by day",
     "['bench'] | summarize count() by bin(_time, 1d), level"),
    ("dataset count (the page's)", "['bench'] | count"),
    ("last hour, error, newest 50",
     "['bench'] | where _time > ago(1h) and level == 'error' | take 50"),
]


def fill(store: Any, n: int, batch: int = 10_000) -> float:
    """Store n events, one second apart, ending now; returns the seconds it took."""
    start_s = time.time() - n
    started = time.perf_counter()
    for first in range(0, n, batch):
        events = []
        for i in range(first, min(n, first + batch)):
            t = start_s + i
            events.append({
                "_time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t))
                + f".{int((t % 1) * 1e6):06d}Z",
                "level": LEVELS[i % len(LEVELS)],
                "message": f"request from user {i % 10_000} served",
                "logger": "app.web",
                "status": 200 if i % 7 else 500,
                "duration_ms": (i * 37) % 1000,
            })
        store.add_events("bench", events)
    return time.perf_counter() - started


def _post(client: Any, path: str, body: dict[str, Any]) -> Any:
    resp = client.send("POST", path, json.dumps(body).encode(),
                       headers={"Content-Type": "application/json"})
    assert resp.status == 200, resp.body
    return resp.body


def page_steps(client: Any) -> list[tuple[str, Any]]:
    """What the page asks when a user searches: the query the search becomes (then run), the
    facets of the search, and the page after the first."""

    def search(q: str) -> Any:
        def step() -> int:
            apl = _post(client, "/local/search", {"dataset": "bench", "q": q})["apl"]
            return len(client.query(apl))
        return step

    def facets() -> int:
        got = _post(client, "/local/facets", {"dataset": "bench", "q": "status:500"})
        return int(got["rows"])

    first = client.query(_post(client, "/local/search",
                               {"dataset": "bench", "q": "level:error"})["apl"])
    last = first[-1]

    def next_page() -> int:
        apl = _post(client, "/local/search", {"dataset": "bench", "q": "level:error",
                                              "after": {"_time": last["_time"],
                                                        "_rowId": last["_rowId"]}})["apl"]
        return len(client.query(apl))

    return [("page: search a word (user 4242)", search('"user 4242 "')),
            ("page: search level:error", search("level:error")),
            ("page: search a rare word", search("nowhere-to-be-found")),
            ("page: facets of status:500", facets),
            ("page: next page of level:error", next_page)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.local_query")
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    server = make_server(tokens=["bench"])
    import threading

    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        seconds = fill(server.store, args.events)
        print(f"stored {args.events:,} events in {seconds:.1f} s "
              f"({args.events / seconds:,.0f} events/s through Store.add_events)")
        client = Client("bench", url=server.url)
        print(f"{'query':36} {'rows':>6} {'best ms':>9} {'median ms':>10}")
        for label, apl in QUERIES:
            times = []
            rows: list[dict[str, Any]] = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                rows = client.query(apl)
                times.append((time.perf_counter() - t0) * 1000)
            print(f"{label:36} {len(rows):>6} {min(times):>9.1f} "
                  f"{statistics.median(times):>10.1f}")
        # The page's own steps (issue 27): a search, its facets, the next page.
        for label, step in page_steps(client):
            times = []
            n = 0
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                n = step()
                times.append((time.perf_counter() - t0) * 1000)
            print(f"{label:36} {n:>6} {min(times):>9.1f} {statistics.median(times):>10.1f}")
        client.close()
    finally:
        server.shutdown()
        server.server_close()
        server.store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
