"""The compiled hot path under AddressSanitizer and UndefinedBehaviorSanitizer.

    python tests/run_speedups_asan.py [--examples 20000]

Not part of the pytest run (it compiles with sanitizers and preloads their runtimes, which the
rest of the suite must not run under). It copies the package to a temporary directory, builds
``_speedups.c`` and ``_gzip.c`` there with ``-fsanitize=address,undefined``, then, with the
sanitizers' runtimes preloaded: runs ``tests/test_speedups.py``, ``test_speedups_fronts.py``
and the event-model tests against that build, and fuzzes the extension's functions directly
with hypothesis (arbitrary record dicts: any keys, nested values, formats that fail, non-dicts;
wire items of real shippers of every kind and malformed ones; contexts; the handler's and the
structlog processor's compiled calls with every policy; admit_repeats). Any
report aborts with a non-zero exit. Needs gcc and its sanitizer runtimes (Debian's gcc has
them).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

FUZZ = r"""
import collections, logging, sys
from hypothesis import HealthCheck, given, settings, strategies as st
import loghandler
from loghandler._engine import compiled as _compiled
from loghandler._engine.shaping import sightings_table

ext = _compiled.extension()
assert ext is not None and ext.__file__ == sys.argv[2], "not the sanitized build"
keys = st.one_of(st.text(max_size=6), st.integers(), st.none(), st.floats(), st.booleans(),
                 st.sampled_from(["msg", "args", "exc_info", "stack_info", "message", "name"]))
leaf = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=30),
                 st.binary(max_size=10))
values = st.recursive(leaf, lambda c: st.one_of(st.lists(c, max_size=3), st.tuples(c, c),
                      st.dictionaries(st.text(max_size=3), c, max_size=3)), max_leaves=8)
base = logging.LogRecord("a", 20, "/p.py", 1, "m %s", ("x",), None).__dict__
clean = {"_time", "level", "message", "logger", "module", "function", "line", "file",
         "process", "thread"}


def learn(key):
    if len(key) % 3 == 0:
        return False
    clean.add(key)
    return True


WIRES = []


class Holder:
    pass


def record_item(d, plan=None):
    # A record's queue item alone (record_put through a FastPath that keeps what it queues).
    from loghandler._engine.fastpath import CallerPlan, FastPath
    got = []
    holder = Holder()
    holder.__dict__ = d
    keep = lambda item, size, *rest: got.append(item) or True
    ext.record_put(None, holder, FastPath([collections.deque(), 0], plan, keep,
                                          CallerPlan(False, None, None), keep, lambda: False,
                                          lambda *a: None))
    return got


def wires():
    # Real item plans (Shipper.item_plan) of shippers of every kind: plain, fields=, exclusions,
    # field_names, no scrubber; and malformed ones.
    if not WIRES:
        from loghandler import Shipper
        from loghandler.testing import MemoryTransport
        for opts in ({}, {"fields": {"service": "s", "n": 1}},
                     {"exclude_fields": ["module", "x"], "scrub_keys": ["k"]},
                     {"field_names": {"message": "msg", "level": "logger", "logger": "l2",
                                      "trace_id": "t", "x": "y"}},
                     {"scrub": False, "identity": False}):
            s = Shipper(None, "ds", transport=MemoryTransport(), flush_interval=3600,
                        handle_sigterm=False, **opts)
            WIRES.append((s, s.item_plan()))
    return [w for _, w in WIRES] + [None, (b"", frozenset()), ("x",) * 13, (1,) * 6]


@settings(max_examples=int(sys.argv[1]), deadline=None, suppress_health_check=list(HealthCheck))
@given(st.dictionaries(keys, values, max_size=8), st.booleans(),
       st.sampled_from(["m", "m %s", "%d %d", "%(a)s", 5]), st.integers(0, 8),
       st.dictionaries(st.text(max_size=4), leaf, max_size=4),
       st.lists(st.tuples(st.sampled_from(list(base)), st.booleans()), max_size=4))
def fuzz(extra, keep_base, msg, which, context_fields, moved):
    import loghandler
    d = dict(base) if keep_base else {}
    d["msg"] = msg
    d.update(extra)

    def move(r, always=False):
        # Attributes deleted, or deleted and set again (last): the places the compiled path
        # reads a record's attributes at (record_attr) hold other keys, or none. (A record
        # the handler gets keeps them all: its careful path would report a missing one.)
        for key, again in moved:
            value = r.pop(key, None)
            if again or always:
                r[key] = value

    move(d)
    all_wires = wires()
    wire = all_wires[which % len(all_wires)]
    got = record_item(d) or None
    record_item(d, wire)
    # The whole way (sampling, context, span, hold, the queue) through real front ends.
    front = FRONTS[which % len(FRONTS)]
    record = logging.LogRecord("a", 20, "/p.py", 1, "m %s", ("x",), None)
    record.__dict__.update({k: v for k, v in extra.items() if isinstance(k, str)})
    move(record.__dict__, always=True)
    with loghandler.context(**{k: v for k, v in context_fields.items() if k.isidentifier()}):
        front.handle(record)
        ext.record_put(front, record, front._fast_path or ())
        ext.record_put(front, record, (None, wire, None, (True, None, None)))
        PROC(None, "info", {k: v for k, v in extra.items() if isinstance(k, str)})
        PROC(None, "info", dict(extra))
    queue = collections.deque()
    # A copy first (list() of a deque runs no bytecode): the flusher takes batches meanwhile.
    queued = list(front.shipper.intake.queue)
    ext.items_size([i for i in queued if type(i) is bytes])
    if got is not None:
        ext.format_record({k: v for k, v in got[0].items() if isinstance(k, str)})
    ext.format_record(extra)
    ext.format_items([d, extra, 1, None], (("k", 1),), True, None, None, lambda i: i, 0)
    items = [i for i in queued if type(i) is bytes][-5:]
    ext.admit_repeats(items + [dict(extra)] if all(isinstance(k, str) for k in extra)
                      else items, {}, [], 0, 1.0, 60.0, 1, 2,
                      ("message", "event", "logger", "level"), sightings_table(2))
    queue.clear()


FRONTS = []
for opts in ({}, {"sample_levels": {"info": 0.5}, "repeat_limit": 2, "hold_level": "info",
                  "exclude_fields": ["file"], "field_names": {"message": "msg"}}):
    h = loghandler.IngestHandler("ds", url="http://127.0.0.1:9", token="t", flush_interval=3600,
                                 handle_sigterm=False, shutdown_timeout=0.1, **opts)
    FRONTS.append(h)
PROC = loghandler.IngestProcessor("ds", url="http://127.0.0.1:9", token="t",
                                  flush_interval=3600, handle_sigterm=False,
                                  shutdown_timeout=0.1)


fuzz()
print("fuzzed", sys.argv[1], "examples: no report")
"""


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python tests/run_speedups_asan.py")
    ap.add_argument("--examples", type=int, default=20_000)
    args = ap.parse_args(argv)
    runtimes = []
    for name in ("libasan.so", "libubsan.so"):
        path = subprocess.run(["gcc", f"-print-file-name={name}"], capture_output=True,
                              text=True, check=True).stdout.strip()
        if not os.path.isabs(path):
            print(f"gcc has no {name}: install gcc's sanitizer runtimes")
            return 2
        runtimes.append(path)
    with tempfile.TemporaryDirectory(prefix="speedups-asan-") as tmp:
        src = Path(tmp) / "src"
        shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
            ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", "*.so", ".*_cache"))
        for name, libs in (("_speedups", []), ("_gzip", ["-lz"])):
            target = src / "loghandler" / (name + sysconfig.get_config_var("EXT_SUFFIX"))
            subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-g", "-fno-omit-frame-pointer",
                            "-fsanitize=address,undefined", "-fno-sanitize-recover=undefined",
                            "-I" + sysconfig.get_paths()["include"],
                            str(src / "loghandler" / (name + ".c")), "-o", str(target), *libs],
                           check=True)
        target = src / "loghandler" / ("_speedups" + sysconfig.get_config_var("EXT_SUFFIX"))
        env = {**os.environ, "LD_PRELOAD": " ".join(runtimes), "PYTHONPATH": str(src),
               "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1",
               "LOGHANDLER_PURE_PYTHON": "0"}
        tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                "tests/test_speedups.py", "tests/test_speedups_fronts.py",
                                "tests/test_event_model.py"], cwd=src, env=env)
        fuzz = subprocess.run([sys.executable, "-c", FUZZ, str(args.examples), str(target)],
                              cwd=src, env=env)
        return tests.returncode or fuzz.returncode


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
