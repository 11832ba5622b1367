"""Instructions per logging call, counted by valgrind's callgrind: a measure the machine's noise
cannot move (the wall-clock tables vary by +-30 % from run to run on a shared 2-core VM).

    python -m benchmarks.instructions          # needs valgrind (Debian: apt-get install valgrind)

Each row runs the same ``logger.info("user %s logged in", i, extra={...})`` loop twice in a
fresh process, with 1,000 and with 6,000 calls; the difference divided by 5,000 is the cost of
one call, start-up excluded. The loghandler rows measure the application thread alone (the
flusher is parked: the largest batch size and a huge interval), and then the whole process with
a live receiver (``ingest-live``: app thread plus flusher thread, gzip off; its batches, and so
its count, depend on timing: ``ingest-flushed`` sends one batch a run, the figure to compare two
versions by). The ``:fields``, ``:context`` and ``:span`` variants add ``fields=`` of four keys,
an active ``loghandler.context`` of two keys, or an active OpenTelemetry span; the last column
divides each by the plain row of the same run. ``python -m benchmarks.instructions null ingest``
runs only the rows named. The counts move by about 0.5 % with the interpreter's hash seed (dict
and set probes): to compare two versions, run both with the same ``PYTHONHASHSEED`` (the
children inherit it).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile

CHILD = r"""
import logging, os, sys
def setup(loghandler, opts):
    # The variants' set-up lives in this function, and the module code below is the same as for
    # the plain rows: the frame's line number, which findCaller asks for on every call, is
    # found by scanning the module's line table from its start, so each line of module code
    # above the loop makes every call dearer (+4,000 instructions with this set-up inline).
    variant = sys.argv[4] if len(sys.argv) > 4 else ""
    if variant == "fields":
        opts["fields"] = {"service": "checkout", "env": "prod", "version": "1.4.2",
                          "host": "web-7"}
    elif variant == "context":
        loghandler.context(user_id=7, tenant="acme").__enter__()
    elif variant == "bare":  # without the default scrubbing and identity (issue 25)
        opts.update(scrub=False, identity=False)
    elif variant == "policies":  # every policy of issue 25 configured, none dropping
        opts.update(sample_levels={"debug": 0.1}, sample_loggers={"noisy": 0.5},
                    repeat_limit=100, exclude_fields=["module", "function", "file"],
                    hold_level="debug")
    elif variant == "names":  # issue 39: field_names of three keys
        opts["field_names"] = {"message": "msg", "level": "severity", "logger": "logger.name"}
    elif variant == "sampled":  # issue 39: sampling that keeps almost all, no keep level
        opts.update(sample_loggers={"bench": 0.999999}, sample_keep_level=None)
    elif variant == "sampled-keep":  # the same with the default keep level ("error")
        opts.update(sample_loggers={"bench": 0.999999})
    elif variant == "span":
        from opentelemetry import trace
        span = trace.NonRecordingSpan(trace.SpanContext(
            trace_id=0x4BF92F3577B34DA6A3CE929D0E0E4736, span_id=0x00F067AA0BA902B7,
            is_remote=False, trace_flags=trace.TraceFlags(1)))
        active = trace.use_span(span)
        active.__enter__()
        return active  # kept: a generator dropped unfinished would leave the span
mode, n, url = sys.argv[1], int(sys.argv[2]), sys.argv[3]
log = logging.getLogger("bench")
log.propagate = False
log.setLevel(logging.INFO)
if mode == "null":
    log.addHandler(logging.NullHandler())
elif mode == "queue":
    import logging.handlers, queue
    log.addHandler(logging.handlers.QueueHandler(queue.SimpleQueue()))
else:
    import loghandler
    if mode == "ingest":
        opts = dict(flush_interval=3600, batch_size=10_000, max_queue_size=10**7,
                    max_queue_bytes=10**12, max_batch_bytes=10**12)
    else:
        opts = dict(compression=None)
    keep = setup(loghandler, opts)
    handler = loghandler.IngestHandler("bench", token="t", url=url, **opts)
    log.addHandler(handler)
for i in range(n):
    log.info("user %s logged in", i, extra={"request_id": "r-1", "latency_ms": 1.5})
if mode == "ingest-live":
    handler.flush(60)
os._exit(0)
"""


# Issue 26's rows run this script instead: the plain CHILD stays as it was, line for line (the
# logging call's line number is part of its cost), so its counts compare with earlier runs.
CHILD_ECO = r"""
import logging, os, sys
def front(mode, variant, url):
    # Issue 26's front ends, with the same call shape as the stdlib rows: loguru with a sink
    # that does nothing (its floor) or IngestSink; OpenTelemetry's LoggingHandler with a
    # processor that does nothing or IngestLogRecordProcessor. The flusher is parked, as in
    # the "ingest" row: the application thread alone.
    opts = dict(flush_interval=3600, batch_size=10_000, max_queue_size=10**7,
                max_queue_bytes=10**12, max_batch_bytes=10**12)
    if mode == "loguru":
        from loguru import logger
        logger.remove()
        if variant == "sink":
            from loghandler import IngestSink
            logger.add(IngestSink("bench", token="t", url=url, **opts), level="INFO")
        else:
            logger.add(lambda message: None, level="INFO")

        class Adapter:
            def info(self, msg, i, extra):
                logger.bind(**extra).info(msg.replace("%s", "{}"), i)
        return Adapter()
    import warnings
    warnings.simplefilter("ignore")
    from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
    provider = LoggerProvider()
    if variant == "sink":
        from loghandler.opentelemetry import IngestLogRecordProcessor
        provider.add_log_record_processor(IngestLogRecordProcessor("bench", token="t", url=url,
                                                                   **opts))
    else:
        class Nothing:
            def on_emit(self, record): pass
            def emit(self, record): pass
            def shutdown(self): pass
            def force_flush(self, timeout_millis=0): return True
        provider.add_log_record_processor(Nothing())
    out = logging.getLogger("bench-otel")
    out.propagate = False
    out.setLevel(logging.INFO)
    out.addHandler(LoggingHandler(logger_provider=provider))
    return out
mode, n, url = sys.argv[1], int(sys.argv[2]), sys.argv[3]
log = front(mode, sys.argv[4] if len(sys.argv) > 4 else "", url)
for i in range(n):
    log.info("user %s logged in", i, extra={"request_id": "r-1", "latency_ms": 1.5})
os._exit(0)
"""

# The whole process without the live rows' noise (how many batches a run sends depends on its
# timing: those rows move by +-10 % from run to run): the flusher parked while the calls queue,
# then one flush to the live receiver at the end, so that every run sends one batch (compression
# off, as in the live rows). The script is CHILD line for line, so its counts compare with
# CHILD's rows.
CHILD_FLUSHED = CHILD.replace(
    'opts = dict(flush_interval=3600, batch_size=10_000, max_queue_size=10**7,\n'
    '                    max_queue_bytes=10**12, max_batch_bytes=10**12)',
    'opts = dict(flush_interval=3600, batch_size=10_000, max_queue_size=10**7,\n'
    '                    max_queue_bytes=10**12, max_batch_bytes=10**12, compression=None)',
).replace('if mode == "ingest-live":\n    handler.flush(60)',
          'if mode != "null":\n    assert handler.flush(60)')

ROWS = [
    ("null", "logging.NullHandler (floor)"),
    ("queue", "stdlib QueueHandler, enqueue only (no listener)"),
    ("ingest", "loghandler IngestHandler, application thread only"),
    ("ingest-live", "loghandler IngestHandler, whole process, live receiver"),
    # Issue 16's variants (each beside the plain row above; ":span" needs opentelemetry-api).
    ("ingest:fields", "IngestHandler fields= of four keys, application thread only"),
    ("ingest:context", "IngestHandler in a loghandler.context of two keys, app thread only"),
    ("ingest:span", "IngestHandler in an OpenTelemetry span, application thread only"),
    ("ingest-live:fields", "IngestHandler fields= of four keys, whole process"),
    ("ingest-live:context", "IngestHandler in a loghandler.context of two keys, whole process"),
    ("ingest-live:span", "IngestHandler in an OpenTelemetry span, whole process"),
    # Issue 25: the defaults (scrubbing, identity) off, and every policy configured.
    ("ingest:bare", "IngestHandler scrub=False identity=False, application thread only"),
    ("ingest:policies", "IngestHandler with every policy configured, app thread only"),
    ("ingest-live:bare", "IngestHandler scrub=False identity=False, whole process"),
    ("ingest-live:policies", "IngestHandler with every policy configured, whole process"),
    # The whole process, one batch a run (CHILD_FLUSHED): the figure to compare two versions by.
    ("ingest-flushed", "IngestHandler, whole process, one flush at the end"),
    ("ingest-flushed:fields", "IngestHandler fields= of four keys, whole process, one flush"),
    # Issue 39: field_names (no wire items: the application thread builds dicts), and the
    # keep level's check on the flusher (sampling that keeps almost every event).
    ("ingest:names", "IngestHandler field_names of three keys, application thread only"),
    ("ingest-live:names", "IngestHandler field_names of three keys, whole process"),
    ("ingest-live:sampled", "IngestHandler sampled, sample_keep_level=None, whole process"),
    ("ingest-live:sampled-keep", "IngestHandler sampled, keep level error, whole process"),
    # Issue 26: each ecosystem's own floor, then loghandler in it (application thread only).
    ("loguru", "loguru with a sink that does nothing (floor)"),
    ("loguru:sink", "loguru with IngestSink, application thread only"),
    ("otel", "OpenTelemetry LoggingHandler, a processor that does nothing (floor)"),
    ("otel:sink", "OpenTelemetry LoggingHandler with IngestLogRecordProcessor, app thread"),
]


def _count(script: str, mode: str, n: int, url: str) -> int:
    proc = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable,
         script, *mode.split(":")[:1], str(n), url, *mode.split(":")[1:]],
        capture_output=True, text=True, timeout=900,
    )
    match = re.search(r"Collected : (\d+)", proc.stderr)
    if not match:
        raise RuntimeError(f"callgrind gave no count for {mode}: {proc.stderr[-500:]}")
    return int(match.group(1))


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks.instructions [MODE ...]``: every row, or only the rows named."""
    only = set(sys.argv[1:] if argv is None else argv)
    if shutil.which("valgrind") is None:
        print("valgrind is not installed: apt-get install valgrind")
        return 1
    from .receiver import start_receiver

    with tempfile.TemporaryDirectory() as tmp, start_receiver() as base:
        script = os.path.join(tmp, "child.py")
        with open(script, "w") as f:
            f.write(CHILD)
        eco_script = os.path.join(tmp, "child_eco.py")
        with open(eco_script, "w") as f:
            f.write(CHILD_ECO)
        flushed_script = os.path.join(tmp, "child_flushed.py")
        with open(flushed_script, "w") as f:
            f.write(CHILD_FLUSHED)
        url = f"{base}/t/instructions"
        results = {}
        rows = [(m, label) for m, label in ROWS if m in only] if only else ROWS
        for mode, label in rows:
            needs = {"loguru": "loguru", "otel": "opentelemetry.sdk"}.get(mode.split(":")[0])
            if needs and importlib.util.find_spec(needs.split(".")[0]) is None:
                print(f"  skipped {label}: {needs} is not installed", file=sys.stderr)
                continue
            if mode.endswith(":span") and importlib.util.find_spec("opentelemetry") is None:
                print(f"  skipped {label}: opentelemetry-api is not installed", file=sys.stderr)
                continue
            child = eco_script if mode.split(":")[0] in ("loguru", "otel") else script
            run = mode
            if mode.startswith("ingest-flushed"):  # CHILD_FLUSHED's own "ingest" mode
                child, run = flushed_script, mode.replace("ingest-flushed", "ingest", 1)
            per_call = (_count(child, run, 6000, url) - _count(child, run, 1000, url)) / 5000
            results[mode] = per_call
            print(f"  measured {label}", file=sys.stderr)
    floor = results.get("null")
    print("| row | instructions per call | x NullHandler | x plain IngestHandler |")
    print("|---|---|---|---|")
    for mode, label in rows:
        if mode not in results:
            continue
        plain = results.get(mode.partition(":")[0]) if ":" in mode else None
        print(f"| {label} | {results[mode]:,.0f} | "
              f"{f'{results[mode] / floor:.2f}x' if floor else '–'} | "
              f"{f'{results[mode] / plain:.3f}x' if plain else '–'} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
