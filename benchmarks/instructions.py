"""Instructions per logging call, counted by valgrind's callgrind: a measure the machine's noise
cannot move (the wall-clock tables vary by +-30 % from run to run on a shared 2-core VM).

    python -m benchmarks.instructions          # needs valgrind (Debian: apt-get install valgrind)

Each row runs the same ``logger.info("user %s logged in", i, extra={...})`` loop twice in a
fresh process, with 1,000 and with 6,000 calls; the difference divided by 5,000 is the cost of
one call, start-up excluded. The loghandler rows measure the application thread alone (the
flusher is parked: the largest batch size and a huge interval), and then the whole process with
a live receiver (``ingest-live``: app thread plus flusher thread, gzip off).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile

CHILD = r"""
import logging, os, sys
mode, n, url = sys.argv[1], int(sys.argv[2]), sys.argv[3]
log = logging.getLogger("bench")
log.propagate = False
log.setLevel(logging.INFO)
if mode == "null":
    log.addHandler(logging.NullHandler())
elif mode == "queue":
    import logging.handlers, queue
    log.addHandler(logging.handlers.QueueHandler(queue.SimpleQueue()))
else:
    import loghandler
    if mode == "ingest":
        opts = dict(flush_interval=3600, batch_size=10_000, max_queue_size=10**7,
                    max_queue_bytes=10**12, max_batch_bytes=10**12)
    else:
        opts = dict(compression=None)
    handler = loghandler.IngestHandler("bench", token="t", url=url, **opts)
    log.addHandler(handler)
for i in range(n):
    log.info("user %s logged in", i, extra={"request_id": "r-1", "latency_ms": 1.5})
if mode == "ingest-live":
    handler.flush(60)
os._exit(0)
"""

ROWS = [
    ("null", "logging.NullHandler (floor)"),
    ("queue", "stdlib QueueHandler, enqueue only (no listener)"),
    ("ingest", "loghandler IngestHandler, application thread only"),
    ("ingest-live", "loghandler IngestHandler, whole process, live receiver"),
]


def _count(script: str, mode: str, n: int, url: str) -> int:
    proc = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable,
         script, mode, str(n), url],
        capture_output=True, text=True, timeout=900,
    )
    match = re.search(r"Collected : (\d+)", proc.stderr)
    if not match:
        raise RuntimeError(f"callgrind gave no count for {mode}: {proc.stderr[-500:]}")
    return int(match.group(1))


def main() -> int:
    if shutil.which("valgrind") is None:
        print("valgrind is not installed: apt-get install valgrind")
        return 1
    from .receiver import start_receiver

    with tempfile.TemporaryDirectory() as tmp, start_receiver() as base:
        script = os.path.join(tmp, "child.py")
        with open(script, "w") as f:
            f.write(CHILD)
        url = f"{base}/t/instructions"
        results = {}
        for mode, label in ROWS:
            per_call = (_count(script, mode, 6000, url) - _count(script, mode, 1000, url)) / 5000
            results[mode] = per_call
            print(f"  measured {label}", file=sys.stderr)
    floor = results["null"]
    print("| row | instructions per call | x NullHandler |")
    print("|---|---|---|")
    for mode, label in ROWS:
        print(f"| {label} | {results[mode]:,.0f} | {results[mode] / floor:.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
