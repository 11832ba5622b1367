"""Process lifecycle: exit without flush, exit with the service down, fork."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
import time
from typing import Any

import pytest
from helpers import TOKEN, closed_port_url

from loghandler import Client, IngestHandler, Shipper

CHILD = textwrap.dedent("""
    import atexit, logging, sys, time
    # Registered before loghandler's exit hook, so it runs after it (atexit is LIFO): when the
    # exit's work was done, in the child (the parent's own wait to run is not the exit's).
    atexit.register(lambda: print(f"HOOKS_DONE {time.time()}", flush=True))
    import loghandler
    url, n, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    handler = loghandler.IngestHandler("ds", token=%r, url=url, shutdown_timeout=timeout,
                                       retry_backoff=0.05, flush_interval=60)
    log = logging.getLogger("child")
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    for i in range(n):
        log.info("record %%d", i, extra={"i": i})
    print(f"LAST_CALL {time.time()}", flush=True)
    # no flush(), no close(): the exit hook must deliver
""") % TOKEN


def run_child(url: str, n: int, timeout: float,
              limit: float = 60) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", CHILD, url, str(n), str(timeout)],
                          capture_output=True, text=True, timeout=limit)
    return proc, time.monotonic() - t0


def last_call_to_exit(proc: subprocess.CompletedProcess, ended: float) -> float:
    """From the child's last logging call to the end of its exit hooks (the process has
    ended by ``ended``: subprocess.run returned, so a hang fails there)."""
    def stamp(name: str) -> float:
        return float(next(x for x in proc.stdout.splitlines() if x.startswith(name)).split()[1])

    assert stamp("HOOKS_DONE") <= ended
    return stamp("HOOKS_DONE") - stamp("LAST_CALL")


class TestExit:
    def test_exit_without_flush_delivers_everything(self, receiver):
        """A process that logs 10,000 records and just exits delivers all of them."""
        proc, _ = run_child(receiver.url, 10_000, 5.0)
        assert proc.returncode == 0, proc.stderr
        ids = sorted(e["i"] for e in receiver.events)
        assert ids == list(range(10_000))
        assert "loghandler" not in proc.stderr  # nothing to report

    def test_exit_with_dead_service_is_bounded(self):
        """Service down: exit takes at most shutdown_timeout + 1 s and says what was lost."""
        proc, _ = run_child(closed_port_url(), 2_000, 1.0)
        ended = time.time()
        assert proc.returncode == 0
        assert last_call_to_exit(proc, ended) < 1.0 + 1.0
        lines = [x for x in proc.stderr.splitlines() if x.startswith("loghandler: at exit")]
        assert len(lines) == 1, proc.stderr
        assert lines[0].startswith("loghandler: at exit: dataset 'ds': 0 of 2,000 delivered, "
                                   "2,000 ")
        assert TOKEN not in proc.stderr

    def test_exit_with_dead_service_says_it_in_one_line(self):
        """Retries that run out during the exit are told in the one exit line, with their cause,
        not in a line of their own (backoff of 0.01 s: all six attempts fit in the deadline)."""
        child = CHILD.replace("retry_backoff=0.05", "retry_backoff=0.01")
        url = closed_port_url()
        proc = subprocess.run([sys.executable, "-c", child, url, "2000", "3.0"],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0
        lines = proc.stderr.splitlines()
        assert len(lines) == 1, proc.stderr
        assert lines[0] == ("loghandler: at exit: dataset 'ds': 0 of 2,000 delivered, 2,000 "
                            "failed (2,000 with retries used up); last error: cannot connect to "
                            f"{url} (connection refused)")
        assert TOKEN not in proc.stderr

    def test_exit_with_hanging_service_is_bounded(self):
        """A service that accepts and never answers: exit is still bounded, nothing unaccounted."""
        import socket

        with socket.socket() as listener:  # the kernel accepts connections; nobody answers
            listener.bind(("127.0.0.1", 0))
            listener.listen(64)
            url = f"http://127.0.0.1:{listener.getsockname()[1]}"
            proc, _ = run_child(url, 500, 1.0)
            ended = time.time()
        assert proc.returncode == 0
        assert last_call_to_exit(proc, ended) < 1.0 + 1.0
        lines = [x for x in proc.stderr.splitlines() if x.startswith("loghandler: at exit")]
        # Sent and never answered: unconfirmed (the service may have stored them), told apart
        # from losses (issue 35.5).
        assert len(lines) == 1 and ("0 of 500 delivered, 500 unconfirmed (sent, no answer by "
                                    "the deadline: the service may have stored them)") in lines[0]
        assert "dropped" not in lines[0]
        assert "still queued" not in lines[0]

    def test_logging_shutdown_bounded_with_full_queue(self):
        """Service down, queue full: logging.shutdown + atexit stay within shutdown_timeout."""
        code = textwrap.dedent(f"""
            import logging, time
            import loghandler
            h = loghandler.IngestHandler("ds", token={TOKEN!r}, url={closed_port_url()!r},
                                         shutdown_timeout=0.5, max_queue_size=100)
            logging.getLogger().addHandler(h)
            for i in range(1000):
                logging.getLogger().warning("x")
            t = time.monotonic()
            logging.shutdown()
            print("took", time.monotonic() - t)
            st = h.stats()
            print("stats", st.submitted, st.dropped_queue_full, st.dropped_shutdown, st.queued)
        """)
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=30)
        took = float(proc.stdout.split("took")[1].split()[0])
        assert took < 1.5
        submitted, full, shutdown, queued = map(int, proc.stdout.split("stats")[1].split())
        assert (submitted, full, shutdown, queued) == (1000, 900, 100, 0)

    def test_event_logged_in_a_later_exit_hook_is_delivered(self, receiver):
        """A record logged by an atexit hook that runs before ours still ships."""
        code = textwrap.dedent(f"""
            import atexit, logging
            import loghandler
            h = loghandler.IngestHandler("ds", token={TOKEN!r}, url={receiver.url!r},
                                         flush_interval=60)
            logging.getLogger().addHandler(h)
            atexit.register(lambda: logging.getLogger().warning("from atexit"))
        """)
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=30)
        assert proc.returncode == 0, proc.stderr
        assert [e["message"] for e in receiver.events] == ["from atexit"]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
# Forking a process that has threads is exactly what pre-fork servers do, and what this tests.
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
class TestFork:
    def test_child_and_parent_both_deliver_no_duplicates(self, receiver):
        """After fork the child has a fresh queue and thread; nothing is sent twice."""
        s = Shipper(Client(TOKEN, url=receiver.url), "ds", flush_interval=60)
        for i in range(100):
            s.submit({"who": "parent-before", "i": i})
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # child
            ok = False
            try:
                os.close(r)
                assert s.stats().queued == 0  # the parent's events stay the parent's
                for i in range(10):
                    s.submit({"who": "child", "i": i})
                ok = s.flush(5) and s.stats().delivered == 10
            finally:
                os.write(w, b"1" if ok else b"0")
                os._exit(0)
        os.close(w)
        child_ok = os.read(r, 1)
        os.close(r)
        os.waitpid(pid, 0)
        for i in range(5):
            s.submit({"who": "parent-after", "i": i})
        assert s.flush(5)
        assert child_ok == b"1"
        who = [e["who"] for e in receiver.events]
        assert who.count("parent-before") == 100 and who.count("child") == 10
        assert who.count("parent-after") == 5 and len(who) == 115
        s.close()

    def test_child_delivers_after_fork_from_a_busy_parent(self, receiver):
        """A fork while the parent's flusher runs leaves the child able to ship."""
        s = Shipper(Client(TOKEN, url=receiver.url), "ds", flush_interval=0.01, batch_size=10)
        for i in range(500):
            s.submit({"who": "parent", "i": i})
        pid = os.fork()
        if pid == 0:
            try:
                s.submit({"who": "child"})
                code = 0 if s.flush(5) else 1
            except BaseException:
                code = 2
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert s.flush(5)
        who = [e["who"] for e in receiver.events]
        assert who.count("child") == 1 and who.count("parent") == 500
        s.close()

    def test_handler_fast_path_appends_to_the_childs_queue(self, receiver):
        """The handler's cached intake (the ledger's face) is reset in place: the child's
        records go to the child's queue (not the parent's deque), and are delivered by the
        child's flusher."""
        h = IngestHandler("ds", client=Client(TOKEN, url=receiver.url), flush_interval=60)
        log = logging.getLogger("fork-cached-ledger")
        log.propagate = False
        log.addHandler(h)
        log.setLevel(logging.INFO)
        for i in range(20):
            log.info("parent %d", i)
        ledger = h.shipper.intake
        pid = os.fork()
        if pid == 0:
            code = 3
            try:
                fresh = ledger.queue
                log.info("child")  # the inline fast path, then the slow path starts a flusher
                log.info("child")
                same = h.shipper.intake is ledger and ledger.queue is fresh
                code = 0 if same and h.flush(5) and h.stats().delivered == 2 else 1
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert h.flush(5)
        messages = [e["message"] for e in receiver.events]
        assert messages.count("child") == 2 and len(messages) == 22
        log.removeHandler(h)
        h.close()


class TestUwsgi:
    def test_warns_once_without_enable_threads(self, receiver):
        """Under uWSGI without --enable-threads, one clear stderr line says so."""
        code = textwrap.dedent(f"""
            import sys, types
            sys.modules["uwsgi"] = types.SimpleNamespace(opt={{b"master": True}})
            import loghandler
            s = loghandler.Shipper(loghandler.Client({TOKEN!r}, url={receiver.url!r}), "ds")
            s.submit({{"a": 1}})
            s.submit({{"a": 2}})
            s2 = loghandler.Shipper(loghandler.Client({TOKEN!r}, url={receiver.url!r}), "ds")
            s2.submit({{"b": 1}})
        """)
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=30)
        assert proc.returncode == 0, proc.stderr
        assert proc.stderr.count("--enable-threads") == 2  # one line, naming the flag twice
        assert len([x for x in proc.stderr.splitlines() if "uWSGI" in x]) == 1


def test_no_thread_of_ours_outlives_close(tmp_path) -> None:
    """Issue 48.3: a sub-interpreter (mod_wsgi's) ends only when its threads have, or the
    whole process aborts ("Py_EndInterpreter: not the last thread"). After close() of the last
    shipper, no thread of loghandler's is left: not the flusher, not the request watchdog
    (before: it outlived close() by seconds), not the spool's spare thread (before: never
    ended). A new shipper afterwards starts them again and delivers."""
    from loghandler.testing import LocalService

    with LocalService(token=TOKEN) as svc:
        _threads_after_close(svc, tmp_path)


def _threads_after_close(svc: Any, tmp_path: Any) -> None:
    code = textwrap.dedent(f"""
        import json, threading
        from loghandler import Client, Shipper

        def ours():
            return sorted(t.name.split(":")[0] for t in threading.enumerate()
                          if t.name.startswith("loghandler"))

        for round in range(2):
            s = Shipper(Client({TOKEN!r}, url={svc.url!r}), "threads",
                        spool_dir={str(tmp_path)!r})
            s.submit({{"round": round}})
            assert s.flush(10), s.stats()
            during = ours()
            s.close()
            print(json.dumps([round, during, ours()]))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    for line in proc.stdout.splitlines():
        _, during, after = json.loads(line)
        assert "loghandler-watchdog" in during and "loghandler-spare" in during, line
        assert after == [], line
    assert len(proc.stdout.splitlines()) == 2
    assert len(svc.events("threads")) == 2
