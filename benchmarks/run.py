"""The benchmark runner: a receiver process, one fresh child per (row, scenario, repetition).

Repetitions are interleaved (every row once, then every row again), so that the machine's noise
falls on all rows alike: the ratios measured side by side in one run are the figures that count.
In scenarios 1 and 2 each row's child builds its own floor beside it and alternates the two in
chunks of 5,000 calls (``--pairing chunks``, the default; ``scenarios._cycles``): this VM's speed
moves in phases of a fraction of a second to seconds, and even a floor run in the children just
before and after the row's was off by a quarter (docs/performance.md, "Pairing inside one
process"). ``--pairing processes`` is the earlier pairing: each row's child between two children
of its own floor (``paired_order``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from . import receiver
from .rows import FLOOR, ROWS, SHIPPING, VARIANTS
from .scenarios import CHUNK

MiB = 1024 * 1024
# Rows left out of scenarios 4 and 5: nothing to bound or deliver at exit (floors that only
# measure the cost of a call).
UNBOUNDED = ("structlog", "copy", "loguru", "otel-nothing")
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    p.add_argument("--quick", action="store_true",
                   help="a tenth of the calls, one repetition, short caps (under a minute)")
    p.add_argument("--reps", type=int, default=None, help="repetitions of scenarios 1, 2, 3, 7")
    p.add_argument("--scenarios", default=None,
                   help="comma-separated, default 1-7 (1-6 with --quick)")
    p.add_argument("--rows", default=",".join(ROWS), help=f"any of {', '.join(ROWS)}")
    p.add_argument("--scale", type=float, default=None, help="multiply every call count")
    p.add_argument("--cap", type=float, default=None,
                   help="seconds after which a timed loop stops (slow peers)")
    p.add_argument("--shutdown-timeout", type=float, default=None,
                   help="shutdown_timeout for loghandler rows (default: the library's)")
    p.add_argument("--shutdown-timeout-up", type=float, default=None,
                   help="shutdown_timeout of scenario 5 with the service up (default: "
                        "--shutdown-timeout's): time enough to deliver 10,000 events on this host")
    p.add_argument("--exit-timeout", type=float, default=None,
                   help="seconds from a scenario 5 child's last call to its end, after which it "
                        "is killed and reported as hung")
    p.add_argument("--outage", type=float, default=None,
                   help="seconds of scenario 4's outage (default 60, 6 with --quick)")
    p.add_argument("--pairing", choices=("chunks", "processes"), default="chunks",
                   help="scenarios 1 and 2: each row and its floor alternated in chunks inside "
                        "one process (chunks, the default), or each row's process between two "
                        "of its floor's (processes, the earlier pairing)")
    p.add_argument("--json", default=None, help="also write every raw result to this file")
    a = p.parse_args()
    quick = a.quick
    a.reps = a.reps or (1 if quick else 3)
    a.scale = a.scale or (0.1 if quick else 1.0)
    a.cap = a.cap or (0.5 if quick else 5.0)
    a.exit_timeout = a.exit_timeout or (2.5 if quick else 25.0)
    a.outage = a.outage or (6.0 if quick else 60.0)
    if quick and a.shutdown_timeout is None:
        a.shutdown_timeout = 1.0
    a.scenarios = a.scenarios or ("1,2,3,4,5,6" if quick else "1,2,3,4,5,6,7")
    a.scenarios = [s.strip() for s in a.scenarios.split(",") if s.strip()]
    a.rows = [r.strip() for r in a.rows.split(",") if r.strip()]
    unknown = [r for r in a.rows if r not in ROWS]
    if unknown:
        p.error(f"unknown rows: {unknown}; known: {', '.join(ROWS)}")
    return a


class Runner:
    def __init__(self, args: argparse.Namespace) -> None:
        self.a = args
        self.results: dict[str, dict[str, list[dict[str, Any]]]] = {}
        self.seq = 0
        self.recv = subprocess.Popen([sys.executable, "-m", "benchmarks.receiver"], cwd=HERE,
                                     stdout=subprocess.PIPE, text=True)
        line = self.recv.stdout.readline()  # type: ignore[union-attr]
        self.port = int(line.split()[1])
        self.down_port = _closed_port()

    def close(self) -> None:
        self.recv.terminate()
        self.recv.wait(5)

    def n(self, calls: int) -> int:
        return max(100, int(calls * self.a.scale))

    def cfg(self, row: str, kind: str, mode: str, **extra: Any) -> dict[str, Any]:
        self.seq += 1
        tag = f"{row}-{kind}-{os.getpid()}-{self.seq}"
        port = self.down_port if mode == "down" else self.port
        opts = {"shutdown_timeout": self.a.shutdown_timeout}
        cfg = {"row": row, "kind": kind, "tag": tag, "port": self.port,
               "base": f"http://127.0.0.1:{port}/{'slow' if mode == 'slow' else 't'}/{tag}",
               "threads": 1, "cap": self.a.cap, "wait": 30.0, "opts": opts,
               "stall": 1.0 if self.a.quick else 3.0}
        cfg.update(extra)
        return cfg

    def child(self, cfg: dict[str, Any], timeout: float = 120.0,
              exit_timeout: float | None = None) -> dict[str, Any]:
        """Run one child; its RESULT, plus what the runner saw (exit time, stderr, hang).

        ``timeout`` bounds the whole child; with ``exit_timeout`` (scenario 5), its exit alone
        is bounded by that, counted from its last call (its ``LAST`` line). The start and the
        calls before it are not the exit's time: on a loaded host they took longer than a
        quick run's exit bound, and the child killed half-way read as "5,000 of 10,000
        delivered at exit", a loss no exit had made."""
        proc = subprocess.Popen([sys.executable, "-m", "benchmarks.scenarios", json.dumps(cfg)],
                                cwd=HERE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        lines: list[str] = []
        errs: list[str] = []
        last = threading.Event()  # its LAST line came, or its stdout ended without one

        def read_out() -> None:
            for line in proc.stdout:  # type: ignore[union-attr]
                lines.append(line)
                if line.startswith("LAST "):
                    last.set()
            last.set()

        def read_err() -> None:
            errs.append(proc.stderr.read())  # type: ignore[union-attr]

        readers = [threading.Thread(target=f, daemon=True) for f in (read_out, read_err)]
        for t in readers:
            t.start()
        until = time.monotonic() + timeout
        hung: float | None = None
        try:
            if exit_timeout is not None:
                if last.wait(timeout) and (stamps := [
                        float(ln[5:]) for ln in lines if ln.startswith("LAST ")]):
                    # The exit's bound from the child's own stamp of its last call, as exit_s.
                    until = time.monotonic() + exit_timeout - max(0.0, time.time() - stamps[0])
                    hung = exit_timeout
                else:
                    hung = timeout
            proc.wait(max(0.0, until - time.monotonic()))
            hung = None
        except subprocess.TimeoutExpired:
            hung = timeout if hung is None else hung
            proc.kill()
            proc.wait()
        ended = time.time()
        for t in readers:
            t.join(10)
        out, err = "".join(lines), "".join(errs)
        res: dict[str, Any] = {}
        for line in out.splitlines():
            if line.startswith("RESULT "):
                res = json.loads(line[7:])
            elif line.startswith("LAST "):
                res["exit_s"] = ended - float(line[5:])
        if hung is not None:
            res["hung"] = hung
            res.pop("exit_s", None)
        elif proc.returncode != 0 and "skipped" not in res:
            res["error"] = f"exit status {proc.returncode}: {err.strip()[-300:]}"
        res["stderr"] = [ln for ln in err.splitlines() if ln.strip()]
        return res

    def child_blast(self) -> dict[str, Any]:
        proc = subprocess.run([sys.executable, "-m", "benchmarks.receiver", "blast", str(self.port),
                               "0.5" if self.a.quick or self.a.scale < 1 else "2.0"],
                              cwd=HERE, capture_output=True, text=True, timeout=60)
        for line in proc.stdout.splitlines():
            if line.startswith("RESULT "):
                return json.loads(line[7:])
        return {"error": proc.stderr[-300:]}

    def record(self, scenario: str, row: str, res: dict[str, Any]) -> None:
        self.results.setdefault(scenario, {}).setdefault(row, []).append(res)
        if "skipped" in res:
            print(f"  skip {row}: {res['skipped']}", file=sys.stderr)
        elif "error" in res:
            print(f"  error {row} (scenario {scenario}): {res['error']}", file=sys.stderr)

    def repeated(self, scenario: str, rows: list[str], make: Callable[[str], dict[str, Any]],
                 reps: int) -> None:
        skipped: set[str] = set()
        for _ in range(reps):
            for row in rows:
                if row in skipped:
                    continue
                res = self.child(make(row))
                self.record(scenario, row, res)
                if "skipped" in res:
                    skipped.add(row)

    def paired(self, scenario: str, rows: list[str], make: Callable[[str], dict[str, Any]],
               reps: int) -> None:
        """Scenarios 1 and 2: each repetition runs ``paired_order(rows)``, every row between
        two runs of its floor. A row's result keeps what those two measured (``floors``), its
        ratio's denominator; every floor run is kept too, in ``<scenario>-floors`` (the report
        checks the pairing with them). ``seq``: the child's place in the repetition."""
        skipped: set[str] = set()
        for rep in range(reps):
            order = paired_order([row for row in rows if row not in skipped])
            before: dict[str, Any] = {}  # the last floor run of each floor
            waiting: dict[str, list[dict[str, Any]]] = {}  # rows awaiting their next floor
            for seq, (kind, name) in enumerate(order):
                res = self.child(make(name))
                res.update(rep=rep, seq=seq)
                if kind == "floor":
                    self.results.setdefault(f"{scenario}-floors", {}).setdefault(
                        name, []).append(res)
                    for row in waiting.pop(name, []):
                        row["floors"].append(_floor_values(res))
                    before[name] = res
                    continue
                self.record(scenario, name, res)
                if "skipped" in res:
                    skipped.add(name)
                floor = FLOOR.get(name, "null")
                res["floors"] = [_floor_values(before[floor])] if floor in before else []
                waiting.setdefault(floor, []).append(res)

    def chunked(self, scenario: str, rows: list[str], make: Callable[[str, str], dict[str, Any]],
                reps: int) -> None:
        """Scenarios 1 and 2 with ``--pairing chunks``: one child per row and repetition, the
        row and its floor inside it (``make(row, floor)``; every row can share a process with
        its floor, loguru's through copies of its logger, rows._loguru). Each floor other than
        ``null`` is also paired with itself, in the first repetition (its cycles' quartiles are
        the check; every repetition cost a run 100 s more), in ``<scenario>-self``: the
        ``null`` row is the NullHandler's check, these are the other floors' (report.py,
        ``chunk_check``)."""
        checks = [f for f in dict.fromkeys(FLOOR.get(row, "null") for row in rows) if f != "null"]
        skipped: set[str] = set()
        for rep in range(reps):
            for row in rows:
                if row in skipped:
                    continue
                res = self.child(make(row, FLOOR.get(row, "null")))
                res["rep"] = rep
                self.record(scenario, row, res)
                if "skipped" in res:
                    skipped.add(row)
            for floor in checks if rep == 0 else []:
                res = self.child(make(floor, floor))
                res["rep"] = rep
                self.results.setdefault(f"{scenario}-self", {}).setdefault(floor, []).append(res)


def paired_order(rows: list[str]) -> list[tuple[str, str]]:
    """One repetition of scenarios 1 and 2: ``("floor", f)`` and ``("row", r)`` children in
    the order they run. The rows of one floor run each between two runs of it (floor, row,
    floor, row, ..., floor: a floor run between two rows serves both), the floors in the
    order their first row comes. A floor measured as a row (``null``, ``structlog``...) runs
    between two runs of its own floor like any other row."""
    by_floor: dict[str, list[str]] = {}
    for row in rows:
        by_floor.setdefault(FLOOR.get(row, "null"), []).append(row)
    order: list[tuple[str, str]] = []
    for floor, members in by_floor.items():
        order.append(("floor", floor))
        for row in members:
            order += [("row", row), ("floor", floor)]
    return order


# What a row's ratio divides by: the floor's figures of scenarios 1 and 2.
FLOOR_KEYS = ("ns_per_call", "thread_cpu_ns_per_call", "cpu_ns_per_call", "events_per_s",
              "call_rate")


def _floor_values(res: dict[str, Any]) -> dict[str, Any]:
    out = {k: res[k] for k in FLOOR_KEYS if k in res}
    out.update({k: res[k] for k in ("skipped", "error", "hung", "seq") if k in res})
    return out


def _closed_port() -> int:
    # A port that was just free and that nobody listens on: connections are refused at once.
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def run_all(a: argparse.Namespace) -> Runner:
    r = Runner(a)
    rows = [x for x in a.rows if x not in VARIANTS]
    with_variants = a.rows  # scenarios 1 and 2: each variant beside the plain ingest row
    shipping = [x for x in rows if x in SHIPPING]
    t0 = time.time()
    try:
        ceiling = r.child_blast()
        r.results["ceiling"] = {"receiver": [ceiling]}
        for s in a.scenarios:
            print(f"scenario {s} ... ({time.time() - t0:.0f} s so far)", file=sys.stderr,
                  flush=True)
            if s in ("1", "2") and a.pairing == "chunks":
                # 40 cycles of 5,000 calls (scenario 1), 20 (scenario 2): as many row calls as
                # with --pairing processes; at least 4 cycles in a scaled-down run.
                n = r.n(200_000 if s == "1" else 100_000)
                chunk = min(CHUNK, max(1, n // 4))
                kind = "app_cost" if s == "1" else "end_to_end"
                r.chunked(s, with_variants, lambda x, f, kind=kind, n=n, chunk=chunk: r.cfg(
                    x, kind, "up", n=n, floor=f, chunk=chunk, cycles=n // chunk), a.reps)
            elif s == "1":
                r.paired("1", with_variants,
                         lambda x: r.cfg(x, "app_cost", "up", n=r.n(200_000)), a.reps)
            elif s == "2":
                r.paired("2", with_variants,
                         lambda x: r.cfg(x, "end_to_end", "up", n=r.n(100_000)), a.reps)
            elif s == "3":
                r.repeated("3", rows, lambda x: r.cfg(x, "slow", "slow", n=r.n(20_000),
                                                       rate=5000), a.reps)
            elif s == "4":
                # A 60 s outage at full speed (6 s with --quick): the queue fills, then drops.
                r.repeated("4", [x for x in rows if x not in UNBOUNDED],
                           lambda x: r.cfg(x, "down", "down", n=r.n(100_000_000),
                                            cap=a.cap * 2, duration=a.outage), 1)
            elif s == "5":
                for mode in ("up", "down"):
                    for row in [x for x in rows if x not in UNBOUNDED]:
                        cfg = r.cfg(row, "exit", mode, n=10_000)
                        if mode == "up" and a.shutdown_timeout_up is not None:
                            cfg["opts"]["shutdown_timeout"] = a.shutdown_timeout_up
                        res = r.child(cfg, exit_timeout=a.exit_timeout)
                        if mode == "up" and "skipped" not in res:
                            res["delivered"] = receiver.count(r.port, cfg["tag"])["events"]
                        res["shutdown_timeout"] = cfg["opts"]["shutdown_timeout"]
                        r.record(f"5-{mode}", row, res)
            elif s == "6":
                r.repeated("6", shipping, lambda x: r.cfg(x, "end_to_end", "up",
                                                           n=r.n(20_000)), 1)
            elif s == "7":
                # One repetition: the 8-thread rows repeat scenarios 1 and 2, which have reps.
                r.repeated("7a", rows, lambda x: r.cfg(x, "app_cost", "up", n=r.n(200_000),
                                                        threads=8), 1)
                r.repeated("7b", rows, lambda x: r.cfg(x, "end_to_end", "up",
                                                        n=r.n(100_000), threads=8), 1)
    finally:
        r.close()
    return r


def main() -> int:
    from .report import report

    a = _parse()
    started = time.time()
    r = run_all(a)
    text = report(r.results, machine(), a)
    print(text)
    print(f"\n(total run time {time.time() - started:.0f} s)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"machine": machine(), "results": r.results}, f, indent=1)
    return 0


def machine() -> dict[str, Any]:
    def version(dist: str) -> str | None:
        try:
            from importlib.metadata import version as v

            return v(dist)
        except Exception:
            return None

    return {
        "cpus": os.cpu_count(), "python": platform.python_version(),
        "implementation": platform.python_implementation(), "platform": platform.platform(),
        "orjson": version("orjson") if importlib.util.find_spec("orjson") else None,
        # The flusher's gzip: ISA-L's when installed (the [fast] extra), else zlib's.
        "isal": version("isal") if importlib.util.find_spec("isal") else None,
        "loghandler": version("loghandler"), "structlog": version("structlog"),
        "opentelemetry-sdk": version("opentelemetry-sdk"),
        "logtail-python": version("logtail-python"),
    }
