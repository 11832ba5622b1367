"""Issue 48.3: sub-interpreters as users meet them (mod_wsgi's shared-GIL ones; isolated ones,
``concurrent.interpreters`` in 3.14).

A sub-interpreter's end (``Py_EndInterpreter``) runs its atexit hooks and then aborts the whole
process ("Fatal Python error: Py_EndInterpreter: not the last thread") if any thread of its own
is still alive. So what a sub-interpreter built must be closed, and every thread of ours ended,
by its own exit hook. An isolated one refuses daemon threads (3.12+; every thread on 3.10/3.11,
and with ``allow_threads=False``): no flusher, so flush(), close() and that exit hook send on
their own thread, and a line says so once.

Each test runs a process of its own (an abort must fail the test, not kill pytest), against
the local service in this one; the interpreter is the one running the tests, so .ci/matrix runs
these on 3.10, 3.12 and 3.13.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap
from typing import Any

import pytest

TOKEN = "subinterp-token"

HAS_INTERPRETERS = (importlib.util.find_spec("_interpreters") is not None
                    or importlib.util.find_spec("_xxsubinterpreters") is not None)
pytestmark = pytest.mark.skipif(
    not HAS_INTERPRETERS,
    reason="this Python has no low-level sub-interpreter module (_interpreters on 3.13+, "
           "_xxsubinterpreters before): sub-interpreters cannot be made from Python here")

# In the child: make a sub-interpreter of the kind asked for ("shared": a legacy, shared-GIL
# one, as mod_wsgi makes; "isolated": its own GIL where the Python has one, no daemon threads;
# "no_threads": allow_threads=False, 3.13+), run code in it, destroy it.
RUNNER = textwrap.dedent("""
    import sys

    def run(kind, code):
        try:
            import _interpreters as I
        except ImportError:
            I = None
        if I is not None:
            if kind == "shared":
                config = I.new_config("legacy")
            elif kind == "isolated":
                config = I.new_config("isolated")
            else:
                config = I.new_config("isolated", allow_threads=False)
            iid = I.create(config)
            failure = I.exec(iid, code)
            if failure is not None:
                print("FAILED IN SUB-INTERPRETER:", failure.formatted, file=sys.stderr)
        else:
            import _xxsubinterpreters as I
            if kind == "no_threads":
                kind = "isolated"  # 3.10-3.12: an isolated one refuses threads already
            iid = I.create(isolated=kind == "isolated")
            if sys.version_info < (3, 12):
                # Before 3.12, _xxsubinterpreters refuses to run code in, or destroy, an
                # interpreter with a thread, before Py_EndInterpreter would run its atexit
                # hooks; a host such as mod_wsgi runs them itself before ending it, and so
                # does this one, at the end of the same run.
                code += "\\nimport atexit\\natexit._run_exitfuncs()\\n"
            try:
                I.run_string(iid, code)
            except Exception as exc:
                print("FAILED IN SUB-INTERPRETER:", exc, file=sys.stderr)
        # Without close(): its end must close what it built.
        I.destroy(iid)
        print("DESTROYED", flush=True)
        if sys.version_info[:2] == (3, 12) and kind != "shared":
            # CPython 3.12's own fault, with no loghandler in it: after `import ssl` (or
            # hashlib) in an isolated sub-interpreter, the main interpreter's final exit
            # frees a bad pointer and aborts ("free(): invalid pointer"). The interpreter
            # under test is gone by now: what it did is checked, that exit is not ours.
            import os
            os._exit(0)
""")

# In the sub-interpreter: whether it refuses a daemon thread (then no flusher can run).
PROBE = textwrap.dedent("""
    import threading
    try:
        probe = threading.Thread(target=lambda: None, daemon=True)
        probe.start()
        probe.join()
        refused = False
    except RuntimeError:
        refused = True
    print("REFUSED" if refused else "THREADS", flush=True)
""")


def _run(kind: str, code: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    child = RUNNER + f"\nrun({kind!r}, {PROBE + code!r})\n"
    return subprocess.run([sys.executable, "-c", child], capture_output=True, text=True,
                          timeout=timeout)


def _check_ended_cleanly(proc: subprocess.CompletedProcess[str]) -> None:
    assert "Fatal Python error" not in proc.stderr, proc.stderr
    assert "FAILED IN SUB-INTERPRETER" not in proc.stderr, proc.stderr
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "DESTROYED", proc.stdout


def _refused(proc: subprocess.CompletedProcess[str]) -> bool:
    return "REFUSED" in proc.stdout.splitlines()


NO_THREAD_LINE = "no thread can be started here"


@pytest.fixture(scope="module")
def svc() -> Any:
    from loghandler.testing import LocalService

    with LocalService(token=TOKEN) as service:
        yield service


@pytest.mark.parametrize("kind", ["shared", "isolated", "no_threads"])
def test_a_handler_built_in_a_sub_interpreter_delivers_at_its_end(svc: Any, kind: str) -> None:
    """A logging handler built in a sub-interpreter, 200 events, the interpreter destroyed
    without close(): the process does not abort, and the 200 arrive. Where threads are refused
    (before: 0 of 200 delivered, nothing told) they are sent at the interpreter's end on its
    own thread, and that is said once."""
    dataset = f"handler-{kind}"
    code = textwrap.dedent(f"""
        import logging
        from loghandler import Client, IngestHandler

        handler = IngestHandler({dataset!r}, client=Client({TOKEN!r}, url={svc.url!r}))
        log = logging.getLogger("sub")
        log.propagate = False
        log.setLevel(logging.INFO)
        log.addHandler(handler)
        for i in range(200):
            log.info("event %d", i)
    """)
    proc = _run(kind, code)
    _check_ended_cleanly(proc)
    got = svc.wait_for_events(dataset, 200, timeout=10)
    assert sorted(e["message"] for e in got) == sorted(f"event {i}" for i in range(200))
    told = proc.stderr.count(NO_THREAD_LINE)
    assert told == (1 if _refused(proc) else 0), proc.stderr
    if kind == "shared":
        assert not _refused(proc)


@pytest.mark.parametrize("kind", ["shared", "isolated"])
def test_a_shipper_with_a_spool_ends_its_threads_at_the_interpreters_end(
        svc: Any, kind: str, tmp_path: Any) -> None:
    """A bare Shipper (no logging.shutdown() to close it) with a spool: its flusher, the
    request watchdog and the spool's spare thread all end with the interpreter's exit hook.
    Before, the parked watchdog and spare threads aborted the process ("Py_EndInterpreter:
    not the last thread") on 3.12 and 3.13."""
    dataset = f"shipper-{kind}"
    code = textwrap.dedent(f"""
        from loghandler import Client, Shipper

        shipper = Shipper(Client({TOKEN!r}, url={svc.url!r}), {dataset!r},
                          spool_dir={str(tmp_path)!r})
        for i in range(200):
            shipper.submit({{"i": i}})
    """)
    proc = _run(kind, code)
    _check_ended_cleanly(proc)
    got = svc.wait_for_events(dataset, 200, timeout=10)
    assert sorted(e["i"] for e in got) == list(range(200))


def test_where_threads_are_refused_flush_and_close_send_on_the_calling_thread(
        svc: Any) -> None:
    """In a sub-interpreter that refuses threads, flush() delivers what is queued on its
    caller's thread and returns True (before: False at once, nothing sent), and close() does
    the same; the line that says so comes once, for two shippers; nothing is lost."""
    code = textwrap.dedent(f"""
        import json, threading
        from loghandler import Client, Shipper

        client = Client({TOKEN!r}, url={svc.url!r})
        a = Shipper(client, "refused-a")
        b = Shipper(client, "refused-b")
        for i in range(100):
            a.submit({{"i": i}})
            b.submit({{"i": i}})
        flushed = a.flush(30)
        after_flush = a.stats().delivered
        for i in range(100, 150):
            a.submit({{"i": i}})
        a.close(30)
        b.close(30)
        print(json.dumps({{"flushed": flushed, "after_flush": after_flush,
                          "a": a.stats().delivered, "b": b.stats().delivered,
                          "threads": [t.name for t in threading.enumerate()
                                      if t.name.startswith("loghandler")]}}), flush=True)
    """)
    proc = _run("isolated", code)
    _check_ended_cleanly(proc)
    if not _refused(proc):
        pytest.skip("this Python's isolated sub-interpreter allows daemon threads")
    result = json.loads(proc.stdout.splitlines()[-2])
    assert result == {"flushed": True, "after_flush": 100, "a": 150, "b": 100,
                      "threads": []}, result
    assert sorted(e["i"] for e in svc.events("refused-a")) == list(range(150))
    assert sorted(e["i"] for e in svc.events("refused-b")) == list(range(100))
    assert proc.stderr.count(NO_THREAD_LINE) == 1, proc.stderr
    assert "call flush()" in proc.stderr


def test_where_threads_are_refused_a_full_queue_is_counted_and_told(svc: Any) -> None:
    """With no flusher, events past max_queue_size cannot wait: each is counted
    (dropped_queue_full) and told, never lost untold; the rest arrive at the end."""
    code = textwrap.dedent(f"""
        from loghandler import Client, Shipper

        s = Shipper(Client({TOKEN!r}, url={svc.url!r}), "refused-full", max_queue_size=50)
        for i in range(200):
            s.submit({{"i": i}})
        st = s.stats()
        print("STATS", st.queued, st.dropped_queue_full, flush=True)
    """)
    proc = _run("isolated", code)
    _check_ended_cleanly(proc)
    if not _refused(proc):
        pytest.skip("this Python's isolated sub-interpreter allows daemon threads")
    stats = next(x for x in proc.stdout.splitlines() if x.startswith("STATS"))
    assert stats == "STATS 50 150", proc.stdout
    got = svc.wait_for_events("refused-full", 50, timeout=10)
    assert len({e["i"] for e in got}) == len(got) == 50  # the 50 it kept, once each
    assert "50 of 200 delivered, 150 dropped (150 on a full queue)" in proc.stderr, proc.stderr
