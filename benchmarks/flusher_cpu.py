"""The application thread's own CPU time per call while the flusher works beside it, and while
it is held off: is the caller slower when the flusher runs on the other core?

    python -m benchmarks.flusher_cpu [--rounds 12] [--calls 100000] [--row ingest]

Each child makes scenario 2's calls (the ``ingest`` row's ``log(i)``, ``--calls`` of them, one
thread) in one of four ways, the children alternated round after round so that the host's
phases (this VM's speed moves by a third within seconds) fall on every way alike:

- ``parked``: the flusher held off for the whole loop (the main thread holds the worker's
  ``send_lock``, which the flusher takes before each round of batches: it wakes, and waits),
  then released, and everything flushed after the loop is timed;
- ``active``: the flusher sends while the calls are made, as in scenario 2, no thread pinned;
- ``apart``: the same, the calling thread pinned to CPU 0 and the flusher to CPU 1;
- ``together``: the same, both pinned to CPU 0 (they take turns on one core: nothing the
  flusher touches moves between cores, but its time is the caller's wait).

With ``--chunks``, each child alternates instead, in one process: chunks of 10,000 calls
(about 0.1 s each, shorter than the host's phases), the flusher held off during one chunk and
free during the next (it then sends the held chunk's events and the new ones beside the
calls), and each free chunk's CPU time is compared with the two held chunks beside it.

Only the queue's bounds differ from the row's (room for every call, in all four ways alike, so
that the parked loop drops nothing). Printed per way: the median over the rounds of the calling
thread's CPU time per call (``time.thread_time``) and of its wall time per call, each round's
ratio to the ``parked`` child of the same round, its minor page faults and context switches per
1,000 calls, and the flusher's requests.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from .receiver import start_receiver

WAYS = ("parked", "active", "apart", "together")

CHILD = r"""
import json, os, resource, sys, threading, time
from benchmarks.rows import build
cfg = json.loads(sys.argv[1])
way = cfg["way"]
opts = {"max_queue_size": 10**7, "max_queue_bytes": 2**40}
row = build(cfg["row"], cfg["base"], opts)
log = row.log
handler = [h for h in __import__("logging").getLogger("bench." + cfg["row"]).handlers][0]
flusher = handler.shipper._flusher
log(-1)  # the flusher thread starts with the first event
thread = flusher.thread
if way in ("apart", "together"):
    os.sched_setaffinity(0, {0})
    os.sched_setaffinity(thread.native_id, {0} if way == "together" else {1})
lock = flusher.worker.send_lock
if way == "parked":
    lock.acquire()
n = cfg["n"]
r0 = resource.getrusage(resource.RUSAGE_THREAD)
c0, t0 = time.thread_time(), time.perf_counter()
for i in range(n):
    log(i)
wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
r1 = resource.getrusage(resource.RUSAGE_THREAD)
if way == "parked":
    lock.release()
t1 = time.perf_counter()
row.flush(60)
s = row.stats()
print("RESULT " + json.dumps({
    "wall_us": wall / n * 1e6, "cpu_us": cpu / n * 1e6, "flush_s": time.perf_counter() - t1,
    "minflt_1k": (r1.ru_minflt - r0.ru_minflt) * 1000 / n,
    "nvcsw_1k": (r1.ru_nvcsw - r0.ru_nvcsw) * 1000 / n,
    "nivcsw_1k": (r1.ru_nivcsw - r0.ru_nivcsw) * 1000 / n,
    "batches": s["batches"], "delivered": s["delivered"], "dropped": s["dropped"]}),
    flush=True)
os._exit(0)
"""


CHUNKS = r"""
import json, os, resource, sys, threading, time
from benchmarks.rows import build
cfg = json.loads(sys.argv[1])
opts = {"max_queue_size": 10**7, "max_queue_bytes": 2**40}
row = build(cfg["row"], cfg["base"], opts)
log = row.log
handler = __import__("logging").getLogger("bench." + cfg["row"]).handlers[0]
flusher = handler.shipper._flusher
log(-1)
lock = flusher.worker.send_lock
fclock = time.pthread_getcpuclockid(flusher.thread.ident)
size, out, i = cfg["chunk"], [], 0
for c in range(cfg["chunks"]):
    held = c % 2 == 0
    if held:
        lock.acquire()  # waits for the flusher's round to end: not timed
    r0 = resource.getrusage(resource.RUSAGE_THREAD)
    f0 = time.clock_gettime(fclock)
    c0, t0 = time.thread_time(), time.perf_counter()
    for j in range(i, i + size):
        log(j)
    wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
    fcpu = time.clock_gettime(fclock) - f0
    r1 = resource.getrusage(resource.RUSAGE_THREAD)
    i += size
    if held:
        lock.release()
    out.append({"held": held, "cpu_us": cpu / size * 1e6, "wall_us": wall / size * 1e6,
                "flusher_cpu_us": fcpu / size * 1e6,
                "minflt_1k": (r1.ru_minflt - r0.ru_minflt) * 1000 / size,
                "nvcsw_1k": (r1.ru_nvcsw - r0.ru_nvcsw) * 1000 / size,
                "nivcsw_1k": (r1.ru_nivcsw - r0.ru_nivcsw) * 1000 / size})
row.flush(60)
print("RESULT " + json.dumps({"chunks": out, "stats": row.stats()}), flush=True)
os._exit(0)
"""


def run_chunks(rounds: int, row: str) -> list[dict[str, float]]:
    """Every free chunk's CPU and wall time per call against the held chunks beside it."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    pairs: list[dict[str, float]] = []
    with start_receiver() as base:
        for r in range(rounds):
            cfg = {"row": row, "chunk": 10_000, "chunks": 21,
                   "base": f"{base}/t/flushercpu-chunks-{os.getpid()}-{r}"}
            proc = subprocess.run([sys.executable, "-c", CHUNKS, json.dumps(cfg)],
                                  cwd=here, capture_output=True, text=True, timeout=300)
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
            if not lines:
                raise RuntimeError(proc.stderr[-800:])
            res = json.loads(lines[0][7:])
            st = res["stats"]
            assert st["delivered"] == st["submitted"], st
            ch = res["chunks"]
            for k in range(1, len(ch) - 1, 2):
                free, before, after = ch[k], ch[k - 1], ch[k + 1]
                pairs.append({key: free[key] / ((before[key] * after[key]) ** 0.5)
                              for key in ("cpu_us", "wall_us")}
                             | {"held_cpu_us": (before["cpu_us"] + after["cpu_us"]) / 2,
                                "free_cpu_us": free["cpu_us"],
                                "held_wall_us": (before["wall_us"] + after["wall_us"]) / 2,
                                "free_wall_us": free["wall_us"],
                                "free_flusher_cpu_us": free["flusher_cpu_us"],
                                "held_minflt_1k": (before["minflt_1k"] + after["minflt_1k"]) / 2,
                                "free_minflt_1k": free["minflt_1k"]}
                             | {f"{way}_{k}": (v[k] if way == "free" else
                                               (before[k] + after[k]) / 2)
                                for way, v in (("held", before), ("free", free))
                                for k in ("nvcsw_1k", "nivcsw_1k")})
            print(f"  round {r}: free/held CPU "
                  + " ".join(f"{p['cpu_us']:.2f}" for p in pairs[-10:]), file=sys.stderr,
                  flush=True)
    return pairs


def chunk_table(pairs: list[dict[str, float]]) -> str:
    def med(key: str) -> str:
        v = [p[key] for p in pairs]
        q = statistics.quantiles(v, n=4)
        return f"{statistics.median(v):.2f} (quartiles {q[0]:.2f}–{q[2]:.2f})"

    return "\n".join([
        f"{len(pairs)} free chunks of 10,000 calls, each against the two held chunks beside it:",
        f"- thread CPU, free / held: {med('cpu_us')}",
        f"- wall, free / held: {med('wall_us')}",
        f"- thread CPU µs/call: held {med('held_cpu_us')}, free {med('free_cpu_us')}",
        f"- wall µs/call: held {med('held_wall_us')}, free {med('free_wall_us')}; the "
        f"flusher's CPU time in a free chunk, µs per call: {med('free_flusher_cpu_us')}",
        f"- minor faults per 1,000 calls: held {med('held_minflt_1k')}, "
        f"free {med('free_minflt_1k')}",
        f"- voluntary switches per 1,000 calls (waits for the interpreter's lock): held "
        f"{med('held_nvcsw_1k')}, free {med('free_nvcsw_1k')}",
        f"- involuntary switches per 1,000 calls (a core taken away): held "
        f"{med('held_nivcsw_1k')}, free {med('free_nivcsw_1k')}"])


def run(rounds: int, calls: int, row: str) -> dict[str, list[dict[str, float]]]:
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out: dict[str, list[dict[str, float]]] = {w: [] for w in WAYS}
    with start_receiver() as base:
        for r in range(rounds):
            # Each round in a new order (rotated), so that no way always follows another.
            ways = WAYS[r % len(WAYS):] + WAYS[:r % len(WAYS)]
            for way in ways:
                cfg = {"way": way, "row": row, "n": calls,
                       "base": f"{base}/t/flushercpu-{os.getpid()}-{r}-{way}"}
                proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(cfg)],
                                      cwd=here, capture_output=True, text=True, timeout=300)
                lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
                if not lines:
                    raise RuntimeError(f"{way}: {proc.stderr[-800:]}")
                res = json.loads(lines[0][7:])
                res["round"] = r
                out[way].append(res)
                print(f"  round {r} {way}: cpu {res['cpu_us']:.2f} µs, wall "
                      f"{res['wall_us']:.2f} µs, {res['batches']} requests",
                      file=sys.stderr, flush=True)
    return out


def table(out: dict[str, list[dict[str, float]]]) -> str:
    parked = {r["round"]: r for r in out["parked"]}

    def med(v: list[float]) -> str:
        return f"{statistics.median(v):.2f} ({min(v):.2f}–{max(v):.2f})"

    lines = ["| flusher | thread CPU µs/call | x parked (same round) | wall µs/call | "
             "x parked (same round) | minor faults /1k calls | voluntary / involuntary "
             "switches /1k calls | requests |", "|---|---|---|---|---|---|---|---|"]
    for way in WAYS:
        runs = out[way]
        if not runs:
            continue
        cpu_x = [r["cpu_us"] / parked[r["round"]]["cpu_us"] for r in runs]
        wall_x = [r["wall_us"] / parked[r["round"]]["wall_us"] for r in runs]
        lines.append(
            f"| {way} | {med([r['cpu_us'] for r in runs])} | {med(cpu_x)} | "
            f"{med([r['wall_us'] for r in runs])} | {med(wall_x)} | "
            f"{statistics.median(r['minflt_1k'] for r in runs):.1f} | "
            f"{statistics.median(r['nvcsw_1k'] for r in runs):.2f} / "
            f"{statistics.median(r['nivcsw_1k'] for r in runs):.2f} | "
            f"{statistics.median(r['batches'] for r in runs):.0f} |")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.flusher_cpu", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--calls", type=int, default=100_000)
    p.add_argument("--row", default="ingest", help="an ingest row of benchmarks/rows.py")
    p.add_argument("--json", default=None, help="also write every child's result here")
    p.add_argument("--chunks", action="store_true",
                   help="held and free chunks alternated in each child (see above)")
    a = p.parse_args()
    if (os.cpu_count() or 1) < 2:
        print("needs two CPUs (the flusher on the other one)", file=sys.stderr)
        return 1
    if a.chunks:
        pairs = run_chunks(a.rounds, a.row)
        print(chunk_table(pairs))
        if a.json:
            with open(a.json, "w") as f:
                json.dump(pairs, f, indent=1)
        return 0
    out = run(a.rounds, a.calls, a.row)
    print(table(out))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
