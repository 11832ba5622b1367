"""``matches regex`` without the ``regex`` package: Python's own ``re`` in a helper process,
which is ended when a match runs past the query's deadline.

``re`` backtracks, so one pattern can take for ever on one value, and a match cannot be stopped
from another thread. A child process can be: each value goes to it over a pipe and its answer
is awaited at most until the deadline; past it the child is killed (and the query answers its
400). Answers are remembered per (pattern, value), as log values repeat. The ``regex`` package
(the ``regex`` extra) matches in the process with a timeout of its own, and much faster.
"""

from __future__ import annotations

import atexit
import select
import struct
import subprocess
import sys
import threading

__all__ = ["search", "shutdown"]

# The child: reads (pattern, text) frames, answers b"1" (a match), b"0", or b"E" (no regex).
_CHILD = r"""
import re, struct, sys
inp, out = sys.stdin.buffer, sys.stdout.buffer
cache = {}
def read(n):
    data = inp.read(n)
    if len(data) < n:
        sys.exit(0)
    return data
while True:
    size_p, size_t = struct.unpack("<II", read(8))
    pattern = read(size_p).decode("utf-8", "surrogatepass")
    text = read(size_t).decode("utf-8", "surrogatepass")
    rx = cache.get(pattern)
    try:
        if rx is None:
            if len(cache) > 64:
                cache.clear()
            rx = cache[pattern] = re.compile(pattern)
        out.write(b"1" if rx.search(text) else b"0")
    except Exception:
        out.write(b"E")
    out.flush()
"""

# Idle helpers kept for the next query (each busy one serves one query thread at a time).
_IDLE_MAX = 2


class _Worker:
    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", _CHILD],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, bufsize=0)

    def ask(self, pattern: str, text: str, timeout: float) -> bool | None:
        """True or False; None when the child did not answer within ``timeout`` (killed)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        p = pattern.encode("utf-8", "surrogatepass")
        t = text.encode("utf-8", "surrogatepass")
        try:
            self.proc.stdin.write(struct.pack("<II", len(p), len(t)) + p + t)
            ready, _, _ = select.select([self.proc.stdout], [], [], max(0.0, timeout))
            answer = self.proc.stdout.read(1) if ready else b""
        except OSError:
            answer = b""
        if answer in (b"1", b"0"):
            return answer == b"1"
        self.kill()
        if answer == b"E":
            raise ValueError(f"the pattern {pattern!r} is not a valid regex")
        return None

    def kill(self) -> None:
        try:
            self.proc.kill()
        except OSError:
            pass
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


_lock = threading.Lock()
_idle: list[_Worker] = []


def _take() -> _Worker:
    with _lock:
        if _idle:
            return _idle.pop()
    return _Worker()


def _give(worker: _Worker) -> None:
    with _lock:
        if len(_idle) < _IDLE_MAX and worker.proc.poll() is None:
            _idle.append(worker)
            return
    worker.kill()


_answers: dict[tuple[str, str], bool] = {}
_ANSWERS_MAX = 8192


def search(pattern: str, text: str, timeout: float) -> bool:
    """Whether ``pattern`` matches anywhere in ``text``; TimeoutError past ``timeout``."""
    key = (pattern, text)
    found = _answers.get(key)
    if found is not None:
        return found
    worker = _take()
    answer = worker.ask(pattern, text, timeout)
    if answer is None:
        raise TimeoutError("matches regex ran past the query's deadline")
    _give(worker)
    if len(text) <= 4096:  # short values repeat (levels, messages); long ones rarely do
        with _lock:
            if len(_answers) >= _ANSWERS_MAX:
                _answers.clear()
            _answers[key] = answer
    return answer


def shutdown() -> None:
    """End the idle helpers (at exit; they also end when this process does)."""
    with _lock:
        workers = list(_idle)
        _idle.clear()
    for worker in workers:
        worker.kill()


atexit.register(shutdown)
