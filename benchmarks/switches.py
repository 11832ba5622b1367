"""Thread switches per 1,000 events, with the compiled hot path and without (issue 29).

    python -m benchmarks.switches [--events 200000] [--reps 3]

The flusher shares the GIL with the application: each time one thread hands it to the other,
the kernel switches threads. Each run is a fresh process logging ``--events`` records in a
tight loop into an ``IngestHandler`` that delivers to a live receiver (``benchmarks.receiver``,
its own process), then ``flush()``. Switches are the process's threads' voluntary plus
involuntary context switches (``/proc/self/task/*/status``) over the loop and the flush, per
1,000 events; the rate is the loop's events per second. The NullHandler row is the floor (one
thread: only the scheduler's own switches).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from .receiver import start_receiver

CHILD = r"""
import json, logging, os, sys, time
mode, n, url = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def switches():
    total = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/status") as f:
                for line in f:
                    if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total
log = logging.getLogger("switches")
log.propagate = False
log.setLevel(logging.INFO)
h = None
if mode == "null":
    log.addHandler(logging.NullHandler())
else:
    import loghandler
    from loghandler import _compiled
    h = loghandler.IngestHandler("bench", token="t", url=url, max_queue_size=n + 1,
                                 max_queue_bytes=2**40)
    log.addHandler(h)
info = log.info
before = switches()
start = time.perf_counter()
for i in range(n):
    info("user %s logged in", i, extra={"request_id": "r-1", "latency_ms": 1.5})
loop = time.perf_counter() - start
delivered = n
if h is not None:
    h.flush(120)
    delivered = h.stats().delivered
print(json.dumps({"switches": switches() - before, "rate": n / loop, "delivered": delivered,
                  "compiled": mode != "null" and _compiled.ACTIVE}))
os._exit(0)
"""

ROWS = [("null", {}, "logging.NullHandler (floor)"),
        ("ingest", {}, "IngestHandler, compiled hot path"),
        ("ingest", {"LOGHANDLER_PURE_PYTHON": "1"}, "IngestHandler, pure Python")]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.switches")
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args(argv)
    print(f"{args.events:,} events a run, {args.reps} runs each, medians\n")
    print("| row | switches per 1,000 events | events/s (loop) | delivered |")
    print("|---|---|---|---|")
    with start_receiver() as base:
        for mode, env, label in ROWS:
            runs = []
            for rep in range(args.reps):
                proc = subprocess.run(
                    [sys.executable, "-c", CHILD, mode, str(args.events),
                     f"{base}/t/switches-{mode}-{rep}"],
                    capture_output=True, text=True, timeout=600,
                    env={**os.environ, "LOGHANDLER_PURE_PYTHON": "0", **env})
                if proc.returncode != 0:
                    print(f"| {label} | failed: {proc.stderr[-300:]} | | |")
                    break
                runs.append(json.loads(proc.stdout))
            if not runs:
                continue
            per_k = statistics.median(r["switches"] * 1000 / args.events for r in runs)
            rate = statistics.median(r["rate"] for r in runs)
            delivered = min(r["delivered"] for r in runs)
            print(f"| {label} | {per_k:.1f} | {rate:,.0f} | {delivered:,} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
