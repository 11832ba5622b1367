"""Local service ingest over HTTP, paired with its floor: ``python -m benchmarks.local_ingest``.

The service (``loghandler serve``, its own process: one core's worth of Python) takes N events
(500,000 by default) as NDJSON bodies of 10,000 events each over one keep-alive connection; the
bodies are built before the clock starts, so the figure is the service's. The floor, in the same
run: a plain ``executemany`` of the same rows (dataset, time, arrival time, the event's JSON)
into a fresh SQLite table of the same schema (its index included), in one transaction per
10,000 rows, the least any store of these events can cost. Reported: events/s of each, their
ratio, and the CPU seconds the service process spent (events per CPU second: one core).

While the ingest runs, a second connection asks the page's dataset count every 100 ms: the
slowest answer shows that queries keep answering (within their 10 s deadline) under a heavy
ingest. At the end the count and a summary are checked against what was sent.

``--db FILE`` stores in a file (WAL, as ``serve --db``; the floor writes a file too); ``--events
100000`` for a quick run.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

LEVELS = ("debug", "info", "info", "info", "warning", "error")
TOKEN = "bench-ingest"
BATCH = 10_000


def make_events(n: int) -> list[dict[str, Any]]:
    """Events of the shape loghandler's handler sends, one second apart, ending now."""
    start = time.time() - n
    out = []
    for i in range(n):
        t = start + i
        out.append({"_time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t))
                    + f".{int((t % 1) * 1e6):06d}Z",
                    "level": LEVELS[i % len(LEVELS)], "logger": "app.web",
                    "message": f"request from user {i % 10_000} served",
                    "status": 200 if i % 7 else 500, "duration_ms": (i * 37) % 1000,
                    "module": "views", "function": "serve", "line": 42})
    return out


def floor(events: list[dict[str, Any]], path: str | None) -> tuple[float, float]:
    """Seconds (wall, CPU) to store the rows with a plain executemany (the store's schema and
    index)."""
    db = sqlite3.connect(path or ":memory:", isolation_level=None)
    if path:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
    db.executescript("""
        CREATE TABLE events (seq INTEGER PRIMARY KEY AUTOINCREMENT, dataset TEXT NOT NULL,
                             time INTEGER NOT NULL, sys TEXT NOT NULL, body TEXT NOT NULL);
        CREATE INDEX events_time ON events (dataset, time, seq);""")
    sys_time = "2026-01-01T00:00:00.000000Z"
    rows = [("bench", 1_700_000_000_000_000 + i, sys_time,
             json.dumps(e, separators=(",", ":"))) for i, e in enumerate(events)]
    started, cpu = time.perf_counter(), time.process_time()
    for first in range(0, len(rows), BATCH):
        db.execute("BEGIN")
        db.executemany("INSERT INTO events (dataset, time, sys, body) VALUES (?, ?, ?, ?)",
                       rows[first:first + BATCH])
        db.execute("COMMIT")
    took, cpu = time.perf_counter() - started, time.process_time() - cpu
    db.close()
    return took, cpu


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _post(conn: http.client.HTTPConnection, path: str, body: bytes,
          kind: str = "application/x-ndjson") -> Any:
    conn.request("POST", path, body=body, headers={"Authorization": f"Bearer {TOKEN}",
                                                    "Content-Type": kind})
    resp = conn.getresponse()
    data = resp.read()
    if resp.status != 200:
        raise RuntimeError(f"{path}: HTTP {resp.status}: {data[:300]!r}")
    return json.loads(data)


def _watch(host: str, port: int, stop: threading.Event, times: list[float]) -> None:
    """The page's dataset count every 100 ms, on its own connection, while ingest runs."""
    conn = http.client.HTTPConnection(host, port, timeout=30)
    body = json.dumps({"apl": "['bench'] | count"}).encode()
    while not stop.wait(0.1):
        t0 = time.perf_counter()
        _post(conn, "/v1/datasets/_apl?format=tabular", body, "application/json")
        times.append(time.perf_counter() - t0)
    conn.close()


def run_service(bodies: list[bytes], n: int, db: str | None) -> dict[str, Any]:
    args = [sys.executable, "-m", "loghandler", "serve", "--port", "0", "--token", TOKEN,
            "--quiet", "--dataset", "bench"] + (["--db", db] if db else [])
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().split("listening on ")[1].split()[0]
        host, port = url.removeprefix("http://").rsplit(":", 1)
        stop, latencies = threading.Event(), []  # type: ignore[var-annotated]
        watcher = threading.Thread(target=_watch, args=(host, int(port), stop, latencies))
        counts = [0, 0]

        def send(k: int) -> None:
            # Two connections, each with every other body: one body arrives while the
            # service stores the other, so the service is never idle waiting for the client.
            c = http.client.HTTPConnection(host, int(port), timeout=60)
            for body in bodies[k::2]:
                counts[k] += _post(c, "/v1/datasets/bench/ingest", body)["ingested"]
            c.close()

        senders = [threading.Thread(target=send, args=(k,)) for k in (0, 1)]
        cpu0 = _cpu_seconds(proc.pid)
        started = time.perf_counter()
        watcher.start()
        for t in senders:
            t.start()
        for t in senders:
            t.join()
        took = time.perf_counter() - started
        ingested = sum(counts)
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        stop.set()
        watcher.join()
        cpu = _cpu_seconds(proc.pid) - cpu0
        q = json.dumps({"apl": "['bench'] | summarize count() by level"}).encode()
        by_level = _post(conn, "/v1/datasets/_apl?format=tabular", q, "application/json")
        columns = by_level["tables"][0]["columns"]
        counts = dict(zip(columns[0], columns[1], strict=True))
        conn.close()
        return {"seconds": took, "ingested": ingested, "cpu": cpu, "latencies": latencies,
                "counts": counts}
    finally:
        proc.terminate()
        proc.wait(30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.local_ingest")
    parser.add_argument("--events", type=int, default=500_000)
    parser.add_argument("--db", metavar="DIR", nargs="?", const="tmp", default=None,
                        help="store in a file (in DIR, default a temporary directory)")
    args = parser.parse_args(argv)
    n = args.events
    events = make_events(n)
    bodies = [b"\n".join(json.dumps(e).encode() for e in events[i:i + BATCH])
              for i in range(0, n, BATCH)]
    expected = {level: sum(1 for e in events if e["level"] == level) for level in set(LEVELS)}
    with tempfile.TemporaryDirectory() as tmp:
        where = None if args.db is None else (tmp if args.db == "tmp" else args.db)
        floor_s, floor_cpu = floor(events, None if where is None else os.path.join(where,
                                                                                 "floor.db"))
        got = run_service(bodies, n, None if where is None else os.path.join(where, "svc.db"))
    assert got["ingested"] == n, got["ingested"]
    assert got["counts"] == expected, (got["counts"], expected)
    rate, floor_rate = n / got["seconds"], n / floor_s
    cpu_rate, floor_cpu_rate = n / got["cpu"], n / floor_cpu
    lat = got["latencies"]
    print(f"storage: {'a file (WAL)' if where else 'memory'}; {n:,} events, NDJSON bodies of "
          f"{BATCH:,}; load average {os.getloadavg()[0]:.1f} (2 cores)")
    print(f"{'':36} {'events/s':>10}  {'per CPU s':>10}")
    print(f"{'floor: executemany into SQLite':36} {floor_rate:>10,.0f}  {floor_cpu_rate:>10,.0f}")
    print(f"{'local service: HTTP ingest':36} {rate:>10,.0f}  {cpu_rate:>10,.0f}")
    print(f"{'  ratio to the floor':36} {rate / floor_rate:>10.2f}x "
          f"{cpu_rate / floor_cpu_rate:>10.2f}x   (the service: {got['cpu']:.1f} CPU s in "
          f"{got['seconds']:.1f} s, one process)")
    if lat:
        print(f"the page's count during the ingest: {len(lat)} answers, median "
              f"{statistics.median(lat) * 1000:.0f} ms, slowest {max(lat) * 1000:.0f} ms "
              "(deadline 10 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
