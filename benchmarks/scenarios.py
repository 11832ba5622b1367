"""One (row, scenario) measurement, run in a fresh child process.

``python -m benchmarks.scenarios '<json config>'`` prints one ``RESULT {...}`` line. Timed loops
stop early at ``cap`` seconds (slow peers would otherwise take minutes); results say how many
calls were made.

With ``floor`` in the config (scenarios 1 and 2, ``--pairing chunks``), the child builds the row
and its floor side by side and alternates them in cycles of three chunks (``_cycles``): this
VM's speed moves in phases of a fraction of a second to seconds, and only calls made within
about 100 ms of each other compare (docs/performance.md, "Pairing inside one process").
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from . import receiver
from .rows import FLOORS, Row, Unavailable, build

_now = time.perf_counter


def _emit(result: dict[str, Any], *, hard_exit: bool = True) -> None:
    print("RESULT " + json.dumps(result), flush=True)
    if hard_exit:
        # What a row does at exit is scenario 5's subject; elsewhere it would only add time.
        sys.stderr.flush()
        os._exit(0)


def _loop(row: Row, n: int, threads: int, cap: float) -> tuple[int, float]:
    """Make up to ``n`` calls (split over ``threads``); returns (calls made, wall seconds)."""
    log = row.log
    done = [0] * threads
    per = n // threads
    barrier = threading.Barrier(threads + 1) if threads > 1 else None

    def work(k: int) -> None:
        if barrier is not None:
            barrier.wait()
        base = k * per
        deadline = _now() + cap
        i = 0
        while i < per:
            stop = min(per, i + 1000)
            for j in range(base + i, base + stop):
                log(j)
            i = stop
            if _now() > deadline:
                break
        done[k] = i

    if threads == 1:
        start = _now()
        work(0)
        return done[0], _now() - start
    workers = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for w in workers:
        w.start()
    barrier.wait()  # type: ignore[union-attr]
    start = _now()
    for w in workers:
        w.join()
    return sum(done), _now() - start


def app_cost(row: Row, cfg: dict[str, Any]) -> dict[str, Any]:
    """Scenario 1 (and 7a): ns per call, the flusher competing for the GIL.

    Beside the wall time, the CPU time: of the calling thread (one thread only), and of the
    whole process (the flusher's work too, gzip included). Their difference to the wall time
    is the time the calling thread waited: for the interpreter's lock, or for a core (the
    receiver and the flusher's compression compete for the second one)."""
    for i in range(1000):  # warm-up: the flusher thread starts, the connection opens
        row.log(i)
    requests = _requests(row, cfg)
    thread0, cpu0 = time.thread_time_ns(), time.process_time_ns()
    calls, wall = _loop(row, cfg["n"], cfg["threads"], cfg["cap"])
    thread, cpu = time.thread_time_ns() - thread0, time.process_time_ns() - cpu0
    out = {"calls": calls, "ns_per_call": wall / calls * 1e9, "stats": row.stats(),
           "cpu_ns_per_call": cpu / calls}
    if cfg["threads"] == 1:
        out["thread_cpu_ns_per_call"] = thread / calls
    if requests is not None:  # sent while the calls were made
        out["requests_per_1k"] = ((_requests(row, cfg) or 0) - requests) * 1000 / calls
    return out


def _requests(row: Row, cfg: dict[str, Any]) -> int | None:
    """Requests the receiver has had from this row so far (None: a row that ships nowhere)."""
    if row.name in FLOORS or row.delivered is not None:
        return None
    try:
        return receiver.count(cfg["port"], cfg["tag"])["requests"]
    except OSError:
        return None


def _wait_delivered(row: Row, cfg: dict[str, Any], expected: int) -> tuple[int, float]:
    """(events acknowledged, when the last of them was). Gives up after ``stall`` s without
    progress: a row that dropped events would otherwise be charged the whole wait."""
    last, last_at = -1, _now()
    deadline = last_at + cfg["wait"]
    while True:
        if row.delivered is not None:
            got = row.delivered()
        else:
            got = receiver.count(cfg["port"], cfg["tag"])["events"]
        now = _now()
        if got != last:
            last, last_at = got, now
        if got >= expected or now > deadline or now - last_at > cfg.get("stall", 3.0):
            return got, last_at
        time.sleep(0.002)


def end_to_end(row: Row, cfg: dict[str, Any]) -> dict[str, Any]:
    """Scenario 2 (7b, 6): from the first call until the receiver acknowledged every event."""
    start = _now()
    calls, wall = _loop(row, cfg["n"], cfg["threads"], cfg["cap"])
    out: dict[str, Any] = {"calls": calls, "call_rate": calls / wall}
    if row.name in FLOORS:
        out["events_per_s"] = calls / wall  # nothing to deliver: the call rate is the floor
        return out
    row.flush(cfg["wait"])
    expected = row.expected(calls)
    if expected == 0:  # every call held by the policy as configured: the call rate
        out.update(delivered=0, expected=0, events_per_s=calls / wall, stats=row.stats())
        return out
    got, done_at = _wait_delivered(row, cfg, expected)
    elapsed = done_at - start
    # The rate of the calls whose events are all accounted for: delivered, or dropped by a
    # policy as configured (sampling), counted in stats().
    out.update(delivered=got, expected=expected,
               events_per_s=calls / elapsed if got >= expected else got / elapsed,
               stats=row.stats())
    if not row.delivered:
        c = receiver.count(cfg["port"], cfg["tag"])
        out.update(bytes=c["bytes"], requests=c["requests"])
    return out


def slow_service(row: Row, cfg: dict[str, Any]) -> dict[str, Any]:
    """Scenario 3: per-call latency at a steady pace while every request takes 1 s."""
    n, rate = cfg["n"], cfg["rate"]
    log = row.log
    lat = [0] * n
    behind = 0.0
    interval = 1.0 / rate
    start = _now() + 0.01
    for i in range(n):
        due = start + i * interval
        while True:  # sleep most of the wait (it releases the GIL), spin the last bit
            left = due - _now()
            if left <= 0:
                break
            if left > 0.0015:
                time.sleep(left - 0.001)
        t0 = _now()
        behind = max(behind, t0 - due)
        log(i)
        lat[i] = _now() - t0
    lat.sort()

    def pct(p: float) -> float:
        return lat[min(n - 1, int(n * p))] * 1e6

    return {"calls": n, "p50_us": pct(0.5), "p99_us": pct(0.99), "p999_us": pct(0.999),
            "max_us": lat[-1] * 1e6, "behind_ms": behind * 1e3, "stats": row.stats()}


def _rss_now() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def service_down(row: Row, cfg: dict[str, Any]) -> dict[str, Any]:
    """Scenario 4: an outage of ``duration`` seconds at full speed (or ``n`` calls): the
    slowest call (a full GC pass over what is queued shows here) and the peak RSS growth."""
    before = _rss_now()
    log = row.log
    now = _now
    slowest = 0.0
    n, i = cfg["n"], 0
    start = now()
    end = start + cfg.get("duration", cfg["cap"])
    while i < n:
        for j in range(i, i + 1000):
            t0 = now()
            log(j)
            took = now() - t0
            if took > slowest:
                slowest = took
        i += 1000
        if now() > end:
            break
    wall = now() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    out = {"calls": i, "ns_per_call": wall / i * 1e9, "rss_growth": peak - before,
           "slowest_ms": slowest * 1e3, "seconds": wall, "stats": row.stats()}
    if "max_queue_bytes" in row.options:
        out["max_queue_bytes"] = row.options["max_queue_bytes"]
        out["max_queue_size"] = row.options["max_queue_size"]
    return out


def at_exit(row: Row, cfg: dict[str, Any]) -> None:
    """Scenario 5: log, print when the last call returned, and exit normally."""
    for i in range(cfg["n"]):
        row.log(i)
    print(f"LAST {time.time():.6f}", flush=True)
    # returns: the interpreter exits as an application would, atexit hooks and all


# Scenarios 1 and 2 paired inside one process. A cycle is three chunks of the same C calls:
# F1 (the floor; the previous cycle's flusher work is over), R (the row), F2 (the floor again,
# right after R: the row's flusher may slow it while it sends R's events). The row is charged
# R + (F2 - F1): all of its flusher's interference, none of it left to the floor.
CHUNK = 5000
KEYS = ("ns_per_call", "thread_cpu_ns_per_call", "cpu_ns_per_call")  # a chunk's three clocks


def cycle_cost(cycles: Sequence[Sequence[float]]) -> dict[str, Any]:
    """The row's cost against its floor from cycles of chunk timings ``(F1, R, F2, ...)`` of
    one clock (chunks after F2, if any, are a diagnostic and not charged).

    ``ratios``: each cycle's (R + F2 - F1) / F1; ``median`` and ``quartiles`` of them;
    ``pooled``: the sums' ratio; ``row`` and ``floor``: the sums, R + (F2 - F1) and F1;
    ``spill``: sum(F2 - F1) / sum(F1), the floor chunk's slow-down right after the row (the
    flusher's work spilling out of R), charged to the row."""
    ratios = [(c[1] + c[2] - c[0]) / c[0] for c in cycles if c[0] > 0]
    floor = sum(c[0] for c in cycles)
    row = sum(c[1] + c[2] - c[0] for c in cycles)
    quartiles = statistics.quantiles(ratios, n=4) if len(ratios) >= 2 else ratios * 3
    return {"ratios": ratios, "median": statistics.median(ratios) if ratios else None,
            "quartiles": quartiles, "pooled": row / floor if floor > 0 else None,
            "row": row, "floor": floor,
            "spill": sum(c[2] - c[0] for c in cycles) / floor if floor > 0 else None}


def _cycles(row: Row, floor: Row, cfg: dict[str, Any],
            drain: Callable[[int], None] | None = None) -> list[list[list[int]]]:
    """Up to ``cycles`` cycles of (F1, R, F2) chunks of ``chunk`` calls each, the same call
    numbers in all three; each chunk's [wall, thread CPU, process CPU] ns. Stops early once
    the row's chunks took ``cap`` seconds. ``after`` > 1 adds floor chunks after F2 (to see
    whether the flusher's work is over by the next F1). ``drain(calls)``: called right after
    the last R chunk, before its F2 (scenario 2's wait for delivery, which a floor chunk
    before it would shorten)."""
    log, flog = row.log, floor.log
    now, thread, process = time.perf_counter_ns, time.thread_time_ns, time.process_time_ns
    chunk, cap = cfg["chunk"], cfg["cap"] * 1e9
    order = (flog, log) + (flog,) * cfg.get("after", 1)
    out: list[list[list[int]]] = []
    spent, last = 0, False
    for c in range(cfg["cycles"]):
        lo, hi = c * chunk, (c + 1) * chunk
        cycle = []
        for i, f in enumerate(order):
            w0, t0, p0 = now(), thread(), process()
            for j in range(lo, hi):
                f(j)
            cycle.append([now() - w0, thread() - t0, process() - p0])
            if i == 1:
                spent += cycle[1][0]
                last = c == cfg["cycles"] - 1 or spent > cap
                if last and drain is not None:
                    drain(hi)
        out.append(cycle)
        if last:
            break
    return out


def _clock(cycles: list[list[list[int]]], k: int) -> list[list[float]]:
    return [[chunk[k] for chunk in cycle] for cycle in cycles]


def app_cost_chunks(row: Row, floor: Row, cfg: dict[str, Any]) -> dict[str, Any]:
    """Scenario 1 paired inside one process: the same warm-up as ``app_cost`` (and the
    floor's), then the cycles. Each clock's ratio is the median over the cycles."""
    for i in range(1000):
        row.log(i)
        floor.log(i)
    requests = _requests(row, cfg)
    cycles = _cycles(row, floor, cfg)
    calls = len(cycles) * cfg["chunk"]
    out: dict[str, Any] = {"calls": calls, "stats": row.stats(), "cycles": cycles,
                           "ratio": {}, "pooled": {}, "quartiles": {}, "spill": {},
                           "floor": {"row": floor.name}}
    for k, key in enumerate(KEYS):
        cost = cycle_cost(_clock(cycles, k))
        out[key] = cost["row"] / calls
        out["floor"][key] = cost["floor"] / calls
        out["ratio"][key], out["pooled"][key] = cost["median"], cost["pooled"]
        out["quartiles"][key], out["spill"][key] = cost["quartiles"], cost["spill"]
    if requests is not None:
        out["requests_per_1k"] = ((_requests(row, cfg) or 0) - requests) * 1000 / calls
    return out


def end_to_end_chunks(row: Row, floor: Row, cfg: dict[str, Any]) -> dict[str, Any]:
    """Scenario 2 paired inside one process, from the row's first call (no warm-up) until the
    receiver acknowledged every event: the row's time is its chunks, plus each cycle's F2 - F1,
    plus the final flush and the wait until delivered, from the end of the last R chunk (as
    ``end_to_end`` waits after its loop); the floor's, its F1 chunks."""
    waited: dict[str, Any] = {}

    def drain(calls: int) -> None:
        start = _now()
        if row.name in FLOORS:
            waited.update(got=calls, expected=calls, drain=0.0)
            return
        row.flush(cfg["wait"])
        expected = row.expected(calls)
        got, drain_s = calls, 0.0  # every call held as configured: the calls' rate, as before
        if expected:
            got, done_at = _wait_delivered(row, cfg, expected)
            drain_s = done_at - start
        waited.update(got=got, expected=expected, drain=drain_s)

    # The floor warmed, the row not: a cold first F1 (the floor's own first calls) would be
    # subtracted from the row's first cycle and added to the floor's time (the NullHandler
    # against itself read 1.03x, and a tiny run's row time went below zero).
    for i in range(1000):
        floor.log(i)
    cycles = _cycles(row, floor, cfg, drain)
    calls = len(cycles) * cfg["chunk"]
    wall = cycle_cost(_clock(cycles, 0))
    calls_s = sum(c[1][0] for c in cycles) / 1e9
    out: dict[str, Any] = {"calls": calls, "call_rate": calls / calls_s, "cycles": cycles,
                           "floor": {"row": floor.name, "events_per_s": calls * 1e9 /
                                     wall["floor"]},
                           "spill": {"events_per_s": wall["spill"]},
                           "quartiles": {"events_per_s": [1 / x for x in
                                                          reversed(wall["quartiles"])]}}
    got, expected, drain_s = waited["got"], waited["expected"], waited["drain"]
    if row.name not in FLOORS:
        out.update(delivered=got, expected=expected, stats=row.stats())
    elapsed = wall["row"] / 1e9 + drain_s
    out.update(drain_s=drain_s,
               events_per_s=calls / elapsed if got >= expected else got / elapsed)
    out["ratio"] = {"events_per_s": out["events_per_s"] / out["floor"]["events_per_s"]}
    out["pooled"] = dict(out["ratio"])
    if not row.delivered and row.name not in FLOORS:
        c = receiver.count(cfg["port"], cfg["tag"])
        out.update(bytes=c["bytes"], requests=c["requests"])
    return out


SCENARIOS = {"app_cost": app_cost, "end_to_end": end_to_end, "slow": slow_service,
             "down": service_down, "exit": at_exit}
PAIRED = {"app_cost": app_cost_chunks, "end_to_end": end_to_end_chunks}


def main(argv: list[str]) -> None:
    cfg = json.loads(argv[0])
    try:
        row = build(cfg["row"], cfg["base"], cfg.get("opts") or {})
        # Built after the row: a floor's logger takes another name when the row is the same
        # floor (rows.py, _stdlib_logger), and loguru's rows each log through a copy.
        floor = build(cfg["floor"], cfg["base"], {}) if cfg.get("floor") else None
    except Unavailable as exc:
        _emit({"skipped": str(exc)})
        return
    if floor is not None:
        _emit(PAIRED[cfg["kind"]](row, floor, cfg))
        return
    result = SCENARIOS[cfg["kind"]](row, cfg)
    if result is not None:
        _emit(result)


if __name__ == "__main__":
    main(sys.argv[1:])
