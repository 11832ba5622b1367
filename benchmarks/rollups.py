"""The page's day-wide views from the per-minute counts, against the scan they replace:
``python -m benchmarks.rollups``.

Stores ``--events`` (1,000,000) events of a web service's logs over 24 hours
(``benchmarks.weblogs``, through ``Store.add_events``), then times, through the store's
reader as the service runs them, the page's default histogram (``count() by bin(_time, 15m),
level`` over the last 24 hours), ``count() by level`` over 24 hours and over all time:
answered from the counts, and by the scan (the counts turned off), interleaved, medians of
``--repeat``. Then the ingest's cost of keeping the counts: the same batches stored with and
without them, paired. The machine's load average (``os.getloadavg()``) is printed beside each
figure: on a shared machine the ratios are the figures to read.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from typing import Any

from . import weblogs

QUERIES = [
    ("the histogram, 24 h", "['web'] | where _time >= ago(24h) "
     "| summarize count() by bin(_time, 15m), level", None),
    ("count() by level, 24 h", "['web'] | summarize count() by level", "now-24h"),
    ("count() by level, all time", "['web'] | summarize count() by level", None),
    # A search's histogram (the search box's status:500, and service:checkout level:error),
    # from the counts by field value.
    ("status:500 histogram, 24 h", "['web'] | where _time >= ago(24h) | where (status == 500 "
     "or status == \"500\") | summarize count() by bin(_time, 15m), level", None),
    ("checkout errors, 24 h", "['web'] | where _time >= ago(24h) | where service =~ "
     "\"checkout\" | where level =~ \"error\" | summarize count() by bin(_time, 15m), level",
     None),
]


def load() -> str:
    return "load %.1f" % os.getloadavg()[0]


def timed(store: Any, apl: str, start: str | None) -> float:
    began = time.perf_counter()
    store.query(apl, start, None, "tabular", timeout=120)
    return time.perf_counter() - began


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.rollups", description=__doc__)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--db", help="read the events of this file (dataset 'web', as "
                                     "benchmarks.page --db leaves it) instead of a new fill")
    args = parser.parse_args(argv)

    from loghandler._local import rollups, valuecounts
    from loghandler._local.store import Store

    with tempfile.TemporaryDirectory(prefix="loghandler-rollups-") as tmp:
        store = Store(args.db or os.path.join(tmp, "events.sqlite"))
        try:
            if args.db:
                print(f"{store.count('web'):,} events of {args.db} ({load()})")
            else:
                print(f"storing {args.events:,} events over 24 hours ({load()})")
                seconds = weblogs.fill(store, args.events)
                print(f"  {seconds:.1f} s ({load()})")
            real = rollups.answer_rows
            for name, apl, start in QUERIES:
                fast, scan = [], []
                for _ in range(args.repeat):
                    fast.append(timed(store, apl, start))
                    rollups.answer_rows = lambda *a, **k: None  # type: ignore[assignment]
                    try:
                        scan.append(timed(store, apl, start))
                    finally:
                        rollups.answer_rows = real
                f, s = statistics.median(fast), statistics.median(scan)
                print(f"{name:28} counts {f * 1000:8.1f} ms, scan {s * 1000:8.1f} ms: "
                      f"{s / f:6.0f}x faster ({load()})")
        finally:
            store.close()
        # The ingest's cost: the same 100,000 events into fresh stores, with and without.
        batches = _batches(min(args.events, 100_000))
        times: dict[str, list[float]] = {"both": [], "levels": [], "none": []}
        for _ in range(args.repeat):
            for kind in times:
                saved = (rollups.tally, rollups.add_locked, valuecounts.tally,
                         valuecounts.add_locked)
                if kind != "both":
                    valuecounts.tally = lambda *a, **k: {}  # type: ignore[assignment,return-value]
                    valuecounts.add_locked = lambda *a, **k: None  # type: ignore[assignment]
                if kind == "none":
                    rollups.tally = lambda *a, **k: {}  # type: ignore[assignment,return-value]
                    rollups.add_locked = lambda *a, **k: None  # type: ignore[assignment]
                try:
                    times[kind].append(_ingest(os.path.join(tmp, kind + ".sqlite"), batches))
                finally:
                    (rollups.tally, rollups.add_locked, valuecounts.tally,
                     valuecounts.add_locked) = saved
        w, lv, wo = (statistics.median(times[k]) for k in ("both", "levels", "none"))
        n = sum(len(b) for b in batches)
        print(f"ingest of {n:,} events: with the counts {n / w:,.0f}/s, the level counts only "
              f"{n / lv:,.0f}/s, without {n / wo:,.0f}/s: {100 * (w / wo - 1):+.1f} % "
              f"({load()})")
    return 0


def _batches(n: int) -> list[list[dict[str, Any]]]:
    events = [e for batch in weblogs.requests(n, time.time()) for e in batch][:n]
    return [events[i:i + 10_000] for i in range(0, len(events), 10_000)]


def _ingest(path: str, batches: list[list[dict[str, Any]]]) -> float:
    from loghandler._local.store import Store

    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    store = Store(path)
    try:
        began = time.perf_counter()
        for batch in batches:
            store.add_events("web", batch)
        return time.perf_counter() - began
    finally:
        store.close()


if __name__ == "__main__":
    sys.exit(main())
