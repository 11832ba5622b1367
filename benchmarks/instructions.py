"""Instructions per logging call, counted by valgrind's callgrind: a measure the machine's noise
cannot move (the wall-clock tables vary by +-30 % from run to run on a shared 2-core VM).

    PYTHONHASHSEED=0 python -m benchmarks.instructions           # every configuration
    PYTHONHASHSEED=0 python -m benchmarks.instructions context span loguru   # some of them
    PYTHONHASHSEED=0 python -m benchmarks.instructions ingest ingest:fields  # raw modes

Needs valgrind (Debian: apt-get install valgrind). Each measurement runs the same loop in a
fresh process twice, with 1,000 and with 6,000 calls; the difference divided by 5,000 is the cost
of one call, start-up excluded.

Every configuration is measured three ways, beside its floor (the same call into the same
ecosystem with nothing shipped: the stdlib's ``NullHandler``; structlog's chain ending in a
processor that drops the event; loguru with a sink that does nothing; OpenTelemetry's
``LoggingHandler`` with a processor that does nothing):

- **application thread**: the flusher is parked (the largest batch size, a huge interval), so
  the count is the caller's work alone;
- **whole process**: the same, then one ``flush()`` to a live receiver at the end, so that both
  runs send exactly one batch (compression off). The difference of the two runs is then the
  caller's work plus everything the flusher does per event (formatting, policies, encoding,
  joining the request body), with the fixed cost of the request cancelled out; the receiver is
  another process, outside the count. The flush must leave nothing queued or failed (checked).
- **live**, whole process with the flusher running while the calls are made, with the defaults
  (``flush_interval=1``, ``batch_size=10000``; compression off), measured twice: on the host as
  it is (``quiet``) and with a CPU hog per core (``@busy``: the hog of tests/cpuload.py, started
  for the two runs). How many requests the flusher sends depends on wall time (valgrind slows
  the calls some 50 times, a hog twice more), and each costs a fixed amount: the requests per
  1,000 calls (the difference of the two runs' ``stats().batches``) are shown beside each count,
  so that two runs compare. ``--live-only`` measures the floors and these rows alone,
  ``--no-busy`` leaves out the busy ones.

The configurations: ``plain``; ``fields`` (``fields=`` of four keys); ``context`` (inside a
``loghandler.context`` of two keys); ``after`` (a context was entered and left before: every
later call outside it); ``span`` (inside an OpenTelemetry span); ``sampling``
(``sample_levels={"debug": 0.1, "info": 0.5}``, ``sample_loggers={"noisy": 0.5}``: half the
calls are sampled out, by a seeded generator); ``hold`` (``hold_level="info"`` inside a
context: every call is held, the buffers large enough that none is dropped); ``repeat``
(``repeat_limit=100``; the calls' messages differ, so none is suppressed); ``policies`` (every
policy at once inside a context, none dropping the calls: sampling of other levels and loggers,
repeats, three fields excluded, a scrubbed key, hold below the calls' level); ``names``
(``field_names`` renaming message, level and logger); ``bare`` (``scrub=False,
identity=False``); ``structlog`` (``IngestProcessor`` in structlog's usual chain);
``loguru`` (``IngestSink``); ``otel`` (``IngestLogRecordProcessor`` under OpenTelemetry's
``LoggingHandler``). Raw modes only (no row of the table): ``patterns`` (``scrub_patterns``:
every event stays a dict item the flusher formats, ``format_items``' row).

The counts move by about 0.5 % with the interpreter's hash seed (dict and set probes): to
compare two versions, run both with the same ``PYTHONHASHSEED`` (the children inherit it).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile

from .cpuhogs import cpu_load

CHILD = r"""
import logging, os, sys
def setup(loghandler, opts):
    # The variants' set-up lives in this function, and the module code below is the same for
    # every row: the frame's line number, which findCaller asks for on every call, is found by
    # scanning the module's line table from its start, so each line of module code above the
    # loop makes every call dearer (+4,000 instructions with this set-up inline). What must
    # come after the handler is built (a context a hold_level shipper sees entered, a span) is
    # returned as a function, called then.
    variant = sys.argv[4] if len(sys.argv) > 4 else ""
    def enter():
        context = loghandler.context(user_id=7, tenant="acme")
        context.__enter__()
        return context
    if variant == "fields":
        opts["fields"] = {"service": "checkout", "env": "prod", "version": "1.4.2",
                          "host": "web-7"}
    elif variant == "context":
        return enter
    elif variant == "after":
        with loghandler.context(user_id=7, tenant="acme"):
            pass
    elif variant == "bare":  # without the default scrubbing and identity (issue 25)
        opts.update(scrub=False, identity=False)
    elif variant == "sampling":
        import random
        random.seed(0)  # the same calls sampled out in every run
        opts.update(sample_levels={"debug": 0.1, "info": 0.5}, sample_loggers={"noisy": 0.5})
    elif variant == "hold":
        opts.update(hold_level="info", hold_size=10_000, hold_total=10_000)
        return enter
    elif variant == "repeat":
        opts.update(repeat_limit=100)
    elif variant == "policies":  # every policy configured, none dropping these calls
        opts.update(sample_levels={"debug": 0.1}, sample_loggers={"noisy": 0.5},
                    repeat_limit=100, exclude_fields=["module", "function", "file"],
                    scrub_keys=["patient_id"], hold_level="debug")
        return enter
    elif variant == "names":
        opts.update(field_names={"message": "msg", "level": "severity",
                                 "logger": "logger.name"})
    elif variant == "patterns":  # dict items: scrub_patterns scans text on the flusher
        opts.update(scrub_patterns=[r"card-[0-9]{16}"])
    elif variant == "sampled":  # issue 39: sampling that keeps almost all, no keep level
        opts.update(sample_loggers={"bench": 0.999999}, sample_keep_level=None)
    elif variant == "sampled-keep":  # the same with the default keep level ("error")
        opts.update(sample_loggers={"bench": 0.999999})
    elif variant == "span":
        def span():
            from opentelemetry import trace
            span = trace.NonRecordingSpan(trace.SpanContext(
                trace_id=0x4BF92F3577B34DA6A3CE929D0E0E4736, span_id=0x00F067AA0BA902B7,
                is_remote=False, trace_flags=trace.TraceFlags(1)))
            active = trace.use_span(span)
            active.__enter__()
            return active  # kept: a generator dropped unfinished would leave the span
        return span
    return None
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
    if mode == "live":
        opts = dict(compression=None)
    else:
        opts = dict(flush_interval=3600, batch_size=10_000, max_queue_size=10**7,
                    max_queue_bytes=10**12, max_batch_bytes=10**12, compression=None)
    after = setup(loghandler, opts)
    handler = loghandler.IngestHandler("bench", token="t", url=url, **opts)
    log.addHandler(handler)
    keep = after and after()
for i in range(n):
    log.info("user %s logged in", i, extra={"request_id": "r-1", "latency_ms": 1.5})
if mode in ("live", "flushed"):
    handler.flush(60)
    s = handler.stats()
    assert s.queued == 0 and s.failed == 0 and s.dropped_queue_full == 0, s
    print("BATCHES", s.batches, flush=True)
os._exit(0)
"""

# Each ecosystem's own call, loop and floor: structlog's chain (its default processors, with
# the ISO stamper its docs advise for JSON) ending in a processor that drops the event, with
# IngestProcessor before it or not; loguru with a sink that does nothing or IngestSink;
# OpenTelemetry's LoggingHandler with a processor that does nothing or
# IngestLogRecordProcessor. Floor and sink share the line of their loop.
CHILD_ECO = r"""
import logging, os, sys
def ingest(cls, url, flushed):
    if flushed == "live":  # the defaults: the flusher sends while the calls are made
        opts = dict(compression=None)
    else:
        opts = dict(flush_interval=3600, batch_size=10_000, max_queue_size=10**7,
                    max_queue_bytes=10**12, max_batch_bytes=10**12, compression=None)
    return cls("bench", token="t", url=url, **opts)
def structlog_chain(url, sink, flushed):
    import structlog
    def drop(logger, method, event_dict):
        raise structlog.DropEvent
    procs = [structlog.contextvars.merge_contextvars, structlog.processors.add_log_level,
             structlog.processors.StackInfoRenderer(), structlog.dev.set_exc_info,
             structlog.processors.TimeStamper(fmt="iso", utc=True)]
    shipper = None
    if sink:
        from loghandler import IngestProcessor
        shipper = ingest(IngestProcessor, url, flushed)
        procs.append(shipper)
    procs.append(drop)
    return structlog.wrap_logger(
        structlog.ReturnLogger(), processors=procs,
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO)), shipper
def loguru_sink(url, sink, flushed):
    from loguru import logger
    logger.remove()
    shipper = None
    if sink:
        from loghandler import IngestSink
        shipper = ingest(IngestSink, url, flushed)
        logger.add(shipper, level="INFO")
    else:
        logger.add(lambda message: None, level="INFO")
    return logger, shipper
def otel_handler(url, sink, flushed):
    import warnings
    warnings.simplefilter("ignore")
    from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
    provider = LoggerProvider()
    shipper = None
    if sink:
        from loghandler.opentelemetry import IngestLogRecordProcessor
        shipper = ingest(IngestLogRecordProcessor, url, flushed)
        provider.add_log_record_processor(shipper)
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
    return out, shipper
mode, n, url = sys.argv[1], int(sys.argv[2]), sys.argv[3]
eco, _, flushed = mode.partition("-")
sink = len(sys.argv) > 4
build = {"structlog": structlog_chain, "loguru": loguru_sink, "otel": otel_handler}[eco]
log, shipper = build(url, sink, flushed)
if eco == "structlog":
    for i in range(n):
        log.info("user logged in", user=i, request_id="r-1", latency_ms=1.5)
elif eco == "loguru":
    for i in range(n):
        log.bind(request_id="r-1", latency_ms=1.5).info("user {} logged in", i)
else:
    for i in range(n):
        log.info("user %s logged in", i, extra={"request_id": "r-1", "latency_ms": 1.5})
if flushed:
    shipper.flush(60)
    s = shipper.stats()
    assert s.queued == 0 and s.failed == 0 and s.dropped == 0, s
    print("BATCHES", s.batches, flush=True)
os._exit(0)
"""

# (name, label, floor, application thread, whole process): the modes each is measured in. Each
# configuration's ``live`` row (``live_mode``) is measured beside them, quiet and busy.
CONFIGS = [
    ("plain", "IngestHandler", "null", "ingest", "flushed"),
    ("fields", "fields= of four keys", "null", "ingest:fields", "flushed:fields"),
    ("context", "inside a loghandler.context of two keys", "null", "ingest:context",
     "flushed:context"),
    ("after", "a context entered before, now outside it", "null", "ingest:after",
     "flushed:after"),
    ("span", "inside an OpenTelemetry span", "null", "ingest:span", "flushed:span"),
    ("sampling", "sampling (info at 0.5)", "null", "ingest:sampling", "flushed:sampling"),
    ("hold", "hold-until-error inside a context (held)", "null", "ingest:hold",
     "flushed:hold"),
    ("repeat", "repeat suppression", "null", "ingest:repeat", "flushed:repeat"),
    ("policies", "every policy at once, inside a context", "null", "ingest:policies",
     "flushed:policies"),
    ("names", "field_names", "null", "ingest:names", "flushed:names"),
    ("bare", "scrub=False, identity=False", "null", "ingest:bare", "flushed:bare"),
    ("structlog", "IngestProcessor in structlog's chain", "structlog", "structlog:sink",
     "structlog-flushed:sink"),
    ("loguru", "IngestSink under loguru", "loguru", "loguru:sink", "loguru-flushed:sink"),
    ("otel", "IngestLogRecordProcessor under LoggingHandler", "otel", "otel:sink",
     "otel-flushed:sink"),
]
# Reference rows, measured when asked for by name or with every configuration.
EXTRA = [("queue", "stdlib QueueHandler, enqueue only (no listener)")]
FLOORS = {"null": "logging.NullHandler", "structlog": "structlog's chain, dropping the event",
          "loguru": "loguru, a sink that does nothing",
          "otel": "LoggingHandler, a processor that does nothing"}
ECO = ("structlog", "loguru", "otel")
# What each mode needs installed, beyond loghandler.
NEEDS = {"structlog": "structlog", "loguru": "loguru", "otel": "opentelemetry.sdk",
         "span": "opentelemetry", "names": None}
# A mode measured with a CPU hog per core running (``live:fields@busy``).
BUSY = "@busy"


def live_mode(whole: str) -> str:
    """The ``live`` mode of a configuration, from its ``flushed`` one: the defaults
    (``flush_interval=1``, ``batch_size=10000``; compression off, as in ``flushed``), the flusher
    sending while the calls are made."""
    return whole.replace("flushed", "live")


# Earlier names of the modes (docs quote them): the same measurement.
ALIASES = {"ingest-live": "live", "ingest-flushed": "flushed"}


def _count(script: str, mode: str, n: int, url: str) -> tuple[int, int]:
    """(instructions, requests sent) of one run of ``n`` calls."""
    base, _, variant = mode.partition(":")
    base = ALIASES.get(base, base)
    proc = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable,
         script, base, str(n), url, *([variant] if variant else [])],
        capture_output=True, text=True, timeout=1800,
    )
    match = re.search(r"Collected : (\d+)", proc.stderr)
    if proc.returncode != 0 or not match:
        raise RuntimeError(f"{mode}: {proc.stderr[-800:]}")
    sent = re.search(r"BATCHES (\d+)", proc.stdout)
    return int(match.group(1)), int(sent.group(1)) if sent else 0


def _missing(mode: str) -> str | None:
    base, _, variant = mode.removesuffix(BUSY).partition(":")
    for key in (base.partition("-")[0], variant):
        need = NEEDS.get(key)
        if need and importlib.util.find_spec(need.split(".")[0]) is None:
            return need
        if need and "." in need:
            try:
                if importlib.util.find_spec(need) is None:
                    return need
            except ImportError:
                return need
    if variant == "names":
        from loghandler._config import ShipperOptions

        if "field_names" not in ShipperOptions.__dataclass_fields__:
            return "a loghandler with field_names"
    return None


def _modes(names: list[str], live_only: bool = False, busy: bool = True) -> list[str]:
    by_name = {c[0]: c for c in CONFIGS}
    if not names:
        names = [c[0] for c in CONFIGS] + ([] if live_only else [e[0] for e in EXTRA])
    modes: list[str] = []
    for name in names:
        if name in by_name:
            _, _, floor, app, whole = by_name[name]
            live = live_mode(whole)
            modes += [floor] + ([] if live_only else [app, whole]) + [live] + (
                [live + BUSY] if busy else [])
        else:
            modes.append(name)  # a raw mode: null, ingest:context, live:fields@busy, ...
    return list(dict.fromkeys(modes))


def measure(names: list[str], live_only: bool = False, busy: bool = True
            ) -> dict[str, tuple[float, float]]:
    """(instructions, requests) per call of each mode (``_modes(names)``), skipping what is
    not installed. A mode ending in ``@busy`` runs with a CPU hog per core."""
    from .receiver import start_receiver

    results: dict[str, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory() as tmp, start_receiver() as base:
        scripts = {}
        for name, text in (("child", CHILD), ("eco", CHILD_ECO)):
            scripts[name] = os.path.join(tmp, f"{name}.py")
            with open(scripts[name], "w") as f:
                f.write(text)
        url = f"{base}/t/instructions"
        for mode in _modes(names, live_only, busy):
            missing = _missing(mode)
            if missing:
                print(f"  skipped {mode}: {missing} is not installed", file=sys.stderr)
                continue
            plain = mode.removesuffix(BUSY)
            script = scripts["eco" if plain.partition("-")[0].partition(":")[0] in ECO
                             else "child"]
            with cpu_load(mode.endswith(BUSY)):
                many, sent_many = _count(script, plain, 6000, url)
                few, sent_few = _count(script, plain, 1000, url)
            results[mode] = ((many - few) / 5000, (sent_many - sent_few) / 5000)
            note = (f" ({results[mode][1] * 1000:.1f} requests per 1,000 calls)"
                    if "live" in mode else "")
            print(f"  {mode}: {results[mode][0]:,.0f}{note}", file=sys.stderr, flush=True)
    return results


def table(results: dict[str, tuple[float, float]]) -> str:
    """The configurations measured, each beside its floor (markdown). A ``live`` cell also
    says how many requests the flusher sent per 1,000 calls: its count moves with them."""
    def x(mode: str, floor: str) -> str:
        if mode not in results or floor not in results:
            return "–"
        value, sent = results[mode]
        text = f"{value:,.0f} ({value / results[floor][0]:.2f}x)"
        return text + (f", {sent * 1000:.1f} req/1k" if "live" in mode else "")

    lines = ["| configuration | floor | application thread (x floor) | whole process, flushed "
             "(x floor) | whole process, live, quiet | whole process, live, a hog per core |",
             "|---|---|---|---|---|---|"]
    for name, label, floor, app, whole in CONFIGS:
        live = live_mode(whole)
        if any(m in results for m in (app, whole, live, live + BUSY)):
            base = f"{results[floor][0]:,.0f}" if floor in results else "–"
            lines.append(f"| {name}: {label} | {FLOORS[floor]}: {base} | {x(app, floor)} | "
                         f"{x(whole, floor)} | {x(live, floor)} | {x(live + BUSY, floor)} |")
    for mode, label in EXTRA:
        if mode in results:
            lines.append(f"| {label} | – | – | {x(mode, 'null')} | – | – |")
    shown = {m for c in CONFIGS for m in (*c[2:], live_mode(c[4]), live_mode(c[4]) + BUSY)}
    shown |= {e[0] for e in EXTRA}
    for mode, (value, _) in results.items():
        if mode not in shown:
            lines.append(f"| {mode} | – | {value:,.0f} | – | – | – |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks.instructions [--live-only] [--no-busy] [NAME ...]``: every
    configuration, or those named (configurations, or raw modes such as ``ingest:context``)."""
    args = list(sys.argv[1:] if argv is None else argv)
    live_only = "--live-only" in args
    busy = "--no-busy" not in args
    names = [a for a in args if not a.startswith("--")]
    if shutil.which("valgrind") is None:
        print("valgrind is not installed: apt-get install valgrind")
        return 1
    print(table(measure(names, live_only, busy)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
