"""A burst at full speed with a spool while the service is down (issue 23, item 4; issue 35.1).

    python -m benchmarks.spool_burst [--reps 3] [--seconds 60] [--load] [--instructions]
                                     [--callers] [--dir PATH]

Each run is a fresh process: a tight loop of ``log.info("event %d", i, extra={"i": i})`` into an
``IngestHandler`` whose address has nothing listening, with ``spool_dir`` set, then ``flush()``:
how many events the queue dropped (``dropped_queue_full``), how many reached the spool, and how
many of those the application's thread wrote itself (``spooled_by_caller``: the queue was full
and the flusher behind). The NullHandler row runs the same loop into ``logging.NullHandler``
(the floor: the loop's own rate).

Rows: 20,000 events into a 1,000-event queue with the spool's own settings; the same with the
settings of issue 35.1 (``batch_size=500, overflow="drop_oldest", max_retries=1``: with these,
before the caller's fallback, 9,300-14,000 were dropped on a quiet machine and 7,750 with both
cores busy); 200,000 into a 10,000-event queue; and with ``--seconds`` the defaults
(100,000-event queue) for that long (``max_spool_bytes`` raised to 4 GiB so that the spool's
bound is not what is measured). Each loghandler run also times every call: the slowest, and how
many calls took over 100 us (those that wrote a batch to the spool, and the GIL's hand-overs);
and the calls that wrote a batch themselves (issue 48.2: the caller's latency with a spool):
their median and slowest (the child notes which calls those are: ``Spool.write`` is wrapped to
flag a write made on the logging thread).

The spool is a fresh directory under ``--dir`` (default: the current directory, so that it is on
the disk the project lives on, not a tmpfs /tmp); its file system is printed with the load.

``--load`` starts one CPU hog per core for the runs (as ``pytest --load`` does): a busy host, on
which the flusher gets less CPU than the application. ``--instructions`` (needs valgrind)
counts the instructions of one logging call in the fallback's state, beside a call into a queue
with room and a call that drops (no spool): the flusher is held in a request that is never
answered, so every call finds the queue full; the count is the difference of 7,000 and 2,000
calls, over 5,000, as in ``benchmarks.instructions`` (the spool's system calls are the
kernel's, not counted: the burst rows time them).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

from .cpuhogs import cpu_load

CHILD = r"""
import json, logging, sys, time
from array import array
mode, n, queue, seconds, spool = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), \
    float(sys.argv[4]), sys.argv[5]
settings = json.loads(sys.argv[6]) if len(sys.argv) > 6 else {}
log = logging.getLogger("burst")
log.propagate = False
log.setLevel(logging.INFO)
if mode == "null":
    log.addHandler(logging.NullHandler())
    h = None
else:
    import loghandler
    opts = dict(url="http://127.0.0.1:9", token="bench-token-1", spool_dir=spool,
                shutdown_timeout=5, **settings)
    if queue:
        opts["max_queue_size"] = queue
    if seconds:
        opts["max_spool_bytes"] = 4 * 2**30
    h = loghandler.IngestHandler("ds", **opts)
    log.addHandler(h)
    # Which calls wrote a batch themselves: a write on this (the logging) thread flags it.
    import threading
    from loghandler._engine.spool import Spool
    main, real_write, flag = threading.get_ident(), Spool.write, [0]
    def write(self, *args, **kw):
        if threading.get_ident() == main:
            flag[0] += 1
        return real_write(self, *args, **kw)
    Spool.write = write
info = log.info
clock = time.perf_counter_ns
slow = 0
slowest = 0
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
    spills = array("q")
    for i in range(n):
        before = flag[0] if h is not None else 0
        t0 = clock()
        info("event %d", i, extra={"i": i})
        took = clock() - t0
        if h is not None and flag[0] != before:
            spills.append(took)
        if took > 100_000:
            slow += 1
            if took > slowest:
                slowest = took
    i = n
elapsed = time.perf_counter() - start
out = {"events": i, "rate": i / elapsed, "slow": slow, "slowest_ms": slowest / 1e6}
if h is not None:
    h.flush(timeout=60)
    st = h.stats()
    out.update(dropped=st.dropped_queue_full, spooled=st.spooled, queued=st.queued,
               by_caller=st.spooled_by_caller,
               balanced=st.submitted == st.delivered + st.dropped + st.failed + st.spooled
               + st.queued + st.unconfirmed)
    h.close()
    if not seconds:
        spills = sorted(spills)
        out.update(spill_calls=len(spills),
                   spill_median_ms=spills[len(spills) // 2] / 1e6 if spills else 0.0,
                   spill_max_ms=spills[-1] / 1e6 if spills else 0.0)
print(json.dumps(out))
"""

# The fallback's state for callgrind: the flusher holds its first request to a listener that
# never accepts (and never answers), so every call finds the queue full (or, after a batch went
# to the spool, fills it again on the fast path).
INSTRUCTIONS_CHILD = r"""
import logging, os, sys, tempfile
mode, n, url = sys.argv[1], int(sys.argv[2]), sys.argv[3]
import loghandler
opts = dict(url=url, token="bench-token-1", timeout=3600, flush_interval=3600)
if mode == "spool":
    opts.update(max_queue_size=1000, batch_size=500, spool_dir=tempfile.mkdtemp())
elif mode == "drop":
    opts.update(max_queue_size=1000, batch_size=500, overflow="drop_oldest")
else:  # room: the ordinary call
    opts.update(max_queue_size=10**7, batch_size=10_000, max_queue_bytes=10**12,
                max_batch_bytes=10**12)
h = loghandler.IngestHandler("ds", **opts)
log = logging.getLogger("burst")
log.propagate = False
log.setLevel(logging.INFO)
log.addHandler(h)
if mode != "room":
    # The flusher sends this one and waits for an answer that never comes: from now on it
    # takes nothing from the queue, and each call finds the queue as the calls before left it.
    log.info("held")
    h.flush(0.5)
for i in range(n):
    log.info("event %d", i, extra={"i": i})
os._exit(0)
"""

SPOOL_DEFAULTS: dict[str, object] = {}
ISSUE_35 = {"batch_size": 500, "overflow": "drop_oldest", "max_retries": 1}


def run(mode: str, n: int, queue: int, seconds: float, settings: dict[str, object],
        parent: str | None = None) -> dict:
    spool = tempfile.mkdtemp(prefix="loghandler-burst-", dir=parent)
    try:
        out = subprocess.run([sys.executable, "-c", CHILD, mode, str(n), str(queue),
                              str(seconds), spool, json.dumps(settings)], capture_output=True,
                             text=True, timeout=seconds + 300, check=True).stdout
        return json.loads(out)
    finally:
        shutil.rmtree(spool, ignore_errors=True)


def file_system(path: str) -> str:
    """The type of the file system holding ``path`` (from /proc/mounts), for the report."""
    path = os.path.realpath(path)
    best, kind = "", "unknown file system"
    try:
        with open("/proc/mounts") as f:
            for line in f:
                fields = line.split()
                if len(fields) > 2 and (path == fields[1] or path.startswith(
                        fields[1].rstrip("/") + "/")) and len(fields[1]) > len(best):
                    best, kind = fields[1], fields[2]
    except OSError:
        pass
    return f"{kind} ({path})"


def instructions() -> int:
    if shutil.which("valgrind") is None:
        print("valgrind is not installed: apt-get install valgrind")
        return 1
    with socket.socket() as listener, tempfile.TemporaryDirectory() as tmp:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)  # never accepted: the flusher's request is never answered
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        script = os.path.join(tmp, "child.py")
        with open(script, "w") as f:
            f.write(INSTRUCTIONS_CHILD)

        def count(mode: str, n: int) -> int:
            proc = subprocess.run(
                ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                 sys.executable, script, mode, str(n), url],
                capture_output=True, text=True, timeout=1800)
            match = re.search(r"Collected : (\d+)", proc.stderr)
            if not match:
                raise RuntimeError(f"callgrind gave no count for {mode}: {proc.stderr[-500:]}")
            return int(match.group(1))

        rows = [("room", "a queue with room (the ordinary call)"),
                ("drop", "queue full, no spool: the oldest dropped (drop_oldest)"),
                ("spool", "queue full, flusher held, spool: the caller writes a batch of 500 "
                          "every 500 calls (the cost averaged over the calls)")]
        results = {}
        for mode, _ in rows:
            results[mode] = (count(mode, 7000) - count(mode, 2000)) / 5000
            print(f"  measured {mode}", file=sys.stderr)
    print("| state | instructions per call | x ordinary call |")
    print("|---|---|---|")
    for mode, label in rows:
        print(f"| {label} | {results[mode]:,.0f} | {results[mode] / results['room']:.2f} |")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=0.0,
                    help="also run the defaults for this long (60 in the issue)")
    ap.add_argument("--load", action="store_true", help="with a CPU hog on every core")
    ap.add_argument("--instructions", action="store_true",
                    help="instructions per call in the fallback's state (valgrind)")
    ap.add_argument("--callers", action="store_true",
                    help="only the row where the application's threads write batches (issue "
                         "35.1's settings): the caller's latency with a spool")
    ap.add_argument("--dir", default=".",
                    help="where the spool goes (default: here, the project's disk)")
    args = ap.parse_args(argv)
    if args.instructions:
        return instructions()
    rows: list[tuple[int, int, float, dict[str, object], str]] = [
        (20_000, 1_000, 0.0, SPOOL_DEFAULTS, "spool defaults"),
        (20_000, 1_000, 0.0, ISSUE_35, "issue 35.1's settings"),
        (200_000, 10_000, 0.0, SPOOL_DEFAULTS, "spool defaults"),
    ]
    if args.callers:
        rows = rows[1:2]
    elif args.seconds:
        rows.append((0, 0, args.seconds, SPOOL_DEFAULTS, "defaults"))
    print(f"load: {'a CPU hog per core' if args.load else 'none added'}; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores at the start; spool on "
          f"{file_system(args.dir)}; {time.strftime('%Y-%m-%d %H:%M')}")
    print("| burst | settings | NullHandler (floor) | IngestHandler + spool | dropped_queue_full "
          "| spooled | by the caller | calls > 100 us | slowest call | calls that wrote a batch: "
          "median / slowest | balanced |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    with cpu_load(args.load):
        for n, queue, seconds, settings, name in rows:
            for _ in range(args.reps if not seconds else 1):
                floor = run("null", n, queue, seconds, {})
                res = run("ingest", n, queue, seconds, settings, args.dir)
                what = (f"{res['events']:,} events, {queue:,} queue" if queue
                        else f"{seconds:g} s, defaults ({res['events']:,} events)")
                # The timed run's calls are not timed one by one.
                slow, slowest = (("-", "-") if seconds else
                                 (f"{res['slow']:,}", f"{res['slowest_ms']:.1f} ms"))
                spills = (f"{res['spill_calls']}: {res['spill_median_ms']:.2f} / "
                          f"{res['spill_max_ms']:.2f} ms" if res.get("spill_calls") else "-")
                print(f"| {what} | {name} | {floor['rate']:,.0f}/s | {res['rate']:,.0f}/s "
                      f"({res['rate'] / floor['rate']:.2f}x) | {res['dropped']:,} | "
                      f"{res['spooled']:,} | {res['by_caller']:,} | {slow} | {slowest} | "
                      f"{spills} | {res['balanced']} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
