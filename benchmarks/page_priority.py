"""The page's queries yielding to the API's (issue 46, finding 2): ``python -m
benchmarks.page_priority --db FILE``.

Over the events of ``FILE`` (dataset ``web``, as ``python -m benchmarks.page --db FILE`` leaves
it), times the API's ``status:500`` page of events (its newest 200) through the store's reader:
alone, beside two threads scanning the day (``duration_ms>1000``'s histogram, as a page
loading its panels does) with the API's own client key (as every query was before), and beside
the same two scans marked as the page's (``reader.PAGE``: they pause while an API query runs).
Interleaved, medians of ``--repeat``, the machine's load average beside each figure: on a
shared machine the ratios are the figures to read.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from typing import Any


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.page_priority",
                                     description=__doc__)
    parser.add_argument("--db", required=True)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)

    from loghandler._local import reader
    from loghandler._local.search import histogram_query, page_query
    from loghandler._local.store import Store

    store = Store(args.db)
    heavy = histogram_query("web", "duration_ms>1000", "24h", 900_000_000)
    probe = page_query("web", "status:500", "24h")

    def api() -> float:
        began = time.perf_counter()
        store.query(probe, timeout=60, client="root")
        return time.perf_counter() - began

    def beside(client: Any) -> float:
        stop = threading.Event()

        def scan() -> None:
            while not stop.is_set():  # ends when the API's query has been timed
                try:
                    store.query(heavy, timeout=60, client=client)
                except Exception:
                    pass

        threads = [threading.Thread(target=scan) for _ in range(2)]
        for thread in threads:
            thread.start()
        time.sleep(0.5)  # the scans under way
        try:
            return api()
        finally:
            stop.set()
            for thread in threads:
                thread.join()

    alone: list[float] = []
    unmarked: list[float] = []
    page: list[float] = []
    try:
        for i in range(args.repeat):
            alone.append(api())
            unmarked.append(beside("root"))
            page.append(beside((reader.PAGE, "root")))
            print(f"run {i + 1}: alone {alone[-1]:.2f} s, beside two scans {unmarked[-1]:.2f} s,"
                  f" beside two page scans {page[-1]:.2f} s (load {os.getloadavg()[0]:.1f})",
                  flush=True)
    finally:
        store.close()
    m = statistics.median
    print(f"the API's status:500 alone {m(alone):.2f} s; beside two scans {m(unmarked):.2f} s "
          f"({m(unmarked) / m(alone):.2f}x); beside two of the page's {m(page):.2f} s "
          f"({m(page) / m(alone):.2f}x) (load {os.getloadavg()[0]:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
