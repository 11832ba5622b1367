"""The load harness: the suite with every core busy (issue 35), and the ``delivery`` marker.

``pytest --load`` (or ``LOGHANDLER_TEST_LOAD=1``) starts one CPU hog per core this process may
run on, before the first test, and stops them after the last: separate processes spinning at
the tests' own priority, which is what a production host, a CI runner or a laptop running a
build looks like to the flusher thread. A delivery promise that only holds when the flusher gets
a core of its own shows up here. ``LOGHANDLER_TEST_LOAD=N`` starts N hogs instead.

Each hog is bounded by itself, so none outlives the run even when pytest is killed: it stops
when its parent is gone (it is re-parented) and after ``LOGHANDLER_TEST_LOAD_MAX`` seconds
(default 3 hours) whatever happens. Under pytest-xdist only the controller starts them.

``delivery`` marks the tests of the delivery promises (spool, exit, fork, pools, job runners,
signals, policies, service answers, accounting): the modules listed in tests/groups.py, the
docs' examples of what ships, and any test marked ``@pytest.mark.delivery`` elsewhere.
``pytest -m delivery --load`` is the check that they hold on a busy host.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

import pytest
from groups import DELIVERY_DOC_PAGES, DELIVERY_MODULES, mark_known_failures

ENV = "LOGHANDLER_TEST_LOAD"
ENV_MAX = "LOGHANDLER_TEST_LOAD_MAX"

# The hog: spins in slices of a few milliseconds, checking between slices that the process
# that started it is still its parent and that its own deadline has not passed.
HOG = """
import os, sys, time
parent, deadline = int(sys.argv[1]), time.monotonic() + float(sys.argv[2])
while os.getppid() == parent and time.monotonic() < deadline:
    for _ in range(20_000):
        pass
"""


def hogs_wanted(config: pytest.Config) -> int:
    """How many hogs this run asks for: 0 without --load / LOGHANDLER_TEST_LOAD."""
    value = os.environ.get(ENV, "").strip()
    if config.getoption("load") or value not in ("", "0"):
        if value.isdigit() and int(value) > 1:
            return int(value)
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
            os.cpu_count() or 1)
    return 0


class Hogs:
    """The running hogs; stop() ends them and says how much CPU they took."""

    def __init__(self, n: int) -> None:
        limit = float(os.environ.get(ENV_MAX, "") or 3 * 3600)
        self.started = time.monotonic()
        self.procs = [subprocess.Popen([sys.executable, "-c", HOG, str(os.getpid()), str(limit)],
                                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
                      for _ in range(n)]
        self.cpu = 0.0
        self.wall = 0.0
        self.died_early: list[int] = []

    def stop(self) -> None:
        self.wall = time.monotonic() - self.started
        for proc in self.procs:
            if proc.poll() is not None:
                self.died_early.append(proc.pid)
            else:
                proc.terminate()
        for proc in self.procs:
            # wait4: the hog's own CPU time, proof that the load was there.
            try:
                _, _, usage = os.wait4(proc.pid, 0)
                self.cpu += usage.ru_utime + usage.ru_stime
            except ChildProcessError:  # reaped by poll() above
                pass
            proc.returncode = proc.returncode if proc.returncode is not None else -15

    def summary(self) -> str:
        n = len(self.procs)
        text = (f"load harness: {n} CPU hog{'s' if n != 1 else ''} ran {self.wall:.0f} s and "
                f"used {self.cpu:.0f} CPU-s ({self.cpu / max(self.wall, 1e-9):.2f} cores)")
        if self.died_early:
            text += f"; hogs {self.died_early} ended before the run did (no load after that)"
        return text


_STATE: dict[str, Any] = {}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--load", action="store_true", default=False,
                     help=f"run with a CPU hog on every core ({ENV}=1 does the same; "
                          f"{ENV}=N starts N hogs)")


def pytest_configure(config: pytest.Config) -> None:
    n = hogs_wanted(config)
    # pytest-xdist's workers inherit the option and the variable: the controller alone loads.
    if n and not hasattr(config, "workerinput"):
        _STATE["hogs"] = Hogs(n)


def pytest_report_header(config: pytest.Config) -> str | None:
    hogs = _STATE.get("hogs")
    if hogs is None:
        return None
    return f"load harness: {len(hogs.procs)} CPU hogs, pids {[p.pid for p in hogs.procs]}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    mark_known_failures(items)
    for item in items:
        name = item.path.name
        if name in DELIVERY_MODULES or (
                name == "test_readme.py"
                and any(f"[{page}:" in item.name for page in DELIVERY_DOC_PAGES)):
            item.add_marker(pytest.mark.delivery)


def pytest_sessionfinish(session: pytest.Session) -> None:
    # Stopped here, before the terminal summary, which then says how much load there was.
    hogs = _STATE.get("hogs")
    if hogs is not None and hogs.wall == 0.0:
        hogs.stop()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    hogs = _STATE.get("hogs")
    if hogs is not None and hogs.wall:
        terminalreporter.write_line(hogs.summary())


def pytest_unconfigure(config: pytest.Config) -> None:
    # The last word: whatever ended the run (an error before the session, Ctrl+C), no hog is
    # left spinning by this process.
    hogs = _STATE.pop("hogs", None)
    if hogs is not None and hogs.wall == 0.0:
        hogs.stop()
