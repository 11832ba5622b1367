"""What ``sample_keep_level`` and ``field_names`` cost the flusher, per event, paired in one run.

    python -m benchmarks.shaping_options [--events 20000] [--rounds 9]

Each pair runs the same flusher step on the same events, alternating, best of ``--rounds``:

- ``Selector.select`` on info events with trace ids (``sample_levels={"info": 0.5}``), with
  ``sample_keep_level=None`` and with the default ``"error"`` (one cached lookup of the level
  per sampled event);
- the finisher (``scrub="keys"``, the default) without and with ``field_names`` of three keys.

The whole-process cost of ``field_names`` on the compiled path, where it turns off the wire
items, is in ``python -m benchmarks.instructions ingest-live ingest-live:names``.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable
from typing import Any

from loghandler._engine.shaping import Selector, make_finisher

NAMES = {"message": "msg", "level": "severity", "logger": "logger.name"}


def events(n: int) -> list[dict[str, Any]]:
    rng = random.Random(5)
    return [{"_time": "2024-05-01T12:00:00.000000Z", "level": "info",
             "message": f"user {i} logged in", "logger": "bench", "module": "app",
             "function": "login", "line": 42, "file": "app.py", "process": 1,
             "thread": "MainThread", "request_id": "r-1", "latency_ms": 1.5,
             "trace_id": f"{rng.getrandbits(128):032x}"} for i in range(n)]


def best(run: Callable[[list[dict[str, Any]]], Any], batch: list[dict[str, Any]]) -> float:
    copy = [dict(e) for e in batch]  # the step may change the events: a fresh copy each round
    started = time.perf_counter()
    run(copy)
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.shaping_options")
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args(argv)
    batch = events(args.events)
    pairs = {
        "sampling, sample_keep_level=None": lambda e: Selector(
            {"info": 0.5}, None, None, 60).select(e, now=0),
        "sampling, sample_keep_level=\"error\"": lambda e: Selector(
            {"info": 0.5}, None, None, 60, keep_level=40).select(e, now=0),
        "finisher (scrub=\"keys\")": _finish(make_finisher((), "keys", (), ())),
        "finisher + field_names (3 keys)": _finish(make_finisher((), "keys", (), (), NAMES)),
    }
    times = {name: float("inf") for name in pairs}
    for _ in range(args.rounds):
        for name, run in pairs.items():
            times[name] = min(times[name], best(run, batch))
    names = list(pairs)
    print(f"{'flusher step':40} {'ns per event':>13} {'ratio':>7}")
    for i, name in enumerate(names):
        base = times[names[i - 1]] if i % 2 else None
        ratio = f"{times[name] / base:.3f}x" if base else ""
        print(f"{name:40} {times[name] / args.events * 1e9:>13.0f} {ratio:>7}")
    return 0


def _finish(finish: Any) -> Callable[[list[dict[str, Any]]], None]:
    def run(batch: list[dict[str, Any]]) -> None:
        for e in batch:
            finish(e, True)
    return run


if __name__ == "__main__":
    sys.exit(main())
