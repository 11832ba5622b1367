"""One CPU hog per core for the length of a block: the busy host the benchmarks measure beside
the quiet one (the same hog as tests/cpuload.py: it spins in slices, and stops when its parent
is gone or after its own deadline, so none outlives a run)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

HOG = """
import os, sys, time
parent, deadline = int(sys.argv[1]), time.monotonic() + float(sys.argv[2])
while os.getppid() == parent and time.monotonic() < deadline:
    for _ in range(20_000):
        pass
"""


@contextmanager
def cpu_load(enabled: bool = True) -> Iterator[None]:
    """One CPU hog per core this process may run on while the block runs (when ``enabled``),
    each bounded by an hour whatever happens."""
    procs = []
    if enabled:
        n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
            os.cpu_count() or 1)
        procs = [subprocess.Popen([sys.executable, "-c", HOG, str(os.getpid()), "3600"],
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
                 for _ in range(n)]
    try:
        yield
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(10)
