"""Memory the application thread leaves per logging call, by what it keeps in the queue.

    python -m benchmarks.allocations

Each variant runs in a fresh process: an IngestHandler whose flusher is parked, N calls, and the
blocks (``sys.getallocatedblocks``) and bytes (``tracemalloc``) still allocated afterwards,
divided by N: the queue item and what it holds, nothing else. Deterministic, unlike timings.
The checks: ``fields=`` costs the caller no allocation (the flusher adds it to an event dict; a
wire item, the compiled path's, holds its text), an unused ``loghandler.context`` and an
OpenTelemetry that is not imported cost nothing either (no snapshot in the queue item), and an
active context or span adds one small tuple per event dict (the snapshot; the context's dict
itself is shared by reference), or, in a wire item, its fields' text in the same one block.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

CHILD = r"""
import gc, json, logging, sys, tracemalloc
variant, n = sys.argv[1], int(sys.argv[2])
import loghandler
# batch_size is the service's largest: the flusher never wakes while fewer events are queued.
opts = dict(flush_interval=3600, batch_size=10_000, max_queue_size=10**7,
            max_queue_bytes=10**12, max_batch_bytes=10**12)
if variant == "fields":
    opts["fields"] = {"service": "checkout", "env": "prod", "version": "1.4.2", "host": "web-7"}
if variant == "dict":
    # The event dict a wire item stands in for (the Python path's item): scanning text for
    # secrets gives the flusher work per event, so the shipper offers no item plan
    # (Shipper.item_plan) and nothing else changes on the caller's thread.
    opts["scrub"] = "all"
handler = loghandler.IngestHandler("bench", token="t", url="http://127.0.0.1:9", **opts)
log = logging.getLogger("bench")
log.propagate = False
log.setLevel(logging.INFO)
log.addHandler(handler)
if variant == "context":
    loghandler.context(user_id=7, tenant="acme").__enter__()
elif variant == "span":
    from opentelemetry import trace
    span = trace.NonRecordingSpan(trace.SpanContext(
        trace_id=0x4BF92F3577B34DA6A3CE929D0E0E4736, span_id=0x00F067AA0BA902B7,
        is_remote=False, trace_flags=trace.TraceFlags(1)))
    active = trace.use_span(span)  # kept: a dropped generator would leave the span
    active.__enter__()
ids = [f"r-{i}" for i in range(n)]
def calls(k):
    for i in range(k):
        log.info("user %s logged in", "ann", extra={"request_id": ids[i], "latency_ms": 1.5})
calls(100)  # warm-up: the flusher thread, caches
gc.collect(); gc.disable()
tracemalloc.start()
blocks0, bytes0 = sys.getallocatedblocks(), tracemalloc.get_traced_memory()[0]
calls(n)
blocks1, bytes1 = sys.getallocatedblocks(), tracemalloc.get_traced_memory()[0]
from loghandler._engine.events import CONTEXT
q = handler.shipper.intake.queue
print(json.dumps({"blocks": (blocks1 - blocks0) / n, "bytes": (bytes1 - bytes0) / n,
                  "with_context": sorted({type(item) is dict and CONTEXT in item for item in q}),
                  "wire": sorted({type(item) is bytes for item in q}),
                  "otel_imported": "opentelemetry.trace" in sys.modules}), flush=True)
import os
os._exit(0)  # nothing listens at the address: skip the exit hook's delivery attempt
"""

VARIANTS = [
    ("plain", "IngestHandler"),
    ("dict", "IngestHandler, events queued as dicts (the Python path's queue item)"),
    ("fields", "IngestHandler, fields= of four keys"),
    ("context", "IngestHandler in a loghandler.context of two keys"),
    ("span", "IngestHandler in an OpenTelemetry span"),
]


def measure(variant: str, n: int = 9_000) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-c", CHILD, variant, str(n)], capture_output=True,
                          text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"{variant}: {proc.stderr[-800:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def checks(results: dict[str, dict[str, Any]]) -> list[tuple[str, bool]]:
    plain = results["plain"]
    out = [
        ("no context, no OpenTelemetry: queue items carry no context snapshot",
         plain["with_context"] == [False] and not plain["otel_imported"]),
        # On the compiled path an event is queued as its JSON (events.py "Wire items"), which
        # holds fields= as text: their 54 more bytes here, in the same one block.
        ("fields= adds no allocation on the caller's thread",
         results["fields"]["with_context"] == [False]
         and abs(results["fields"]["blocks"] - plain["blocks"]) < 0.05
         and -8 < results["fields"]["bytes"] - plain["bytes"]
         < (72 if results["fields"]["wire"] == [True] else 8)),
    ]
    for variant, what, most in (("context", "context", 40), ("span", "span", 80)):
        if variant not in results:
            continue
        r = results[variant]
        if r["wire"] == [True]:
            # Its members' JSON, written into the wire item on the caller's thread.
            out.append((f"an active {what} adds its text to the wire item, in the same block",
                        r["with_context"] == [False]
                        and abs(r["blocks"] - plain["blocks"]) < 0.05
                        and 8 < r["bytes"] - plain["bytes"] < most))
        else:
            out.append((f"an active {what} adds one snapshot tuple to the event dict",
                        r["with_context"] == [True]
                        and abs(r["blocks"] - results["dict"]["blocks"] - 1) < 0.05))
    return out


def main() -> int:
    import importlib.util

    results = {}
    for variant, _label in VARIANTS:
        if variant == "span" and importlib.util.find_spec("opentelemetry") is None:
            print("  skipped the span variant: opentelemetry-api is not installed",
                  file=sys.stderr)
            continue
        results[variant] = measure(variant)
    print("| row | blocks kept per call | bytes kept per call |")
    print("|---|---|---|")
    for variant, label in VARIANTS:
        if variant in results:
            r = results[variant]
            print(f"| {label} | {r['blocks']:.2f} | {r['bytes']:,.0f} |")
    failed = 0
    for text, ok in checks(results):
        print(f"- {'PASS' if ok else 'FAIL'}: {text}")
        failed += not ok
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
