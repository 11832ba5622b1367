"""A web service's logs, generated: what the page's benchmark (``benchmarks.page``) and the
docs' screenshots look at. ``python -m benchmarks.weblogs --events 1000000 --db FILE`` fills
a ``loghandler serve --db FILE`` database through the store's own bulk path.

One request is a few events sharing its ``request_id`` and ``trace_id``: the access line
(``GET /api/cart 200 in 41 ms``, with method, path, status, duration_ms, user_id), a few
debug lines (cache and database), a warning when it was slow, and an error with a Python
traceback when it failed. Over 24 hours ending now, busier by day than by night, in time
order. Seeded: the same arguments give the same events (but their times follow the clock).

What the benchmark searches for is there in known proportions: ``status:500`` (about 0.8 %
of requests), ``duration_ms>1000`` (about 1.5 %), and a rare word, ``deadlock``, in a dozen
events. A few events carry 200 fields (a feature-flag snapshot), as real services log.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from collections.abc import Iterator
from typing import Any

DATASET = "web"
RARE_WORD = "deadlock"
RARE_EVERY = 80_000  # one deadlock error per this many events
WIDE_EVERY = 50_000  # one 200-field snapshot per this many events
SERVICES = ("web", "checkout", "search", "auth")
PATHS = [  # (path, method, weight, typical ms)
    ("/", "GET", 20, 12), ("/api/cart", "GET", 14, 30), ("/api/cart", "POST", 6, 55),
    ("/api/products", "GET", 16, 45), ("/api/products/{id}", "GET", 18, 25),
    ("/api/search", "GET", 10, 120), ("/api/checkout", "POST", 3, 350),
    ("/api/orders", "GET", 4, 80), ("/api/orders/{id}", "GET", 3, 40),
    ("/api/login", "POST", 2, 90), ("/api/logout", "POST", 1, 10),
    ("/static/app.js", "GET", 8, 3), ("/healthz", "GET", 5, 1),
]
_WEIGHTS = [p[2] for p in PATHS]
EXCEPTIONS = [
    ("KeyError", "'sku'", "catalog/prices.py", "price_of", "return PRICES[item['sku']]"),
    ("TimeoutError", "upstream payments did not answer in 5.0 s", "payments/client.py",
     "charge", "resp = self.session.post(url, json=body, timeout=5.0)"),
    ("ValueError", "quantity must be positive, got -1", "cart/models.py", "add_line",
     "raise ValueError(f'quantity must be positive, got {qty}')"),
    ("ConnectionResetError", "[Errno 104] Connection reset by peer", "db/pool.py", "execute",
     "return cursor.execute(sql, params)"),
]


def _traceback(rng: random.Random, service: str) -> tuple[str, str]:
    name, text, file, func, line = rng.choice(EXCEPTIONS)
    lines = ["Traceback (most recent call last):",
             f'  File "/srv/{service}/app/handlers.py", line {rng.randint(40, 400)}, in handle',
             "    return view(request)",
             f'  File "/srv/{service}/app/views.py", line {rng.randint(20, 300)}, in view',
             "    result = service.run(request.data)",
             f'  File "/srv/{service}/{file}", line {rng.randint(10, 200)}, in {func}',
             f"    {line}",
             f"{name}: {text}"]
    return name + ": " + text, "\n".join(lines)


def _stamp(t: float) -> str:
    whole = int(t)
    frac = int((t - whole) * 1e6)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{frac:06d}Z"


def request(rng: random.Random, t: float) -> list[dict[str, Any]]:
    """One request's events from ``t`` on: its debug lines, a warning when slow, an error
    with its traceback when it failed, and its access line."""
    path, method, _, typical = rng.choices(PATHS, _WEIGHTS)[0]
    shown = path.replace("{id}", str(rng.randint(1, 5000)))
    service = ("checkout" if "checkout" in path or "cart" in path or "orders" in path
               else "search" if "search" in path or "products" in path
               else "auth" if "login" in path or "logout" in path else "web")
    request_id = f"{rng.getrandbits(64):016x}"
    trace_id = f"{rng.getrandbits(128):032x}"
    user = f"u{rng.randint(1, 40_000)}"
    host = f"{service}-{rng.randint(1, 4)}"
    duration = round(rng.lognormvariate(math.log(typical), 0.9), 1)
    roll = rng.random()
    status = (500 if roll < 0.008 else 404 if roll < 0.035 else 401 if roll < 0.045
              else 302 if roll < 0.06 else 201 if method == "POST" else 200)
    common = {"service": service, "host": host, "request_id": request_id,
              "trace_id": trace_id, "logger": f"{service}.app"}
    batch: list[dict[str, Any]] = []
    at = t
    for _ in range(rng.choice((1, 1, 2, 2, 3))):
        at += rng.random() * 0.004
        kind = rng.random()
        if kind < 0.5:
            batch.append({"_time": _stamp(at), "level": "debug",
                          "message": f"cache {'hit' if kind < 0.3 else 'miss'} for {shown}",
                          **common, "span_id": f"{rng.getrandbits(64):016x}"})
        else:
            table = rng.choice(("orders", "carts", "products", "users", "sessions"))
            batch.append({"_time": _stamp(at), "level": "debug",
                          "message": f"SELECT from {table} took {rng.randint(1, 40)} ms",
                          **common, "span_id": f"{rng.getrandbits(64):016x}",
                          "table": table, "rows": rng.randint(0, 200)})
    at = max(at, t) + duration / 1000.0
    if duration > 1000:
        batch.append({"_time": _stamp(at - 0.0005), "level": "warning",
                      "message": f"slow request: {method} {shown} took {duration:.0f} ms",
                      **common, "duration_ms": duration})
    if status == 500:
        said, trace = _traceback(rng, service)
        batch.append({"_time": _stamp(at - 0.0002), "level": "error",
                      "message": f"unhandled error in {method} {shown}: {said}",
                      **common, "exception": trace, "user_id": user})
    batch.append({"_time": _stamp(at), "level": "info",
                  "message": f"{method} {shown} {status} in {duration:.0f} ms",
                  **common, "method": method, "path": path, "url": shown,
                  "status": status, "duration_ms": duration, "user_id": user,
                  "bytes": rng.randint(200, 90_000), "span_id": f"{rng.getrandbits(64):016x}"})
    return batch


def requests(n_events: int, end: float, hours: float = 24.0, seed: int = 7
             ) -> Iterator[list[dict[str, Any]]]:
    """The events, one request's at a time, over ``hours`` ending at ``end`` (epoch s), in
    time order; about ``n_events`` in all (the last request completes the count exactly)."""
    rng = random.Random(seed)
    span = hours * 3600.0 - 60.0  # the last minute left to the live trickle (and no event
    start = end - span - 60.0    # of a slow request stamped in the future)
    # A request starts at the fraction of the span that the events made so far are of all
    # (with a request's worth of jitter), warped by a day's sine so that the day is busier
    # than the night.
    made = 0
    two_pi = 2 * math.pi
    while made < n_events:
        p = min(0.999999, (made + rng.random() * 2.8) / n_events)
        t = start + span * (p - 0.25 / two_pi * math.sin(two_pi * p))
        batch = request(rng, t)
        last = batch[-1]  # the access line: the request's fields, its time
        common = {k: last[k] for k in ("service", "host", "request_id", "trace_id", "logger")}
        if (made // RARE_EVERY) != ((made + len(batch)) // RARE_EVERY):
            batch.append({"_time": last["_time"], "level": "error",
                          "message": f"{RARE_WORD} detected while updating orders; retrying",
                          **common, "table": "orders"})
        if (made // WIDE_EVERY) != ((made + len(batch)) // WIDE_EVERY):
            flags = {f"flag_{i:03d}": rng.random() < 0.5 for i in range(200)}
            batch.append({"_time": last["_time"], "level": "info",
                          "message": "feature flags loaded", **common, **flags})
        batch = batch[:n_events - made]
        made += len(batch)
        yield batch


def fill(store: Any, n_events: int, end: float | None = None, batch: int = 10_000,
         seed: int = 7, dataset: str = DATASET) -> float:
    """Store about ``n_events`` through ``Store.add_events`` in batches; the seconds taken."""
    started = time.perf_counter()
    pending: list[dict[str, Any]] = []
    for events in requests(n_events, time.time() if end is None else end, seed=seed):
        pending.extend(events)
        if len(pending) >= batch:
            store.add_events(dataset, pending)
            pending = []
    if pending:
        store.add_events(dataset, pending)
    return time.perf_counter() - started


def live_events(rng: random.Random, now: float, n: int) -> list[dict[str, Any]]:
    """About ``n`` events of requests stamped from ``now``: the trickle a live service adds."""
    out: list[dict[str, Any]] = []
    while len(out) < n:
        out += request(rng, now - 0.5 + rng.random() * 0.5)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.weblogs", description=__doc__)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--db", help="a loghandler serve --db file to fill (else: NDJSON on "
                                     "stdout)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    if args.db:
        from loghandler._local.store import Store

        store = Store(args.db)
        try:
            seconds = fill(store, args.events, seed=args.seed)
        finally:
            store.close()
        print(f"stored {args.events:,} events in {seconds:.1f} s "
              f"({args.events / seconds:,.0f} events/s)", file=sys.stderr)
        return 0
    out = sys.stdout
    for events in requests(args.events, time.time(), seed=args.seed):
        for event in events:
            out.write(json.dumps(event, separators=(",", ":")) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
