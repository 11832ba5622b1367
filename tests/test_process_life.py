"""Every event accounted in every way a process ends: SIGTERM, multiprocessing children, atexit
hooks registered before loghandler (issue 15). Each case runs in a subprocess of its own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from helpers import TOKEN

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals and fork")


def run(code: str, *args: str, env: dict[str, str] | None = None,
        timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args],
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


SIGTERM_CHILD = """
    import logging, os, signal, sys
    import loghandler
    url, mode = sys.argv[1], sys.argv[2]
    if mode == "app":
        signal.signal(signal.SIGTERM, lambda *a: (print("APP HANDLER", flush=True),
                                                   os._exit(7)))
    handler = loghandler.IngestHandler("ds", token=%r, url=url, flush_interval=60,
                                       shutdown_timeout=5)
    log = logging.getLogger("app")
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    for i in range(1000):
        log.info("event %%d", i, extra={"i": i})
    os.kill(os.getpid(), signal.SIGTERM)
    signal.pause() if hasattr(signal, "pause") else None
""" % TOKEN


class TestSigterm:
    def test_default_disposition_delivers_everything_and_dies_by_sigterm(self, receiver):
        """SIGTERM (docker stop): everything queued is delivered, and the status is still -15."""
        proc = run(SIGTERM_CHILD, receiver.url, "default")
        assert proc.returncode == -signal.SIGTERM, proc.stderr
        assert sorted(e["i"] for e in receiver.events) == list(range(1000))
        assert proc.stderr == ""

    def test_application_handler_is_untouched(self, receiver):
        """An application's own SIGTERM handler is never replaced."""
        proc = run(SIGTERM_CHILD, receiver.url, "app")
        assert proc.returncode == 7 and "APP HANDLER" in proc.stdout, proc.stderr

    @pytest.mark.parametrize("how", ["env", "option"])
    def test_can_be_turned_off(self, receiver, how):
        """LOGHANDLER_HANDLE_SIGTERM=0 or handle_sigterm=False: SIGTERM is left alone."""
        code = SIGTERM_CHILD
        env = None
        if how == "env":
            env = {"LOGHANDLER_HANDLE_SIGTERM": "0"}
        else:
            code = code.replace("shutdown_timeout=5", "shutdown_timeout=5, handle_sigterm=False")
        code = code.replace("for i in range(1000)", "print(signal.getsignal(signal.SIGTERM) "
                                                    "is signal.SIG_DFL, flush=True)\n"
                                                    "    for i in range(1000)")
        proc = run(code, receiver.url, "default", env=env)
        assert proc.returncode == -signal.SIGTERM
        assert proc.stdout.split() == ["True"]
        assert receiver.events == []  # not flushed: the default disposition, as before

    @pytest.mark.parametrize("where", ["exit", "close"])
    def test_sigterm_inside_a_close_in_progress(self, receiver, where):
        """SIGTERM lands while the main thread is inside loghandler's own close, holding one of
        its locks (issue 35.2: Pool.terminate() during a worker's finalizer). Before, the
        handler waited on the main thread for a closer whose flusher needed that lock: nothing
        moved until shutdown_timeout (5 s) and every event was dropped. Now the close goes on,
        everything is delivered, and the process still dies of SIGTERM."""
        code = f"""
            import logging, os, signal, sys, threading, time
            import loghandler
            handler = loghandler.IngestHandler("ds", token={TOKEN!r}, url={receiver.url!r},
                                               flush_interval=60, shutdown_timeout=5)
            log = logging.getLogger("app")
            log.addHandler(handler)
            log.propagate = False
            for i in range(300):
                log.warning("event %d", i, extra={{"i": i}})
            # The first Condition.notify_all from now on raises SIGTERM while its caller holds
            # the condition's lock: that caller is loghandler's close (the ledger's begin_close).
            notify_all = threading.Condition.notify_all
            armed = [True]
            def raising_notify_all(self):
                if armed[0]:
                    armed[0] = False
                    os.kill(os.getpid(), signal.SIGTERM)
                return notify_all(self)
            threading.Condition.notify_all = raising_notify_all
            print("START", time.monotonic(), flush=True)
            if {where!r} == "close":
                handler.close()
                print("CLOSED", flush=True)
                signal.pause()
        """
        proc = run(code, timeout=60)
        ended = time.monotonic()
        assert proc.returncode == -signal.SIGTERM, proc.stderr
        assert sorted(e["i"] for e in receiver.events) == list(range(300)), proc.stderr
        assert proc.stderr == ""
        # Delivering 300 events takes milliseconds: the close did not wait for its deadline.
        started = float(proc.stdout.split("START")[1].split()[0])
        assert ended - started < 5.0, proc.stdout

    def test_a_shipper_on_another_thread_installs_nothing(self, receiver):
        """Signal handlers belong to the main thread: a shipper made elsewhere leaves SIGTERM."""
        code = f"""
            import signal, threading
            import loghandler
            def make():
                loghandler.Shipper(loghandler.Client({TOKEN!r}, url={receiver.url!r}), "ds")
            t = threading.Thread(target=make); t.start(); t.join()
            print(signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)
            loghandler.Shipper(loghandler.Client({TOKEN!r}, url={receiver.url!r}), "ds")
            print(signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)
        """
        proc = run(code)
        assert proc.stdout.split() == ["True", "False"], proc.stderr


POOL_SCRIPT = """
import logging, multiprocessing as mp, os, sys
import loghandler

URL = os.environ["TEST_URL"]


def setup():
    handler = loghandler.IngestHandler("ds", token=%r, url=URL, flush_interval=60)
    log = logging.getLogger()
    log.addHandler(handler)
    log.setLevel(logging.INFO)


def work(task):
    for j in range(100):
        logging.getLogger("worker").info("w", extra={"task": task, "j": j})
    return task


def sigterm_is_default(task):
    import signal
    setup()
    return signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def child():
    for j in range(100):
        logging.getLogger("child").info("c", extra={"task": "child", "j": j})


if __name__ == "__main__":
    method, how = sys.argv[1], sys.argv[2]
    ctx = mp.get_context(method)
    if how == "process":  # a fork Process inheriting the parent's handler
        setup()
        p = ctx.Process(target=child)
        p.start()
        p.join()
        print("EXIT", p.exitcode, flush=True)
    elif how == "close":
        with ctx.Pool(2, initializer=setup) as pool:
            print(sorted(pool.map(work, range(4), chunksize=1)), flush=True)
            pool.close()
            pool.join()
    else:  # the context manager's exit: Pool.terminate()
        import time
        with ctx.Pool(2, initializer=setup) as pool:
            print(sorted(pool.map(work, range(4), chunksize=1)), flush=True)
            started = time.monotonic()
        print("TERMINATED IN", round(time.monotonic() - started, 2), flush=True)
""" % TOKEN


# Issue 35.2's settings: `with Pool(4, initializer=init)`, 150 tasks logging two events each,
# shutdown_timeout=5, flush_interval=5; the pool's exit is Pool.terminate() (SIGTERM).
POOL_OF_THE_ISSUE = """
import logging, multiprocessing as mp, os, sys, time
import loghandler


def init(url):
    handler = loghandler.IngestHandler("ds", token=%r, url=url, shutdown_timeout=5,
                                       flush_interval=5)
    log = logging.getLogger()
    log.addHandler(handler)
    log.setLevel(logging.INFO)


def task(i):
    log = logging.getLogger("task")
    log.info("first", extra={"task": i, "j": 0})
    log.info("second", extra={"task": i, "j": 1})
    return i


if __name__ == "__main__":
    ctx = mp.get_context(sys.argv[1])
    with ctx.Pool(4, initializer=init, initargs=(os.environ["TEST_URL"],)) as pool:
        assert pool.map(task, range(150)) == list(range(150))
        started = time.monotonic()
    print("TERMINATED IN", round(time.monotonic() - started, 2), flush=True)
""" % TOKEN


@pytest.fixture
def pool_script(tmp_path: Path) -> Path:
    path = tmp_path / "pool_script.py"
    path.write_text(POOL_SCRIPT)
    return path


class TestMultiprocessing:
    @pytest.mark.parametrize("method", ["fork", "forkserver", "spawn"])
    def test_pool_workers_deliver_everything(self, receiver, pool_script, method):
        """Pool workers end in os._exit (fork, forkserver): multiprocessing's finalizers flush
        them. Pool(2), 4 tasks of 100 events each: all 400 arrive, with close() + join()."""
        proc = subprocess.run([sys.executable, str(pool_script), method, "close"],
                              capture_output=True, text=True, timeout=60,
                              env={**os.environ, "TEST_URL": receiver.url})
        assert proc.returncode == 0, proc.stderr
        got = sorted((e["task"], e["j"]) for e in receiver.events)
        assert got == [(t, j) for t in range(4) for j in range(100)]

    @pytest.mark.parametrize("method", ["fork", "forkserver", "spawn"])
    def test_pool_terminate_delivers_what_the_tasks_logged(self, receiver, pool_script,
                                                            method):
        """`with Pool()` ends in terminate(): SIGTERM to each worker. Each worker delivers what
        its finished tasks logged before it dies, and the pool's exit stays bounded by
        shutdown_timeout (5 s); a worker that cannot deliver in time says so on stderr, with
        the count (issue 22)."""
        import re

        proc = subprocess.run([sys.executable, str(pool_script), method, "terminate"],
                              capture_output=True, text=True, timeout=60,
                              env={**os.environ, "TEST_URL": receiver.url})
        assert proc.returncode == 0, proc.stderr
        took = float(proc.stdout.split("TERMINATED IN")[1])
        assert took < 5.0 + 2.0
        told = sum(int(n) for n in re.findall(r"(\d+) dropped", proc.stderr))
        got = {(e["task"], e["j"]) for e in receiver.events}
        assert len(got) == len(receiver.events)  # none twice
        assert len(got) + told == 400, (len(got), proc.stderr)

    @pytest.mark.parametrize("method", ["fork", "forkserver", "spawn"])
    def test_terminate_of_the_issue_delivers_everything(self, receiver, tmp_path, method):
        """Issue 35.2: some runs delivered nothing from a worker ("0 of 180 delivered, 180
        dropped (180 at exit)"): SIGTERM landed while its finalizer was closing, and the
        handler waited for a flusher that needed a lock the interrupted close held, until
        shutdown_timeout. Every event arrives, nothing is told lost, and the pool's exit is
        not the deadline's (300 events take milliseconds to send)."""
        script = tmp_path / "pool_of_the_issue.py"
        script.write_text(POOL_OF_THE_ISSUE)
        proc = subprocess.run([sys.executable, str(script), method], capture_output=True,
                              text=True, timeout=60, env={**os.environ, "TEST_URL": receiver.url})
        assert proc.returncode == 0, proc.stderr
        got = sorted((e["task"], e["j"]) for e in receiver.events)
        assert got == [(t, j) for t in range(150) for j in range(2)], proc.stderr
        assert "dropped" not in proc.stderr and "loghandler" not in proc.stderr, proc.stderr
        took = float(proc.stdout.split("TERMINATED IN")[1])
        assert took < 5.0, proc.stdout  # below shutdown_timeout: no close waited it out

    def test_fork_process_inheriting_the_handler_delivers(self, receiver, pool_script):
        """A fork Process that inherits the parent's handler ships its events before os._exit."""
        proc = subprocess.run([sys.executable, str(pool_script), "fork", "process"],
                              capture_output=True, text=True, timeout=60,
                              env={**os.environ, "TEST_URL": receiver.url})
        assert proc.returncode == 0 and "EXIT 0" in proc.stdout, proc.stderr
        assert sorted(e["j"] for e in receiver.events) == list(range(100))


EARLY_HOOK = """
    import atexit, logging, sys
    url, n = sys.argv[1], int(sys.argv[2])
    # Registered before loghandler is imported: atexit runs it after loghandler's own hook.
    atexit.register(lambda: [logging.getLogger("app").warning("early %%d", i) for i in range(n)])
    import loghandler
    handler = loghandler.IngestHandler("ds", token=%r, url=url, flush_interval=60,
                                       shutdown_timeout=1, retry_backoff=0.05)
    logging.getLogger("app").addHandler(handler)
    logging.getLogger("app").warning("main")
""" % TOKEN


class TestAtexitOrder:
    def test_hook_registered_before_import_is_delivered(self, receiver):
        """An atexit hook registered before `import loghandler` runs after loghandler's exit
        hook; what it logs is still delivered, and nothing is reported lost."""
        proc = run(EARLY_HOOK, receiver.url, "3")
        assert proc.returncode == 0, proc.stderr
        assert sorted(e["message"] for e in receiver.events) == [
            "early 0", "early 1", "early 2", "main"]
        assert proc.stderr == ""

    def test_hook_registered_before_import_is_told_when_undeliverable(self):
        """Service down: the late events cannot be delivered in time, and a line says so
        (the exit summary was printed before they were logged)."""
        from helpers import closed_port_url

        proc = run(EARLY_HOOK, closed_port_url(), "2")
        assert proc.returncode == 0
        lines = proc.stderr.splitlines()
        assert lines[0].startswith("loghandler: at exit: dataset 'ds': 0 of 1 delivered")
        assert len(lines) == 2, proc.stderr
        assert lines[1] == ("loghandler: dataset 'ds': an event logged after the exit hook (by a "
                            "later atexit hook or a __del__) was dropped (shutdown_timeout ran "
                            "out): raise shutdown_timeout")


class TestFinalizers:
    def test_records_logged_by_finalizers_on_the_flusher_thread_ship(self, receiver):
        """The cyclic GC runs finalizers on whichever thread allocates, the flusher included:
        what they log is the application's and ships; only the library's own sending (urllib3,
        on_error) is suppressed. Under load from 4 threads, every record is accounted."""
        import gc
        import logging
        import threading

        from loghandler import IngestHandler

        handler = IngestHandler("ds", token=TOKEN, url=receiver.url, flush_interval=0.05,
                                batch_size=200)
        log = logging.getLogger("test.finalizers")
        log.propagate = False
        log.setLevel(logging.DEBUG)
        log.addHandler(handler)
        # urllib3 at DEBUG on the same handler: its records on the flusher are still ours.
        urllib3_log = logging.getLogger("urllib3")
        urllib3_log.addHandler(handler)
        old_level = urllib3_log.level
        urllib3_log.setLevel(logging.DEBUG)

        class Node:
            def __init__(self, n: int) -> None:
                self.n = n
                self.me = self  # a cycle: only the cyclic GC frees it

            def __del__(self) -> None:
                log.warning("finalized", extra={"n": self.n})
                finalized_here.append(self.n)
                if len(finalized_here) == total:
                    all_finalized.set()

        class Collect:  # a value whose repr runs a full GC pass: on the flusher thread
            def __repr__(self) -> str:
                gc.collect()
                return "collected"

        per_thread, n_threads = 2000, 4
        total = 500 + n_threads * per_thread
        finalized_here: list[int] = []
        all_finalized = threading.Event()
        try:
            gc.disable()
            for i in range(500):
                Node(i)
            handler.shipper.submit({"trigger": Collect()})
            assert handler.flush(10)
            gc.enable()

            def work(t: int) -> None:
                for i in range(per_thread):
                    Node(1000 + t * per_thread + i)
                    log.info("app", extra={"t": t})

            threads = [threading.Thread(target=work, args=(t,)) for t in range(n_threads)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            # gc.collect() returns at once while another thread (the flusher) is collecting
            # (3.12+): collect until every finalizer has run, then flush what they logged.
            deadline = time.monotonic() + 30
            while not all_finalized.is_set() and time.monotonic() < deadline:
                gc.collect()
                all_finalized.wait(0.05)
            assert all_finalized.is_set(), f"{len(finalized_here)} of {total} finalized in 30 s"
            assert handler.flush(10) and handler.flush(10)
        finally:
            gc.enable()
            urllib3_log.setLevel(old_level)
            urllib3_log.removeHandler(handler)
            log.removeHandler(handler)
            handler.close()
        finalized = [e for e in receiver.events if e.get("message") == "finalized"]
        on_flusher = [e for e in finalized if e["thread"].startswith("loghandler-flusher")]
        assert len(on_flusher) >= 500
        assert sorted(e["n"] for e in finalized) == (
            list(range(500)) + list(range(1000, 1000 + n_threads * per_thread)))
        st = handler.stats()
        assert st.suppressed > 0  # urllib3's own debug lines
        assert not any(e.get("logger", "").startswith("urllib3") for e in receiver.events)
        assert st.submitted == st.delivered == len(receiver.events)
