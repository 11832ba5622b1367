"""A burst at full speed with a spool while the service is down (issue 23, item 4).

    python -m benchmarks.spool_burst [--reps 3] [--seconds 60]

Each run is a fresh process: a tight loop of ``log.info("event %d", i, extra={"i": i})`` into an
``IngestHandler`` whose address has nothing listening, with ``spool_dir`` set, then ``flush()``:
how many events the queue dropped (``dropped_queue_full``) and how many reached the spool. The
NullHandler row runs the same loop into ``logging.NullHandler`` (the floor: the loop's own rate).

Rows: 20,000 events into a 1,000-event queue, 200,000 into a 10,000-event queue, and with
``--seconds`` the defaults (100,000-event queue) for that long (``max_spool_bytes`` raised to
4 GiB so that the spool's bound is not what is measured). Before the flusher was woken by the
queue's pressure, these dropped 16,000-19,000, 30,000-123,000 and 2.49 M (60 s).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile

CHILD = r"""
import json, logging, sys, time
mode, n, queue, seconds, spool = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), \
    float(sys.argv[4]), sys.argv[5]
log = logging.getLogger("burst")
log.propagate = False
log.setLevel(logging.INFO)
if mode == "null":
    log.addHandler(logging.NullHandler())
    h = None
else:
    import loghandler
    opts = dict(url="http://127.0.0.1:9", token="bench-token-1", spool_dir=spool,
                shutdown_timeout=5)
    if queue:
        opts["max_queue_size"] = queue
    if seconds:
        opts["max_spool_bytes"] = 4 * 2**30
    h = loghandler.IngestHandler("ds", **opts)
    log.addHandler(h)
info = log.info
start = time.perf_counter()
i = 0
if seconds:
    end = start + seconds
    while True:
        for _ in range(1000):
            info("event %d", i, extra={"i": i})
            i += 1
        if time.perf_counter() >= end:
            break
else:
    for i in range(n):
        info("event %d", i, extra={"i": i})
    i = n
elapsed = time.perf_counter() - start
out = {"events": i, "rate": i / elapsed}
if h is not None:
    h.flush(timeout=60)
    st = h.stats()
    out.update(dropped=st.dropped_queue_full, spooled=st.spooled, queued=st.queued,
               balanced=st.submitted == st.delivered + st.dropped + st.failed + st.spooled
               + st.queued)
    h.close()
print(json.dumps(out))
"""


def run(mode: str, n: int, queue: int, seconds: float) -> dict:
    spool = tempfile.mkdtemp(prefix="loghandler-burst-")
    try:
        out = subprocess.run([sys.executable, "-c", CHILD, mode, str(n), str(queue),
                              str(seconds), spool], capture_output=True, text=True,
                             timeout=seconds + 300, check=True).stdout
        return json.loads(out)
    finally:
        shutil.rmtree(spool, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=0.0,
                    help="also run the defaults for this long (60 in the issue)")
    args = ap.parse_args(argv)
    rows = [(20_000, 1_000, 0.0), (200_000, 10_000, 0.0)]
    if args.seconds:
        rows.append((0, 0, args.seconds))
    print("| burst | NullHandler (floor) | IngestHandler + spool | dropped_queue_full | "
          "spooled | balanced |")
    print("|---|---|---|---|---|---|")
    for n, queue, seconds in rows:
        for _ in range(args.reps if not seconds else 1):
            floor = run("null", n, queue, seconds)
            res = run("ingest", n, queue, seconds)
            what = (f"{res['events']:,} events, {queue:,} queue" if queue
                    else f"{seconds:g} s, defaults ({res['events']:,} events)")
            print(f"| {what} | {floor['rate']:,.0f}/s | {res['rate']:,.0f}/s "
                  f"({res['rate'] / floor['rate']:.2f}x) | {res['dropped']:,} | "
                  f"{res['spooled']:,} | {res['balanced']} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
