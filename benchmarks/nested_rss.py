"""RSS growth when events carry large nested values and the service is down (issue 23, item 5).

    python -m benchmarks.nested_rss

Each row runs in a fresh process: 8,000 events, each with a 50 KB string inside a dict, while
nothing listens at the address, with ``max_queue_bytes`` 16 MiB. The NullHandler row is the
floor (the application's own allocations, freed as it goes). Before the size estimate counted
what a nested value holds, the three loghandler rows grew by 509-724 MB (the queue bound did
not see the strings); now they stay within a small factor of the 16 MiB bound.
"""

from __future__ import annotations

import json
import subprocess
import sys

CHILD = r"""
import gc, json, logging, resource, sys
mode = sys.argv[1]
def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20
opts = dict(url="http://127.0.0.1:9", token="bench-token-1", flush_interval=3600,
            batch_size=10_000, max_queue_bytes=16 * 2**20, max_retries=0, shutdown_timeout=0.1)
big = "x" * 50_000
start = rss_mb()
if mode == "null":
    log = logging.getLogger("b"); log.propagate = False; log.addHandler(logging.NullHandler())
    for i in range(8000):
        log.warning("big", extra={"payload": {"blob": big + str(i), "i": i}})
else:
    import loghandler
    if mode == "handler":
        h = loghandler.IngestHandler("ds", **opts)
        log = logging.getLogger("b"); log.propagate = False; log.addHandler(h)
        for i in range(8000):
            log.warning("big", extra={"payload": {"blob": big + str(i), "i": i}})
    elif mode == "processor":
        h = loghandler.IngestProcessor("ds", **opts)
        for i in range(8000):
            h(None, "info", {"event": "big", "payload": {"blob": big + str(i), "i": i}})
    else:
        h = loghandler.Shipper(loghandler.Client(url=opts.pop("url"), token=opts.pop("token")),
                               "ds", **opts)
        for i in range(8000):
            h.submit({"message": "big", "payload": {"blob": big + str(i), "i": i}})
gc.collect()
print(json.dumps({"grew_mb": round(rss_mb() - start, 1),
                  "queued": (h.stats().queued if mode != "null" else 0)}))
import os; os._exit(0)
"""

ROWS = (("null", "logging.NullHandler (floor)"), ("handler", "IngestHandler, extra"),
        ("processor", "IngestProcessor, a value"), ("submit", "Shipper.submit, a value"))


def main() -> int:
    print("| row | RSS growth (MB) | events queued (of 8,000) |")
    print("|---|---|---|")
    for mode, label in ROWS:
        out = subprocess.run([sys.executable, "-c", CHILD, mode], capture_output=True,
                             text=True, timeout=300, check=True).stdout
        res = json.loads(out)
        print(f"| {label} | {res['grew_mb']} | {res['queued']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
