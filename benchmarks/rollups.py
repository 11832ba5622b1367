"""The page's day-wide views from the per-minute counts, against the scan they replace:
``python -m benchmarks.rollups``.

Stores ``--events`` (1,000,000) events of a web service's logs over 24 hours
(``benchmarks.weblogs``, through ``Store.add_events``), then times, through the store's
reader as the service runs them, the page's default histogram (``count() by bin(_time, 15m),
level`` over the last 24 hours), ``count() by level`` over 24 hours and over all time, and
searches' histograms (a field's value, a comparison of a numeric field): answered from the
counts, and by the scan (the counts turned off), interleaved, medians of ``--repeat``, wall
and CPU time; a rare word's events and histogram through the index of the events' text
(``words.py``) and by the scan, and a common word's count (scanned either way). Then the
ingest's cost of keeping the counts and the index: the same batches stored with every count
and the word index, without the index, without the numbers', with the level counts only and
with none, paired (CPU time per event, and the file's size). The machine's load average
(``os.getloadavg()``) is printed beside each figure: on a shared machine the ratios are the
figures to read.
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
    # A comparison's histogram (duration_ms>1000, status>=500, a range), from the counts by
    # numeric field value.
    ("duration_ms>1000 histogram, 24 h", "['web'] | where _time >= ago(24h) "
     "| where duration_ms > 1000 | summarize count() by bin(_time, 15m), level", None),
    ("status>=500 histogram, 24 h", "['web'] | where _time >= ago(24h) | where status >= 500 "
     "| summarize count() by bin(_time, 15m), level", None),
    ("250 <= duration_ms < 1000, 24 h", "['web'] | where _time >= ago(24h) "
     "| where duration_ms >= 250 | where duration_ms < 1000 "
     "| summarize count() by bin(_time, 15m), level", None),
]

# A rare word (benchmarks.weblogs.RARE_WORD: one event in 80,000) as the page asks for it: its
# events, its histogram and its count.
WORD_QUERIES = [
    (f"{weblogs.RARE_WORD}: newest 200, 24 h", f"['web'] | where _time >= ago(24h) "
     f"| search \"{weblogs.RARE_WORD}\" | sort by _time desc, _rowId desc | take 200", None),
    (f"{weblogs.RARE_WORD}: histogram, 24 h", f"['web'] | where _time >= ago(24h) "
     f"| search \"{weblogs.RARE_WORD}\" | summarize count() by bin(_time, 15m), level", None),
    ("a common word: count, 24 h", "['web'] | where _time >= ago(24h) | search \"checkout\" "
     "| count", None),
]


def load() -> str:
    return "load %.1f" % os.getloadavg()[0]


def timed(store: Any, apl: str, start: str | None) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the process: the query's, the process does nothing
    else) of one query."""
    began, cpu = time.perf_counter(), time.process_time()
    store.query(apl, start, None, "tabular", timeout=120)
    return time.perf_counter() - began, time.process_time() - cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.rollups", description=__doc__)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--db", help="read the events of this file (dataset 'web', as "
                                     "benchmarks.page --db leaves it) instead of a new fill")
    args = parser.parse_args(argv)

    from loghandler._local import numbercounts, rollups, valuecounts, words
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
                f, s = (statistics.median(t for t, _ in fast),
                        statistics.median(t for t, _ in scan))
                fc, sc = (statistics.median(c for _, c in fast),
                          statistics.median(c for _, c in scan))
                print(f"{name:34} counts {f * 1000:8.1f} ms (CPU {fc * 1000:7.1f}), scan "
                      f"{s * 1000:8.1f} ms (CPU {sc * 1000:7.1f}): {s / f:6.0f}x faster "
                      f"({load()})")
            # A word, through the index and by the scan (the index turned off).
            real_match = words.match_for
            for name, apl, start in WORD_QUERIES:
                fast, scan = [], []
                for _ in range(args.repeat):
                    fast.append(timed(store, apl, start))
                    words.match_for = lambda *a, **k: None  # type: ignore[assignment]
                    try:
                        scan.append(timed(store, apl, start))
                    finally:
                        words.match_for = real_match
                _print(name, "index", fast, "scan", scan)
        finally:
            store.close()
        # The ingest's cost: the same 100,000 events into fresh stores, with and without.
        batches = _batches(min(args.events, 100_000))
        # "all": every count; "values": without the numbers'; "levels": the level counts
        # only; "none": no count. CPU seconds of the process, paired in each round.
        # "all": every count and the word index; "nowords": every count, no word index;
        # "values": without the numbers' counts (nor the index); ...
        times: dict[str, list[float]] = {"all": [], "nowords": [], "values": [], "levels": [],
                                         "none": []}
        sizes: dict[str, int] = {}
        for _ in range(args.repeat):
            for kind in times:
                saved = (rollups.tally, rollups.add_locked, valuecounts.tally,
                         valuecounts.add_locked, numbercounts.tally, numbercounts.add_locked,
                         words.create_locked)
                if kind != "all":
                    words.create_locked = lambda *a, **k: False  # type: ignore[assignment]
                if kind not in ("all", "nowords"):
                    numbercounts.tally = lambda *a, **k: None  # type: ignore[assignment,return-value]
                    numbercounts.add_locked = lambda *a, **k: None  # type: ignore[assignment]
                if kind in ("levels", "none"):
                    valuecounts.tally = lambda *a, **k: {}  # type: ignore[assignment,return-value]
                    valuecounts.add_locked = lambda *a, **k: None  # type: ignore[assignment]
                if kind == "none":
                    rollups.tally = lambda *a, **k: {}  # type: ignore[assignment,return-value]
                    rollups.add_locked = lambda *a, **k: None  # type: ignore[assignment]
                try:
                    cpu, sizes[kind] = _ingest(os.path.join(tmp, kind + ".sqlite"), batches)
                    times[kind].append(cpu)
                finally:
                    (rollups.tally, rollups.add_locked, valuecounts.tally,
                     valuecounts.add_locked, numbercounts.tally,
                     numbercounts.add_locked, words.create_locked) = saved
        n = sum(len(b) for b in batches)
        cost = {k: statistics.median(v) / n * 1e6 for k, v in times.items()}
        print(f"ingest of {n:,} events, CPU per event: every count and the word index "
              f"{cost['all']:.1f} µs, every count {cost['nowords']:.1f} µs, without the "
              f"numbers' {cost['values']:.1f} µs, the level counts only "
              f"{cost['levels']:.1f} µs, none {cost['none']:.1f} µs ({load()})")
        print(f"  the word index: {cost['all'] - cost['nowords']:+.1f} µs an event, "
              f"{(sizes['all'] - sizes['nowords']) / 1e6:+.1f} MB of "
              f"{sizes['nowords'] / 1e6:.1f} MB")
        print(f"  the numbers' counts: {cost['nowords'] - cost['values']:+.1f} µs an event, "
              f"{(sizes['nowords'] - sizes['values']) / 1e6:+.1f} MB of "
              f"{sizes['values'] / 1e6:.1f} MB")
    return 0


def _print(name: str, a_name: str, a: list[tuple[float, float]], b_name: str,
           b: list[tuple[float, float]]) -> None:
    f, s = statistics.median(t for t, _ in a), statistics.median(t for t, _ in b)
    fc, sc = statistics.median(c for _, c in a), statistics.median(c for _, c in b)
    print(f"{name:34} {a_name} {f * 1000:8.1f} ms (CPU {fc * 1000:7.1f}), {b_name} "
          f"{s * 1000:8.1f} ms (CPU {sc * 1000:7.1f}): {s / f:6.1f}x faster ({load()})")


def _batches(n: int) -> list[list[dict[str, Any]]]:
    events = [e for batch in weblogs.requests(n, time.time()) for e in batch][:n]
    return [events[i:i + 10_000] for i in range(0, len(events), 10_000)]


def _ingest(path: str, batches: list[list[dict[str, Any]]]) -> tuple[float, int]:
    """(CPU seconds to store the batches, the file's bytes after)."""
    from loghandler._local.store import Store

    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    store = Store(path)
    try:
        began = time.process_time()
        for batch in batches:
            store.add_events("web", batch)
        took = time.process_time() - began
    finally:
        store.close()
    return took, os.path.getsize(path)


if __name__ == "__main__":
    sys.exit(main())
