"""The compiled hot path under AddressSanitizer and UndefinedBehaviorSanitizer.

    python tests/run_speedups_asan.py [--examples 20000]

Not part of the pytest run (it compiles with sanitizers and preloads their runtimes, which the
rest of the suite must not run under). It copies the package to a temporary directory, builds
``_speedups.c`` and ``_gzip.c`` there with ``-fsanitize=address,undefined``, then, with the
sanitizers' runtimes preloaded: runs ``tests/test_speedups.py`` and the event-model tests
against that build, and fuzzes the extension's functions directly with hypothesis (arbitrary
record dicts: any keys, nested values, formats that fail, non-dicts; wire items with and
without a scrubber). Any report aborts with a non-zero exit. Needs gcc and its sanitizer
runtimes (Debian's gcc has them).
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
from loghandler import _compiled

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


@settings(max_examples=int(sys.argv[1]), deadline=None, suppress_health_check=list(HealthCheck))
@given(st.dictionaries(keys, values, max_size=8), st.booleans(),
       st.sampled_from(["m", "m %s", "%d %d", "%(a)s", 5]))
def fuzz(extra, keep_base, msg):
    d = dict(base) if keep_base else {}
    d["msg"] = msg
    d.update(extra)
    got = ext.record_put(d, None)
    queue = collections.deque()
    ext.record_put(d, [queue, 10])
    ext.record_put(d, [queue, "not a number"])
    ext.record_put(d, [queue])
    # Wire items: with a scrubber's set and learn(), without, and malformed wires.
    ext.record_put(d, [queue, 10], (b',"f":1', frozenset({"f"}), clean, learn))
    ext.record_put(d, None, (b"", frozenset(), None, None))
    ext.record_put(d, [queue, 10], (b"", frozenset()))
    ext.record_put(d, [queue, 10], ("x", 1, 2, 3))
    ext.items_size([i for i in queue if type(i) is bytes])
    if got is not None:
        ext.format_record({k: v for k, v in got[0].items() if isinstance(k, str)})
    ext.format_record(extra)
    ext.format_items([d, extra, 1, None], (("k", 1),), True, None, None, lambda i: i, 0)


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
                                "tests/test_speedups.py", "tests/test_event_model.py"],
                               cwd=src, env=env)
        fuzz = subprocess.run([sys.executable, "-c", FUZZ, str(args.examples), str(target)],
                              cwd=src, env=env)
        return tests.returncode or fuzz.returncode


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
